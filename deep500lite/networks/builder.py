"""A small helper for writing ONNX graphs by hand, with seeded parameter initialization."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from deep500lite.lv1.network import Network

__all__ = ["GraphBuilder", "OPSET"]

OPSET = 17


class GraphBuilder:
    """Collects nodes and initializers, then builds a :class:`~deep500lite.Network`.

    Args:
        name: the graph's name.
        seed: seed of the parameter initialization.
    """

    def __init__(self, name: str, seed: int = 0):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._counts: dict[str, int] = {}

    def unique(self, prefix: str) -> str:
        """A fresh tensor name starting with ``prefix``."""
        n = self._counts.get(prefix, 0)
        self._counts[prefix] = n + 1
        return f"{prefix}{n}" if n else prefix

    def constant(self, name: str, value: np.ndarray) -> str:
        """Add an initializer holding ``value``; returns its name."""
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, shape, fan_in: int, gain: float = 2.0) -> str:
        """A float32 parameter drawn uniformly with variance ``gain / fan_in`` (He for ReLU)."""
        bound = math.sqrt(3.0 * gain / max(1, fan_in))
        return self.constant(name, self.rng.uniform(-bound, bound, size=shape).astype(np.float32))

    def zeros(self, name: str, shape) -> str:
        """A float32 parameter of zeros."""
        return self.constant(name, np.zeros(shape, np.float32))

    def ones(self, name: str, shape) -> str:
        """A float32 parameter of ones."""
        return self.constant(name, np.ones(shape, np.float32))

    def op(self, op_type: str, inputs, outputs=None, name: str | None = None, **attrs) -> str:
        """Add a node; returns its (first) output name."""
        name = name or self.unique(op_type.lower())
        outputs = outputs or [name]
        self.nodes.append(helper.make_node(op_type, list(inputs), list(outputs), name=name, **attrs))
        return outputs[0]

    # layers --------------------------------------------------------------
    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, pad: int = 0,
             bias: bool = True, prefix: str | None = None) -> str:
        """2D convolution with a ``k x k`` kernel."""
        p = prefix or self.unique("conv")
        w = self.weight(f"{p}.weight", (cout, cin, k, k), cin * k * k)
        inputs = [x, w] + ([self.zeros(f"{p}.bias", (cout,))] if bias else [])
        return self.op("Conv", inputs, name=p, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[pad] * 4)

    def dense(self, x: str, cin: int, cout: int, prefix: str | None = None, gain: float = 2.0) -> str:
        """Fully connected layer ``x @ W^T + b`` (Gemm with transB)."""
        p = prefix or self.unique("fc")
        w = self.weight(f"{p}.weight", (cout, cin), cin, gain)
        b = self.zeros(f"{p}.bias", (cout,))
        return self.op("Gemm", [x, w, b], name=p, transB=1)

    def batchnorm(self, x: str, c: int, prefix: str | None = None) -> str:
        """Batch normalization (inference form; running statistics as initializers)."""
        p = prefix or self.unique("bn")
        ins = [x, self.ones(f"{p}.weight", (c,)), self.zeros(f"{p}.bias", (c,)),
               self.zeros(f"{p}.running_mean", (c,)), self.ones(f"{p}.running_var", (c,))]
        return self.op("BatchNormalization", ins, name=p, epsilon=1e-5, momentum=0.9)

    def relu(self, x: str) -> str:
        """ReLU."""
        return self.op("Relu", [x])

    def maxpool(self, x: str, k: int = 2, stride: int | None = None, pad: int = 0) -> str:
        """Max pooling."""
        s = stride or k
        return self.op("MaxPool", [x], kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4)

    def flatten(self, x: str) -> str:
        """Flatten to ``[N, -1]``."""
        return self.op("Flatten", [x], axis=1)

    def build(self, inputs: dict[str, tuple], output: str, output_name: str = "output",
              doc: str = "") -> Network:
        """Finish the graph: ``inputs`` maps names to shapes (float32); ``output`` is renamed."""
        self.op("Identity", [output], [output_name], name=f"{output_name}_identity")
        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v)) for k, v in inputs.items()],
            [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, None)],
            initializer=self.initializers,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="deep500lite", doc_string=doc,
                                  ir_version=8)  # the IR of opset 17, readable by older runtimes
        model = onnx.shape_inference.infer_shapes(model)
        onnx.checker.check_model(model)
        return Network(model, source=f"deep500lite.networks:{self.name}")
