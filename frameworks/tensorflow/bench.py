"""TensorFlow's part of ``deep500lite bench``: what is timed on TensorFlow and Keras.

The orchestration (cases, timing, statistics, tables, JSON) lives in :mod:`deep500lite.bench`;
it reaches this module at run time through
``deep500lite.registry.framework_module("tensorflow", "bench")``. Every framework's ``bench``
module has the same functions for the same role:

- ``bench op``: :func:`op_runner` (one GEMM or convolution case) and :func:`op_threads`;
- ``bench overhead``: :func:`set_seed`, :func:`inference_pair` and :func:`training_pair`
  (deep500lite against the framework's own API);
- ``bench overhead --op``: :func:`custom_op_pair` (a custom operator against the framework's own).
"""

from __future__ import annotations

import contextlib

import keras
import numpy as np
import tensorflow as tf

from deep500lite.bench.contract import (LEARNING_RATE, MODEL_SHAPES, MOMENTUM, OpRunner, random_labels, with_loss,
                                        zoo_network)
from deep500lite.errors import DeviceError
from deep500lite.frameworks.tensorflow import models
from deep500lite.frameworks.tensorflow.custom import custom_op
from deep500lite.frameworks.tensorflow.optimizers import MomentumOptimizer
from deep500lite.lv1.network import load_model
from deep500lite.registry import executor

__all__ = ["op_runner", "op_threads", "set_seed", "inference_pair", "training_pair", "custom_op_pair"]


# --------------------------------------------------------------------------------------------- bench op


def op_runner(case, inputs, device, threads) -> OpRunner:
    """``tf.linalg.matmul`` / ``tf.nn.conv2d`` (NHWC input, HWIO filter) inside a ``tf.function``.

    The convolution's inputs are transposed to TensorFlow's native layout once, before timing.
    Each run ends by fetching the result with ``.numpy()``; on a GPU
    ``tf.test.experimental.sync_devices()`` waits instead, so no device-to-host copy is timed.

    Args:
        case: a :class:`~deep500lite.bench.op.GemmCase` or :class:`~deep500lite.bench.op.ConvCase`.
        inputs: the case's numpy inputs (NCHW / KCRS for a convolution).
        device: the :class:`~deep500lite.Device`.
        threads: CPU threads (set for the whole run by :func:`op_threads`).

    Returns:
        An :class:`~deep500lite.bench.op.OpRunner` whose ``fetch`` gives the result in the case's layout.

    Raises:
        DeviceError: a GPU was asked for and TensorFlow does not see it (the framework is skipped).
    """
    if device.is_gpu:
        if len(tf.config.list_physical_devices("GPU")) <= device.index:
            raise DeviceError(f"TensorFlow sees no GPU {device.index} (tensorflow-cpu or no CUDA build). "
                              f"Received: device={str(device)!r}")
        where = f"/GPU:{device.index}"
    else:
        where = "/CPU:0"
    with tf.device(where):
        if case.suite == "gemm":
            args = [tf.constant(x) for x in inputs]
            fn = tf.function(lambda a, b: tf.linalg.matmul(a, b))
            how, to_case_layout = "tf.linalg.matmul in tf.function", (lambda y: y)
        else:
            pads = [[0, 0], [case.pad, case.pad], [case.pad, case.pad], [0, 0]]
            args = [tf.constant(np.ascontiguousarray(inputs[0].transpose(0, 2, 3, 1))),
                    tf.constant(np.ascontiguousarray(inputs[1].transpose(2, 3, 1, 0)))]
            fn = tf.function(lambda x, w: tf.nn.conv2d(x, w, strides=[1, case.stride, case.stride, 1], padding=pads))
            how, to_case_layout = "tf.nn.conv2d in tf.function (NHWC, HWIO)", (lambda y: y.transpose(0, 3, 1, 2))

    def run():
        with tf.device(where):
            return fn(*args)

    sync_devices = getattr(getattr(tf.test, "experimental", None), "sync_devices", None)
    if device.is_gpu and sync_devices is not None:
        call, sync, how = run, sync_devices, how + ", tf.test.experimental.sync_devices()"
    else:
        call, sync, how = (lambda: run().numpy()), None, how + ", result fetched with .numpy()"
    return OpRunner(call, sync, lambda: to_case_layout(np.asarray(run().numpy())), how)


