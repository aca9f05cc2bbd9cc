#!/usr/bin/env bash
# The main job: set up (once), show the environment, then run a zoo model on every framework
# and compare each one's answer and latency with the reference executor.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

deep500lite env
out=${DEEP500LITE_OUT:-results}
mkdir -p "$out"
python -c "from deep500lite import networks; networks.create_model('lenet', 64, classes=10, shape=(1, 8, 8))[0].save('$out/lenet_digits.onnx')"
deep500lite infer "$out/lenet_digits.onnx" --frameworks torch,tensorflow,onnxruntime,reference
