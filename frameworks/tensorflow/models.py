"""Plain Keras versions of benchmark models (LeNet-5, CIFAR ResNet-20), for native baselines.

``deep500lite bench overhead`` times these models (channels-last, as Keras writes them) called
through ``tf.function`` against the same models converted to ONNX by tf2onnx and run by the
deep500lite TensorFlow executor.
"""

from __future__ import annotations

import keras
import onnx
import tensorflow as tf

__all__ = ["lenet", "resnet20", "to_onnx"]


def lenet(classes: int = 10, input_shape=(28, 28, 1)) -> keras.Model:
    """LeNet-5 (NHWC input)."""
    inp = keras.Input(input_shape)
    x = keras.layers.Conv2D(6, 5, padding="same", activation="relu")(inp)
    x = keras.layers.MaxPooling2D(2)(x)
    x = keras.layers.Conv2D(16, 5, activation="relu")(x)
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
    """CIFAR ResNet-20 (NHWC input)."""
    inp = keras.Input(input_shape)
    x = keras.layers.Conv2D(16, 3, padding="same", use_bias=False)(inp)
    x = keras.layers.ReLU()(keras.layers.BatchNormalization()(x))
    for stage, width in enumerate((16, 32, 64)):
        for i in range(3):
            x = _block(x, width, 2 if stage > 0 and i == 0 else 1)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, keras.layers.Dense(classes)(x))


def to_onnx(model: keras.Model, batch_size: int | None = None) -> onnx.ModelProto:
    """Convert a Keras model to ONNX with tf2onnx (opset 17), through a ``tf.function``."""
    try:
        import tf2onnx
    except ImportError as exc:
        raise ImportError("Converting Keras models to ONNX needs tf2onnx: pip install tf2onnx") from exc
    spec = (tf.TensorSpec((batch_size, *model.input_shape[1:]), tf.float32, name="input"),)

    @tf.function(input_signature=spec)
    def forward(x):
        return model(x, training=False)

    proto, _ = tf2onnx.convert.from_function(forward, input_signature=spec, opset=17)
    return proto
