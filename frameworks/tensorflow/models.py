"""Plain Keras versions of benchmark models (LeNet-5, CIFAR ResNet-20), for native baselines.

``deep500lite bench overhead`` times these models (channels-last, as Keras writes them) called
through ``tf.function`` against the same models converted to ONNX by tf2onnx and run by the
deep500lite TensorFlow executor.

The functions have the same names and arguments as :mod:`deep500lite.frameworks.torch.models`:
``lenet(classes, input_shape)`` and ``resnet20(classes, input_shape)`` return the model (here a
``keras.Model``), ``export_onnx(model, ...)`` converts it to ONNX (``to_onnx`` is its deprecated
old name). Each framework keeps its own layout: ``input_shape`` is one sample's shape
**channels-last (H, W, C)** here, as Keras layers take it, and channels-first (C, H, W) for
torch; the exported graphs take NHWC and NCHW batches respectively and give the same output
shape, ``(batch, classes)``.
"""

from __future__ import annotations

import warnings

import keras
import numpy as np
import onnx
import tensorflow as tf

from deep500lite.errors import FrameworkNotAvailableError, UserError

__all__ = ["lenet", "resnet20", "export_onnx"]


def _hwc(input_shape, what: str) -> tuple[int, int, int]:
    shape = tuple(input_shape)
    if len(shape) != 3 or not all(isinstance(d, (int, np.integer)) and d > 0 for d in shape):
        raise UserError(f"{what}: input_shape is one sample's shape, channels last: (H, W, C), three positive "
                        f"integers. Received: input_shape={input_shape!r}")
    return tuple(int(d) for d in shape)


def lenet(classes: int = 10, input_shape=(28, 28, 1)) -> keras.Model:
    """LeNet-5, the same layers as the torch ``lenet`` (NHWC input).

    Args:
        classes: the number of outputs.
        input_shape: one sample's shape, channels last ``(H, W, C)``; inputs smaller than 16
            pixels keep their size through the second convolution, as in the torch model.

    Returns:
        The Keras model.
    """
    shape = _hwc(input_shape, "lenet")
    small = min(shape[0], shape[1]) // 2 < 8
    inp = keras.Input(shape)
    x = keras.layers.Conv2D(6, 5, padding="same", activation="relu")(inp)
    x = keras.layers.MaxPooling2D(2)(x)
    x = keras.layers.Conv2D(16, 5, padding="same" if small else "valid", activation="relu")(x)
    x = keras.layers.MaxPooling2D(2)(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(120, activation="relu")(x)
    x = keras.layers.Dense(84, activation="relu")(x)
    return keras.Model(inp, keras.layers.Dense(classes)(x))


def _block(x, width, stride):
    out = keras.layers.Conv2D(width, 3, stride, padding="same", use_bias=False)(x)
    out = keras.layers.ReLU()(keras.layers.BatchNormalization()(out))
    out = keras.layers.BatchNormalization()(keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(out))
    if stride != 1 or x.shape[-1] != width:
        x = keras.layers.BatchNormalization()(keras.layers.Conv2D(width, 1, stride, use_bias=False)(x))
    return keras.layers.ReLU()(keras.layers.Add()([out, x]))


def resnet20(classes: int = 10, input_shape=(32, 32, 3)) -> keras.Model:
    """CIFAR ResNet-20, the same layers as the torch ``resnet20`` (NHWC input).

    Args:
        classes: the number of outputs.
        input_shape: one sample's shape, channels last ``(H, W, C)``.

    Returns:
        The Keras model.
    """
    inp = keras.Input(_hwc(input_shape, "resnet20"))
    x = keras.layers.Conv2D(16, 3, padding="same", use_bias=False)(inp)
    x = keras.layers.ReLU()(keras.layers.BatchNormalization()(x))
    for stage, width in enumerate((16, 32, 64)):
        for i in range(3):
            x = _block(x, width, 2 if stage > 0 and i == 0 else 1)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, keras.layers.Dense(classes)(x))


def export_onnx(model: keras.Model, example=None, batch_size: int | None = None) -> onnx.ModelProto:
    """Convert a Keras model to ONNX with tf2onnx (opset 17), through a ``tf.function``.

    The graph's input is named ``input`` (NHWC for the models here); it is an inference graph
    (``training=False``).

    Args:
        model: the Keras model (one input).
        example: an input batch, optional: the graph's batch size is then its first dimension.
        batch_size: a fixed batch size for the graph; None (and no example) leaves it open.

    Returns:
        The ONNX model.

    Raises:
        UserError: an example whose sample shape differs from the model's input, or a
            ``batch_size`` that differs from the example's.
        FrameworkNotAvailableError: tf2onnx is not installed (an ``ImportError``).
    """
    try:
        import tf2onnx
    except ImportError as exc:
        raise FrameworkNotAvailableError("Converting Keras models to ONNX needs tf2onnx: pip install tf2onnx") from exc
    sample = tuple(model.input_shape[1:])
    if example is not None:
        shape = tuple(np.shape(example))
        if shape[1:] != sample or (batch_size is not None and shape[0] != batch_size):
            raise UserError(f"export_onnx: the example must be a batch of the model's input {list(sample)}"
                            f"{'' if batch_size is None else f' with batch_size {batch_size}'}. "
                            f"Received: example shape {list(shape)}")
        batch_size = shape[0]
    spec = (tf.TensorSpec((batch_size, *sample), tf.float32, name="input"),)

    @tf.function(input_signature=spec)
    def forward(x):
        return model(x, training=False)

    proto, _ = tf2onnx.convert.from_function(forward, input_signature=spec, opset=17)
    return proto


def to_onnx(model: keras.Model, batch_size: int | None = None) -> onnx.ModelProto:
    """Deprecated: the old name of :func:`export_onnx` (the name the torch models module uses too)."""
    warnings.warn("deep500lite.frameworks.tensorflow.models.to_onnx is deprecated; use export_onnx (the same "
                  "function).", DeprecationWarning, stacklevel=2)
    return export_onnx(model, batch_size=batch_size)
