"""ONNX Runtime executor.

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

try:
    import onnxruntime  # noqa: F401
except ImportError as exc:
    from deep500lite.errors import FrameworkNotAvailableError

    raise FrameworkNotAvailableError(
        "Framework 'onnxruntime' needs ONNX Runtime: pip install 'deep500lite[onnxruntime]'") from exc

from deep500lite.frameworks.onnxruntime.custom import custom_op
from deep500lite.frameworks.onnxruntime.executor import OnnxRuntimeExecutor, from_model
from deep500lite.frameworks.onnxruntime.ops import SUPPORTED_OPS
from deep500lite.frameworks.onnxruntime.optimizers import (AcceleGradOptimizer, AdaGradOptimizer, AdamOptimizer,
                                                           GradientDescent, MomentumOptimizer, NesterovOptimizer,
                                                           RMSPropOptimizer)

executor_class = OnnxRuntimeExecutor

__all__ = ["custom_op", "OnnxRuntimeExecutor", "from_model", "SUPPORTED_OPS", "executor_class", "GradientDescent",
           "MomentumOptimizer", "NesterovOptimizer", "AdaGradOptimizer", "RMSPropOptimizer", "AdamOptimizer",
           "AcceleGradOptimizer"]

# Deep500's own names (issue 15), grouped by area; each block adds its imports and extends __all__.
# [training]
# [/training]
# [data-metrics]
# [/data-metrics]
# [ops-custom]
# [/ops-custom]
# [graph-executors]
from deep500lite.frameworks.onnxruntime.executor import from_onnx  # noqa: E402

__all__ += ["from_onnx"]
# [/graph-executors]
# [distributed]
# [/distributed]
