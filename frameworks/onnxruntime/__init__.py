r"""ONNX Runtime executor.

The network runs in an ``onnxruntime.InferenceSession`` with the execution provider of the
device (``CPUExecutionProvider``; ``CUDAExecutionProvider`` for ``gpu:N`` when the installed
onnxruntime has it). Parameters are initializers of the session, so ONNX Runtime can pre-pack
them; ``feed_tensor`` changes the executor's copy and the session is rebuilt before the next
run. Inputs and outputs are numpy arrays; ``InferenceSession.run`` returns once the outputs are
on the host, so no separate synchronization is needed.

Training: the backward graph is built by deep500lite's ONNX autodiff. The optimizers
(:mod:`.optimizers`: ``GradientDescent``, ``MomentumOptimizer``, ``NesterovOptimizer``,
``AdaGradOptimizer``, ``RMSPropOptimizer``, ``AdamOptimizer``, ``AcceleGradOptimizer``) are the
reference ones, as the ``onnxruntime`` inference package has no optimizer of its own; all but
AcceleGrad run fused (:mod:`.training_session`): their update is written into the training graph,
one session run per step computes loss, gradients, new parameters and optimizer state, and the
state stays in ``OrtValue`` buffers swapped by two ``IOBinding``\ s, copied to the host only when
read. A ``gradient_modifier``, a subclass or ``executor.fused_training = False`` takes the host
path (gradients fetched, the update in numpy).

Role modules (the same names in every framework package; see ``docs/architecture.md``):

- ``executor.py``: :class:`OnnxRuntimeExecutor` and ``from_model``.
- ``ops/``: ``SUPPORTED_OPS``, what the installed ONNX Runtime's kernels cover.
- ``custom.py``: ``custom_op``, a deep500lite custom operator as an ONNX Runtime custom op.
- ``optimizers.py``: the reference optimizers, re-exported (see above).
- ``bench.py``: this framework's benchmark runners.

ONNX Runtime runs ONNX as it is, so it has no ``dtypes.py``, ``native.py`` or ``models.py``.
"""

# Light on purpose: deep500lite.registry imports this package to read SPEC, so the framework itself
# is imported only when one of the names below is first used (lazy_exports).
from deep500lite.frameworkspec import lazy_exports
from deep500lite.frameworks.onnxruntime.spec import SPEC

_EXPORTS = {
    "custom_op": "custom",
    "OnnxRuntimeExecutor": "executor",
    "from_model": "executor",
    "SUPPORTED_OPS": "ops",
    "executor_class": "executor:OnnxRuntimeExecutor",
    "GradientDescent": "optimizers",
    "MomentumOptimizer": "optimizers",
    "NesterovOptimizer": "optimizers",
    "AdaGradOptimizer": "optimizers",
    "RMSPropOptimizer": "optimizers",
    "AdamOptimizer": "optimizers",
    "AcceleGradOptimizer": "optimizers",
    "from_onnx": "executor",
}

__all__ = ["custom_op", "OnnxRuntimeExecutor", "from_model", "SUPPORTED_OPS", "executor_class", "GradientDescent",
           "MomentumOptimizer", "NesterovOptimizer", "AdaGradOptimizer", "RMSPropOptimizer", "AdamOptimizer",
           "AcceleGradOptimizer", "from_onnx"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, SPEC)
