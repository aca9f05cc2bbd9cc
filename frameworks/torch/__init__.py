"""The PyTorch executor: ONNX graphs run with torch operators, and native torch modules.

Device placement: ``device="cpu"`` or ``"gpu:N"`` (CUDA device N). Asking for a GPU when
``torch.cuda.is_available()`` is False (or N is out of range) raises ``DeviceError``. Every
initializer is converted once, when the executor is built, to a tensor on that device and stays
there between calls; ``network.feed_tensor`` updates it in place.

Synchronization: CUDA work is asynchronous. ``inference`` returns numpy arrays, so it waits for
its own results; ``executor.synchronize()`` (``torch.cuda.synchronize``) is what timers call.

Copies at the boundary: on the CPU, feeds are wrapped with ``torch.from_numpy`` without a copy
(read-only, non-native-endian or negatively strided arrays are copied first); on a GPU they are
copied to the device. Outputs are numpy arrays that never share memory with the executor's
parameters, constants or the caller's feeds: results the graph computes are handed over as they
are, and an output that could alias held memory (an Identity of a parameter, a reshaped feed) is
copied.

Training: ``inference_and_backprop`` runs the graph in training mode (BatchNormalization with
batch statistics, running statistics updated in place with ONNX's rule; Dropout active, masks
from a generator seeded per executor) and backpropagates with torch autograd; gradients stay on
the device as the parameters' ``.grad`` until fetched as ``"<param>_grad"``. The native
optimizers (``GradientDescent``, ``MomentumOptimizer``, ``NesterovOptimizer``,
``AdaGradOptimizer``, ``RMSPropOptimizer``, ``AdamOptimizer``; see
:mod:`deep500lite.frameworks.torch.optimizers` for their exact formulas) update the parameters in
place on the device with ``torch.optim``.

``TorchNativeExecutor`` (see :mod:`deep500lite.frameworks.torch.native`) wraps a
``torch.nn.Module`` that exists only in PyTorch, with an optional loss, behind the same
``inference``/``inference_and_backprop`` interface.

Role modules (the same names in every framework package; see ``docs/architecture.md``):

- ``executor.py``: :class:`TorchExecutor`, ``from_model`` and ``torch_device``.
- ``ops/``: the ONNX-to-torch operator converters, one module per operator family, and
  ``SUPPORTED_OPS``; ``dtypes.py``: ONNX and numpy dtypes to torch's and back.
- ``custom.py``: ``custom_op``, a deep500lite custom operator as a torch autograd function.
- ``optimizers.py``: the native optimizers (``torch.optim`` on the device).
- ``bench.py``: this framework's benchmark runners.
- ``native.py``: :class:`TorchNativeExecutor` and its :class:`NativeNetwork`.
- ``models.py``: ``lenet``, ``resnet20`` (``nn.Module``, CHW ``input_shape``) and ``export_onnx``,
  with the same names as :mod:`deep500lite.frameworks.tensorflow.models`.
- ``zoo.py``, ``op_validation.py``, ``state.py``: the zoo's exports, Deep500's native-operator tests, the
  seed and checkpoint state; ``spec.py``: the declaration read through the entry point.
- ``distributed.py``: ``TorchDistributedCommunicator`` over ``torch.distributed``,
  re-exported lazily as ``deep500lite.lv3.TorchDistributedCommunicator``.
"""

# Light on purpose: deep500lite.registry imports this package to read SPEC, so the framework itself
# is imported only when one of the names below is first used (lazy_exports).
from deep500lite.frameworkspec import lazy_exports
from deep500lite.frameworks.torch.spec import SPEC

_EXPORTS = {
    "custom_op": "custom",
    "TorchExecutor": "executor",
    "TorchNativeExecutor": "native",
    "NativeNetwork": "native",
    "from_model": "executor",
    "torch_device": "executor",
    "SUPPORTED_OPS": "ops",
    "executor_class": "executor:TorchExecutor",
    "GradientDescent": "optimizers",
    "MomentumOptimizer": "optimizers",
    "NesterovOptimizer": "optimizers",
    "AdamOptimizer": "optimizers",
    "AdaGradOptimizer": "optimizers",
    "RMSPropOptimizer": "optimizers",
    "desc_from_tensor": "custom",
    "custom_op_from_native": "custom",
    "test_nativeop_forward": "op_validation",
    "test_nativeop_gradient": "op_validation",
    "from_onnx": "executor",
    "PyTorchNativeGraphExecutor": "native",
    "PyTorchGraphExecutor": "executor:TorchExecutor",
    "HorovodDistributedOptimizer": "distributed",
}

__all__ = ["custom_op", "TorchExecutor", "TorchNativeExecutor", "NativeNetwork", "from_model", "torch_device",
           "SUPPORTED_OPS", "executor_class", "GradientDescent", "MomentumOptimizer", "NesterovOptimizer",
           "AdamOptimizer", "AdaGradOptimizer", "RMSPropOptimizer", "desc_from_tensor", "custom_op_from_native",
           "test_nativeop_forward", "test_nativeop_gradient", "from_onnx", "PyTorchNativeGraphExecutor",
           "PyTorchGraphExecutor", "HorovodDistributedOptimizer"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, SPEC)
