"""An OpenVINO executor for deep500lite, added from outside the core through one entry point.

Inference: the network's ONNX graph is read by OpenVINO's ONNX frontend (``Core.read_model``),
with its parameters as constants, and compiled for the CPU (``Core.compile_model``, float32
inference precision, so results match the other executors'); a call is one ``InferRequest.infer``
on the caller's numpy arrays, and the outputs are copied out. Changing a parameter
(``feed_tensor``, an optimizer step) recompiles on the next call.

Training: like ONNX Runtime and the reference executor, it runs the training graph of
deep500lite's ONNX autodiff (:func:`deep500lite.lv1.autodiff.training_graph`: forward, loss and
every parameter gradient in one ONNX graph), compiled once per network version with the
parameters as inputs, so updating them needs no recompilation. The optimizers are the reference
ones (numpy, on the host).

Device: the CPU only. Custom operators are not supported (OpenVINO's frontend rejects unknown
domains). Role modules: ``executor.py``, ``ops.py`` (``SUPPORTED_OPS``), ``optimizers.py``,
``bench.py`` (the runners of ``deep500lite bench op`` and ``bench overhead``).
"""

# Light on purpose: deep500lite's registry imports this package to read SPEC; openvino itself is
# imported when one of the names below is first used.
from deep500lite.frameworkspec import lazy_exports

from deep500lite_openvino.spec import SPEC

_EXPORTS = {
    "OpenVINOExecutor": "executor",
    "from_model": "executor",
    "executor_class": "executor:OpenVINOExecutor",
    "SUPPORTED_OPS": "ops",
    "GradientDescent": "optimizers",
    "MomentumOptimizer": "optimizers",
    "NesterovOptimizer": "optimizers",
    "AdaGradOptimizer": "optimizers",
    "RMSPropOptimizer": "optimizers",
    "AdamOptimizer": "optimizers",
    "AcceleGradOptimizer": "optimizers",
}

__all__ = ["SPEC", *_EXPORTS]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, SPEC)
