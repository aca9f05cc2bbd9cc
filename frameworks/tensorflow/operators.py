"""ONNX operators as TensorFlow ops.

Each converter is registered for one ONNX op type with a *layout kind* that says how it treats
channels-last values (see :mod:`deep500lite.frameworks.tensorflow.layout`):

- ``PLAIN``: takes and returns tensors in the ONNX layout (the default, always correct).
- ``UNARY``: elementwise in its first input; works on the stored tensor and keeps its layout.
- ``ELEMENTWISE``: broadcasting n-ary op; operands are brought to one common layout.
- ``SPATIAL``: first input is given channels-last, outputs of the same rank are channels-last.
- ``VALUE``: receives and returns :class:`Value` objects and handles layouts itself.

:func:`build_node` parses a node's attributes once and returns a callable used while
``tf.function`` traces the graph. With ``training=True`` it uses the training-mode converter
where an op has one (:func:`training_op`): BatchNormalization with batch statistics, returning
its new running statistics (``TRAINING_STATE_OUTPUTS`` says which inputs they replace), and
Dropout drawing a mask.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import tensorflow as tf
from onnx import numpy_helper

from deep500lite.errors import UnsupportedOperatorError
from deep500lite.frameworks.tensorflow.layout import Value, channels_last, inverse
from deep500lite.lv1.network import constant_attribute_value

__all__ = ["SUPPORTED_OPS", "TRAINING_STATE_OUTPUTS", "build_node", "check_types", "tf_dtype"]

PLAIN, UNARY, ELEMENTWISE, SPATIAL, VALUE = "plain", "unary", "elementwise", "spatial", "value"

_CONVERTERS: dict = {}
# Training-mode converters (used by inference_and_backprop and the native optimizers): op type ->
# (kind, fn, minimum number of outputs the converter returns).
_TRAINING_CONVERTERS: dict = {}

# Operators whose training-mode form updates state: op type -> [(input index of the state,
# converter output index of its new value)]. BatchNormalization's running mean and variance.
TRAINING_STATE_OUTPUTS = {"BatchNormalization": [(3, 1), (4, 2)]}

_ONNX_TO_TF = {
    onnx.TensorProto.FLOAT: tf.float32, onnx.TensorProto.DOUBLE: tf.float64,
    onnx.TensorProto.FLOAT16: tf.float16, onnx.TensorProto.BFLOAT16: tf.bfloat16,
    onnx.TensorProto.INT8: tf.int8, onnx.TensorProto.INT16: tf.int16, onnx.TensorProto.INT32: tf.int32,
    onnx.TensorProto.INT64: tf.int64, onnx.TensorProto.UINT8: tf.uint8, onnx.TensorProto.UINT16: tf.uint16,
    onnx.TensorProto.UINT32: tf.uint32, onnx.TensorProto.UINT64: tf.uint64, onnx.TensorProto.BOOL: tf.bool,
    onnx.TensorProto.STRING: tf.string, onnx.TensorProto.COMPLEX64: tf.complex64,
    onnx.TensorProto.COMPLEX128: tf.complex128,
}



def tf_dtype(onnx_type: int) -> tf.DType:
    """The TensorFlow dtype of an ONNX ``TensorProto`` element type."""
    try:
        return _ONNX_TO_TF[onnx_type]
    except KeyError:
        raise UnsupportedOperatorError(
            f"TensorFlow has no dtype for ONNX type {onnx.TensorProto.DataType.Name(onnx_type)}; "
            f"supported types: {sorted(onnx.TensorProto.DataType.Name(t) for t in _ONNX_TO_TF)}"
        ) from None


def _type_name(t: int) -> str:
    return onnx.TensorProto.DataType.Name(t)


def check_types(network) -> None:
    """Raise UnsupportedOperatorError for graph values of a type TensorFlow cannot hold.

    Checks the graph's inputs and outputs (tensors only: no sequences or optionals), and the
    types named by Cast, Constant and ConstantOfShape nodes.
    """
    graph = network.graph
    for kind, vis in (("input", graph.input), ("output", graph.output)):
        for vi in vis:
            t = vi.type
            if t.HasField("tensor_type"):
                if t.tensor_type.elem_type and t.tensor_type.elem_type not in _ONNX_TO_TF:
                    raise UnsupportedOperatorError(
                        f"The tensorflow executor cannot hold graph {kind} '{vi.name}' of type "
                        f"{_type_name(t.tensor_type.elem_type)}: TensorFlow has no such dtype.")
            elif t.WhichOneof("value") is not None:
                raise UnsupportedOperatorError(
                    f"The tensorflow executor runs tensors only; graph {kind} '{vi.name}' is a "
                    f"{t.WhichOneof('value').replace('_type', '')}.")
    for node in graph.node:
        types = []
        for a in node.attribute:
            if node.op_type == "Cast" and a.name == "to":
                types.append(a.i)
            elif node.op_type in ("Constant", "ConstantOfShape") and a.type == onnx.AttributeProto.TENSOR:
                types.append(a.t.data_type)
        for t in types:
            if t not in _ONNX_TO_TF:
                raise UnsupportedOperatorError(
                    f"The tensorflow executor cannot run {node.op_type} node '{node.name or node.output[0]}': "
                    f"TensorFlow has no dtype for ONNX type {_type_name(t)}.")


def op(*names, kind=PLAIN):
    """Register a converter for the ONNX op types ``names``."""
    def wrap(fn):
        for n in names:
            _CONVERTERS[n] = (kind, fn)
        return fn
    return wrap


def training_op(name, kind=PLAIN, outputs=1):
    """Register the training-mode converter of ``name`` (returning at least ``outputs`` outputs)."""
    def wrap(fn):
        _TRAINING_CONVERTERS[name] = (kind, fn, outputs)
        return fn
    return wrap


class Node:
    """Build-time view of an ONNX node: parsed attributes, opset and output count."""

    __slots__ = ("op_type", "name", "attrs", "opset", "n_outputs", "n_inputs", "rng", "gpu")

    def __init__(self, node: onnx.NodeProto, opset: int, rng=None, gpu: bool = False):
        self.rng = rng  # the executor's tf.random.Generator (training-mode Dropout)
        self.gpu = gpu  # whether the node runs on a GPU
        self.op_type = node.op_type
        self.name = node.name or (node.output[0] if node.output else node.op_type)
        self.opset = opset
        self.n_outputs = len(node.output)
        self.n_inputs = len(node.input)
        self.attrs = {}
        for a in node.attribute:
            if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                raise UnsupportedOperatorError(
                    f"The tensorflow executor does not support subgraph attributes (node '{self.name}', "
                    f"{node.op_type}.{a.name})."
                )
            v = onnx.helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, onnx.TensorProto):
                v = numpy_helper.to_array(v)
            elif isinstance(v, list) and v and isinstance(v[0], bytes):
                v = [s.decode() for s in v]
            self.attrs[a.name] = v

    def get(self, key, default=None):
        """An attribute's value, or ``default``."""
        return self.attrs.get(key, default)

    def fail(self, what: str):
        """Raise UnsupportedOperatorError naming this node."""
        raise UnsupportedOperatorError(
            f"The tensorflow executor cannot run {self.op_type} node '{self.name}': {what}"
        )


def _custom_converter(node: onnx.NodeProto, ctx: Node):
    from deep500lite.frameworks.tensorflow.custom import custom_op
    from deep500lite.lv0.custom import registered_op

    op = registered_op(node.domain, node.op_type)
    if op is None:
        ctx.fail(f"no custom operator is registered as '{node.domain}::{node.op_type}' (d5.register_op).")
    fn = custom_op(op)
    return lambda ctx, *xs: fn(*xs)


