#!/usr/bin/env bash
# Set up .venv once: every framework's CPU build, MPI, and deep500lite itself (editable).
# Re-running is cheap: when .venv matches pyproject.toml, the constraints and this script,
# nothing is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP="$VENV/.deep500lite-setup"
want=$(cat pyproject.toml plugins/deep500lite-openvino/pyproject.toml scripts/setup.sh scripts/constraints.txt | sha256sum | cut -d' ' -f1)

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/deep500lite" ]; then
    echo "setup: $VENV is up to date (delete it to reinstall)"
    exit 0
fi

"$PYTHON" - <<'PY'
import sys
if sys.version_info < (3, 10):
    sys.exit(f"setup: deep500lite needs Python >= 3.10; {sys.executable} is {sys.version.split()[0]}")
PY

echo "setup: creating $VENV and installing deep500lite with torch, tensorflow-cpu, onnxruntime, mpi4py+mpich, and the OpenVINO plugin"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# torch first, pinned: on PyPI this version resolves to the CPU build, and installing it before
# the rest keeps any later requirement from pulling a CUDA build.
"$VENV/bin/python" -m pip install --quiet -c scripts/constraints.txt "torch==2.13.0"
# The constraints pin every package to the versions the tests were written against (see there).
"$VENV/bin/python" -m pip install --quiet -c scripts/constraints.txt -e ".[all,test]"
# Keras 2 for Deep500's TF1-style samples (tf.layers.conv2d; used with TF_USE_LEGACY_KERAS=1). Without
# --no-deps it would pull the full 'tensorflow' wheel on top of tensorflow-cpu, which holds the same files.
"$VENV/bin/python" -m pip install --quiet --no-deps -c scripts/constraints.txt "tf_keras==2.21.0"
# The OpenVINO executor is a plugin, a distribution of its own (plugins/deep500lite-openvino):
# installed after deep500lite, it registers through the deep500lite.frameworks entry point.
"$VENV/bin/python" -m pip install --quiet -c scripts/constraints.txt -e plugins/deep500lite-openvino
echo "$want" > "$STAMP"
echo "setup: done ($("$VENV/bin/python" --version))"
