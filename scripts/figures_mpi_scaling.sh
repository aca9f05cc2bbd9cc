#!/usr/bin/env bash
# On a machine with a core per rank: the allreduce model at 2, 4 and 8 ranks
# (64 KiB to 64 MiB, three passes) and `model scaling` against `run -n P`, P = 1, 2, 4, 8.
# Written for the lent 16-core GPU machine, whose python3 has torch but neither MPICH nor
# jsonschema: deep500lite, mpi4py, jsonschema and MPICH travel as wheels in .whl/ (MPICH is
# unpacked, since pip --target leaves its lib/ out). LOCAL=1 runs it here with .venv to check the
# commands (RANKS="2", MAXT=0.05 keep that short). Everything lands in one archive in $OUT.
set -u
export PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1 OMP_NUM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=2
OUT=${OUT:-/tmp/mpi-figures}; mkdir -p "$OUT"
RES=/tmp/mpi-res; rm -rf "$RES"; mkdir -p "$RES"
if [ -z "${LOCAL:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        $(ls .whl/*.whl | grep -v /mpich-) && export PYTHONPATH=/tmp/site || exit 1
    # no unzip there; zipfile drops the execute bits, so they are set again
    mkdir -p /tmp/mpich && python3 -m zipfile -e .whl/mpich-*.whl /tmp/mpich || exit 1
    M=$(echo /tmp/mpich/mpich-*.data/data); chmod +x "$M"/bin/*
    export PATH="$M/bin:$PATH" LD_LIBRARY_PATH="$M/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    PY=python3
    # the ranks mpiexec starts import from the working directory first: leave the checkout (no frameworks/ in it)
    SCRIPT=$(readlink -f "$0"); cd /tmp || exit 1
else
    PY=${PY:-.venv/bin/python}
    export PATH="$(dirname "$PY"):$PATH"
fi
D5="$PY -m deep500lite"
RANKS=${RANKS:-2 4 8}
MAXT=${MAXT:-0.3}
EPOCHS=${EPOCHS:-10}
# nproc alone would honour OMP_NUM_THREADS=1
CORES=$($PY -c "import os; print(len(os.sched_getaffinity(0)))")
step() { echo "=== $* ($(date +%T))"; }
snap() { cp "${SCRIPT:-$0}" "$RES/" 2>/dev/null; tar czf "$OUT/mpi-figures.tgz" -C /tmp mpi-res; }  # after every step: a cut-off run keeps its results
finish() { snap; step done; }
trap finish EXIT

step environment
{ lscpu | grep -E 'Model name|^CPU\(s\)|Thread|L3'; echo "usable cores: $CORES"; uptime; which mpiexec
  $PY -c "import mpi4py, numpy, torch, onnx, deep500lite; from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0], '| mpi4py', mpi4py.__version__, '| torch', torch.__version__, '| numpy', numpy.__version__, '| onnx', onnx.__version__, '|', deep500lite.__file__)"
} 2>&1 | tee "$RES/environment.txt"

step "bench allreduce, 64 KiB to 64 MiB, 3 passes, ranks $RANKS"
for n in $RANKS; do
    timeout 200 $D5 bench allreduce -n "$n" --min-bytes 64KiB --max-bytes 64MiB --factor 4 --max-time "$MAXT" \
        --passes 3 --algorithms ring,recursive_doubling,rabenseifner,tree,auto --save-model "$RES/ar-large.json" \
        --json "$RES/allreduce-n$n.json" > "$RES/allreduce-n$n.txt" 2>&1
    echo "-- $n ranks: rc=$?"; tail -4 "$RES/allreduce-n$n.txt"; snap
done

step "the recipe's message sizes (4 KiB to 256 KiB), for auto and the prediction"
for n in $RANKS; do
    timeout 120 $D5 bench allreduce -n "$n" --min-bytes 4KiB --max-bytes 256KiB --factor 4 --max-time "$MAXT" \
        --passes 3 --save-model "$RES/ar-small.json" > "$RES/allreduce-small-n$n.txt" 2>&1
    echo "-- $n ranks: rc=$?"; tail -3 "$RES/allreduce-small-n$n.txt" | head -2; snap
done

step "run digits_mlp_distributed -n P (weak scaling, batch 32 per rank, $EPOCHS epochs)"
for p in 1 $RANKS; do
    DEEP500LITE_ALLREDUCE_MODEL="$RES/ar-small.json" timeout 120 $D5 run digits_mlp_distributed -n "$p" \
        --set epochs="$EPOCHS" --set distributed_kwargs.algorithm=auto --out "$RES/run$p" > "$RES/run$p.txt" 2>&1
    echo "-- $p ranks: rc=$?"; grep -E '^job:' "$RES/run$p.txt"; snap
done

step "predicted from the 1-rank run and the calibrated allreduce"
NODES=$(echo 1 $RANKS | tr ' ' ',')
$D5 model scaling digits_mlp_distributed --nodes "$NODES" --weak --batch 32 --allreduce-model "$RES/ar-small.json" \
    --host-cores "$CORES" --fusion-mb 1 --no-overlap --accelerator this --step-from "$RES/run1/results.json" \
    --format markdown --json "$RES/predict.json" 2>&1 | tee "$RES/predict.md" | tail -12
