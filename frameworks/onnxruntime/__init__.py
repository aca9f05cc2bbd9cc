"""ONNX Runtime executor.

The network runs in an ``onnxruntime.InferenceSession`` with the execution provider of the
device (``CPUExecutionProvider``; ``CUDAExecutionProvider`` for ``gpu:N`` when the installed
onnxruntime has it). Parameters are initializers of the session, so ONNX Runtime can pre-pack
them; ``feed_tensor`` changes the executor's copy and the session is rebuilt before the next
run. Inputs and outputs are numpy arrays; ``InferenceSession.run`` returns once the outputs are
on the host, so no separate synchronization is needed.
"""

try:
    import onnxruntime  # noqa: F401
except ImportError as exc:
    from deep500lite.errors import FrameworkNotAvailableError

    raise FrameworkNotAvailableError(
        "Framework 'onnxruntime' needs ONNX Runtime: pip install 'deep500lite[onnxruntime]'") from exc

from deep500lite.frameworks.onnxruntime.custom import custom_op
from deep500lite.frameworks.onnxruntime.executor import OnnxRuntimeExecutor, from_model
from deep500lite.frameworks.onnxruntime.operators import SUPPORTED_OPS

executor_class = OnnxRuntimeExecutor

__all__ = ["custom_op", "OnnxRuntimeExecutor", "from_model", "SUPPORTED_OPS", "executor_class"]
