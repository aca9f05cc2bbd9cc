#!/usr/bin/env bash
# TensorFlow's tests once more, with its oneDNN kernels in the other state than the main test run had.
# TensorFlow turns oneDNN on by default on some x86 CPUs (the AVX-512 ones CI has used) and leaves it off
# on others (an AVX2 AMD EPYC); TF_ENABLE_ONEDNN_OPTS=0/1 overrides it. So whatever CPU runs this, both
# kernel sets are tested. Runs every test whose name says tensorflow, keras or tfrecord
# (tests/frameworks/tensorflow, ONNX's node tests for TensorFlow, and each framework-parametrized
# test's tensorflow case). Needs .venv (bash scripts/setup.sh). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
onednn() {  # 1 when TensorFlow runs its oneDNN kernels in this environment, else 0
    .venv/bin/python -c "from tensorflow.python.util import _pywrap_util_port as p; print(int(p.IsMklEnabled()))" \
        2>/dev/null
}
main=$(onednn)
export TF_ENABLE_ONEDNN_OPTS=$((1 - main))
if [ "$(onednn)" = "$main" ]; then
    echo "test_tensorflow_onednn: TF_ENABLE_ONEDNN_OPTS=$TF_ENABLE_ONEDNN_OPTS did not change TensorFlow's oneDNN" \
         "state (IsMklEnabled() is still $main); this pass would test the same kernels again" >&2
    exit 1
fi
state=(off on)
echo "test_tensorflow_onednn: the main run had oneDNN ${state[$main]}; now TF_ENABLE_ONEDNN_OPTS=$TF_ENABLE_ONEDNN_OPTS" \
     "(oneDNN ${state[$((1 - main))]})"
exec .venv/bin/python -m pytest -k "tensorflow or keras or tfrecord" tests "$@"
