"""TensorFlow executors: ONNX graphs converted to TensorFlow ops, and Keras models as they are.

``from_model(network, device)`` converts the ONNX graph once into one Python function of
TensorFlow ops wrapped in ``tf.function``; it is traced once per family of input shapes
(``None`` where the model leaves a dimension open), not per call. TensorFlow's CPU kernels
for convolution and pooling are channels-last only, so the converter propagates layouts while
tracing: a chain such as Conv-BatchNorm-Relu-MaxPool runs NHWC with one transpose at each end
(see :mod:`.layout`).

Note on device placement: ``device="cpu"`` places every op and parameter on ``/CPU:0``;
``device="gpu:N"`` on ``/GPU:N``, and is refused with a :class:`~deep500lite.DeviceError` when
``tf.config.list_physical_devices('GPU')`` has no GPU N (always with ``tensorflow-cpu``).
Floating-point initializers are ``tf.Variable`` objects created once on the device and kept
there between calls; ``feed_tensor`` assigns to them in place.

Note on synchronization and copies: feeds are numpy arrays, copied to the device by the call;
outputs are copied back to numpy arrays before ``inference`` returns, which waits for the
device, so ``synchronize()`` has nothing left to wait for.

TensorFlow prints C++ start-up messages (oneDNN, CPU features) on import; setting
``TF_CPP_MIN_LOG_LEVEL=2`` in the shell silences them (setting it from Python after start-up
does not, with TensorFlow 2.21, so this package does not try).

Training: ``inference_and_backprop`` runs the graph in training mode (BatchNormalization with
batch statistics, updating its running statistics; Dropout active, seeded per executor) under
``tf.GradientTape`` in one ``tf.function``; gradients stay on the device until fetched. The
native optimizers (:mod:`.optimizers`: ``GradientDescent``, ``MomentumOptimizer``,
``NesterovOptimizer``, ``AdamOptimizer``, ``AdaGradOptimizer``, ``RMSPropOptimizer``) run forward, backward and a Keras
optimizer's update as one ``tf.function``.

Keras models that have no ONNX form run through :class:`TensorFlowNativeExecutor`
(``native.py``; ``KerasExecutor`` is its deprecated old name, which still works with a
DeprecationWarning).

Role modules (the same names in every framework package; see ``docs/architecture.md``):

- ``executor.py``: :class:`TensorFlowExecutor` and ``from_model``, the converted ONNX graph.
- ``ops/``: the ONNX-to-TensorFlow operator converters, one module per operator family, and
  ``SUPPORTED_OPS``; ``dtypes.py``: ONNX and numpy dtypes to TensorFlow's and back.
- ``custom.py``: ``custom_op``, a deep500lite custom operator as a TensorFlow op with a custom
  gradient.
- ``optimizers.py``: the native optimizers (Keras optimizers under one ``tf.function`` per step).
- ``bench.py``: this framework's benchmark runners.
- ``native.py``: :class:`TensorFlowNativeExecutor`, for Keras models with no ONNX form.
- ``models.py``: ``lenet``, ``resnet20`` (Keras, NHWC ``input_shape``) and ``export_onnx``, with
  the same names as :mod:`deep500lite.frameworks.torch.models`.
- ``layout.py`` (TensorFlow only): the NCHW/NHWC layout propagation of the converter.
- ``distributed.py``: Deep500's ``HorovodDistributedOptimizer`` over ``horovod.tensorflow`` (an optimizer
  wrapper, where torch's module is also a communicator); ``zoo.py``, ``op_validation.py``: the zoo's
  Keras exports and Deep500's native-operator tests; ``state.py``: the seed and checkpoint state.
- ``native_graph.py``: Deep500's ``TensorflowNativeGraphExecutor``, for TensorFlow 1 graphs run in
  graph mode.
- ``spec.py``: the framework's declaration (roles and capabilities), read through the entry point.
"""

# Light on purpose: deep500lite.registry imports this package to read SPEC, so the framework itself
# is imported only when one of the names below is first used (lazy_exports).
from deep500lite.frameworkspec import lazy_exports
from deep500lite.frameworks.tensorflow.spec import SPEC

_EXPORTS = {
    "custom_op": "custom",
    "TensorFlowExecutor": "executor",
    "TensorFlowNativeExecutor": "native",
    "NativeNetwork": "native",
    "from_model": "executor",
    "SUPPORTED_OPS": "ops",
    "executor_class": "executor:TensorFlowExecutor",
    "TensorFlowOptimizer": "optimizers",
    "GradientDescent": "optimizers",
    "MomentumOptimizer": "optimizers",
    "NesterovOptimizer": "optimizers",
    "AdamOptimizer": "optimizers",
    "AdaGradOptimizer": "optimizers",
    "RMSPropOptimizer": "optimizers",
    "desc_from_tensor": "op_validation",
    "custom_op_from_native": "op_validation",
    "test_nativeop_forward": "op_validation",
    "test_nativeop_gradient": "op_validation",
    "from_onnx": "executor",
    "TensorflowGraphExecutor": "executor:TensorFlowExecutor",
    "TensorflowNativeGraphExecutor": "native_graph",
    "HorovodDistributedOptimizer": "distributed",
}

__all__ = ["custom_op", "TensorFlowExecutor", "TensorFlowNativeExecutor", "NativeNetwork", "from_model",
           "SUPPORTED_OPS", "executor_class", "TensorFlowOptimizer", "GradientDescent", "MomentumOptimizer",
           "NesterovOptimizer", "AdamOptimizer", "AdaGradOptimizer", "RMSPropOptimizer", "desc_from_tensor",
           "custom_op_from_native", "test_nativeop_forward", "test_nativeop_gradient", "from_onnx",
           "TensorflowGraphExecutor", "TensorflowNativeGraphExecutor", "HorovodDistributedOptimizer"]

_DEPRECATED = {"KerasExecutor": ("TensorFlowNativeExecutor", "KerasExecutor is deprecated; use "
                                "deep500lite.frameworks.tensorflow.TensorFlowNativeExecutor (the same class).")}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, SPEC, deprecated=_DEPRECATED)