def build_node(node: onnx.NodeProto, opset: int, training: bool = False, rng=None, gpu: bool = False):
    """A callable ``f(values: list[Value | None]) -> list[Value | None]`` for one node.

    Args:
        node: the ONNX node.
        opset: the default-domain opset of the model.
        training: use the training-mode converter where the op has one (BatchNormalization with
            batch statistics, returning the new running statistics as outputs 1 and 2 even when the
            node declares fewer outputs; Dropout drawing a mask from ``rng``).
        rng: a ``tf.random.Generator`` for training-mode Dropout.
        gpu: whether the node runs on a GPU (some kernels have GPU-only limits).
    """
    ctx = Node(node, opset, rng, gpu)
    n_out = ctx.n_outputs
    if node.domain not in ("", "ai.onnx"):
        kind, fn = PLAIN, _custom_converter(node, ctx)
    elif training and node.op_type in _TRAINING_CONVERTERS:
        kind, fn, min_out = _TRAINING_CONVERTERS[node.op_type]
        n_out = max(n_out, min_out)
    else:
        kind, fn = _CONVERTERS[node.op_type]

    def as_list(out):
        return list(out) if isinstance(out, (list, tuple)) else [out]

    if kind == PLAIN:
        def run(values):
            outs = as_list(fn(ctx, *[None if v is None else v.plain for v in values]))
            return [None if o is None else Value(o) for o in outs[:n_out]]
    elif kind == UNARY:
        def run(values):
            x = values[0]
            rest = [None if v is None else v.plain for v in values[1:]]
            outs = as_list(fn(ctx, x.tensor, *rest))
            return [None if o is None else Value(o, x.perm) for o in outs[:n_out]]
    elif kind == ELEMENTWISE:
        def run(values):
            tensors, perm = _align(values)
            return [Value(fn(ctx, *tensors), perm)]
    elif kind == SPATIAL:
        def run(values):
            x = values[0]
            rank = x.rank
            if rank is None:
                ctx.fail("the input rank is unknown")
            xs = x.channels_last
            rest = [None if v is None else v.plain for v in values[1:]]
            outs = as_list(fn(ctx, xs, *rest))
            perm = channels_last(rank) if rank >= 3 else None
            return [None if o is None else Value(o, perm if o.shape.rank == rank else None)
                    for o in outs[:n_out]]
    else:
        def run(values):
            return as_list(fn(ctx, *values))[:n_out]
    return run


def _align(values):
    """Bring broadcasting operands to one layout; returns (tensors, perm)."""
    perm = next((v.perm for v in values if v is not None and v.perm is not None), None)
    if perm is None:
        return [None if v is None else v.tensor for v in values], None
    rank = len(perm)
    ranks = [None if v is None else v.rank for v in values]
    if any(r is None or r > rank for r in ranks if r is not None) or any(
            v is not None and v.rank is None for v in values):
        return [None if v is None else v.plain for v in values], None
    out = []
    for v, r in zip(values, ranks):
        if v is None:
            out.append(None)
        elif r == rank:
            out.append(v.as_layout(perm))
        elif r == 0:
            out.append(v.tensor)
        else:
            t = v.plain
            order = inverse(perm)
            if t.shape.is_fully_defined():
                shape = [1] * (rank - r) + t.shape.as_list()
                moved = [shape[a] for a in order]
                kept = [a for a in order if shape[a] != 1]
                if kept == sorted(kept):  # only size-1 axes move: a reshape, not a transpose
                    out.append(tf.reshape(t, moved))
                    continue
            else:
                shape = [1] * (rank - r) + tf.unstack(tf.shape(t))
            out.append(tf.transpose(tf.reshape(t, shape), order))
    return out, perm


# --------------------------------------------------------------------------- helpers
def _static(t):
    """The value of ``t`` as numpy if it is known while tracing, else ``None``."""
    if t is None:
        return None
    try:
        return tf.get_static_value(t)
    except (TypeError, ValueError):
        return None


def _ints(t):
    """A static integer tensor as a list of ints (None if not static)."""
    v = _static(t)
    return None if v is None else [int(i) for i in np.asarray(v).reshape(-1)]


def _rank(ctx, t):
    r = t.shape.rank
    if r is None:
        ctx.fail("the input rank must be known while tracing")
    return r


def _dims(t):
    """Dimensions of ``t``: Python ints where static, scalar tensors elsewhere."""
    static = t.shape.as_list()
    if all(d is not None for d in static):
        return static
    dyn = tf.shape(t)
    return [d if d is not None else dyn[i] for i, d in enumerate(static)]


def _axis(ax, rank):
    return ax + rank if ax < 0 else ax


def _max0(v):
    return max(v, 0) if isinstance(v, int) else tf.maximum(v, 0)


