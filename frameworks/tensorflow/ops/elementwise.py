"""Elementwise operators as TensorFlow ops: unary and binary math, comparisons and logic,
activations, Clip, Where, the variadic Sum/Max/Min/Mean, the softmax family (Softmax,
LogSoftmax) and the casts (Cast, CastLike).

Converters follow the contract of :mod:`deep500lite.frameworks.tensorflow.ops` (layout kinds:
:mod:`deep500lite.frameworks.tensorflow.ops._common`).
"""

from __future__ import annotations

import tensorflow as tf

from deep500lite.frameworks.tensorflow.dtypes import tf_dtype
from deep500lite.frameworks.tensorflow.layout import Value
from deep500lite.frameworks.tensorflow.ops._common import ELEMENTWISE, UNARY, VALUE, _axis, _rank, registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict = {}
"""ONNX op type -> (layout kind, converter) of this family."""
op = registrar(CONVERTERS)


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


@op("Cast", kind=UNARY)
def _cast(ctx, x):
    return _cast_to(ctx, x, tf_dtype(ctx.get("to")))


def _cast_to(ctx, x, dtype):
    if dtype == tf.string or x.dtype == tf.string:
        if dtype == x.dtype:
            return x
        if x.dtype == tf.string:
            return tf.strings.to_number(x, out_type=dtype)
        ctx.fail("casting to strings is not supported", f"a cast from {x.dtype.name} to string")
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


@tf.custom_gradient
def _fmod(a, b):
    """``tf.truncatemod`` (C's fmod) with the gradient TensorFlow registers none for: ``dy`` for ``a``,
    ``-dy * trunc(a / b)`` for ``b``, each summed over the axes it was broadcast along."""
    def grad(dy):
        return _sum_to(dy, a), _sum_to(-dy * tf.truncatediv(a, b), b)

    return tf.truncatemod(a, b), grad


def _sum_to(g, x):
    """``g`` summed over the axes along which ``x`` was broadcast to ``g``'s shape."""
    axes, _ = tf.raw_ops.BroadcastGradientArgs(s0=tf.shape(x), s1=tf.shape(g))
    return tf.reshape(tf.reduce_sum(g, axes), tf.shape(x))


@op("Mod", kind=ELEMENTWISE)
def _mod(ctx, a, b):
    f = (_fmod if a.dtype.is_floating else tf.truncatemod) if ctx.get("fmod", 0) else tf.math.floormod
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
