"""A small helper for writing ONNX graphs by hand, with seeded parameter initialization.

Initialization (what the model zoo uses, so the same seed gives the same weights):

- convolution and dense weights: uniform in ``[-b, b]`` with ``b = sqrt(3 * gain / fan_in)``, that is
  variance ``gain / fan_in``; ``gain = 2`` (He/Kaiming for ReLU) except the last classifier layer
  (``gain = 1``); ``fan_in = in_channels * kernel_h * kernel_w`` (``in_features`` for dense);
- biases zero; batch-normalization scale one, shift zero, running mean zero, running variance one.

The weights are drawn from one ``numpy.random.default_rng(seed)`` in the order the layers are
added, so a network's weights depend only on its architecture and the seed.

A builder created inside :func:`dry_run` draws nothing and builds no ONNX model: :meth:`GraphBuilder.build`
returns a :class:`GraphSummary` of the parameter shapes, so the size of networks too large to
materialize cheaply (VGG-16 at 224x224 holds 138M parameters) can be counted.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from deep500lite.lv1.network import Network

__all__ = ["GraphBuilder", "GraphSummary", "OPSET", "dry_run"]

OPSET = 17

_DRY = contextvars.ContextVar("deep500lite_networks_dry_run", default=False)


@contextlib.contextmanager
def dry_run():
    """Within this context, :class:`GraphBuilder` records parameter shapes and allocates no weights."""
    token = _DRY.set(True)
    try:
        yield
    finally:
        _DRY.reset(token)


@dataclasses.dataclass(frozen=True)
class GraphSummary:
    """What a dry-run build returns instead of a network.

    Attributes:
        name: the graph's name.
        parameters: float parameter name -> shape, in creation order.
        non_trainable: the parameters that are not trained (batch-normalization running statistics).
    """

    name: str
    parameters: dict
    non_trainable: frozenset

    def count(self, trainable_only: bool = True) -> int:
        """Number of scalar parameters (only the trained ones unless ``trainable_only=False``)."""
        return sum(math.prod(s) for n, s in self.parameters.items()
                   if not (trainable_only and n in self.non_trainable))


class GraphBuilder:
    """Collects nodes and initializers, then builds a :class:`~deep500lite.Network`.

    Args:
        name: the graph's name.
        seed: seed of the parameter initialization.
    """

    def __init__(self, name: str, seed: int = 0):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.dry = _DRY.get()
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.parameter_shapes: dict[str, tuple] = {}
        self.non_trainable: set[str] = set()
        self._counts: dict[str, int] = {}

    def unique(self, prefix: str) -> str:
        """A fresh tensor name starting with ``prefix``."""
        n = self._counts.get(prefix, 0)
        self._counts[prefix] = n + 1
        return f"{prefix}{n}" if n else prefix

    def constant(self, name: str, value: np.ndarray) -> str:
        """Add an initializer holding ``value``; returns its name."""
        value = np.asarray(value)
        if value.dtype.kind == "f":
            self.parameter_shapes[name] = tuple(value.shape)
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def _parameter(self, name: str, shape, make) -> str:
        shape = tuple(int(s) for s in shape)
        if self.dry:
            self.parameter_shapes[name] = shape
            return name
        return self.constant(name, make(shape))

    def weight(self, name: str, shape, fan_in: int, gain: float = 2.0) -> str:
        """A float32 parameter drawn uniformly with variance ``gain / fan_in`` (He for ReLU)."""
        bound = math.sqrt(3.0 * gain / max(1, fan_in))
        return self._parameter(name, shape,
                               lambda s: self.rng.uniform(-bound, bound, size=s).astype(np.float32))

    def zeros(self, name: str, shape) -> str:
        """A float32 parameter of zeros."""
        return self._parameter(name, shape, lambda s: np.zeros(s, np.float32))

    def ones(self, name: str, shape) -> str:
        """A float32 parameter of ones."""
        return self._parameter(name, shape, lambda s: np.ones(s, np.float32))

    def const_node(self, value: np.ndarray, prefix: str = "const") -> str:
        """A ``Constant`` node (not an initializer, so never a trainable parameter); returns its output."""
        name = self.unique(prefix)
        return self.op("Constant", [], [name], name=name, value=numpy_helper.from_array(np.asarray(value), name))

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
        self.non_trainable.update(ins[3:])
        return self.op("BatchNormalization", ins, name=p, epsilon=1e-5, momentum=0.9)

    def relu(self, x: str) -> str:
        """ReLU."""
        return self.op("Relu", [x])

    def maxpool(self, x: str, k: int = 2, stride: int | None = None, pad: int = 0) -> str:
        """Max pooling."""
        s = stride or k
        return self.op("MaxPool", [x], kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4)

    def global_avgpool(self, x: str) -> str:
        """Global average pooling to ``[N, C, 1, 1]``."""
        return self.op("GlobalAveragePool", [x])

    def adaptive_avgpool(self, x: str, in_hw: tuple[int, int], out_hw: tuple[int, int]) -> str:
        """Average pooling of an ``in_hw`` map to ``out_hw``, as ``torch.nn.AdaptiveAvgPool2d``.

        Output cell ``i`` of an axis of length ``n -> m`` averages inputs ``floor(i*n/m)`` up to
        ``ceil((i+1)*n/m)`` (exclusive). Written as two MatMuls with constant pooling matrices,
        so it works on every executor and is differentiable; the identity when ``in_hw == out_hw``.
        """
        if tuple(in_hw) == tuple(out_hw):
            return x
        rows = self.const_node(_pool_matrix(in_hw[0], out_hw[0]), "adaptive_pool_rows")
        cols = self.const_node(_pool_matrix(in_hw[1], out_hw[1]).T.copy(), "adaptive_pool_cols")
        return self.op("MatMul", [rows, self.op("MatMul", [x, cols])])

    def dropout(self, x: str, ratio: float) -> str:
        """Dropout (identity at inference; the ratio is a ``Constant`` node, not a parameter)."""
        if ratio == 0:
            return x
        r = self.const_node(np.asarray(ratio, np.float32), "dropout_ratio")
        return self.op("Dropout", [x, r])

    def flatten(self, x: str) -> str:
        """Flatten to ``[N, -1]``."""
        return self.op("Flatten", [x], axis=1)

    def build(self, inputs: dict[str, tuple], output: str, output_name: str = "output",
              doc: str = "") -> Network | GraphSummary:
        """Finish the graph: ``inputs`` maps names to shapes (float32); ``output`` is renamed.

        Returns a :class:`GraphSummary` instead of a network inside :func:`dry_run`.
        """
        if self.dry:
            return GraphSummary(self.name, dict(self.parameter_shapes), frozenset(self.non_trainable))
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


def _pool_matrix(n: int, m: int) -> np.ndarray:
    """``[m, n]`` float32 matrix averaging the windows of adaptive average pooling ``n -> m``."""
    p = np.zeros((m, n), np.float32)
    for i in range(m):
        lo, hi = (i * n) // m, -((-(i + 1) * n) // m)
        p[i, lo:hi] = 1.0 / (hi - lo)
    return p
