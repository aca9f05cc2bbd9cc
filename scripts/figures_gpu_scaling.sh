#!/usr/bin/env bash
# On a lent GPU: the compute model calibrated on the GPU (each layer of ResNet-20 timed
# alone through the torch executor, and the skinny GEMMs), and its prediction of a single-GPU training
# step at a batch it did not measure, against that step measured. Same setup as scripts/figures_gpu.sh;
# DEVICE=cpu runs it here (slowly) to check the commands.
set -u
export PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1 TF_CPP_MIN_LOG_LEVEL=2 XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/gpu-figures}; mkdir -p "$OUT"
DEVICE=${DEVICE:-gpu:0}
TAG=${DEVICE/:/}  # file names without the colon (files come back only with plain names)
if [ -d .whl ] && [ "$DEVICE" != cpu ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site || exit 1
fi
PY=${PY:-python3}
D5="$PY -m deep500lite"
step() { echo "=== $* ($(date +%T))"; }
MODEL=$OUT/resnet20.onnx
$PY -c "import deep500lite.networks as n; n.create_model('resnet', None, classes=10, shape=(3, 32, 32), depth=20)[0].save('$MODEL')" || exit 1

step "layers of ResNet-20 on $DEVICE through torch, batches ${BATCHES:=16,64,256}"
timeout 240 $D5 model layers "$MODEL" --framework torch --device "$DEVICE" --batches "$BATCHES" --max-time ${MAXT:-0.1} \
    --json "$OUT/layers-resnet20-$TAG.json" 2>&1 | tail -12
step "the measured step at batch ${PREDICT:=128} (not among the calibration batches)"
timeout 120 $D5 model layers "$MODEL" --framework torch --device "$DEVICE" --batches "$PREDICT" --max-time ${MAXT:-0.1} \
    --json "$OUT/layers-resnet20-$TAG-b$PREDICT.json" 2>&1 | tail -8
step "predicted at batch $PREDICT: calibrated (--compute-from) and the data-sheet roofline alone"
for acc in h100 this; do
    $D5 model scaling "$MODEL" --nodes 1 --batch "$PREDICT" --network none --accelerator $acc \
        --compute-from "$OUT/layers-resnet20-$TAG.json" --format markdown --json "$OUT/predict-$acc-$TAG.json" 2>&1 | tail -4
done
$D5 model scaling "$MODEL" --nodes 1 --batch "$PREDICT" --network none --accelerator h100 --format markdown \
    --json "$OUT/predict-roofline-h100.json" 2>&1 | tail -4
step "skinny GEMMs on $DEVICE, and the efficiency curve fitted to them"
timeout 150 $D5 bench op --suite skinny --frameworks torch --device "$DEVICE" --max-time 0.05 --json "$OUT/skinny-$TAG.json" \
    2>&1 | tail -4
$D5 model scaling alexnet --nodes 1..256 --network fdr-ib --accelerator this --gemm-from "$OUT/skinny-$TAG.json" \
    --format markdown 2>&1 | tail -14
step done