@contextlib.contextmanager
def op_threads(threads: int, device):
    """TensorFlow's intra-op threads for the block; yields a description.

    TensorFlow fixes its thread pools when it initializes: if that happened before, the setting
    cannot change and the description says what is in effect.
    """
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        yield f"intra-op threads {threads}"
    except RuntimeError:  # TensorFlow was initialized before: its thread pools are fixed
        current = tf.config.threading.get_intra_op_parallelism_threads()
        yield f"intra-op threads {current or 'all cores'} (set before this benchmark)"


# --------------------------------------------------------------------------------------------- bench overhead


def set_seed(seed: int) -> None:
    """Seed Keras, TensorFlow, numpy and Python (``keras.utils.set_random_seed``)."""
    keras.utils.set_random_seed(seed)


def inference_pair(model, batch, rng):
    """A Keras model (channels-last) in a ``tf.function`` against its tf2onnx conversion on the TensorFlow executor.

    Args:
        model: ``"lenet"`` or ``"resnet20"``.
        batch: samples per call.
        rng: the numpy generator of the inputs.

    Returns:
        ``(deep500lite_call, native_call, executor)``.
    """
    c, h, w = MODEL_SHAPES[model]
    keras_model = models.lenet(input_shape=(h, w, c)) if model == "lenet" else models.resnet20(input_shape=(h, w, c))
    proto = models.export_onnx(keras_model)
    ex = executor(load_model(proto), "tensorflow")
    name, out = ex.network.inputs[0], ex.network.outputs[0]
    x = rng.standard_normal((batch, h, w, c)).astype(np.float32)
    spec = (tf.TensorSpec((None, h, w, c), tf.float32),)
    call = tf.function(lambda t: keras_model(t, training=False), input_signature=spec)

    def native():
        return call(x).numpy()

    return (lambda: ex.inference({name: x})[out]), native, ex


def training_pair(model, batch, rng):
    """One step of a Keras model with ``GradientTape`` and ``keras.optimizers.SGD`` in a ``tf.function``
    against the zoo's ONNX graph of the same architecture on the TensorFlow executor with its native
    ``MomentumOptimizer`` (the two start from different weights).

    Args:
        model: ``"lenet"`` or ``"resnet20"``.
        batch: samples per step.
        rng: the numpy generator of the inputs and labels.

    Returns:
        ``(deep500lite_call, native_call, executor)``; each call returns the step's loss.
    """
    c, h, w = MODEL_SHAPES[model]
    keras_model = models.lenet(input_shape=(h, w, c)) if model == "lenet" else models.resnet20(input_shape=(h, w, c))
    net = with_loss(zoo_network(model, batch))
    ex = executor(net, "tensorflow")
    optimizer = MomentumOptimizer(ex, learning_rate=LEARNING_RATE, momentum=MOMENTUM)
    x = rng.standard_normal((batch, c, h, w)).astype(np.float32)
    x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    y = random_labels(rng, batch)
    keras_opt = keras.optimizers.SGD(learning_rate=LEARNING_RATE, momentum=MOMENTUM)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, keras_model(xb, training=True))
        grads = tape.gradient(loss, keras_model.trainable_variables)
        keras_opt.apply_gradients(zip(grads, keras_model.trainable_variables))
        return loss

    def native():
        return train_step(x_nhwc, y).numpy()

    return (lambda: optimizer.step({"input": x, "label": y})["loss"]), native, ex


# --------------------------------------------------------------------------------------------- bench overhead --op


def custom_op_pair(op, x, g):
    """``deep500lite.frameworks.tensorflow.custom_op(op)`` against ``tf.nn.silu``, each under
    ``tf.GradientTape`` in a ``tf.function``.

    Args:
        op: the Swish operator (:func:`deep500lite.bench.op_overhead.swish_op`).
        x: the input vector.
        g: the output gradient.

    Returns:
        ``(custom_call, native_call)``; each call returns ``(y, dL/dx)`` as numpy arrays.
    """
    fn = custom_op(op)
    spec = [tf.TensorSpec(x.shape, tf.float32)] * 2

    def run(f):
        @tf.function(input_signature=spec, autograph=False)
        def step(t, gy):
            with tf.GradientTape() as tape:
                tape.watch(t)
                y = f(t)
            return y, tape.gradient(y, t, output_gradients=gy)

        def call():
            y, grad = step(x, g)
            return y.numpy(), grad.numpy()
        return call

    return run(lambda t: fn(t)[0]), run(tf.nn.silu)
