#!/usr/bin/env bash
# The main job: set up (once), show the environment, then compare the frameworks on the bundled
# recipe recipes/digits_lenet.py (LeNet on scikit-learn's digits): each framework trains in a fresh
# process; the table gives accuracy, time-to-accuracy, throughput, step latency with 95% CIs,
# peak memory, first-step divergence from the reference executor and which step-time
# differences are significant. Results files and plots go to d5-results/ (DEEP500LITE_OUT to change).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

deep500lite env
out=${DEEP500LITE_OUT:-d5-results/digits_lenet/compare}
deep500lite compare recipes/digits_lenet.py --frameworks torch,tensorflow,onnxruntime,jax,reference --out "$out"