def _cdiv(a, b):
    return -(-a // b)


def _lowest(dtype):
    return -np.inf if dtype.is_floating else dtype.min


# ------------------------------------------------------------------- elementwise unary
def _unary(names, f):
    op(*names, kind=UNARY)(lambda ctx, x, *rest: f(x))


_unary(["Identity"], tf.identity)
_unary(["Neg"], tf.negative)
_unary(["Exp"], tf.exp)
_unary(["Log"], tf.math.log)
_unary(["Sqrt"], tf.sqrt)
_unary(["Erf"], tf.math.erf)
_unary(["Sigmoid"], tf.sigmoid)
_unary(["Tanh"], tf.tanh)
_unary(["Reciprocal"], tf.math.reciprocal)
_unary(["Floor"], tf.floor)
_unary(["Ceil"], tf.math.ceil)
_unary(["Round"], tf.round)
_unary(["Sign"], tf.sign)
_unary(["Sin"], tf.sin)
_unary(["Cos"], tf.cos)
_unary(["Tan"], tf.tan)
_unary(["Asin"], tf.asin)
_unary(["Acos"], tf.acos)
_unary(["Atan"], tf.atan)
_unary(["Sinh"], tf.sinh)
_unary(["Cosh"], tf.cosh)
_unary(["Asinh"], tf.asinh)
_unary(["Acosh"], tf.acosh)
_unary(["Atanh"], tf.atanh)
_unary(["Softplus"], tf.math.softplus)
_unary(["Softsign"], tf.math.softsign)
_unary(["Not"], tf.logical_not)
_unary(["IsNaN"], tf.math.is_nan)


@op("Abs", kind=UNARY)
def _abs(ctx, x):
    return x if x.dtype.is_unsigned else tf.abs(x)


@op("Relu", kind=UNARY)
def _relu(ctx, x):
    return tf.nn.relu(x) if x.dtype.is_floating else tf.maximum(x, tf.zeros([], x.dtype))


@op("LeakyRelu", kind=UNARY)
def _leaky_relu(ctx, x):
    return tf.nn.leaky_relu(x, alpha=ctx.get("alpha", 0.01))


@op("Elu", kind=UNARY)
def _elu(ctx, x):
    alpha = ctx.get("alpha", 1.0)
    return tf.where(x < 0, alpha * (tf.exp(x) - 1), x)


@op("Selu", kind=UNARY)
def _selu(ctx, x):
    alpha = ctx.get("alpha", 1.67326319217681884765625)
    gamma = ctx.get("gamma", 1.05070102214813232421875)
    return gamma * tf.where(x > 0, x, alpha * (tf.exp(x) - 1))


@op("Celu", kind=UNARY)
def _celu(ctx, x):
    alpha = ctx.get("alpha", 1.0)
    return tf.maximum(x, 0) + tf.minimum(tf.zeros([], x.dtype), alpha * (tf.exp(x / alpha) - 1))


@op("ThresholdedRelu", kind=UNARY)
def _thresholded_relu(ctx, x):
    return tf.where(x > ctx.get("alpha", 1.0), x, tf.zeros([], x.dtype))


@op("HardSigmoid", kind=UNARY)
def _hard_sigmoid(ctx, x):
    return tf.clip_by_value(ctx.get("alpha", 0.2) * x + ctx.get("beta", 0.5), 0, 1)


@op("HardSwish", kind=UNARY)
def _hard_swish(ctx, x):
    return x * tf.clip_by_value(x / 6 + 0.5, 0, 1)


@op("Mish", kind=UNARY)
def _mish(ctx, x):
    return x * tf.tanh(tf.math.softplus(x))


@op("Gelu", kind=UNARY)
def _gelu(ctx, x):
    return tf.nn.gelu(x, approximate=ctx.get("approximate", "none") == "tanh")


@op("IsInf", kind=UNARY)
def _isinf(ctx, x):
    pos, neg = ctx.get("detect_positive", 1), ctx.get("detect_negative", 1)
    inf = tf.math.is_inf(x)
    if pos and neg:
        return inf
    if pos:
        return tf.logical_and(inf, x > 0)
    if neg:
        return tf.logical_and(inf, x < 0)
    return tf.zeros_like(inf)


@op("Clip", kind=UNARY)
def _clip(ctx, x, lo=None, hi=None):
    if ctx.opset < 11:
        lo, hi = ctx.get("min"), ctx.get("max")
    if lo is not None:
        x = tf.maximum(x, tf.cast(lo, x.dtype))
    if hi is not None:
        x = tf.minimum(x, tf.cast(hi, x.dtype))
    return x


@op("Dropout", kind=UNARY)
def _dropout(ctx, x, *rest):
    # Inference semantics: the identity, and a mask of ones.
    if ctx.n_outputs > 1:
        return x, tf.ones_like(x, dtype=tf.bool)
    return x


@op("Cast", kind=UNARY)
def _cast(ctx, x):
    return _cast_to(ctx, x, tf_dtype(ctx.get("to")))


def _cast_to(ctx, x, dtype):
    if dtype == tf.string or x.dtype == tf.string:
        if dtype == x.dtype:
            return x
        if x.dtype == tf.string:
            return tf.strings.to_number(x, out_type=dtype)
        ctx.fail("casting to strings is not supported")
    if dtype == tf.bool and x.dtype != tf.bool:
        return tf.not_equal(x, tf.zeros([], x.dtype))
    return tf.cast(x, dtype)


@op("CastLike", kind=VALUE)
def _cast_like(ctx, x, like):
    return Value(_cast_to(ctx, x.tensor, like.tensor.dtype), x.perm)


# -------------------------------------------------------------------- elementwise n-ary
def _binary(names, f):
    op(*names, kind=ELEMENTWISE)(lambda ctx, a, b: f(a, b))


_binary(["Add"], tf.add)
_binary(["Sub"], tf.subtract)
_binary(["Mul"], tf.multiply)
_binary(["Equal"], tf.equal)
_binary(["Less"], tf.less)
_binary(["LessOrEqual"], tf.less_equal)
_binary(["Greater"], tf.greater)
_binary(["GreaterOrEqual"], tf.greater_equal)
_binary(["And"], tf.logical_and)
_binary(["Or"], tf.logical_or)
_binary(["Xor"], tf.math.logical_xor)


@op("Div", kind=ELEMENTWISE)
def _div(ctx, a, b):
    if a.dtype.is_integer:
        return tf.truncatediv(a, b)
    return tf.divide(a, b)


@op("Mod", kind=ELEMENTWISE)
def _mod(ctx, a, b):
    f = tf.truncatemod if ctx.get("fmod", 0) else tf.math.floormod
    if a.dtype == tf.float16 or a.dtype == tf.bfloat16:
        return tf.cast(f(tf.cast(a, tf.float32), tf.cast(b, tf.float32)), a.dtype)
    return f(a, b)


@op("Pow", kind=ELEMENTWISE)
def _pow(ctx, a, b):
    if a.dtype == b.dtype:
        return tf.pow(a, b)
    if a.dtype.is_integer and b.dtype.is_floating:
        return tf.cast(tf.pow(tf.cast(a, b.dtype), b), a.dtype)
    return tf.pow(a, tf.cast(b, a.dtype))


@op("PRelu", kind=ELEMENTWISE)
def _prelu(ctx, x, slope):
    return tf.where(x < 0, x * slope, x)


@op("Where", kind=ELEMENTWISE)
def _where(ctx, c, a, b):
    return tf.where(c, a, b)


def _variadic(names, f):
    def fn(ctx, *xs):
        out = xs[0]
        for x in xs[1:]:
            out = f(out, x)
        return out
    op(*names, kind=ELEMENTWISE)(fn)


_variadic(["Sum"], tf.add)
_variadic(["Max"], tf.maximum)
_variadic(["Min"], tf.minimum)


@op("Mean", kind=ELEMENTWISE)
def _mean(ctx, *xs):
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out / len(xs)


# ------------------------------------------------------------------------ linear algebra
@op("MatMul")
def _matmul(ctx, a, b):
    ra, rb = _rank(ctx, a), _rank(ctx, b)
    if ra == 1:
        a = a[None, :]
    if rb == 1:
        b = b[:, None]
    y = tf.linalg.matmul(a, b)
    if ra == 1:
        y = tf.squeeze(y, -2)
    if rb == 1:
        y = tf.squeeze(y, -1)
    return y


@op("Gemm")
def _gemm(ctx, a, b, c=None):
    y = tf.linalg.matmul(a, b, transpose_a=bool(ctx.get("transA", 0)), transpose_b=bool(ctx.get("transB", 0)))
    alpha, beta = ctx.get("alpha", 1.0), ctx.get("beta", 1.0)
    if alpha != 1.0:
        y = y * tf.cast(alpha, y.dtype)
    if c is not None:
        if c.shape.rank == 2 and c.shape[0] == 1:
            # A [1, N] bias is fused by TensorFlow's graph rewriter into a BiasAdd that wants 1-D.
            c = tf.reshape(c, [-1])
        y = y + (c if beta == 1.0 else c * tf.cast(beta, c.dtype))
    return y


# ---------------------------------------------------------------------- softmax family
def _softmax_like(f):
    def fn(ctx, x):
        rank = x.rank
        if ctx.opset >= 13:
            if rank is None:
                return Value(f(x.plain, axis=ctx.get("axis", -1)))
            axis = _axis(ctx.get("axis", -1), rank)
            stored_axis = axis if x.perm is None else x.perm[axis]
            return Value(f(x.tensor, axis=stored_axis), x.perm)
        t = x.plain
        axis = _axis(ctx.get("axis", 1), _rank(ctx, t))
        shape = tf.shape(t)
        flat = tf.reshape(t, tf.stack([tf.reduce_prod(shape[:axis]), tf.reduce_prod(shape[axis:])]))
        return Value(tf.reshape(f(flat, axis=-1), shape))
    return fn


op("Softmax", kind=VALUE)(_softmax_like(tf.nn.softmax))
op("LogSoftmax", kind=VALUE)(_softmax_like(tf.nn.log_softmax))


# --------------------------------------------------------------------------- reductions
def _reduce_axes(ctx, x_rank, axes_input):
    """Static axes list, ``None`` for all axes, or a tensor of dynamic axes; plus a noop flag."""
    if "axes" in ctx.attrs:
        axes = list(ctx.attrs["axes"])
    elif axes_input is not None:
        axes = _ints(axes_input)
        if axes is None:
            return axes_input, False
    else:
        axes = []
    if not axes:
        return (None, bool(ctx.get("noop_with_empty_axes", 0)))
    return [_axis(a, x_rank) for a in axes], False


def _reduction(name, f):
    def fn(ctx, x, axes_in=None):
        keep = bool(ctx.get("keepdims", 1))
        axes_in = None if axes_in is None else axes_in.plain
        rank = x.rank
        axes, noop = _reduce_axes(ctx, rank if rank is not None else 0, axes_in)
        if noop:
            return Value(x.tensor, x.perm)
        if axes is None:
            return Value(f(x.tensor, None, keep), x.perm if keep else None)
        if not isinstance(axes, list):
            t = x.plain
            dyn = tf.cast(axes, tf.int64)
            dyn = tf.where(dyn < 0, dyn + tf.cast(tf.rank(t), tf.int64), dyn)
            empty = tf.equal(tf.size(dyn), 0)
            all_axes = tf.range(tf.cast(tf.rank(t), tf.int64))
            if ctx.get("noop_with_empty_axes", 0):
                return Value(tf.cond(empty, lambda: t, lambda: f(t, dyn, keep)))
            return Value(f(t, tf.cond(empty, lambda: all_axes, lambda: dyn), keep))
        if x.perm is None:
            return Value(f(x.tensor, axes, keep))
        stored = [x.perm[a] for a in axes]
        y = f(x.tensor, stored, keep)
        if keep:
            return Value(y, x.perm)
        inv = inverse(x.perm)
        remaining = [inv[j] for j in range(rank) if j not in stored]  # plain axes in stored order
        order = sorted(remaining)
        renum = [order.index(a) for a in remaining]
        return Value(y, inverse(renum))
    op(name, kind=VALUE)(fn)


def _reduce_max(x, axes, keep):
    if x.dtype == tf.bool:
        return tf.reduce_any(x, axis=axes, keepdims=keep)
    y = tf.reduce_max(x, axis=axes, keepdims=keep)
    if x.dtype.is_floating:  # TensorFlow's identity for an empty max is the lowest finite value
        y = tf.where(tf.equal(y, x.dtype.min), tf.cast(-np.inf, x.dtype), y) if _may_be_empty(x) else y
    return y


def _reduce_min(x, axes, keep):
    if x.dtype == tf.bool:
        return tf.reduce_all(x, axis=axes, keepdims=keep)
    y = tf.reduce_min(x, axis=axes, keepdims=keep)
    if x.dtype.is_floating and _may_be_empty(x):
        y = tf.where(tf.equal(y, x.dtype.max), tf.cast(np.inf, x.dtype), y)
    return y


def _may_be_empty(x):
    return x.shape.num_elements() is None or x.shape.num_elements() == 0


_reduction("ReduceSum", lambda x, a, k: tf.reduce_sum(x, axis=a, keepdims=k))
_reduction("ReduceMean", lambda x, a, k: tf.reduce_mean(x, axis=a, keepdims=k))
_reduction("ReduceMax", _reduce_max)
_reduction("ReduceMin", _reduce_min)
_reduction("ReduceProd", lambda x, a, k: tf.reduce_prod(x, axis=a, keepdims=k))
_reduction("ReduceL1", lambda x, a, k: tf.reduce_sum(tf.abs(x), axis=a, keepdims=k))
_reduction("ReduceL2", lambda x, a, k: tf.sqrt(tf.reduce_sum(tf.square(x), axis=a, keepdims=k)))
_reduction("ReduceSumSquare", lambda x, a, k: tf.reduce_sum(tf.square(x), axis=a, keepdims=k))
_reduction("ReduceLogSum", lambda x, a, k: tf.math.log(tf.reduce_sum(x, axis=a, keepdims=k)))
_reduction("ReduceLogSumExp", lambda x, a, k: tf.reduce_logsumexp(x, axis=a, keepdims=k))


def _arg(f):
    def fn(ctx, x):
        rank = _rank(ctx, x)
        axis = _axis(ctx.get("axis", 0), rank)
        if ctx.get("select_last_index", 0):
            n = tf.cast(tf.shape(x)[axis], tf.int64)
            y = n - 1 - f(tf.reverse(x, [axis]), axis=axis, output_type=tf.int64)
        else:
            y = f(x, axis=axis, output_type=tf.int64)
        return tf.expand_dims(y, axis) if ctx.get("keepdims", 1) else y
    return fn


op("ArgMax")(_arg(tf.argmax))
op("ArgMin")(_arg(tf.argmin))


@op("CumSum")
def _cumsum(ctx, x, axis):
    return tf.math.cumsum(x, axis=tf.reshape(axis, []), exclusive=bool(ctx.get("exclusive", 0)),
                          reverse=bool(ctx.get("reverse", 0)))


# ----------------------------------------------------------------------- shape handling
@op("Shape", kind=VALUE)
def _shape(ctx, x):
    shape = tf.shape(x.tensor, out_type=tf.int64)
    if x.perm is not None:
        shape = tf.gather(shape, x.perm)
    rank = x.rank
    start, end = ctx.get("start", 0), ctx.get("end")
    if start or end is not None:
        if rank is None:
            return Value(shape[start:end])
        start = min(max(_axis(start, rank), 0), rank)
        end = rank if end is None else min(max(_axis(end, rank), 0), rank)
        shape = shape[start:end]
    return Value(shape)


@op("Size")
def _size(ctx, x):
    return tf.size(x, out_type=tf.int64)


@op("Constant")
def _constant(ctx):
    v = constant_attribute_value(ctx.attrs)
    if v is None:
        ctx.fail(f"unsupported attribute(s) {sorted(ctx.attrs)}")
    return tf.constant(v)


@op("ConstantOfShape")
def _constant_of_shape(ctx, shape):
    value = ctx.get("value")
    value = np.zeros([1], np.float32) if value is None else value
    return tf.fill(tf.cast(shape, tf.int64), tf.constant(value.reshape(-1)[0], dtype=tf.as_dtype(value.dtype)))


@op("Flatten")
def _flatten(ctx, x):
    rank = _rank(ctx, x)
    axis = _axis(ctx.get("axis", 1), rank)
    dims = _dims(x)
    lead = math.prod(dims[:axis]) if all(isinstance(d, int) for d in dims[:axis]) else tf.reduce_prod(
        tf.shape(x)[:axis])
    tail = math.prod(dims[axis:]) if all(isinstance(d, int) for d in dims[axis:]) else tf.reduce_prod(
        tf.shape(x)[axis:])
    return tf.reshape(x, [lead, tail] if isinstance(lead, int) and isinstance(tail, int) else tf.stack(
        [tf.cast(lead, tf.int32), tf.cast(tail, tf.int32)]))


@op("Reshape")
def _reshape(ctx, x, shape=None):
    if ctx.opset < 5:
        shape = tf.constant(ctx.get("shape"), tf.int64)
    allowzero = ctx.get("allowzero", 0)
    static = _ints(shape)
    if static is not None:
        if allowzero or 0 not in static:
            return tf.reshape(x, static)
        dims = _dims(x)
        if all(isinstance(d, int) for d in dims) and len(dims) >= len(static):
            return tf.reshape(x, [dims[i] if s == 0 else s for i, s in enumerate(static)])
    shape = tf.cast(shape, tf.int64)
    if not allowzero:
        n = tf.size(shape)
        src = tf.concat([tf.shape(x, out_type=tf.int64), tf.ones([n], tf.int64)], 0)[:n]
        shape = tf.where(tf.equal(shape, 0), src, shape)
    return tf.reshape(x, shape)


@op("Transpose", kind=VALUE)
def _transpose(ctx, x):
    perm = ctx.get("perm")
    rank = x.rank
    if rank is None:
        return Value(tf.transpose(x.plain, perm))
    perm = list(reversed(range(rank))) if perm is None else [_axis(p, rank) for p in perm]
    mine = x.perm if x.perm is not None else tuple(range(rank))
    return Value(x.tensor, tuple(mine[p] for p in perm))


@op("Concat", kind=VALUE)
def _concat(ctx, *xs):
    xs = [x for x in xs if x is not None]
    first = next((x for x in xs if x.rank is not None and x.rank > 0), xs[0])
    rank = first.rank
    if rank is None or any(x.rank != rank for x in xs):
        return Value(tf.concat([x.plain for x in xs], _axis(ctx.get("axis"), rank or 1)))
    axis = _axis(ctx.get("axis"), rank)
    perm = first.perm
    stored_axis = axis if perm is None else perm[axis]
    return Value(tf.concat([x.as_layout(perm) for x in xs], stored_axis), perm)


@op("Split", kind=VALUE)
def _split(ctx, x, split=None):
    rank = x.rank
    if rank is None:
        ctx.fail("the input rank must be known while tracing")
    axis = _axis(ctx.get("axis", 0), rank)
    stored_axis = axis if x.perm is None else x.perm[axis]
    t = x.tensor
    if ctx.opset < 13 and "split" in ctx.attrs:
        sizes = list(ctx.attrs["split"])
    elif split is not None:
        sizes = _ints(split.plain)
        if sizes is None:
            sizes = tf.cast(split.plain, tf.int64)
    else:
        n = ctx.get("num_outputs", ctx.n_outputs)
        dim = t.shape[stored_axis]
        if dim is None:
            if ctx.get("num_outputs") is None:
                return [Value(p, x.perm) for p in tf.split(t, n, axis=stored_axis)]
            ctx.fail("num_outputs needs a static dimension")
        chunk = _cdiv(dim, n)
        sizes = [min(chunk, dim - i * chunk) for i in range(n)]
    return [Value(p, x.perm) for p in tf.split(t, sizes, axis=stored_axis, num=ctx.n_outputs)]


@op("Squeeze")
def _squeeze(ctx, x, axes=None):
    if ctx.opset < 13:
        axes = ctx.get("axes")
    elif axes is not None:
        static = _ints(axes)
        if static is None:
            rank = _rank(ctx, x)
            ax = tf.cast(axes, tf.int64)
            ax = tf.where(ax < 0, ax + rank, ax)
            keep = tf.reduce_all(tf.not_equal(tf.range(rank, dtype=tf.int64)[:, None], ax[None, :]), axis=1)
            return tf.reshape(x, tf.boolean_mask(tf.shape(x, out_type=tf.int64), keep))
        axes = static
    if axes is None:
        return tf.squeeze(x)
    rank = _rank(ctx, x)
    return tf.squeeze(x, [_axis(a, rank) for a in axes])


@op("Unsqueeze")
def _unsqueeze(ctx, x, axes=None):
    if ctx.opset < 13:
        axes = ctx.get("axes")
    else:
        static = _ints(axes)
        if static is None:
            rank = _rank(ctx, x)
            n = axes.shape[0]
            if n is None:
                ctx.fail("the number of axes must be known while tracing")
            out_rank = rank + n
            ax = tf.cast(axes, tf.int64)
            ax = tf.where(ax < 0, ax + out_rank, ax)
            is_new = tf.reduce_any(tf.equal(tf.range(out_rank, dtype=tf.int64)[:, None], ax[None, :]), axis=1)
            idx = tf.where(tf.logical_not(is_new))
            shape = tf.tensor_scatter_nd_update(tf.ones([out_rank], tf.int64), idx, tf.shape(x, out_type=tf.int64))
            return tf.reshape(x, shape)
        axes = static
    out_rank = _rank(ctx, x) + len(axes)
    for a in sorted(_axis(a, out_rank) for a in axes):
        x = tf.expand_dims(x, a)
    return x


@op("Expand")
def _expand(ctx, x, shape):
    shape = tf.cast(shape, tf.int64)
    target = tf.broadcast_dynamic_shape(tf.shape(x, out_type=tf.int64), shape)
    return tf.broadcast_to(x, target)


@op("Tile")
def _tile(ctx, x, repeats):
    return tf.tile(x, tf.cast(repeats, tf.int64))


@op("Range")
def _range(ctx, start, limit, delta):
    return tf.range(start, limit, delta, dtype=start.dtype)


@op("Slice")
def _slice(ctx, x, starts=None, ends=None, axes=None, steps=None):
    rank = _rank(ctx, x)
    if ctx.opset < 10:
        n = len(ctx.get("starts"))
        starts, ends = tf.constant(ctx.get("starts"), tf.int64), tf.constant(ctx.get("ends"), tf.int64)
        axes = tf.constant(ctx.get("axes") or list(range(n)), tf.int64)
    starts, ends = tf.cast(starts, tf.int64), tf.cast(ends, tf.int64)
    if axes is None:
        axes = tf.range(tf.size(starts, out_type=tf.int64), dtype=tf.int64)
    axes = tf.cast(axes, tf.int64)
    axes = tf.where(axes < 0, axes + rank, axes)[:, None]
    dims = tf.shape(x, out_type=tf.int64)
    step = tf.ones([rank], tf.int64)
    if steps is not None:
        step = tf.tensor_scatter_nd_update(step, axes, tf.cast(steps, tf.int64))
    begin = tf.tensor_scatter_nd_update(tf.zeros([rank], tf.int64), axes, starts)
    end = tf.tensor_scatter_nd_update(dims, axes, ends)
    # ONNX clamps indices per axis; strided_slice reads negative values from the end, so
    # normalise to non-negative indices and spell "before index 0" as -(dim + 1).
    forward = step > 0
    begin = tf.where(begin < 0, begin + dims, begin)
    begin = tf.where(forward, tf.clip_by_value(begin, 0, dims), tf.clip_by_value(begin, 0, dims - 1))
    end = tf.where(end < 0, end + dims, end)
    end = tf.where(forward, tf.clip_by_value(end, 0, dims), tf.clip_by_value(end, -1, dims - 1))
    end = tf.where(tf.logical_and(tf.logical_not(forward), end < 0), -dims - 1, end)
    return tf.strided_slice(x, begin, end, step)


@op("Gather")
def _gather(ctx, x, idx):
    rank = _rank(ctx, x)
    axis = _axis(ctx.get("axis", 0), rank)
    if idx.dtype.is_integer and not idx.dtype.is_unsigned:
        idx = tf.where(idx < 0, idx + tf.cast(tf.shape(x)[axis], idx.dtype), idx)
    return tf.gather(x, idx, axis=axis)


@op("GatherElements")
def _gather_elements(ctx, x, idx):
    rank = _rank(ctx, x)
    axis = _axis(ctx.get("axis", 0), rank)
    idx = tf.cast(idx, tf.int64)
    idx = tf.where(idx < 0, idx + tf.cast(tf.shape(x)[axis], tf.int64), idx)
    grids = tf.meshgrid(*[tf.range(tf.shape(idx, out_type=tf.int64)[i]) for i in range(rank)], indexing="ij")
    grids[axis] = idx
    return tf.gather_nd(x, tf.stack(grids, axis=-1))


@op("NonZero")
def _nonzero(ctx, x):
    return tf.transpose(tf.where(tf.not_equal(x, tf.zeros([], x.dtype))))


@op("Pad")
def _pad(ctx, x, pads=None, value=None, axes=None):
    rank = _rank(ctx, x)
    mode = ctx.get("mode", "constant")
    if ctx.opset < 11:
        pads = tf.constant(ctx.get("pads", ctx.get("paddings")), tf.int64)
        value = tf.constant(ctx.get("value", 0.0), x.dtype)
    pads = tf.cast(pads, tf.int64)
    if axes is not None:
        axes = tf.cast(axes, tf.int64)
        axes = tf.where(axes < 0, axes + rank, axes)
        n = tf.size(axes)
        full = tf.zeros([2 * rank], tf.int64)
        full = tf.tensor_scatter_nd_update(full, axes[:, None], pads[:n])
        pads = tf.tensor_scatter_nd_update(full, (axes + rank)[:, None], pads[n:])
    value = tf.zeros([], x.dtype) if value is None else tf.cast(tf.reshape(value, []), x.dtype)
    static = _ints(pads)
    if static is not None and min(static, default=0) >= 0 and mode in ("constant", "reflect"):
        paddings = [[static[i], static[i + rank]] for i in range(rank)]
        if mode == "constant":
            return tf.pad(x, paddings, constant_values=value)
        return tf.pad(x, paddings, mode="REFLECT")
    for i in range(rank):
        if static is not None and static[i] == 0 and static[i + rank] == 0:
            continue
        b, e = pads[i], pads[i + rank]
        n = tf.shape(x, out_type=tf.int64)[i]
        pos = tf.range(-b, n + e)
        if mode == "constant":
            inside = tf.logical_and(pos >= 0, pos < n)
            g = tf.gather(x, tf.clip_by_value(pos, 0, tf.maximum(n - 1, 0)), axis=i)
            shape = [1] * rank
            shape[i] = -1
            x = tf.where(tf.reshape(inside, shape), g, value)
        elif mode == "edge":
            x = tf.gather(x, tf.clip_by_value(pos, 0, n - 1), axis=i)
        elif mode == "wrap":
            x = tf.gather(x, tf.math.floormod(pos, n), axis=i)
        elif mode == "reflect":
            period = 2 * (n - 1)
            m = tf.math.floormod(pos, tf.maximum(period, 1))
            x = tf.gather(x, tf.where(m >= n, period - m, m), axis=i)
        else:
            ctx.fail(f"mode must be one of 'constant', 'reflect', 'edge', 'wrap'. Received: {mode!r}")
    return x


@op("DepthToSpace")
def _depth_to_space(ctx, x):
    b = ctx.get("blocksize")
    n, c, h, w = _dims(x)
    if ctx.get("mode", "DCR") == "DCR":
        t = tf.reshape(x, [n, b, b, c // (b * b), h, w])
        t = tf.transpose(t, [0, 3, 4, 1, 5, 2])
    else:
        t = tf.reshape(x, [n, c // (b * b), b, b, h, w])
        t = tf.transpose(t, [0, 1, 4, 2, 5, 3])
    return tf.reshape(t, [n, c // (b * b), h * b, w * b])


@op("SpaceToDepth")
def _space_to_depth(ctx, x):
    b = ctx.get("blocksize")
    n, c, h, w = _dims(x)
    t = tf.reshape(x, [n, c, h // b, b, w // b, b])
    if ctx.get("mode", "DCR") == "DCR":
        t = tf.transpose(t, [0, 3, 5, 1, 2, 4])
    else:
        t = tf.transpose(t, [0, 1, 3, 5, 2, 4])
    return tf.reshape(t, [n, c * b * b, h // b, w // b])


# ------------------------------------------------------------------ convolution & pooling
def _spatial_attrs(ctx, n):
    strides = list(ctx.get("strides") or [1] * n)
    dilations = list(ctx.get("dilations") or [1] * n)
    return strides, dilations


def _explicit_pads(ctx, sizes, kernel, strides, dilations):
    """Per spatial axis (begin, end) padding from ``auto_pad``/``pads`` (ints or tensors)."""
    n = len(sizes)
    auto = ctx.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for i in range(n):
            eff = (kernel[i] - 1) * dilations[i] + 1
            total = _max0((_cdiv(sizes[i], strides[i]) - 1) * strides[i] + eff - sizes[i])
            small = total // 2
            out.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
        return out, auto
    if auto == "VALID":
        return [(0, 0)] * n, auto
    pads = list(ctx.get("pads") or [0] * (2 * n))
    return [(pads[i], pads[i + n]) for i in range(n)], auto


def _pad_spatial(x, pads, value=0):
    paddings = [[0, 0]] + [[b, e] for b, e in pads] + [[0, 0]]
    if all(isinstance(v, int) and v == 0 for p in pads for v in p):
        return x
    return tf.pad(x, paddings, constant_values=tf.cast(value, x.dtype))


def _all_zero(pads):
    return all(isinstance(v, int) and v == 0 for p in pads for v in p)


@op("Conv", kind=SPATIAL)
def _conv(ctx, x, w, b=None):
    rank = _rank(ctx, x)
    n = rank - 2
    group = ctx.get("group", 1)
    strides, dilations = _spatial_attrs(ctx, n)
    kernel = list(ctx.get("kernel_shape") or w.shape.as_list()[2:])
    if any(k is None for k in kernel):
        ctx.fail("the kernel shape must be known")
    w = tf.transpose(w, list(range(2, rank)) + [1, 0])  # [k..., C_in / group, C_out]
    sizes = _dims(x)[1:-1]
    pads, auto = _explicit_pads(ctx, sizes, kernel, strides, dilations)
    dilated_strided = any(d > 1 for d in dilations) and any(s > 1 for s in strides)
    run_strides = [1] * n if dilated_strided else strides
    if _all_zero(pads):
        padding = "VALID"
    elif auto == "SAME_UPPER" and not dilated_strided:
        padding = "SAME"
    elif n == 2 and all(isinstance(v, int) for p in pads for v in p):
        padding = [[0, 0], list(pads[0]), list(pads[1]), [0, 0]]
    else:
        x = _pad_spatial(x, pads)
        padding = "VALID"

    def conv(xx, ww):
        if n == 2:
            return tf.nn.conv2d(xx, ww, run_strides, padding, dilations=dilations)
        return tf.nn.convolution(xx, ww, strides=run_strides, padding=padding, dilations=dilations)

    if group == 1:
        y = conv(x, w)
    elif n == 2 and x.dtype == tf.float32:
        y = conv(x, w)  # TensorFlow runs grouped 2-D convolutions natively (filter depth C_in / group)
    else:
        xs = tf.split(x, group, axis=-1)
        ws = tf.split(w, group, axis=-1)
        y = tf.concat([conv(a, c) for a, c in zip(xs, ws)], axis=-1)
    if dilated_strided:
        y = y[(slice(None),) + tuple(slice(None, None, s) for s in strides)]
    if b is not None:
        y = tf.nn.bias_add(y, b)
    return y


def _dilate_kernel(w, dilations, n):
    """Insert zeros between kernel taps (w is [k..., a, b])."""
    for i, d in enumerate(dilations):
        if d == 1:
            continue
        k = w.shape[i]
        idx = tf.range(k) * d
        moved = tf.experimental.numpy.moveaxis(w, i, 0)
        full_shape = tf.concat([[(k - 1) * d + 1], tf.shape(moved)[1:]], 0)
        dil = tf.scatter_nd(idx[:, None], moved, full_shape)
        w = tf.experimental.numpy.moveaxis(dil, 0, i)
    return w


@op("ConvTranspose", kind=SPATIAL)
def _conv_transpose(ctx, x, w, b=None):
    rank = _rank(ctx, x)
    n = rank - 2
    group = ctx.get("group", 1)
    strides, dilations = _spatial_attrs(ctx, n)
    kernel = list(ctx.get("kernel_shape") or w.shape.as_list()[2:])
    out_pad = list(ctx.get("output_padding") or [0] * n)
    w = tf.transpose(w, list(range(2, rank)) + [1, 0])  # [k..., C_out / group, C_in]
    w = _dilate_kernel(w, dilations, n)
    eff = [(kernel[i] - 1) * dilations[i] + 1 for i in range(n)]
    sizes = _dims(x)[1:-1]
    full = [strides[i] * (sizes[i] - 1) + out_pad[i] + eff[i] for i in range(n)]
    auto = ctx.get("auto_pad", "NOTSET")
    out_shape = ctx.get("output_shape")
    out_shape = None if out_shape is None else list(out_shape)[-n:]
    if "pads" not in ctx.attrs and auto in ("SAME_UPPER", "SAME_LOWER"):
        target = out_shape or [sizes[i] * strides[i] for i in range(n)]
        total = [full[i] - target[i] for i in range(n)]
        if auto == "SAME_UPPER":
            pads = [(t // 2, t - t // 2) for t in total]
        else:
            pads = [(t - t // 2, t // 2) for t in total]
        out_shape = None
    else:
        p = list(ctx.get("pads") or [0] * (2 * n))
        pads = [(p[i], p[i + n]) for i in range(n)]
    batch = tf.shape(x)[0]
    cout_g = w.shape[-2]

    def deconv(xx, ww):
        # Extra output_padding rows lie beyond the last input tap; compute without them, pad after.
        shape = [batch] + [full[i] - out_pad[i] for i in range(n)] + [cout_g]
        y = tf.nn.conv_transpose(xx, ww, tf.stack(shape) if not all(isinstance(s, int) for s in shape)
                                 else shape, strides=strides, padding="VALID")
        if any(out_pad):
            y = tf.pad(y, [[0, 0]] + [[0, p] for p in out_pad] + [[0, 0]])
        return y

    if group == 1:
        y = deconv(x, w)
    else:
        y = tf.concat([deconv(a, c) for a, c in zip(tf.split(x, group, axis=-1), tf.split(w, group, axis=-1))],
                      axis=-1)
    if not _all_zero(pads):
        y = y[(slice(None),) + tuple(slice(bb, full[i] - e) for i, (bb, e) in enumerate(pads))]
    if out_shape is not None:
        # The output_shape attribute without auto_pad: the result is cropped or zero-extended at the end.
        have = [full[i] - pads[i][0] - pads[i][1] for i in range(n)]
        y = y[(slice(None),) + tuple(slice(0, o) for o in out_shape)]
        y = tf.pad(y, [[0, 0]] + [[0, _max0(o - h)] for o, h in zip(out_shape, have)] + [[0, 0]])
    if b is not None:
        y = tf.nn.bias_add(y, b)
    return y


def _pool_geometry(ctx, x):
    rank = _rank(ctx, x)
    n = rank - 2
    kernel = list(ctx.get("kernel_shape"))
    strides, dilations = _spatial_attrs(ctx, n)
    sizes = _dims(x)[1:-1]
    pads, auto = _explicit_pads(ctx, sizes, kernel, strides, dilations)
    extra = [0] * n
    if ctx.get("ceil_mode", 0) and auto not in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        for i in range(n):
            eff = (kernel[i] - 1) * dilations[i] + 1
            span = sizes[i] + pads[i][0] + pads[i][1] - eff
            out = _cdiv(span, strides[i]) + 1
            if isinstance(out, int):
                if (out - 1) * strides[i] >= sizes[i] + pads[i][0]:
                    out -= 1
            else:
                out = tf.where((out - 1) * strides[i] >= sizes[i] + pads[i][0], out - 1, out)
            extra[i] = _max0((out - 1) * strides[i] + eff - sizes[i] - pads[i][0] - pads[i][1])
    return n, kernel, strides, dilations, pads, extra


def _run_pool(x, kind, kernel, strides, dilations, n):
    if all(d == 1 for d in dilations):
        f = tf.nn.max_pool if kind == "MAX" else tf.nn.avg_pool
        return f(x, kernel, strides, "VALID")
    y = tf.nn.pool(x, kernel, kind, strides=[1] * n, padding="VALID", dilations=dilations)
    if any(s > 1 for s in strides):
        y = y[(slice(None),) + tuple(slice(None, None, s) for s in strides)]
    return y


@op("MaxPool", kind=SPATIAL)
def _max_pool(ctx, x):
    n, kernel, strides, dilations, pads, extra = _pool_geometry(ctx, x)
    total = [(b, e + ex) for (b, e), ex in zip(pads, extra)]
    padded = _pad_spatial(x, total, _lowest(x.dtype))
    if x.dtype == tf.float64 and n == 3:
        y = tf.cast(_run_pool(tf.cast(padded, tf.float32), "MAX", kernel, strides, dilations, n), x.dtype)
    else:
        y = _run_pool(padded, "MAX", kernel, strides, dilations, n)
    if ctx.n_outputs < 2:
        return y
    if n != 2 or any(d != 1 for d in dilations):
        ctx.fail("the Indices output needs a 2-D pooling without dilations")
    _, idx = tf.nn.max_pool_with_argmax(padded, kernel, strides, "VALID", output_dtype=tf.int64)
    shp = tf.shape(padded, out_type=tf.int64)
    wp, c = shp[2], shp[3]
    h, w = tf.shape(x, out_type=tf.int64)[1], tf.shape(x, out_type=tf.int64)[2]
    ch = idx % c
    pix = idx // c
    yy, xx = pix // wp - pads[0][0], pix % wp - pads[1][0]
    nn = tf.range(tf.shape(x, out_type=tf.int64)[0])[:, None, None, None]
    if ctx.get("storage_order", 0):
        flat = ((nn * c + ch) * w + xx) * h + yy
    else:
        flat = ((nn * c + ch) * h + yy) * w + xx
    return y, flat


@op("AveragePool", kind=SPATIAL)
def _avg_pool(ctx, x):
    n, kernel, strides, dilations, pads, extra = _pool_geometry(ctx, x)
    if _all_zero(pads) and all(isinstance(e, int) and e == 0 for e in extra):
        return _run_pool(x, "AVG", kernel, strides, dilations, n)
    total = [(b, e + ex) for (b, e), ex in zip(pads, extra)]
    include = ctx.get("count_include_pad", 0)
    mask = tf.ones(tf.concat([[1], tf.shape(x)[1:-1], [1]], 0), x.dtype)
    if include:
        mask = _pad_spatial(mask, pads, 1)
        mask = _pad_spatial(mask, [(0, e) for e in extra], 0)
    else:
        mask = _pad_spatial(mask, total, 0)
    s = _run_pool(_pad_spatial(x, total, 0), "AVG", kernel, strides, dilations, n)
    cnt = _run_pool(mask, "AVG", kernel, strides, dilations, n)
    return s / cnt


@op("GlobalAveragePool", kind=SPATIAL)
def _global_avg_pool(ctx, x):
    return tf.reduce_mean(x, axis=list(range(1, _rank(ctx, x) - 1)), keepdims=True)


@op("GlobalMaxPool", kind=SPATIAL)
def _global_max_pool(ctx, x):
    return tf.reduce_max(x, axis=list(range(1, _rank(ctx, x) - 1)), keepdims=True)


@op("BatchNormalization", kind=SPATIAL)
def _batch_norm(ctx, x, scale, bias, mean, var):
    eps = ctx.get("epsilon", 1e-5)
    training = ctx.get("training_mode", 0) if ctx.opset >= 14 else ctx.n_outputs > 1
    if training:
        axes = list(range(_rank(ctx, x) - 1))
        m, v = tf.nn.moments(x, axes)
        mom = ctx.get("momentum", 0.9)
        y = (x - m) * (scale * tf.math.rsqrt(v + eps)) + bias
        return y, mean * mom + m * (1 - mom), var * mom + v * (1 - mom)
    mul = scale * tf.math.rsqrt(var + tf.cast(eps, var.dtype))
    return x * mul + (bias - mean * mul)


@training_op("BatchNormalization", kind=SPATIAL, outputs=3)
def _batch_norm_training(ctx, x, scale, bias, mean, var):
    """Batch statistics (biased variance); returns y, the new running mean and variance
    (``running * momentum + batch * (1 - momentum)``, ONNX's rule), the batch mean and variance."""
    eps = float(ctx.get("epsilon", 1e-5))
    mom = ctx.get("momentum", 0.9)
    rank = _rank(ctx, x)
    # TensorFlow's fused kernel (about 25% faster for ResNet-20 training on the CPU) takes
    # channels-last float32 images; cuDNN refuses epsilon below 1e-5, so on a GPU small epsilons
    # (ONNX's float32 1e-5 is 9.99999975e-6) take the composite path.
    if (rank == 4 and x.dtype == tf.float32 and scale.dtype == tf.float32 and bias.dtype == tf.float32
            and (not ctx.gpu or eps >= 1.001e-5)):
        empty = tf.zeros([0], tf.float32)
        y, m, v, _, _, _ = tf.raw_ops.FusedBatchNormV3(
            x=x, scale=scale, offset=bias, mean=empty, variance=empty, epsilon=eps, data_format="NHWC",
            is_training=True)
        n = tf.cast(tf.reduce_prod(tf.shape(x)[:-1]), tf.float32)
        v = v * ((n - 1) / tf.maximum(n, 1))  # the kernel returns the unbiased variance
    else:
        axes = list(range(rank - 1))
        m, v = tf.nn.moments(x, axes)
        y = (x - m) * (scale * tf.math.rsqrt(v + tf.cast(eps, v.dtype))) + bias
    sm, sv = tf.stop_gradient(m), tf.stop_gradient(v)
    new_mean = mean * mom + tf.cast(sm, mean.dtype) * (1 - mom)
    new_var = var * mom + tf.cast(sv, var.dtype) * (1 - mom)
    return y, new_mean, new_var, sm, sv


@training_op("Dropout", kind=UNARY, outputs=1)
def _dropout_training(ctx, x, ratio=None, training_mode=None):
    """Inverted dropout: ``y = x * mask / (1 - ratio)`` with ``mask = U[0, 1) >= ratio``.

    The mask is drawn from the executor's seeded generator (the node's ``seed`` attribute is not
    used). The executor's mode decides: a ``training_mode`` input is ignored.
    """
    if ctx.opset < 12 or ratio is None:
        ratio = ctx.get("ratio", 0.5)
    static = _static(ratio) if not isinstance(ratio, float) else ratio
    if static is not None and float(static) == 0.0:
        return x, tf.ones_like(x, dtype=tf.bool)
    if ctx.rng is None:
        ctx.fail("training-mode Dropout needs a random generator")
    ratio = tf.cast(ratio, tf.float32)
    mask = ctx.rng.uniform(tf.shape(x), dtype=tf.float32) >= ratio
    scale = tf.where(ratio < 1, 1 / (1 - ratio), tf.zeros([], tf.float32))
    y = tf.where(mask, x * tf.cast(scale, x.dtype), tf.zeros([], x.dtype))
    return y, mask


@op("InstanceNormalization", kind=SPATIAL)
def _instance_norm(ctx, x, scale, bias):
    axes = list(range(1, _rank(ctx, x) - 1))
    m, v = tf.nn.moments(x, axes, keepdims=True)
    return (x - m) * tf.math.rsqrt(v + ctx.get("epsilon", 1e-5)) * scale + bias


@op("LRN", kind=SPATIAL)
def _lrn(ctx, x):
    size = ctx.get("size")
    alpha, beta, bias = ctx.get("alpha", 1e-4), ctx.get("beta", 0.75), ctx.get("bias", 1.0)
    if size % 2 == 1 and _rank(ctx, x) == 4 and x.dtype == tf.float32:
        return tf.nn.local_response_normalization(x, (size - 1) // 2, bias, alpha / size, beta)
    sq = tf.square(x)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    rank = _rank(ctx, x)
    padded = tf.pad(sq, [[0, 0]] * (rank - 1) + [[lo, hi]])
    c = tf.shape(x)[-1]
    total = tf.add_n([padded[..., i:i + c] for i in range(size)])
    return x / tf.pow(bias + alpha / size * total, beta)


@op("LayerNormalization")
def _layer_norm(ctx, x, scale, bias=None):
    rank = _rank(ctx, x)
    axis = _axis(ctx.get("axis", -1), rank)
    eps = ctx.get("epsilon", 1e-5)
    stash = tf.float32 if ctx.get("stash_type", 1) == 1 else x.dtype
    xs = tf.cast(x, stash)
    axes = list(range(axis, rank))
    m, v = tf.nn.moments(xs, axes, keepdims=True)
    inv = tf.math.rsqrt(v + eps)
    y = tf.cast((xs - m) * inv, x.dtype) * scale
    if bias is not None:
        y = y + bias
    return y, m, inv


# ------------------------------------------------------------------------------ losses
def _nll(ctx, logp, target, weight):
    """Per-element loss, weights, for log-probabilities [N, d..., C] and targets [N, d...]."""
    ignore = ctx.get("ignore_index")
    target = tf.cast(target, tf.int64)
    if ignore is not None:
        valid = tf.not_equal(target, ignore)
        safe = tf.where(valid, target, tf.zeros_like(target))
    else:
        valid, safe = None, target
    picked = -tf.gather(logp, safe, batch_dims=target.shape.rank)
    w = None
    if weight is not None:
        w = tf.gather(weight, safe)
    if valid is not None:
        vw = tf.cast(valid, logp.dtype)
        w = vw if w is None else w * vw
    loss = picked if w is None else picked * w
    reduction = ctx.get("reduction", "mean")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return tf.reduce_sum(loss)
    if w is None:
        return tf.reduce_mean(loss)
    return tf.reduce_sum(loss) / tf.reduce_sum(w)


@op("NegativeLogLikelihoodLoss", kind=VALUE)
def _nll_loss(ctx, x, target, weight=None):
    logp = x.channels_last  # [N, d..., C]
    return Value(_nll(ctx, logp, target.plain, None if weight is None else weight.plain))


@op("SoftmaxCrossEntropyLoss", kind=VALUE)
def _sce_loss(ctx, x, target, weight=None):
    scores = x.channels_last  # [N, d..., C]
    logp = tf.nn.log_softmax(scores, axis=-1)  # pruned from the traced graph when unused
    rank = x.rank
    reduction = ctx.get("reduction", "mean")
    if weight is None and ctx.get("ignore_index") is None and rank == 2 and reduction in ("mean", "sum"):
        # The common case gets TF's fused kernel (one op forward, one backward).
        per_sample = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(target.plain, tf.int64),
                                                                    logits=scores)
        loss = Value(tf.reduce_mean(per_sample) if reduction == "mean" else tf.reduce_sum(per_sample))
    else:
        loss = Value(_nll(ctx, logp, target.plain, None if weight is None else weight.plain))
    return [loss, Value(logp, channels_last(rank) if rank >= 3 else None)]


# -------------------------------------------------------------------------- recurrent
def _activation(name, alpha=None, beta=None):
    name = name.lower()
    if name == "sigmoid":
        return tf.sigmoid
    if name == "tanh":
        return tf.tanh
    if name == "relu":
        return tf.nn.relu
    if name == "hardsigmoid":
        a, b = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
        return lambda t: tf.clip_by_value(a * t + b, 0, 1)
    if name == "affine":
        return lambda t: (1.0 if alpha is None else alpha) * t + (0.0 if beta is None else beta)
    if name == "leakyrelu":
        return lambda t: tf.nn.leaky_relu(t, 0.01 if alpha is None else alpha)
    if name == "thresholdedrelu":
        return lambda t: tf.where(t > (1.0 if alpha is None else alpha), t, tf.zeros_like(t))
    if name == "scaledtanh":
        return lambda t: (1.0 if alpha is None else alpha) * tf.tanh((1.0 if beta is None else beta) * t)
    if name == "elu":
        return lambda t: tf.where(t < 0, (1.0 if alpha is None else alpha) * (tf.exp(t) - 1), t)
    if name == "softsign":
        return tf.math.softsign
    if name == "softplus":
        return tf.math.softplus
    raise UnsupportedOperatorError(f"Unknown RNN activation {name!r}")


def _rnn_activations(ctx, defaults):
    names = ctx.get("activations")
    dirs = 2 if ctx.get("direction", "forward") == "bidirectional" else 1
    names = list(names) if names else defaults * dirs
    alphas = list(ctx.get("activation_alpha") or [])
    betas = list(ctx.get("activation_beta") or [])
    acts = []
    for i, nm in enumerate(names):
        acts.append(_activation(nm, alphas[i] if i < len(alphas) else None, betas[i] if i < len(betas) else None))
    k = len(defaults)
    return [acts[d * k:(d + 1) * k] for d in range(dirs)]


def _run_rnn(ctx, x, seq_lens, init_states, step, n_states):
    """Run ``step`` over time for every direction; returns Y [T, D, N, H] and final states."""
    direction = ctx.get("direction", "forward")
    dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    t_len = tf.shape(x)[0]
    ys, finals = [], [[] for _ in range(n_states)]
    for d, dname in enumerate(dirs):
        states0 = tuple(s[d] for s in init_states)
        if seq_lens is not None:
            lens = tf.cast(seq_lens, tf.int32)
            tidx = tf.range(t_len)
            if dname == "reverse":
                xs = tf.reverse_sequence(x, lens, seq_axis=0, batch_axis=1)
            else:
                xs = x
            mask = tf.cast(tidx[:, None] < lens[None, :], x.dtype)[:, :, None]
        else:
            xs = tf.reverse(x, [0]) if dname == "reverse" else x
            mask = None

        def body(carry, inp, d=d, mask=mask):
            xt, mt = inp
            new = step(d, xt, carry)
            if mt is not None:
                new = tuple(mt * a + (1 - mt) * b for a, b in zip(new, carry))
                return new
            return new

        if mask is None:
            seq = tf.scan(lambda c, xt, d=d: step(d, xt, c), xs, initializer=states0)
            h_seq = seq[0]
        else:
            seq = tf.scan(lambda c, inp: body(c, inp), (xs, mask), initializer=states0)
            h_seq = seq[0] * mask
        finals_d = [s[-1] for s in seq]
        if dname == "reverse":
            h_seq = tf.reverse_sequence(h_seq, tf.cast(seq_lens, tf.int32), seq_axis=0, batch_axis=1) \
                if seq_lens is not None else tf.reverse(h_seq, [0])
        ys.append(h_seq)
        for i in range(n_states):
            finals[i].append(finals_d[i])
    y = tf.stack(ys, axis=1)
    return y, [tf.stack(f, axis=0) for f in finals]


def _rnn_prepare(ctx, x, w, initial, n_states, hidden):
    layout = ctx.get("layout", 0)
    if layout:
        x = tf.transpose(x, [1, 0, 2])
        initial = [None if s is None else tf.transpose(s, [1, 0, 2]) for s in initial]
    dirs = w.shape[0]
    batch = tf.shape(x)[1]
    states = [tf.zeros(tf.stack([dirs, batch, hidden]), x.dtype) if s is None else s for s in initial]
    return x, states, layout


def _rnn_finish(ctx, y, finals, layout):
    if layout:
        y = tf.transpose(y, [2, 0, 1, 3])
        finals = [tf.transpose(f, [1, 0, 2]) for f in finals]
    return [y] + finals


@op("LSTM")
def _lstm(ctx, x, w, r, b=None, seq_lens=None, h0=None, c0=None, p=None):
    hidden = ctx.get("hidden_size") or r.shape[-1]
    clip = ctx.get("clip")
    couple = ctx.get("input_forget", 0)
    acts = _rnn_activations(ctx, ["Sigmoid", "Tanh", "Tanh"])
    x, (h0, c0), layout = _rnn_prepare(ctx, x, w, [h0, c0], 2, hidden)
    bias = None if b is None else b[:, :4 * hidden] + b[:, 4 * hidden:]

    def step(d, xt, carry):
        h, c = carry
        gates = tf.matmul(xt, w[d], transpose_b=True) + tf.matmul(h, r[d], transpose_b=True)
        if bias is not None:
            gates = gates + bias[d]
        gi, go, gf, gc = tf.split(gates, 4, axis=-1)
        f, g, hact = acts[d]
        if p is not None:
            pi, po, pf = tf.split(p[d], 3)
            gi = gi + pi * c
            gf = gf + pf * c
        if clip is not None:
            gi, gf, gc = (tf.clip_by_value(t, -clip, clip) for t in (gi, gf, gc))
        i_ = f(gi)
        f_ = 1 - i_ if couple else f(gf)
        c_new = f_ * c + i_ * g(gc)
        if p is not None:
            go = go + po * c_new
        if clip is not None:
            go = tf.clip_by_value(go, -clip, clip)
        h_new = f(go) * hact(c_new)
        return h_new, c_new

    y, finals = _run_rnn(ctx, x, seq_lens, [h0, c0], step, 2)
    return _rnn_finish(ctx, y, finals, layout)


@op("GRU")
def _gru(ctx, x, w, r, b=None, seq_lens=None, h0=None):
    hidden = ctx.get("hidden_size") or r.shape[-1]
    clip = ctx.get("clip")
    lbr = ctx.get("linear_before_reset", 0)
    acts = _rnn_activations(ctx, ["Sigmoid", "Tanh"])
    x, (h0,), layout = _rnn_prepare(ctx, x, w, [h0], 1, hidden)
    if b is None:
        b = tf.zeros(tf.stack([tf.shape(w)[0], 6 * hidden]), x.dtype)

    def step(d, xt, carry):
        (h,) = carry
        f, g = acts[d]
        wb, rb = b[d, :3 * hidden], b[d, 3 * hidden:]
        xw = tf.matmul(xt, w[d], transpose_b=True) + wb
        xz, xr, xh = tf.split(xw, 3, axis=-1)
        rz, rr, rh = tf.split(r[d], 3, axis=0)
        bz, br, bh = tf.split(rb, 3)
        gz = xz + tf.matmul(h, rz, transpose_b=True) + bz
        gr = xr + tf.matmul(h, rr, transpose_b=True) + br
        if clip is not None:
            gz, gr = tf.clip_by_value(gz, -clip, clip), tf.clip_by_value(gr, -clip, clip)
        z, rt = f(gz), f(gr)
        if lbr:
            gh = xh + rt * (tf.matmul(h, rh, transpose_b=True) + bh)
        else:
            gh = xh + tf.matmul(rt * h, rh, transpose_b=True) + bh
        if clip is not None:
            gh = tf.clip_by_value(gh, -clip, clip)
        ht = g(gh)
        return ((1 - z) * ht + z * h,)

    y, finals = _run_rnn(ctx, x, seq_lens, [h0], step, 1)
    return _rnn_finish(ctx, y, finals, layout)


SUPPORTED_OPS: frozenset = frozenset(_CONVERTERS)
