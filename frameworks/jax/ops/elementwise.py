"""ONNX elementwise operators as JAX functions: arithmetic, comparisons, logic, activations, casts,
softmax-like ops and ``Where``.

Attribute constants (``alpha``, ``beta``...) are Python floats, which JAX treats as weakly typed:
they never widen a float32 input, even with x64 enabled.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.scipy.special import erf

from deep500lite.frameworks.jax.dtypes import SATURATING_FLOAT8, onnx_to_jax_dtype
from deep500lite.frameworks.jax.ops._common import registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict[str, Callable] = {}
_op = registrar(CONVERTERS)


def _unary(name: str, fn: Callable) -> None:
    CONVERTERS[name] = lambda ctx, x: fn(x)


for _name, _fn in {
    "Abs": jnp.abs, "Neg": jnp.negative, "Exp": jnp.exp, "Log": jnp.log, "Sqrt": jnp.sqrt,
    "Ceil": jnp.ceil, "Floor": jnp.floor, "Round": jnp.round, "Sign": jnp.sign,
    "Sin": jnp.sin, "Cos": jnp.cos, "Tan": jnp.tan, "Asin": jnp.arcsin, "Acos": jnp.arccos,
    "Atan": jnp.arctan, "Sinh": jnp.sinh, "Cosh": jnp.cosh, "Tanh": jnp.tanh, "Asinh": jnp.arcsinh,
    "Acosh": jnp.arccosh, "Atanh": jnp.arctanh, "Erf": erf, "Sigmoid": jax.nn.sigmoid,
    "Relu": jax.nn.relu, "Softplus": jax.nn.softplus, "Not": jnp.logical_not, "IsNaN": jnp.isnan,
    "BitwiseNot": jnp.bitwise_not, "Reciprocal": lambda x: 1 / x,
    "Softsign": lambda x: x / (1 + jnp.abs(x)),
    "Mish": lambda x: x * jnp.tanh(jax.nn.softplus(x)),
    "HardSwish": lambda x: x * jnp.clip(x / 6 + 0.5, 0, 1),
}.items():
    _unary(_name, _fn)

for _name, _fn in {
    "Add": jnp.add, "Sub": jnp.subtract, "Mul": jnp.multiply, "Equal": jnp.equal, "Greater": jnp.greater,
    "GreaterOrEqual": jnp.greater_equal, "Less": jnp.less, "LessOrEqual": jnp.less_equal,
    "And": jnp.logical_and, "Or": jnp.logical_or, "Xor": jnp.logical_xor, "BitwiseAnd": jnp.bitwise_and,
    "BitwiseOr": jnp.bitwise_or, "BitwiseXor": jnp.bitwise_xor,
}.items():
    CONVERTERS[_name] = (lambda f: lambda ctx, a, b: f(a, b))(_fn)


def _is_int(x) -> bool:
    return jnp.issubdtype(jnp.result_type(x), jnp.integer)


@_op("Div")
def _div(ctx, a, b):
    if _is_int(a) and _is_int(b):
        # ONNX divides integers like C: the quotient is truncated toward zero.
        a, b = jnp.broadcast_arrays(jnp.asarray(a), jnp.asarray(b))
        return jax.lax.div(a, b.astype(a.dtype))
    return jnp.divide(a, b)


@_op("Mod")
def _mod(ctx, a, b):
    return jnp.fmod(a, b) if ctx.attr("fmod", 0) else jnp.mod(a, b)


@_op("Pow")
def _pow(ctx, a, b):
    a, b = jnp.asarray(a), jnp.asarray(b)
    if _is_int(a) and not _is_int(b):
        return jnp.power(a.astype(b.dtype), b).astype(a.dtype)
    return jnp.power(a, b.astype(a.dtype))


@_op("BitShift")
def _bitshift(ctx, a, b):
    b = jnp.asarray(b).astype(jnp.result_type(a))
    return jnp.left_shift(a, b) if ctx.attr("direction") == "LEFT" else jnp.right_shift(a, b)


@_op("IsInf")
def _isinf(ctx, x):
    pos, neg = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    return jnp.logical_or(jnp.logical_and(jnp.isposinf(x), bool(pos)), jnp.logical_and(jnp.isneginf(x), bool(neg)))


def _variadic(fn):
    def convert(ctx, *xs):
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return jnp.asarray(out) if len(xs) == 1 else out
    return convert


CONVERTERS["Sum"] = _variadic(jnp.add)
CONVERTERS["Max"] = _variadic(jnp.maximum)
CONVERTERS["Min"] = _variadic(jnp.minimum)


@_op("Mean")
def _mean(ctx, *xs):
    return _variadic(jnp.add)(ctx, *xs) / len(xs)


@_op("Identity")
def _identity(ctx, x):
    return x


def _cast_to(ctx, x, dtype):
    x = jnp.asarray(x)
    dtype = np.dtype(dtype)
    if dtype in SATURATING_FLOAT8 and ctx.attr("saturate", 1) and jnp.issubdtype(x.dtype, jnp.floating):
        # ONNX saturates out-of-range values (infinities included) to the largest finite float8.
        info = ml_dtypes.finfo(dtype)
        x = jnp.clip(x, float(info.min), float(info.max))
    return x.astype(dtype)


@_op("Cast")
def _cast(ctx, x):
    return _cast_to(ctx, x, onnx_to_jax_dtype(ctx.attr("to")))


@_op("CastLike")
def _cast_like(ctx, x, like):
    return _cast_to(ctx, x, jnp.result_type(like))


@_op("Clip")
def _clip(ctx, x, lo=None, hi=None):
    x = jnp.asarray(x)
    if ctx.opset < 11:
        lo, hi = ctx.attr("min", None), ctx.attr("max", None)
    if lo is not None:
        x = jnp.maximum(x, jnp.asarray(lo).astype(x.dtype))
    if hi is not None:
        x = jnp.minimum(x, jnp.asarray(hi).astype(x.dtype))
    return x


@_op("Where")
def _where(ctx, cond, a, b):
    return jnp.where(cond, a, b)


@_op("Elu")
def _elu(ctx, x):
    alpha = ctx.attr("alpha", 1.0)
    return jnp.where(x > 0, x, alpha * jnp.expm1(jnp.minimum(x, 0)))


@_op("Celu")
def _celu(ctx, x):
    alpha = ctx.attr("alpha", 1.0)
    return jnp.maximum(x, 0) + jnp.minimum(0, alpha * jnp.expm1(x / alpha))


@_op("Selu")
def _selu(ctx, x):
    alpha = ctx.attr("alpha", 1.67326319217681884765625)
    gamma = ctx.attr("gamma", 1.05070102214813232421875)
    return gamma * jnp.where(x > 0, x, alpha * jnp.expm1(jnp.minimum(x, 0)))


@_op("LeakyRelu")
def _leaky_relu(ctx, x):
    alpha = ctx.attr("alpha", 0.01)
    return jnp.where(x >= 0, x, alpha * x)


@_op("ThresholdedRelu")
def _thresholded_relu(ctx, x):
    alpha = ctx.attr("alpha", 1.0)
    return jnp.where(x > alpha, x, jnp.zeros_like(x))


@_op("HardSigmoid")
def _hard_sigmoid(ctx, x):
    return jnp.clip(ctx.attr("alpha", 0.2) * x + ctx.attr("beta", 0.5), 0, 1)


@_op("PRelu")
def _prelu(ctx, x, slope):
    return jnp.where(x < 0, jnp.asarray(slope).astype(jnp.result_type(x)) * x, x)


@_op("Shrink")
def _shrink(ctx, x):
    lambd, bias = ctx.attr("lambd", 0.5), ctx.attr("bias", 0.0)
    x = jnp.asarray(x)
    out = jnp.where(x < -lambd, x + bias, jnp.where(x > lambd, x - bias, 0))
    return out.astype(x.dtype)


@_op("Gelu")
def _gelu(ctx, x):
    return jax.nn.gelu(x, approximate=ctx.attr("approximate", "none") == "tanh")


def _coerced(ctx, x, fn):
    """Apply ``fn(x, axis)`` with the opset's axis rule (before 13: flatten to 2D at ``axis``)."""
    x = jnp.asarray(x)
    if ctx.opset >= 13:
        return fn(x, ctx.attr("axis", -1))
    axis = ctx.attr("axis", 1) % max(x.ndim, 1)
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    return fn(x.reshape(rows, -1), 1).reshape(x.shape)


@_op("Softmax")
def _softmax(ctx, x):
    return _coerced(ctx, x, lambda v, axis: jax.nn.softmax(v, axis=axis))


@_op("LogSoftmax")
def _log_softmax(ctx, x):
    return _coerced(ctx, x, lambda v, axis: jax.nn.log_softmax(v, axis=axis))


def _hardmax(v, axis):
    idx = jnp.argmax(v, axis=axis, keepdims=True)
    return (jnp.arange(v.shape[axis]).reshape([-1 if d == axis % v.ndim else 1 for d in range(v.ndim)])
            == idx).astype(v.dtype)


@_op("Hardmax")
def _hardmax_op(ctx, x):
    return _coerced(ctx, x, _hardmax)
