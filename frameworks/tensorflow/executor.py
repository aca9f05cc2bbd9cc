"""The TensorFlow graph executor: the ONNX graph converted to TF ops under ``tf.function``."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from deep500lite.errors import FeedError
from deep500lite.lv1.executor import GraphExecutor
from deep500lite.lv1.network import FLOAT_DTYPES
from deep500lite.frameworks.tensorflow.layout import Value
from deep500lite.frameworks.tensorflow.operators import SUPPORTED_OPS, build_node, check_types

__all__ = ["TensorFlowExecutor", "from_model", "tf_device_name"]


def tf_device_name(device) -> str:
    """The TensorFlow device string of a deep500lite device (``"/CPU:0"``, ``"/GPU:N"``)."""
    return f"/GPU:{device.index}" if device.is_gpu else "/CPU:0"


class TensorFlowExecutor(GraphExecutor):
    """Runs a network as one ``tf.function`` built from the ONNX graph.

    The graph is converted once, when the executor is built (and again when operations or
    outputs are added to the network): every node becomes TensorFlow ops, channels-first
    spatial operators run channels-last (see :mod:`.layout`), and the function is traced once per
    family of input shapes (an input signature with ``None`` for dimensions the model leaves
    open). Floating-point initializers are ``tf.Variable`` objects on the executor's device, so
    ``feed_tensor`` assigns in place and TensorFlow's autodiff can reach them; other
    initializers (shapes, indices) are embedded as graph constants.

    Args:
        network: a Network, ONNX file path or ``onnx.ModelProto``.
        device: ``"cpu"`` or ``"gpu:N"``.
    """

    framework = "tensorflow"
    SUPPORTED_OPS = SUPPORTED_OPS

    def __init__(self, network, device=None):
        super().__init__(network, device)
        self._tfdev = tf_device_name(self.devname)
        self._variables: dict[str, tf.Variable] = {}
        self._constants: dict[str, np.ndarray] = {}
        self._load_values(self.network.host_values())
        self._build()

    # ------------------------------------------------------------------ building
    def _load_values(self, values):
        with tf.device(self._tfdev):
            for name, value in values.items():
                value = np.asarray(value)
                if value.dtype in FLOAT_DTYPES:
                    self._variables[name] = tf.Variable(value, name=_var_name(name), trainable=True)
                else:
                    self._constants[name] = np.array(value, copy=True)

    def _build(self):
        network = self.network
        graph = network.graph
        opset = network.opset
        plan = [(build_node(node, opset), list(node.input), list(node.output)) for node in graph.node]
        inputs = network.inputs
        outputs = network.outputs
        variables = self._variables
        constants = self._constants
        tfdev = self._tfdev
        used = {n for node in graph.node for n in node.input} | set(network.outputs)
        used_vars = [n for n in variables if n in used]
        used_consts = [n for n in constants if n in used]

        def forward(*feeds):
            with tf.device(tfdev):
                env: dict[str, Value] = {name: Value(variables[name].read_value()) for name in used_vars}
                env.update((name, Value(tf.constant(constants[name]))) for name in used_consts)
                env.update(zip(inputs, (Value(t) for t in feeds)))
                for run, ins, outs in plan:
                    results = run([env[n] if n else None for n in ins])
                    for name, value in zip(outs, results):
                        if name and value is not None:
                            env[name] = value
                return [env[name].plain for name in outputs]

        descs = network.input_descriptors()
        if all(d is not None for d in descs.values()):
            signature = [tf.TensorSpec(None if d.shape is None else list(d.shape), tf.as_dtype(d.dtype), name=None)
                         for d in descs.values()]
            self._fn = tf.function(forward, input_signature=signature, autograph=False)
        else:
            self._fn = tf.function(forward, reduce_retracing=True, autograph=False)
        self._inputs = inputs
        self._outputs = outputs

    def _network_changed(self):
        super()._network_changed()
        # New nodes may read initializers the executor has not seen (add_operation with params).
        self._load_values({k: v for k, v in self.network.host_values().items()
                           if k not in self._variables and k not in self._constants})
        self._build()

    @classmethod
    def check_supported(cls, network):
        """Also refuse tensors of types TensorFlow lacks (float8, int4, sequences...), naming them."""
        super().check_supported(network)
        check_types(network)

    # ------------------------------------------------------------------ running
    def inference(self, feeds):
        """Run the network forward (see :meth:`GraphExecutor.inference`).

        Outputs are copied to numpy arrays, which waits for the computation to finish.
        """
        feeds = self.network.check_feeds(feeds)
        results = self._fn(*[feeds[name] for name in self._inputs])
        return {name: r.numpy() for name, r in zip(self._outputs, results)}

    def inference_and_backprop(self, feeds, y="loss"):
        """Training arrives with the training issue."""
        raise NotImplementedError(
            "inference_and_backprop is not supported by the tensorflow executor in this version: "
            "gradients through tf.GradientTape arrive with the training issue."
        )

    def synchronize(self):
        """Nothing to wait for: every output is materialised as a numpy array before it is returned."""

    @classmethod
    def supports_device(cls, device):
        """CPU always; ``gpu:N`` when TensorFlow lists at least N + 1 GPUs."""
        if not device.is_gpu:
            return True
        return device.index < len(tf.config.list_physical_devices("GPU"))

    @classmethod
    def device_unavailable_reason(cls, device):
        """Why a GPU cannot be used (the GPUs TensorFlow sees)."""
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            return ("tf.config.list_physical_devices('GPU') is empty on this machine (tensorflow-cpu, "
                    "or no CUDA device); use device='cpu'.")
        return f"TensorFlow sees {len(gpus)} GPU(s) (gpu:0 to gpu:{len(gpus) - 1}); received {device}."

    # ------------------------------------------------------------------ tensors
    def has_tensor(self, name):
        return name in self._variables or name in self._constants

    def fetch_tensor(self, name):
        if name in self._variables:
            return self._variables[name].numpy()
        return np.array(self._constants[name], copy=True)

    def feed_tensor(self, name, value):
        value = np.asarray(value)
        old = self._variables.get(name)
        if old is None and name in self._constants:
            old_value = self._constants[name]
            _check_same(name, old_value.dtype, old_value.shape, value)
            # Constants are embedded in the traced graph: rebuild the function.
            self._constants[name] = np.array(value, copy=True)
            self._build()
            return
        if old is None:
            raise KeyError(name)
        _check_same(name, np.dtype(old.dtype.as_numpy_dtype), tuple(old.shape), value)
        old.assign(value)


def _check_same(name, dtype, shape, value):
    if value.dtype != dtype or tuple(value.shape) != tuple(shape):
        raise FeedError(
            f"feed_tensor('{name}'): expected {np.dtype(dtype).name}{list(shape)}. "
            f"Received: {value.dtype.name}{list(value.shape)}"
        )


def _var_name(name: str) -> str:
    # TensorFlow variable names may not contain every character ONNX names may.
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name) or "param"


def from_model(network, device=None) -> TensorFlowExecutor:
    """Build a :class:`TensorFlowExecutor` for a Network, ONNX file or ModelProto on ``device``."""
    return TensorFlowExecutor(network, device)
