"""A native executor for models that exist only in Keras (TensorFlow's model API).

:class:`TensorFlowNativeExecutor` (the counterpart of
``deep500lite.frameworks.torch.TorchNativeExecutor``; formerly ``KerasExecutor``, still
importable under that name with a DeprecationWarning) wraps a ``keras.Model`` (and optionally a
loss) behind the :class:`~deep500lite.GraphExecutor` interface, so the benchmarks, metrics and
optimizers of deep500lite run on it as on an ONNX network:

>>> ex = TensorFlowNativeExecutor(model, input_names=["x"], label_name="label",
...                               loss=keras.losses.SparseCategoricalCrossentropy())  # doctest: +SKIP
>>> out = ex.inference({"x": x, "label": y})   # {"output": ..., "loss": ...}  # doctest: +SKIP
>>> ex.inference_and_backprop({"x": x, "label": y})  # doctest: +SKIP
>>> ex.network.fetch_tensors(["dense/kernel_grad"])  # doctest: +SKIP

Semantics:

- Feeds are keyed by the input names given to the constructor (default: the Keras inputs'
  names), plus the label under ``label_name`` when a loss is given. Outputs are keyed by
  ``output_names`` (default: ``"output"`` for one output, else ``"output_0"``, ...), plus
  ``"loss"`` when a loss and the label are fed. Arrays are numpy at the boundary.
- The forward pass runs ``model(inputs, training=False)`` under ``tf.function`` (traced once
  per input-shape family), on the device given (``"cpu"`` or ``"gpu:N"``).
- There is no ONNX graph: ``executor.network`` is a small stand-in with ``inputs``,
  ``outputs``, ``parameters`` (the paths of ``model.trainable_variables``, such as
  ``"dense/kernel"``), ``fetch_tensors``/``feed_tensor`` for them and, after
  :meth:`TensorFlowNativeExecutor.inference_and_backprop`, for their gradients
  ``"<param>_grad"``.
- :meth:`TensorFlowNativeExecutor.inference_and_backprop` differentiates the loss with
  ``tf.GradientTape`` (training semantics for layers such as dropout: ``training=True``).
"""

from __future__ import annotations

import functools
import warnings
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from deep500lite.errors import (Deep500Error, DeviceError, FeedError, UnsupportedOperatorError, UserKeyError,
                                UserTypeError)
from deep500lite.lv0.tensordesc import TensorDescriptor
from deep500lite.lv1.device import as_device
from deep500lite.lv1.executor import GraphExecutor
from deep500lite.lv1.network import Deep500NetworkNames, gradient_name
from deep500lite.frameworks.tensorflow.executor import TensorFlowExecutor, tf_device_name

__all__ = ["TensorFlowNativeExecutor", "NativeNetwork", "cpu_runs_nchw_convolutions"]

# Old public names -> their new names; resolved with a DeprecationWarning by __getattr__ below.
_DEPRECATED = {"KerasExecutor": "TensorFlowNativeExecutor", "KerasNetwork": "NativeNetwork"}


@functools.lru_cache(maxsize=1)
def cpu_runs_nchw_convolutions() -> bool:
    """Whether TensorFlow's CPU kernels run 2-D convolutions on NCHW tensors in this process.

    They do with oneDNN and do not without it (TensorFlow's own CPU Conv2D and its input gradient,
    which a transposed convolution runs, are NHWC only); asked by running both once on tiny tensors.
    """
    with tf.device("/CPU:0"):
        try:
            tf.nn.conv2d(tf.zeros([1, 1, 2, 2]), tf.zeros([1, 1, 1, 1]), 1, "VALID", data_format="NCHW")
            tf.raw_ops.Conv2DBackpropInput(input_sizes=[1, 1, 2, 2], filter=tf.zeros([1, 1, 1, 1]),
                                           out_backprop=tf.zeros([1, 1, 2, 2]), strides=[1, 1, 1, 1],
                                           padding="VALID", data_format="NCHW")
        except (tf.errors.UnimplementedError, tf.errors.InvalidArgumentError):
            return False
    return True


