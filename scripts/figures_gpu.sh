#!/usr/bin/env bash
# GPU figures for docs/performance.md and docs/executors.md, run on a lent GPU machine
# whose python3 has torch with CUDA and jax with CUDA (no TensorFlow). deep500lite and its missing
# dependencies travel as wheels in .whl/ (see docs/performance.md, "On a GPU"); every result lands in $OUT.
set -u
# PYTHONSAFEPATH: import the installed deep500lite, not the checkout's deep500lite/ folder (without frameworks/)
export PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1 TF_CPP_MIN_LOG_LEVEL=2 XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/gpu-figures}; mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site || exit 1
fi
D5="python3 -m deep500lite"
step() { echo "=== $* ($(date +%T))"; }

step environment
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, jax, deep500lite.frameworks as f; print('torch', torch.__version__, torch.cuda.get_device_name(0), '| jax', jax.__version__, jax.devices(), '|', f.__file__)" || exit 1

step "GPU tests (torch and jax executors, bench overhead --device)"
timeout 150 python3 -m pytest -q -p no:cacheprovider -W ignore -x tests/frameworks/jax/test_jax_gpu.py \
    "tests/cli/test_bench.py::test_bench_overhead_torch_on_gpu" \
    "tests/frameworks/torch/test_torch_executor.py::test_gpu_matches_cpu" 2>&1 | tail -8

step "the JAX executor against native JAX on the GPU"
for t in "" "--training"; do
    timeout 150 $D5 bench overhead -f jax --device gpu:0 --max-time 6 $t --json "$OUT/overhead-jax${t:+-training}.json"
done

step "eager against compiled executors on the GPU (batch 64)"
for m in lenet resnet20; do
    for s in torch torch:compile jax; do
        timeout 150 python3 scripts/figures_compiled_modes.py "$s" --device gpu:0 --model "$m" --rounds 4 \
            | tee -a "$OUT/compiled-modes-gpu.jsonl"
    done
done

step "compare on the GPU"
timeout 200 $D5 compare recipes/digits_lenet.py --frameworks torch,torch:compile,jax --set 'executor_args=["gpu:0"]' \
    --out /tmp/cmp-gpu --no-plots --format markdown 2>&1 | tail -14
cp /tmp/cmp-gpu/comparison.md "$OUT/compare-gpu.md" 2>/dev/null

step "skinny GEMMs on the GPU (bench op, torch and jax)"
timeout 150 $D5 bench op --suite gemm --size large --frameworks torch,jax --device gpu:0 --max-time 0.2 \
    --json "$OUT/op-gemm-gpu.json" 2>&1 | tail -30
step "torch executor against native torch on the GPU"
for t in "" "--training"; do
    timeout 120 $D5 bench overhead -f torch --device gpu:0 --max-time 4 $t --json "$OUT/overhead-torch${t:+-training}.json"
done
step done
