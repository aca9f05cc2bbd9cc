"""Level 1: deep500lite's own ONNX autodiff (reverse mode, written in standard ONNX operators).

:func:`build_training_model` turns a forward network into one ONNX graph that runs the forward
pass in training mode and then the backward pass from a scalar tensor ``y``. The reference and
ONNX Runtime executors run that graph to implement ``inference_and_backprop``.

Training-mode semantics (shared by every executor):

- BatchNormalization normalizes with the batch statistics (biased variance) and the graph also
  outputs the updated running statistics ``running * momentum + batch_stat * (1 - momentum)``
  under the names ``"<running_mean>__updated"`` and ``"<running_var>__updated"``. The batch
  statistics are written out as ReduceMean/Sub/Mul/Sqrt nodes (the exact formula of
  ``BatchNormalization(training_mode=1)``), so the saved mean and inverse standard deviation are
  available to the backward pass.
- Dropout multiplies by a boolean mask and scales by ``1 / (1 - ratio)``; the backward pass
  reuses the mask. Where the input shape is static the mask is a graph input that the executor
  draws from its own seeded generator at every step (:meth:`TrainingGraph.draw_masks`);
  otherwise ``Dropout(training_mode=True, seed=...)`` draws it inside the graph.

The training graph's inputs are the network's inputs followed by every floating-point
initializer (parameters and running statistics), so the caller feeds its own current values;
integer initializers (shapes, indices) stay initializers. Its outputs are the network's outputs,
``y``, one gradient per parameter of ``network.gradient(y)`` (named by ``gradient_name``) and the
updated running statistics.

>>> from deep500lite import networks
>>> from deep500lite.datasets import dataset_loss
>>> from deep500lite.lv1.autodiff import build_training_model
>>> net, _, out = networks.create_model("mlp", 4, shape=(8,))
>>> net.add_operation(dataset_loss("digits")([out, "label"], "loss"))
>>> model = build_training_model(net, "loss")
>>> [o.name for o in model.graph.output][:4]
['output', 'loss', 'fc1.weight_grad', 'fc1.bias_grad']
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from deep500lite.errors import ModelError, UnsupportedOperatorError, UserError
from deep500lite.lv1.network import Network, gradient_name

__all__ = ["TrainingGraph", "training_graph", "build_training_model", "save_backward_graph",
           "differentiable_operators", "updated_name", "MIN_OPSET"]

MIN_OPSET = 13


def updated_name(stat: str) -> str:
    """The training-graph output holding the updated value of the running statistic ``stat``."""
    return f"{stat}__updated"


@dataclasses.dataclass
class TrainingGraph:
    """A training model and what its outputs mean.

    Attributes:
        model: the ONNX training model (forward in training mode, then backward).
        outputs: the network's outputs (computed in training mode), in order.
        y: the differentiated scalar.
        gradients: parameter name -> graph output holding its gradient.
        running_stats: running-statistic name -> graph output holding its updated value.
        param_inputs: the initializers that are graph inputs (fed with the caller's values).
        feed_inputs: the network's own inputs.
        dropout_masks: boolean mask input -> ``(shape, ratio)`` for every Dropout whose input
            shape is static; the caller draws them (:meth:`draw_masks`) and feeds them.
    """

    model: onnx.ModelProto
    outputs: list
    y: str
    gradients: dict
    running_stats: dict
    param_inputs: list
    feed_inputs: list
    dropout_masks: dict = dataclasses.field(default_factory=dict)

    def draw_masks(self, rng: np.random.Generator) -> dict:
        """Fresh Dropout masks (``True`` keeps an element, with probability ``1 - ratio``)."""
        return {name: rng.random(shape) >= ratio for name, (shape, ratio) in self.dropout_masks.items()}

    @property
    def output_names(self) -> list:
        """Every graph output name, in the model's order."""
        return [o.name for o in self.model.graph.output]


# ------------------------------------------------------------------------------- graph building
class _Info:
    """Static dtypes and shapes of the forward graph's tensors (from ONNX shape inference)."""

    def __init__(self, model: onnx.ModelProto):
        try:
            inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
        except Exception:  # noqa: BLE001 - shapes are a refinement; Shape-based ops are the fallback
            inferred = model
        self.types: dict[str, int] = {}
        self.shapes: dict[str, tuple | None] = {}
        for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
            tt = vi.type.tensor_type
            if not vi.type.HasField("tensor_type"):
                continue
            if tt.elem_type:
                self.types[vi.name] = tt.elem_type
            if tt.HasField("shape"):
                self.shapes[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
        self.values: dict[str, np.ndarray] = {}
        for init in inferred.graph.initializer:
            arr = numpy_helper.to_array(init)
            self.values[init.name] = arr
            self.types[init.name] = init.data_type
            self.shapes[init.name] = tuple(arr.shape)
        for node in inferred.graph.node:
            if node.op_type == "Constant" and node.attribute:
                try:
                    arr = numpy_helper.to_array(helper.get_attribute_value(node.attribute[0])) \
                        if node.attribute[0].type == onnx.AttributeProto.TENSOR else None
                except Exception:  # noqa: BLE001
                    arr = None
                if arr is not None:
                    self.values[node.output[0]] = arr
                    self.types[node.output[0]] = helper.np_dtype_to_tensor_dtype(arr.dtype)
                    self.shapes[node.output[0]] = tuple(arr.shape)

    def shape(self, name):
        return self.shapes.get(name)

    def rank(self, name, node=None) -> int:
        s = self.shapes.get(name)
        if s is None:
            raise UnsupportedOperatorError(
                f"ONNX autodiff needs the rank of '{name}'"
                + (f" (input of {node.op_type} node '{_node_name(node)}')" if node is not None else "")
                + ", which shape inference could not find; declare the input shapes of the model.")
        return len(s)

    def np_dtype(self, name):
        t = self.types.get(name)
        return np.dtype(np.float32) if not t else helper.tensor_dtype_to_np_dtype(t)

    def is_float(self, name) -> bool:
        t = self.types.get(name)
        return t is None or helper.tensor_dtype_to_np_dtype(t).kind == "f"

    def const_value(self, name):
        return self.values.get(name)


def _node_name(node) -> str:
    return node.name or (node.output[0] if node.output else node.op_type)


class _Builder:
    """Appends nodes and constants to the training graph with fresh names."""

    def __init__(self, opset: int, info: _Info, taken: set):
        self.opset = opset
        self.info = info
        self.nodes: list = []
        self.inits: list = []
        self._taken = set(taken)
        self._count = 0
        self._shape_cache: dict[str, str] = {}
        self.masks: dict[str, tuple] = {}  # Dropout mask input -> (shape, ratio)

    def fresh(self, hint: str) -> str:
        while True:
            self._count += 1
            name = f"__d5ad_{hint}_{self._count}"
            if name not in self._taken:
                self._taken.add(name)
                return name

    def op(self, op_type: str, inputs, n_out: int = 1, hint: str | None = None, outputs=None, **attrs):
        if outputs is None:
            outputs = [self.fresh(hint or op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), list(outputs),
                                           name=self.fresh(f"n_{op_type}"), **attrs))
        return outputs[0] if len(outputs) == 1 else list(outputs)

    def const(self, value, dtype=None, hint="c") -> str:
        arr = np.asarray(value, dtype=dtype)
        name = self.fresh(hint)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def ints(self, values) -> str:
        return self.const(np.asarray(values, np.int64), hint="i")

    def scalar(self, value, like: str) -> str:
        return self.const(np.asarray(value, self.info.np_dtype(like)), hint="s")

    def shape(self, x: str) -> str:
        if x not in self._shape_cache:
            self._shape_cache[x] = self.op("Shape", [x], hint="shape")
        return self._shape_cache[x]

    def reduce(self, op_type: str, x: str, axes, keepdims: int = 1) -> str:
        """ReduceSum/ReduceMean over constant ``axes`` in the form the opset requires."""
        axes = [int(a) for a in axes]
        if not axes:
            return self.op("Identity", [x])
        takes_input = op_type == "ReduceSum" or self.opset >= 18
        if takes_input:
            return self.op(op_type, [x, self.ints(axes)], keepdims=keepdims)
        return self.op(op_type, [x], axes=axes, keepdims=keepdims)

    def reshape_like(self, g: str, x: str) -> str:
        s = self.info.shape(x)
        if s is not None and all(d is not None for d in s):
            return self.op("Reshape", [g, self.ints(list(s))])
        return self.op("Reshape", [g, self.shape(x)])

    def numel(self, x: str) -> str:
        return self.op("Size", [x])

    def zeros_like(self, x: str) -> str:
        return self.op("ConstantOfShape", [self.shape(x)],
                       value=numpy_helper.from_array(np.zeros(1, self.info.np_dtype(x))))

    def unsqueeze(self, x: str, axes) -> str:
        return self.op("Unsqueeze", [x, self.ints(list(axes))])

    def unbroadcast(self, g: str, gshape, target: str, tshape=None) -> str:
        """Sum ``g`` (shaped ``gshape``) over the axes broadcast to it from ``target``'s shape."""
        if tshape is None:
            tshape = self.info.shape(target)
        if gshape is not None and tshape is not None and tuple(gshape) == tuple(tshape) and None not in gshape:
            return g
        if gshape is not None and tshape is not None:
            lead = len(gshape) - len(tshape)
            static = all(d is not None for d in tshape) and all(
                gshape[lead + i] is not None for i, d in enumerate(tshape) if d == 1)
            if static:
                axes = list(range(lead)) + [lead + i for i, d in enumerate(tshape)
                                             if d == 1 and gshape[lead + i] != 1]
                if not axes:
                    return g if lead == 0 else self.op("Reshape", [g, self.ints(list(tshape))])
                r = self.reduce("ReduceSum", g, axes, keepdims=1)
                return self.op("Reshape", [r, self.ints(list(tshape))])
            # Ranks known, some dims open: find the broadcast axes at run time.
            one = self.ints([1] * lead) if lead else None
            tpad = self.op("Concat", [one, self.shape(target)], axis=0) if lead else self.shape(target)
            is_one = self.op("Equal", [tpad, self.ints([1])])
            if lead:
                lead_mask = self.const(np.array([True] * lead + [False] * len(tshape)), hint="m")
                is_one = self.op("Or", [is_one, lead_mask])
            axes = self.op("Reshape", [self.op("NonZero", [is_one]), self.ints([-1])])
            r = self.op("ReduceSum", [g, axes], keepdims=1, noop_with_empty_axes=1)
            return self.op("Reshape", [r, self.shape(target)])
        raise UnsupportedOperatorError(
            f"ONNX autodiff cannot unbroadcast the gradient of '{target}': its rank is unknown to shape "
            "inference; declare the model's input shapes.")


@dataclasses.dataclass
class _Ctx:
    b: _Builder
    node: onnx.NodeProto
    dys: list  # gradient name per output (None: no gradient flows into that output)
    need: list  # per input: whether its gradient is wanted
    saved: dict  # what the training-mode forward kept for this node

    @property
    def info(self) -> _Info:
        return self.b.info

    def attr(self, name, default=None):
        for a in self.node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default

    def input(self, i):
        return self.node.input[i] if i < len(self.node.input) and self.node.input[i] else None

    def dy(self, i: int = 0) -> str:
        g = self.dys[i] if i < len(self.dys) else None
        if g is None:
            g = self.b.zeros_like(self.node.output[i])
        return g

    def unsupported(self, why: str):
        raise UnsupportedOperatorError(
            f"ONNX autodiff cannot differentiate operator '{self.node.op_type}' (node "
            f"'{_node_name(self.node)}'): {why}.")


_RULES: dict[str, Callable] = {}


def _rule(*op_types):
    def wrap(fn):
        for t in op_types:
            _RULES[t] = fn
        return fn
    return wrap


def differentiable_operators() -> list[str]:
    """The ONNX operators deep500lite's autodiff has a gradient rule for."""
    return sorted(_RULES)


# ------------------------------------------------------------------------------- gradient rules
@_rule("Identity")
def _identity(c: _Ctx):
    return [c.dy()]


@_rule("Flatten", "Reshape", "Squeeze", "Unsqueeze")
def _reshape(c: _Ctx):
    return [c.b.reshape_like(c.dy(), c.node.input[0])] + [None] * (len(c.node.input) - 1)


@_rule("Cast")
def _cast(c: _Ctx):
    x = c.node.input[0]
    return [c.b.op("Cast", [c.dy()], to=c.info.types.get(x, onnx.TensorProto.FLOAT))]


@_rule("Expand")
def _expand(c: _Ctx):
    y = c.node.output[0]
    return [c.b.unbroadcast(c.dy(), c.info.shape(y), c.node.input[0]), None]


@_rule("Relu")
def _relu(c: _Ctx):
    b, x = c.b, c.node.input[0]
    return [b.op("Where", [b.op("Greater", [x, b.scalar(0, x)]), c.dy(), b.scalar(0, x)])]


@_rule("LeakyRelu")
def _leaky_relu(c: _Ctx):
    b, x = c.b, c.node.input[0]
    dy = c.dy()
    alpha = c.attr("alpha", 0.01)
    return [b.op("Where", [b.op("Greater", [x, b.scalar(0, x)]), dy, b.op("Mul", [dy, b.scalar(alpha, x)])])]


@_rule("Sigmoid")
def _sigmoid(c: _Ctx):
    b, y = c.b, c.node.output[0]
    return [b.op("Mul", [c.dy(), b.op("Mul", [y, b.op("Sub", [b.scalar(1, y), y])])])]


@_rule("Tanh")
def _tanh(c: _Ctx):
    b, y = c.b, c.node.output[0]
    return [b.op("Mul", [c.dy(), b.op("Sub", [b.scalar(1, y), b.op("Mul", [y, y])])])]


@_rule("Exp")
def _exp(c: _Ctx):
    return [c.b.op("Mul", [c.dy(), c.node.output[0]])]


@_rule("Log")
def _log(c: _Ctx):
    return [c.b.op("Div", [c.dy(), c.node.input[0]])]


@_rule("Sqrt")
def _sqrt(c: _Ctx):
    b, y = c.b, c.node.output[0]
    return [b.op("Div", [b.op("Mul", [c.dy(), b.scalar(0.5, y)]), y])]


@_rule("Neg")
def _neg(c: _Ctx):
    return [c.b.op("Neg", [c.dy()])]


def _binary(c: _Ctx, ga, gb):
    """Unbroadcast the full-shape gradients ``ga``/``gb`` (callables, evaluated when needed)."""
    b, (a, bb), y = c.b, c.node.input[:2], c.node.output[0]
    ys = c.info.shape(y)
    return [b.unbroadcast(ga(), ys, a) if c.need[0] else None,
            b.unbroadcast(gb(), ys, bb) if c.need[1] else None]


@_rule("Add")
def _add(c: _Ctx):
    dy = c.dy()
    return _binary(c, lambda: dy, lambda: dy)


@_rule("Sub")
def _sub(c: _Ctx):
    dy = c.dy()
    return _binary(c, lambda: dy, lambda: c.b.op("Neg", [dy]))


@_rule("Mul")
def _mul(c: _Ctx):
    b, dy, (x, w) = c.b, c.dy(), c.node.input[:2]
    return _binary(c, lambda: b.op("Mul", [dy, w]), lambda: b.op("Mul", [dy, x]))


@_rule("Div")
def _div(c: _Ctx):
    b, dy, w, y = c.b, c.dy(), c.node.input[1], c.node.output[0]
    return _binary(c, lambda: b.op("Div", [dy, w]),
                   lambda: b.op("Neg", [b.op("Div", [b.op("Mul", [dy, y]), w])]))


@_rule("Pow")
def _pow(c: _Ctx):
    b, dy, (x, p), y = c.b, c.dy(), c.node.input[:2], c.node.output[0]
    if not c.info.is_float(p):
        p_f = b.op("Cast", [p], to=c.info.types.get(x, onnx.TensorProto.FLOAT))
    else:
        p_f = p

    def ga():
        pm1 = b.op("Sub", [p_f, b.scalar(1, x)])
        return b.op("Mul", [dy, b.op("Mul", [p_f, b.op("Pow", [x, pm1])])])

    def gb():
        return b.op("Mul", [dy, b.op("Mul", [y, b.op("Log", [x])])])

    return _binary(c, ga, gb)


@_rule("Sum")
def _sum(c: _Ctx):
    dy, ys = c.dy(), c.info.shape(c.node.output[0])
    return [c.b.unbroadcast(dy, ys, x) if need else None for x, need in zip(c.node.input, c.need)]


@_rule("Gemm")
def _gemm(c: _Ctx):
    b, dy = c.b, c.dy()
    a, w = c.node.input[:2]
    ta, tb = c.attr("transA", 0), c.attr("transB", 0)
    alpha, beta = c.attr("alpha", 1.0), c.attr("beta", 1.0)
    da = dw = dc = None
    if c.need[0]:
        if not ta:
            da = b.op("Gemm", [dy, w], alpha=alpha, transB=0 if tb else 1)
        else:
            da = b.op("Gemm", [w, dy], alpha=alpha, transA=tb, transB=1)
    if c.need[1]:
        if not tb:
            dw = b.op("Gemm", [a, dy], alpha=alpha, transA=0 if ta else 1)
        else:
            dw = b.op("Gemm", [dy, a], alpha=alpha, transA=1, transB=ta)
    cin = c.input(2)
    if cin is not None and c.need[2]:
        g = dy if beta == 1.0 else b.op("Mul", [dy, b.scalar(beta, cin)])
        dc = b.unbroadcast(g, c.info.shape(c.node.output[0]), cin)
    return [da, dw, dc]


def _swap_last(b: _Builder, x: str, rank: int) -> str:
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return b.op("Transpose", [x], perm=perm)


@_rule("MatMul")
def _matmul(c: _Ctx):
    b, dy, info = c.b, c.dy(), c.info
    a, w = c.node.input[:2]
    sa, sw, sy = info.shape(a), info.shape(w), info.shape(c.node.output[0])
    if sa is None or sw is None:
        c.unsupported("the ranks of its inputs are unknown to shape inference")
    a2, w2, dy2 = a, w, dy
    sa2, sw2 = tuple(sa), tuple(sw)
    if len(sa) == 1:
        a2, sa2 = b.unsqueeze(a, [0]), (1,) + tuple(sa)
        dy2 = b.unsqueeze(dy2, [len(sy) - 1 if len(sy) else 0]) if len(sw) > 1 else dy2
    if len(sw) == 1:
        w2, sw2 = b.unsqueeze(w, [1]), tuple(sw) + (1,)
        dy2 = b.unsqueeze(dy2, [-1])
    if len(sa) == 1 and len(sw) == 1:
        dy2 = b.op("Reshape", [dy, b.ints([1, 1])])
    batch = _broadcast_shapes(sa2[:-2], sw2[:-2])
    out = []
    if c.need[0]:
        g = b.op("MatMul", [dy2, _swap_last(b, w2, len(sw2))])
        gshape = None if batch is None else batch + sa2[-2:]
        g = b.unbroadcast(g, gshape, a2, sa2)
        out.append(b.reshape_like(g, a) if len(sa) == 1 else g)
    else:
        out.append(None)
    if c.need[1]:
        g = b.op("MatMul", [_swap_last(b, a2, len(sa2)), dy2])
        gshape = None if batch is None else batch + sw2[-2:]
        g = b.unbroadcast(g, gshape, w2, sw2)
        out.append(b.reshape_like(g, w) if len(sw) == 1 else g)
    else:
        out.append(None)
    return out


def _broadcast_shapes(s1, s2):
    n = max(len(s1), len(s2))
    s1 = (1,) * (n - len(s1)) + tuple(s1)
    s2 = (1,) * (n - len(s2)) + tuple(s2)
    out = []
    for x, y in zip(s1, s2):
        if x == 1:
            out.append(y)
        elif y == 1 or x == y:
            out.append(x)
        else:
            out.append(None)
    return tuple(out)


@_rule("Transpose")
def _transpose(c: _Ctx):
    rank = c.info.rank(c.node.input[0], c.node)
    perm = c.attr("perm") or list(range(rank))[::-1]
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return [c.b.op("Transpose", [c.dy()], perm=inv)]


def _spatial(c: _Ctx, x: str, kernel):
    """(strides, dilations, pads) of a Conv/pool node, resolving auto_pad from static shapes."""
    n = len(kernel)
    strides = list(c.attr("strides") or [1] * n)
    dil = list(c.attr("dilations") or [1] * n)
    auto = c.attr("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    pads = list(c.attr("pads") or [0] * (2 * n))
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        xs = c.info.shape(x)
        if xs is None or any(d is None for d in xs[2:]):
            c.unsupported("auto_pad needs static spatial input dimensions")
        pads = [0] * (2 * n)
        for i in range(n):
            size = xs[2 + i]
            out = -(-size // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - size)
            small, big = total // 2, total - total // 2
            pads[i], pads[i + n] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        pads = [0] * (2 * n)
    return strides, dil, pads


def _output_padding(c: _Ctx, x, y, kernel, strides, dil, pads):
    xs, ys = c.info.shape(x), c.info.shape(y)
    n = len(kernel)
    if xs is None or ys is None or any(d is None for d in list(xs[2:]) + list(ys[2:])):
        c.unsupported("its gradient needs static spatial dimensions of input and output")
    return [xs[2 + i] - ((ys[2 + i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - pads[i] - pads[i + n])
            for i in range(n)]


@_rule("Conv")
def _conv(c: _Ctx):
    b, dy, info = c.b, c.dy(), c.info
    x, w = c.node.input[:2]
    ws = info.shape(w)
    if ws is None or any(d is None for d in ws):
        c.unsupported("the weight shape is unknown to shape inference")
    kernel = list(c.attr("kernel_shape") or ws[2:])
    n = len(kernel)
    group = c.attr("group", 1)
    strides, dil, pads = _spatial(c, x, kernel)
    dx = dw = db = None
    if c.need[0]:
        outpad = _output_padding(c, x, c.node.output[0], kernel, strides, dil, pads)

        def input_grad(dyg, wg):
            return b.op("ConvTranspose", [dyg, wg], strides=strides, dilations=dil, pads=pads,
                        kernel_shape=kernel, output_padding=outpad)

        if group == 1:
            dx = input_grad(dy, w)
        else:  # per group (onnx.reference's ConvTranspose does not implement group > 1)
            dys = b.op("Split", [dy, b.ints([ws[0] // group] * group)], n_out=group, axis=1)
            wgs = b.op("Split", [w, b.ints([ws[0] // group] * group)], n_out=group, axis=0)
            dx = b.op("Concat", [input_grad(dyg, wg) for dyg, wg in zip(dys, wgs)], axis=1)
    if c.need[1]:
        perm = [1, 0] + list(range(2, n + 2))

        def weight_grad(xg, dyg):
            # dW[o, i] = sum_n x[n, i] (*) dy[n, o]: a convolution over the batch axis, with the
            # roles of stride and dilation swapped; the result is cut to the kernel size.
            g = b.op("Conv", [b.op("Transpose", [xg], perm=perm), b.op("Transpose", [dyg], perm=perm)],
                     strides=dil, dilations=strides, pads=pads)
            g = b.op("Slice", [g, b.ints([0] * n), b.ints(kernel), b.ints(list(range(2, n + 2)))])
            return b.op("Transpose", [g], perm=perm)

        if group == 1:
            dw = weight_grad(x, dy)
        else:  # one weight gradient per group
            xs = b.op("Split", [x, b.ints([ws[1]] * group)], n_out=group, axis=1)
            dys = b.op("Split", [dy, b.ints([ws[0] // group] * group)], n_out=group, axis=1)
            dw = b.op("Concat", [weight_grad(xg, dyg) for xg, dyg in zip(xs, dys)], axis=0)
    bias = c.input(2)
    if bias is not None and c.need[2]:
        db = b.reduce("ReduceSum", dy, [0] + list(range(2, n + 2)), keepdims=0)
    return [dx, dw, db]


@_rule("MaxPool")
def _maxpool(c: _Ctx):
    b, dy, x = c.b, c.dy(), c.node.input[0]
    if c.attr("storage_order", 0):
        c.unsupported("storage_order=1 (column-major indices) is not supported")
    idx = c.saved["indices"]
    kernel = list(c.attr("kernel_shape"))
    strides = list(c.attr("strides") or [1] * len(kernel))
    overlapping = any(s < k for s, k in zip(strides, kernel)) or any(d != 1 for d in c.attr("dilations") or [])
    return [_scatter_add(b, x, idx, dy, overlapping)]


def _scatter_add(b: _Builder, x: str, idx: str, upd: str, accumulate: bool) -> str:
    """A zero tensor shaped like ``x`` plus ``upd`` added at the flat positions ``idx``.

    ScatterElements accumulates (``reduction="add"``) from opset 16; before, repeated positions
    are summed by a one-hot MatMul (exact, memory ``len(idx) * x.size``).
    """
    flat = b.ints([-1])
    idx_f, upd_f = b.op("Reshape", [idx, flat]), b.op("Reshape", [upd, flat])
    if accumulate and b.opset < 16:
        numel = b.op("Cast", [b.numel(x)], to=onnx.TensorProto.INT64)
        positions = b.op("Unsqueeze", [b.op("Range", [b.ints(0), numel, b.ints(1)]), b.ints([0])])
        onehot = b.op("Cast", [b.op("Equal", [b.op("Unsqueeze", [idx_f, b.ints([1])]), positions])],
                      to=b.info.types.get(x, onnx.TensorProto.FLOAT))
        g = b.op("MatMul", [b.op("Unsqueeze", [upd_f, b.ints([0])]), onehot])
    else:
        zeros = b.op("Reshape", [b.zeros_like(x), flat])
        attrs = {"reduction": "add"} if accumulate else {}
        g = b.op("ScatterElements", [zeros, idx_f, upd_f], axis=0, **attrs)
    return b.reshape_like(g, x)


@_rule("GlobalAveragePool")
def _global_average_pool(c: _Ctx):
    b, dy, x = c.b, c.dy(), c.node.input[0]
    xs = c.info.shape(x)
    if xs is not None and all(d is not None for d in xs[2:]):
        scale = b.scalar(1.0 / float(np.prod(xs[2:])), x)
    else:
        rank = c.info.rank(x, c.node)
        sp = b.op("Slice", [b.shape(x), b.ints([2]), b.ints([rank])])
        scale = b.op("Reciprocal", [b.op("Cast", [b.op("ReduceProd", [sp], keepdims=1)],
                                          to=c.info.types.get(x, onnx.TensorProto.FLOAT))])
    return [b.op("Mul", [b.op("Expand", [dy, b.shape(x)]), scale])]


@_rule("AveragePool")
def _average_pool(c: _Ctx):
    b, dy, x, y = c.b, c.dy(), c.node.input[0], c.node.output[0]
    kernel = list(c.attr("kernel_shape"))
    strides, dil, pads = _spatial(c, x, kernel)
    if c.attr("ceil_mode", 0):
        c.unsupported("ceil_mode=1 is not supported")
    xs = c.info.shape(x)
    if xs is None or xs[1] is None:
        c.unsupported("the channel count is unknown to shape inference")
    channels = xs[1]
    dtype = c.info.np_dtype(x)
    ones_k = b.const(np.ones([channels, 1] + kernel, dtype), hint="k")
    outpad = _output_padding(c, x, y, kernel, strides, dil, pads)
    if c.attr("count_include_pad", 0) or not any(pads):
        g = b.op("Mul", [dy, b.scalar(1.0 / float(np.prod(kernel)), x)])
    else:
        # The divisor of each window is the number of input (non-pad) elements it covers.
        ones_x = b.op("ConstantOfShape", [b.shape(x)], value=numpy_helper.from_array(np.ones(1, dtype)))
        count = b.op("Conv", [ones_x, ones_k], strides=strides, dilations=dil, pads=pads, group=channels,
                     kernel_shape=kernel)
        g = b.op("Div", [dy, count])
    dx = b.op("ConvTranspose", [g, ones_k], strides=strides, dilations=dil, pads=pads, group=channels,
              kernel_shape=kernel, output_padding=outpad)
    return [dx]


@_rule("BatchNormalization")
def _batchnorm(c: _Ctx):
    b, dy, s = c.b, c.dy(), c.saved
    xhat, invstd, scale_r, axes = s["xhat"], s["invstd"], s["scale_r"], s["axes"]
    out = [None] * len(c.node.input)
    if c.need[0]:
        # dx = scale * invstd * (dy - mean(dy) - xhat * mean(dy * xhat))
        m1 = b.reduce("ReduceMean", dy, axes, keepdims=1)
        m2 = b.reduce("ReduceMean", b.op("Mul", [dy, xhat]), axes, keepdims=1)
        inner = b.op("Sub", [b.op("Sub", [dy, m1]), b.op("Mul", [xhat, m2])])
        out[0] = b.op("Mul", [inner, b.op("Mul", [scale_r, invstd])])
    if c.need[1]:
        out[1] = b.reduce("ReduceSum", b.op("Mul", [dy, xhat]), axes, keepdims=0)
    if c.need[2]:
        out[2] = b.reduce("ReduceSum", dy, axes, keepdims=0)
    return out


def _axis_reduce_keep(b: _Builder, x: str, axis: int) -> str:
    return b.reduce("ReduceSum", x, [axis], keepdims=1)


@_rule("Softmax")
def _softmax(c: _Ctx):
    b, dy, y = c.b, c.dy(), c.node.output[0]
    axis = c.attr("axis", -1)
    s = _axis_reduce_keep(b, b.op("Mul", [dy, y]), axis)
    return [b.op("Mul", [y, b.op("Sub", [dy, s])])]


@_rule("LogSoftmax")
def _log_softmax(c: _Ctx):
    b, dy, y = c.b, c.dy(), c.node.output[0]
    axis = c.attr("axis", -1)
    s = _axis_reduce_keep(b, dy, axis)
    return [b.op("Sub", [dy, b.op("Mul", [b.op("Exp", [y]), s])])]


def _class_loss_grads(c: _Ctx, logp: str, dlogp_of_scores: Callable[[str], str]):
    """Gradients of SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss.

    The per-element loss is ``w[t_i] * nll_i`` with ``nll_i = -logp[i, t_i]`` (zero where
    ``t_i == ignore_index``), reduced by ``reduction``. ``dlogp_of_scores(g)`` maps a gradient
    with respect to ``logp`` to one with respect to the first input.

    Returns:
        ``[d scores, None, d weights]`` (``None`` where not needed).
    """
    b, info = c.b, c.info
    scores, labels = c.node.input[:2]
    weights = c.input(2)
    rank = info.rank(scores, c.node)
    ftype = info.types.get(scores, onnx.TensorProto.FLOAT)
    ignore = c.attr("ignore_index")
    reduction = c.attr("reduction", b"mean")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction not in ("none", "sum", "mean"):
        c.unsupported(f"reduction must be one of 'none', 'sum', 'mean'. Received: {reduction!r}")
    safe = labels
    keep = None
    if ignore is not None:
        is_ign = b.op("Equal", [labels, b.const(np.asarray(ignore, info.np_dtype(labels)))])
        safe = b.op("Where", [is_ign, b.const(np.asarray(0, info.np_dtype(labels))), labels])
        keep = b.op("Cast", [b.op("Not", [is_ign])], to=ftype)
    nclass = b.op("Gather", [b.shape(scores), b.ints([1])])
    classes = b.op("Range", [b.ints(0), b.op("Squeeze", [nclass, b.ints([0])]), b.ints(1)])
    classes = b.op("Reshape", [classes, b.ints([1, -1] + [1] * (rank - 2))])
    onehot = b.op("Cast", [b.op("Equal", [b.op("Unsqueeze", [b.op("Cast", [safe], to=onnx.TensorProto.INT64),
                                                             b.ints([1])]), classes])], to=ftype)
    w = None
    if weights is not None:
        w = b.op("Gather", [weights, safe])
    if keep is not None:
        w = keep if w is None else b.op("Mul", [w, keep])
    dy = c.dy()
    denom = None
    if reduction == "none":
        coef = dy if w is None else b.op("Mul", [dy, w])
    elif reduction == "sum":
        coef = b.op("Expand", [dy, b.shape(labels)]) if w is None else b.op("Mul", [w, dy])
    elif w is None:
        denom = b.op("Cast", [b.numel(labels)], to=ftype)
        coef = b.op("Expand", [b.op("Div", [dy, denom]), b.shape(labels)])
    else:
        denom = b.reduce("ReduceSum", w, list(range(rank - 1)), keepdims=0)
        coef = b.op("Mul", [w, b.op("Div", [dy, denom])])
    out = [None, None, None]
    if c.need[0]:
        # d loss / d logp = -onehot * coef
        out[0] = dlogp_of_scores(b.op("Neg", [b.op("Mul", [onehot, b.op("Unsqueeze", [coef, b.ints([1])])])]))
    if weights is not None and len(c.need) > 2 and c.need[2]:
        nll = b.op("Neg", [b.reduce("ReduceSum", b.op("Mul", [onehot, logp]), [1], keepdims=0)])
        if reduction == "mean":  # d(S/W)/dw_c = sum over elements of class c of (nll_i - loss) / W
            e = b.op("Div", [b.op("Mul", [dy, b.op("Sub", [nll, c.node.output[0]])]), denom])
        else:
            e = b.op("Mul", [dy, nll])
        if keep is not None:
            e = b.op("Mul", [e, keep])
        per_class = b.op("Mul", [onehot, b.op("Unsqueeze", [e, b.ints([1])])])
        out[2] = b.reduce("ReduceSum", per_class, [0] + list(range(2, rank)), keepdims=0)
    return out


@_rule("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(c: _Ctx):
    b = c.b
    scores = c.node.input[0]
    logp = c.node.output[1] if len(c.node.output) > 1 and c.node.output[1] else None
    if logp is None:
        logp = b.op("LogSoftmax", [scores], axis=1)
    p = b.op("Exp", [logp])

    def through_log_softmax(g):
        return b.op("Sub", [g, b.op("Mul", [p, b.reduce("ReduceSum", g, [1], keepdims=1)])])

    out = _class_loss_grads(c, logp, lambda g: g)
    dlogp_extra = c.dys[1] if len(c.dys) > 1 else None
    if c.need[0]:
        g = out[0]
        if dlogp_extra is not None:  # the log_prob output is used downstream too
            g = b.op("Add", [g, dlogp_extra])
        out[0] = through_log_softmax(g)
    return out


@_rule("NegativeLogLikelihoodLoss")
def _nll(c: _Ctx):
    return _class_loss_grads(c, c.node.input[0], lambda g: g)


def _index_scatter(c: _Ctx, x: str, index_of: Callable[[str], str], dy: str, accumulate: bool) -> str:
    """Gradient of an indexing op: ``index_of(positions)`` applies the op to the positions of ``x``."""
    b = c.b
    numel = b.op("Cast", [b.numel(x)], to=onnx.TensorProto.INT64)
    positions = b.op("Reshape", [b.op("Range", [b.ints(0), numel, b.ints(1)]), b.shape(x)])
    return _scatter_add(b, x, index_of(positions), dy, accumulate)


@_rule("Slice")
def _slice(c: _Ctx):
    rest = list(c.node.input[1:])
    g = _index_scatter(c, c.node.input[0], lambda pos: c.b.op("Slice", [pos] + rest), c.dy(), False)
    return [g] + [None] * len(rest)


@_rule("Gather")
def _gather(c: _Ctx):
    idx, axis = c.node.input[1], c.attr("axis", 0)
    g = _index_scatter(c, c.node.input[0], lambda pos: c.b.op("Gather", [pos, idx], axis=axis), c.dy(), True)
    return [g, None]


@_rule("Concat")
def _concat(c: _Ctx):
    b, info = c.b, c.info
    axis = c.attr("axis")
    sizes = []
    for x in c.node.input:
        s = info.shape(x)
        if s is None:
            c.unsupported(f"the shape of input '{x}' is unknown to shape inference")
        axis_n = axis % len(s)
        if s[axis_n] is None:
            c.unsupported(f"the size of input '{x}' along axis {axis} is unknown to shape inference")
        sizes.append(s[axis_n])
    parts = b.op("Split", [c.dy(), b.ints(sizes)], n_out=len(sizes), axis=axis)
    parts = [parts] if isinstance(parts, str) else parts
    return [p if need else None for p, need in zip(parts, c.need)]


@_rule("Pad")
def _pad(c: _Ctx):
    b, x = c.b, c.node.input[0]
    mode = c.attr("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode != "constant":
        c.unsupported(f"only mode='constant' has a gradient rule. Received: mode={mode!r}")
    pads = c.info.const_value(c.input(1)) if c.input(1) else None
    if pads is None:
        c.unsupported("the pads input must be a constant (initializer or Constant node)")
    rank = c.info.rank(x, c.node)
    axes = list(range(rank))
    if c.input(3):
        av = c.info.const_value(c.input(3))
        if av is None:
            c.unsupported("the axes input must be a constant")
        axes = [int(a) % rank for a in av]
    pads = [int(p) for p in pads]
    k = len(axes)
    if any(p < 0 for p in pads):
        c.unsupported("negative pads are not supported")
    ends = [-pads[k + i] if pads[k + i] else np.iinfo(np.int64).max for i in range(k)]
    g = b.op("Slice", [c.dy(), b.ints(pads[:k]), b.ints(ends), b.ints(axes)])
    return [g] + [None] * (len(c.node.input) - 1)


def _reduce_axes(c: _Ctx):
    x = c.node.input[0]
    rank = c.info.rank(x, c.node)
    axes = c.attr("axes")
    if axes is None and c.input(1):
        v = c.info.const_value(c.input(1))
        if v is None:
            c.unsupported("the axes input must be a constant")
        axes = [int(a) for a in v.reshape(-1)]
    if not axes:
        if c.attr("noop_with_empty_axes", 0):
            return None
        axes = list(range(rank))
    return sorted(int(a) % rank for a in axes)


@_rule("ReduceSum", "ReduceMean")
def _reduce_sum_mean(c: _Ctx):
    b, x, dy = c.b, c.node.input[0], c.dy()
    axes = _reduce_axes(c)
    if axes is None:
        return [dy] + [None] * (len(c.node.input) - 1)
    if not c.attr("keepdims", 1):
        dy = b.unsqueeze(dy, axes)
    g = b.op("Expand", [dy, b.shape(x)])
    if c.node.op_type == "ReduceMean":
        xs = c.info.shape(x)
        if xs is not None and all(xs[a] is not None for a in axes):
            g = b.op("Mul", [g, b.scalar(1.0 / float(np.prod([xs[a] for a in axes])), x)])
        else:
            count = b.op("Div", [b.numel(x), b.numel(dy)])
            g = b.op("Div", [g, b.op("Cast", [count], to=c.info.types.get(x, onnx.TensorProto.FLOAT))])
    return [g] + [None] * (len(c.node.input) - 1)


@_rule("Dropout")
def _dropout(c: _Ctx):
    b, dy = c.b, c.dy()
    if "mask" not in c.saved:
        return [dy, None, None]
    scale = c.saved["scale"]
    mask = b.op("Cast", [c.saved["mask"]], to=c.info.types.get(c.node.input[0], onnx.TensorProto.FLOAT))
    return [b.op("Mul", [b.op("Mul", [dy, mask]), b.scalar(scale, c.node.input[0])]), None, None]


# -------------------------------------------------------------------- training-mode forward pass
def _training_forward(b: _Builder, node, saved: dict, running: dict, seed: int):
    """Append ``node`` in training mode; fills ``saved`` for its backward and ``running`` with stats."""
    info = b.info
    if node.op_type == "BatchNormalization":
        x, scale, bias, mean, var = node.input[:5]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        eps, momentum = attrs.get("epsilon", 1e-5), attrs.get("momentum", 0.9)
        rank = info.rank(x, node)
        axes = [0] + list(range(2, rank))
        bshape = b.ints([1, -1] + [1] * (rank - 2))
        bm = b.reduce("ReduceMean", x, axes, keepdims=1)
        xc = b.op("Sub", [x, bm])
        bv = b.reduce("ReduceMean", b.op("Mul", [xc, xc]), axes, keepdims=1)
        invstd = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [bv, b.scalar(eps, x)])])])
        xhat = b.op("Mul", [xc, invstd])
        scale_r = b.op("Reshape", [scale, bshape])
        b.op("Add", [b.op("Mul", [xhat, scale_r]), b.op("Reshape", [bias, bshape])], outputs=[node.output[0]])
        saved.update(xhat=xhat, invstd=invstd, scale_r=scale_r, axes=axes)
        flat = b.ints([-1])
        for k, (stat, batch) in enumerate(((mean, bm), (var, bv))):
            out = updated_name(stat)
            upd = b.op("Add", [b.op("Mul", [stat, b.scalar(momentum, stat)]),
                               b.op("Mul", [b.op("Reshape", [batch, flat]), b.scalar(1.0 - momentum, stat)])],
                       outputs=[out] if out not in b._taken else None)
            running[stat] = upd
            if len(node.output) > k + 1 and node.output[k + 1]:
                b.op("Identity", [upd], outputs=[node.output[k + 1]])
        return
    if node.op_type == "MaxPool":
        new = onnx.NodeProto()
        new.CopyFrom(node)
        if len(new.output) < 2 or not new.output[1]:
            del new.output[1:]
            new.output.append(b.fresh("maxpool_indices"))
        saved["indices"] = new.output[1]
        b.nodes.append(new)
        return
    if node.op_type == "Dropout":
        x = node.input[0]
        ratio = 0.5
        if len(node.input) > 1 and node.input[1]:
            v = info.const_value(node.input[1])
            if v is None:
                raise UnsupportedOperatorError(
                    f"ONNX autodiff needs a constant ratio for Dropout node '{_node_name(node)}'.")
            ratio = float(v)
        if ratio == 0.0:
            b.op("Identity", [x], outputs=[node.output[0]])
            return
        xs = info.shape(x)
        if xs is not None and all(d is not None for d in xs):
            # Static shape: the mask is a graph input, drawn by the executor at every step.
            mask = b.fresh("dropout_mask")
            b.masks[mask] = (tuple(int(d) for d in xs), ratio)
            keep = b.op("Cast", [mask], to=info.types.get(x, onnx.TensorProto.FLOAT))
            b.op("Mul", [b.op("Mul", [x, keep]), b.scalar(1.0 / (1.0 - ratio), x)], outputs=[node.output[0]])
            if len(node.output) > 1 and node.output[1]:
                b.op("Identity", [mask], outputs=[node.output[1]])
        else:
            mask = node.output[1] if len(node.output) > 1 and node.output[1] else b.fresh("dropout_mask")
            b.op("Dropout", [x, b.const(np.asarray(ratio, info.np_dtype(x))), b.const(np.asarray(True))],
                 outputs=[node.output[0], mask], seed=int(seed + len(b.nodes)))
        saved.update(mask=mask, scale=1.0 / (1.0 - ratio))
        return
    b.nodes.append(node)


def _custom_rule(node):
    """The gradient rule of a registered custom operator: one ``<op_type>_Grad`` node."""
    from deep500lite.lv0.custom import grad_op_type, registered_op

    if registered_op(node.domain, node.op_type) is None:
        return None

    def rule(c: _Ctx):
        n_out = len(c.node.output)
        dys = [c.dy(i) for i in range(n_out)]
        outs = [c.b.fresh(f"{c.node.op_type.lower()}_dx") for _ in c.node.input]
        c.b.nodes.append(helper.make_node(
            grad_op_type(c.node.op_type), dys + list(c.node.input) + list(c.node.output), outs,
            name=c.b.fresh(f"n_{c.node.op_type}_Grad"), domain=c.node.domain))
        return outs

    return rule


# ---------------------------------------------------------------------------------- entry points
def training_graph(network: Network, y: str = "loss", seed: int = 0) -> TrainingGraph:
    """Build the training graph of ``network`` for the scalar ``y`` (see :func:`build_training_model`).

    Returns:
        A :class:`TrainingGraph`: the model and the names of its gradient and statistics outputs.
    """
    opset = network.opset
    if opset < MIN_OPSET:
        raise ModelError(
            f"ONNX autodiff needs a model of opset >= {MIN_OPSET}. Received: opset {opset}; convert it "
            "with onnx.version_converter.convert_version(model, 13).")
    graph = network.graph
    producers = {o: n for n in graph.node for o in n.output}
    if y not in producers and y not in network.inputs:
        raise ModelError(f"ONNX autodiff: '{y}' is not a tensor of the network. Outputs: {network.outputs}")
    values = dict(zip(network.initializers, network.fetch_tensors(network.initializers)))
    fwd = onnx.ModelProto()
    fwd.CopyFrom(network._model)
    fwd.graph.initializer.extend(numpy_helper.from_array(np.asarray(v), k) for k, v in values.items())
    info = _Info(fwd)
    ys = info.shape(y)
    if ys is not None and None not in ys and int(np.prod(ys)) != 1:
        raise UserError(f"ONNX autodiff differentiates a scalar; '{y}' has shape {list(ys)}. Reduce it to "
                        "a scalar first (for example with a loss operator or ReduceMean).")

    taken = {i.name for i in graph.input} | set(values) | {o for n in graph.node for o in n.output}
    b = _Builder(opset, info, taken)

    # Forward pass in training mode.
    saved: dict[int, dict] = {}
    running: dict[str, str] = {}
    for i, node in enumerate(graph.node):
        saved[i] = {}
        _training_forward(b, node, saved[i], running, seed)

    # Which tensors carry gradient: reachable from the trainable parameters, and float.
    params = [p for p, _ in network.gradient(y)]
    requires = set(params)
    for node in graph.node:
        if any(x in requires for x in node.input if x):
            requires.update(o for o in node.output if o and info.is_float(o))
    ancestors, stack = set(), [y]
    while stack:
        t = stack.pop()
        if t in ancestors:
            continue
        ancestors.add(t)
        n = producers.get(t)
        if n is not None:
            stack.extend(x for x in n.input if x)

    grads: dict[str, list] = {}

    def grad_of(name):
        parts = grads.get(name)
        if not parts:
            return None
        if len(parts) > 1:
            grads[name] = [b.op("Sum", parts, hint="gsum")]
        return grads[name][0]

    if y in requires:
        ys = info.shape(y)
        if ys is not None and None not in ys:
            seed_grad = b.const(np.ones(ys, info.np_dtype(y)), hint="dy")
        else:
            seed_grad = b.op("ConstantOfShape", [b.shape(y)],
                             value=numpy_helper.from_array(np.ones(1, info.np_dtype(y))))
        grads[y] = [seed_grad]

    for i in reversed(range(len(graph.node))):
        node = graph.node[i]
        if not any(o in ancestors for o in node.output):
            continue
        need = [bool(x) and x in requires for x in node.input]
        if not any(need):
            continue
        dys = [grad_of(o) if o else None for o in node.output]
        if all(d is None for d in dys):
            continue
        rule = _RULES.get(node.op_type) if node.domain in ("", "ai.onnx") else _custom_rule(node)
        if rule is None:
            raise UnsupportedOperatorError(
                f"deep500lite's ONNX autodiff has no gradient for operator '{node.op_type}' (node "
                f"'{_node_name(node)}'). Operators with gradients: {', '.join(differentiable_operators())}.")
        result = rule(_Ctx(b, node, dys, need, saved[i]))
        for x, g, nd in zip(node.input, result, need):
            if nd and g is not None:
                grads.setdefault(x, []).append(g)

    gradient_outputs = {}
    for p in params:
        g = grad_of(p)
        if g is None:
            g = b.const(np.zeros_like(values[p]), hint="zero_grad")
        gradient_outputs[p] = b.op("Identity", [g], outputs=[gradient_name(p)])

    # Assemble the model.
    float_inits = [k for k, v in values.items() if np.asarray(v).dtype.kind == "f"]
    other_inits = [k for k in values if k not in set(float_inits)]
    inputs = [vi for vi in graph.input if vi.name not in values]
    inputs += [helper.make_tensor_value_info(m, onnx.TensorProto.BOOL, list(shape))
               for m, (shape, _) in b.masks.items()]
    for k in float_inits:
        v = np.asarray(values[k])
        inputs.append(helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
    outputs = list(graph.output)
    out_names = [o.name for o in outputs]
    if y not in out_names:
        outputs.append(helper.make_tensor_value_info(y, info.types.get(y, 0), None)
                       if y in info.types else helper.ValueInfoProto(name=y))
        out_names.append(y)
    for p, g in gradient_outputs.items():
        v = np.asarray(values[p])
        outputs.append(helper.make_tensor_value_info(g, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
    for stat, upd in running.items():
        v = np.asarray(values[stat]) if stat in values else None
        outputs.append(helper.make_tensor_value_info(upd, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
                       if v is not None else helper.ValueInfoProto(name=upd))
    used = {x for n in b.nodes for x in n.input} | {o.name for o in outputs}
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in b.nodes for a in n.attribute):
        used.update(other_inits)  # subgraphs may read outer constants
    # Constants only the replaced forward nodes read (a Dropout ratio) are left out.
    inits = [numpy_helper.from_array(np.asarray(values[k]), k) for k in other_inits if k in used] + b.inits
    new_graph = helper.make_graph(b.nodes, f"{graph.name or 'graph'}_training", inputs, outputs,
                                  initializer=inits)
    model = helper.make_model(new_graph, opset_imports=list(network._model.opset_import),
                              producer_name="deep500lite.autodiff", ir_version=network._model.ir_version)
    return TrainingGraph(model=model, outputs=network.outputs, y=y, gradients=gradient_outputs,
                         running_stats=running, param_inputs=float_inits, feed_inputs=network.inputs,
                         dropout_masks=dict(b.masks))


def build_training_model(network: Network, y: str = "loss", seed: int = 0) -> onnx.ModelProto:
    """Build the ONNX training model of ``network``: the forward pass in training mode, then backward.

    Args:
        network: the forward network (a :class:`~deep500lite.Network`, opset >= 13).
        y: the scalar tensor to differentiate (the loss); computed even if it is not an output.
        seed: seed of the Dropout masks drawn inside the graph.

    Returns:
        An ``onnx.ModelProto`` whose inputs are the network's inputs, its floating-point
        initializers and the boolean Dropout masks, and whose outputs are the network's
        outputs, ``y``, ``"<param>_grad"`` for every parameter of ``network.gradient(y)`` and
        ``"<running stat>__updated"`` for every BatchNormalization running statistic.

    Raises:
        UnsupportedOperatorError: an operator on the path from the parameters to ``y`` has no
            gradient rule (the message names the operator and the node).
        ModelError: ``y`` is not a tensor of the network, or the opset is below 13.
        UserError: ``y`` is known not to be a scalar.
    """
    return training_graph(network, y, seed).model


def save_backward_graph(network: Network, y: str, path: str | os.PathLike, seed: int = 0) -> None:
    """Write the training model of :func:`build_training_model` to ``path`` for inspection.

    Args:
        network: the forward network.
        y: the scalar tensor to differentiate.
        path: the ONNX file to write (atomically).
        seed: seed of the Dropout masks.
    """
    from deep500lite.utils import atomic_write_bytes

    atomic_write_bytes(path, build_training_model(network, y, seed).SerializeToString())