def _check_cpu_layouts(model) -> None:
    """Refuse, before running, a model with channels-first 1-D or 2-D (transposed) convolution layers
    where TensorFlow's CPU kernels cannot run them (:func:`cpu_runs_nchw_convolutions`), naming them."""
    import keras

    kinds = (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv1DTranspose, keras.layers.Conv2DTranspose)
    flatten = getattr(model, "_flatten_layers", None)
    layers = list(flatten(include_self=False)) if flatten is not None else list(getattr(model, "layers", []))
    found = [f"'{layer.name}' ({type(layer).__name__})" for layer in layers
             if isinstance(layer, kinds) and getattr(layer, "data_format", None) == "channels_first"]
    if found and not cpu_runs_nchw_convolutions():
        raise UnsupportedOperatorError(
            f"TensorFlow cannot run 1-D and 2-D convolution layers with data_format='channels_first' on this "
            f"CPU: only its oneDNN kernels take NCHW tensors, and oneDNN is off in this process "
            f"(TF_ENABLE_ONEDNN_OPTS=0, or TensorFlow's default on a CPU without AVX-512). Build the layers "
            f"with data_format='channels_last', run on a GPU, or start Python with TF_ENABLE_ONEDNN_OPTS=1. "
            f"Received: layers {', '.join(found)}")


class NativeNetwork(Deep500NetworkNames):
    """The ``network`` of a :class:`TensorFlowNativeExecutor`: names and values of a Keras model's tensors.

    Attributes:
        inputs: the feed names of the model's inputs.
        outputs: the names of the model's outputs (and ``"loss"`` when a loss is set).
        parameters: the paths of the model's trainable variables.
    """

    def __init__(self, executor: "TensorFlowNativeExecutor"):
        self._executor = executor
        self.inputs = list(executor.input_names)
        self.outputs = list(executor.output_names) + (["loss"] if executor.loss is not None else [])
        self._vars = {v.path: v for v in executor.model.trainable_variables}
        self.parameters = list(self._vars)

    def input_descriptors(self) -> dict[str, TensorDescriptor | None]:
        """The dtype and shape of each input as the Keras model declares it (batch dimension ``None``).

        ``None`` for an input the model does not describe (a subclassed model before its first call).
        """
        tensors = list(getattr(self._executor.model, "inputs", None) or [])
        descs = {}
        for i, name in enumerate(self.inputs):
            t = tensors[i] if i < len(tensors) and len(tensors) == len(self.inputs) else None
            try:
                descs[name] = None if t is None else TensorDescriptor(np.dtype(str(t.dtype)), tuple(t.shape))
            except (TypeError, ValueError, Deep500Error):
                descs[name] = None
        return descs

    def output_descriptors(self) -> dict[str, None]:
        """Every output with descriptor ``None`` (known only once the model has run)."""
        return {name: None for name in self.outputs}

    def gradient(self, y: str = "loss") -> list[tuple[str, str]]:
        """The ``(parameter, gradient name)`` pairs that ``inference_and_backprop`` fills."""
        return [(p, gradient_name(p)) for p in self.parameters]

    def fetch_tensors(self, names: Sequence[str]) -> list[np.ndarray]:
        """Current values of parameters, or of gradients after ``inference_and_backprop``.

        Raises:
            UserKeyError: a name that is neither a parameter nor a computed gradient (a ``KeyError``).
            UserTypeError: ``names`` is one string, not a list of them.
        """
        if isinstance(names, str):
            raise UserTypeError(f"fetch_tensors expects a list of names (wrap one name as [name]). "
                                f"Received: the string {names!r}")
        grads = self._executor._grads
        out = []
        for name in names:
            if name in self._vars:
                out.append(self._vars[name].numpy())
            elif name in grads:
                out.append(grads[name].numpy())
            else:
                raise UserKeyError(
                    f"fetch_tensors: no tensor '{name}'. Parameters: {self.parameters[:20]}; gradients "
                    f"('<param>_grad') are available after inference_and_backprop. Received: {name!r}"
                )
        return out

    def fetch_tensor(self, name: str) -> np.ndarray:
        """The current value of one parameter or gradient."""
        return self.fetch_tensors([name])[0]

    def feed_tensor(self, name: str, value, is_param: bool = False) -> None:
        """Assign a new value to a parameter (same shape and dtype).

        Raises:
            FeedError: unknown name, or a different shape or dtype.
        """
        var = self._vars.get(name)
        if var is None:
            raise FeedError(f"feed_tensor: unknown parameter '{name}'. Parameters: {self.parameters[:20]}. "
                            f"Received: {name!r}")
        value = np.asarray(value)
        dtype = np.dtype(var.dtype)
        if value.dtype != dtype or tuple(value.shape) != tuple(var.shape):
            raise FeedError(
                f"feed_tensor('{name}'): expected {dtype.name}{list(var.shape)}. "
                f"Received: {value.dtype.name}{list(value.shape)}"
            )
        var.assign(value)

    def __repr__(self) -> str:
        return f"NativeNetwork(inputs={self.inputs}, outputs={self.outputs}, parameters={len(self.parameters)})"


class TensorFlowNativeExecutor(GraphExecutor):
    """Runs a ``keras.Model`` as a deep500lite executor (see the module docstring).

    Args:
        model: the Keras model.
        input_names: feed names for the model's inputs, in the order the model takes them
            (default: the names of ``model.inputs``, or ``"input"`` for one input).
        output_names: names for the model's outputs (default: ``"output"`` or ``"output_<i>"``).
        loss: ``loss(y_true, y_pred) -> scalar`` (a Keras loss object or any callable on tensors),
            applied to the first output; ``None`` for none.
        label_name: the feed name of the label that the loss compares with.
        device: ``"cpu"`` or ``"gpu:N"``.

    Raises:
        DeviceError: the device is not present.
        UnsupportedOperatorError: on the CPU, the model has 1-D or 2-D convolution layers with
            ``data_format="channels_first"`` and TensorFlow's oneDNN kernels, the only CPU kernels
            for them, are off (see :func:`cpu_runs_nchw_convolutions`).
        UserTypeError: ``model`` is not a Keras model (a ``TypeError``).
    """

    framework = "tensorflow"
    device_peak_memory = TensorFlowExecutor.device_peak_memory  # the same GPU peak as the converting executor

    def __init__(self, model, input_names: Sequence[str] | None = None, output_names: Sequence[str] | None = None,
                 loss: Callable | None = None, label_name: str = "label", device=None):
        import keras

        if not isinstance(model, keras.Model):
            raise UserTypeError(f"TensorFlowNativeExecutor expects a keras.Model. "
                                f"Received: {type(model).__name__}")
        device = as_device(device)
        if not TensorFlowExecutor.supports_device(device):
            raise DeviceError(f"The {self.framework} executor cannot run on {device}: "
                              + TensorFlowExecutor.device_unavailable_reason(device)
                              + f" Received: device={str(device)!r}")
        if not device.is_gpu:
            _check_cpu_layouts(model)
        self.devname = device
        self._tfdev = tf_device_name(device)
        self.model = model
        n_in = len(getattr(model, "inputs", None) or []) or 1
        if input_names is None:
            names = [getattr(t, "name", None) for t in (getattr(model, "inputs", None) or [])]
            input_names = names if names and all(names) else (["input"] if n_in == 1 else
                                                              [f"input_{i}" for i in range(n_in)])
        self.input_names = list(input_names)
        n_out = len(getattr(model, "outputs", None) or []) or 1
        if output_names is None:
            output_names = ["output"] if n_out == 1 else [f"output_{i}" for i in range(n_out)]
        self.output_names = list(output_names)
        self.loss = loss
        self.label_name = label_name
        self._grads: dict[str, tf.Tensor] = {}
        self.network = NativeNetwork(self)
        self._forward = tf.function(self._forward_impl, reduce_retracing=True)
        self._backward = tf.function(self._backward_impl, reduce_retracing=True)

    # ------------------------------------------------------------------ internals
    def _call_model(self, xs, training):
        out = self.model(xs[0] if len(xs) == 1 else list(xs), training=training)
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def _forward_impl(self, xs, label):
        with tf.device(self._tfdev):
            outs = self._call_model(xs, False)
            loss = None if label is None else self.loss(label, outs[0])
            return outs, loss

    def _backward_impl(self, xs, label, y_index):
        with tf.device(self._tfdev):
            variables = self.model.trainable_variables
            with tf.GradientTape() as tape:
                outs = self._call_model(xs, True)
                loss = self.loss(label, outs[0]) if label is not None else None
                target = loss if y_index < 0 else outs[y_index]
            grads = tape.gradient(target, variables)
            return outs, loss, grads

    def _split_feeds(self, feeds):
        if not isinstance(feeds, dict):
            raise FeedError(f"Feeds must be a dict of input name to array. Received: {type(feeds).__name__}")
        allowed = self.input_names + ([self.label_name] if self.loss is not None else [])
        unknown = [k for k in feeds if k not in allowed]
        if unknown:
            raise FeedError(f"Unknown input(s) {unknown}. The model's inputs are {allowed}. "
                            f"Received: feeds {list(feeds)}")
        missing = [k for k in self.input_names if k not in feeds]
        if missing:
            raise FeedError(f"Missing input(s) {missing}. The model's inputs are {self.input_names}. "
                            f"Received: feeds {list(feeds)}")
        xs = tuple(np.asarray(feeds[k]) for k in self.input_names)
        label = feeds.get(self.label_name) if self.loss is not None else None
        return xs, None if label is None else np.asarray(label)

    def _result(self, outs, loss):
        result = {name: o.numpy() for name, o in zip(self.output_names, outs)}
        if loss is not None:
            result["loss"] = loss.numpy()
        return result

    # ------------------------------------------------------------------ contract
    def inference(self, feeds):
        """Run the model (``training=False``); returns the named outputs, and ``"loss"`` with a label."""
        xs, label = self._split_feeds(feeds)
        outs, loss = self._forward(xs, label)
        return self._result(outs, loss)

    def inference_and_backprop(self, feeds, y="loss"):
        """Run forward (``training=True``) and differentiate ``y`` with ``tf.GradientTape``.

        Args:
            feeds: the inputs and, for ``y="loss"``, the label.
            y: ``"loss"`` or the name of a scalar output.

        Returns:
            The outputs (and ``"loss"``). Gradients are then readable as ``"<param>_grad"``
            through ``network.fetch_tensors``.

        Raises:
            FeedError: ``y`` is not the loss or an output, or the label for the loss is missing.
        """
        xs, label = self._split_feeds(feeds)
        if y == "loss":
            if self.loss is None or label is None:
                raise FeedError(
                    f"inference_and_backprop(y='loss') needs a loss and the label feed '{self.label_name}'. "
                    f"Received: loss={'set' if self.loss is not None else None}, feeds {sorted(feeds)}"
                )
            y_index = -1
        elif y in self.output_names:
            y_index = self.output_names.index(y)
        else:
            raise FeedError(f"inference_and_backprop: y must be 'loss' or one of {self.output_names}. Received: {y!r}")
        outs, loss, grads = self._backward(xs, label, y_index)
        if y_index >= 0 and outs[y_index].shape.num_elements() != 1:
            raise FeedError(f"inference_and_backprop: y='{y}' must be a scalar. Received: shape "
                            f"{outs[y_index].shape.as_list()}")
        self._grads = {gradient_name(p): g for p, g in zip(self.network.parameters, grads) if g is not None}
        return self._result(outs, loss)

    def has_tensor(self, name):
        return name in self.network._vars or name in self._grads

    def fetch_tensor(self, name):
        return self.network.fetch_tensor(name)

    def feed_tensor(self, name, value):
        self.network.feed_tensor(name, value)

    def synchronize(self):
        """Nothing to wait for: outputs are numpy arrays when ``inference`` returns."""

    def __repr__(self):
        return f"TensorFlowNativeExecutor(device={self.devname}, model={self.model.name!r}, network={self.network!r})"


def __getattr__(name: str):
    """``KerasExecutor`` and ``KerasNetwork``, the old names, with a DeprecationWarning."""
    new = _DEPRECATED.get(name)
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{name} is deprecated; use deep500lite.frameworks.tensorflow.{new} (the same class).",
                  DeprecationWarning, stacklevel=2)
    return globals()[new]
