"""Elementwise operators as torch functions: unary and binary math, comparisons and logic,
activations, Clip, Where, the variadic Max/Min/Sum/Mean, the softmax family (Softmax,
LogSoftmax, Hardmax) and the casts (Cast, CastLike).

Converters follow the contract of :mod:`deep500lite.frameworks.torch.ops`.
"""

from __future__ import annotations

import math
from typing import Callable

import onnx
import torch
import torch.nn.functional as F

from deep500lite.frameworks.torch.dtypes import _FLOAT8, ONNX_TO_TORCH_DTYPE
from deep500lite.frameworks.torch.ops._common import _wide_unsigned, registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict[str, Callable] = {}
"""ONNX op type -> converter (``NodeSpec -> function of tensors``) of this family."""
_op = registrar(CONVERTERS)


_UNARY = {
    "Abs": torch.abs, "Neg": torch.neg, "Sqrt": torch.sqrt, "Exp": torch.exp, "Log": torch.log,
    "Erf": torch.special.erf, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh, "Relu": torch.relu,
    "Floor": torch.floor, "Ceil": torch.ceil, "Reciprocal": torch.reciprocal, "Sin": torch.sin,
    "Cos": torch.cos, "Tan": torch.tan, "Asin": torch.asin, "Acos": torch.acos, "Atan": torch.atan,
    "Sinh": torch.sinh, "Cosh": torch.cosh, "Asinh": torch.asinh, "Acosh": torch.acosh,
    "Atanh": torch.atanh, "Sign": torch.sign, "Not": torch.logical_not, "Round": torch.round,
    "IsNaN": torch.isnan, "BitwiseNot": torch.bitwise_not,
    "Softsign": lambda x: x / (1 + x.abs()),
    "Mish": lambda x: x * torch.tanh(F.softplus(x)),
}


@_op(*_UNARY)
def _unary(spec):
    return _wide_unsigned(_UNARY[spec.op])


@_op("Identity")
def _identity(spec):
    return lambda x: x


def _int_div(a, b):
    if a.is_floating_point() or a.is_complex():
        return a / b
    return torch.div(a, b, rounding_mode="trunc")


def _pow(a, b):
    r = torch.pow(a, b)
    return r if r.dtype == a.dtype else r.to(a.dtype)


_BINARY = {
    "Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": _int_div, "Pow": _pow,
    "Equal": torch.eq, "Less": torch.lt, "Greater": torch.gt, "LessOrEqual": torch.le,
    "GreaterOrEqual": torch.ge, "And": torch.logical_and, "Or": torch.logical_or,
    "Xor": torch.logical_xor, "BitwiseAnd": torch.bitwise_and, "BitwiseOr": torch.bitwise_or,
    "BitwiseXor": torch.bitwise_xor,
}


@_op(*_BINARY)
def _binary(spec):
    return _wide_unsigned(_BINARY[spec.op])


@_op("Mod")
def _mod(spec):
    return _wide_unsigned(torch.fmod if spec.attr("fmod", 0) else torch.remainder)


@_op("Max", "Min", "Sum", "Mean")
def _variadic(spec):
    pair = {"Max": torch.maximum, "Min": torch.minimum, "Sum": torch.add, "Mean": torch.add}[spec.op]
    mean = spec.op == "Mean"

    def run(*xs):
        r = xs[0]
        for x in xs[1:]:
            r = pair(r, x)
        if len(xs) == 1:
            r = r.clone()
        return r / len(xs) if mean else r
    return _wide_unsigned(run)


@_op("Where")
def _where(spec):
    return _wide_unsigned(lambda c, x, y: torch.where(c, x, y))


@_op("Clip")
def _clip(spec):
    if spec.opset < 11:
        lo, hi = spec.attr("min", -math.inf), spec.attr("max", math.inf)
        return lambda x: torch.clamp(x, lo, hi)

    def run(x, lo=None, hi=None):
        if lo is not None:
            x = torch.maximum(x, lo.to(x.dtype))
        if hi is not None:
            x = torch.minimum(x, hi.to(x.dtype))
        return x
    return _wide_unsigned(run)


@_op("LeakyRelu")
def _leaky_relu(spec):
    alpha = spec.attr("alpha", 0.01)
    return lambda x: F.leaky_relu(x, alpha)


@_op("PRelu")
def _prelu(spec):
    return lambda x, slope: torch.where(x < 0, x * slope, x)


@_op("ThresholdedRelu")
def _thresholded_relu(spec):
    alpha = spec.attr("alpha", 1.0)
    return lambda x: torch.where(x > alpha, x, torch.zeros((), dtype=x.dtype, device=x.device))


@_op("HardSigmoid")
def _hard_sigmoid(spec):
    alpha, beta = spec.attr("alpha", 0.2), spec.attr("beta", 0.5)
    return lambda x: torch.clamp(x * alpha + beta, 0, 1)


@_op("HardSwish")
def _hard_swish(spec):
    return lambda x: x * torch.clamp(x / 6 + 0.5, 0, 1)


@_op("Elu")
def _elu(spec):
    alpha = spec.attr("alpha", 1.0)
    return lambda x: F.elu(x, alpha)


@_op("Celu")
def _celu(spec):
    alpha = spec.attr("alpha", 1.0)
    return lambda x: F.celu(x, alpha)


@_op("Selu")
def _selu(spec):
    alpha = spec.attr("alpha", 1.67326319217681884765625)
    gamma = spec.attr("gamma", 1.05070102214813232421875)
    return lambda x: gamma * torch.where(x > 0, x, alpha * (torch.exp(x) - 1))


@_op("Softplus")
def _softplus(spec):
    return lambda x: torch.where(x > 0, x + torch.log1p(torch.exp(-x)), torch.log1p(torch.exp(x)))


@_op("Gelu")
def _gelu(spec):
    approximate = spec.attr("approximate", "none")
    return lambda x: F.gelu(x, approximate=approximate)


@_op("Shrink")
def _shrink(spec):
    bias, lambd = spec.attr("bias", 0.0), spec.attr("lambd", 0.5)

    def run(x):
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        return torch.where(x < -lambd, x + bias, torch.where(x > lambd, x - bias, zero)).to(x.dtype)
    return run


def _softmax_like(spec, fn):
    if spec.opset >= 13:
        axis = spec.attr("axis", -1)
        return lambda x: fn(x, axis)
    axis = spec.attr("axis", 1)

    def run(x):
        a = axis % x.dim() if x.dim() else 0
        return fn(x.reshape(math.prod(x.shape[:a]), -1), 1).reshape(x.shape)
    return run


@_op("Softmax")
def _softmax(spec):
    return _softmax_like(spec, lambda x, a: torch.softmax(x, a))


@_op("LogSoftmax")
def _log_softmax(spec):
    return _softmax_like(spec, lambda x, a: torch.log_softmax(x, a))


@_op("Hardmax")
def _hardmax(spec):
    def hardmax(x, a):
        return F.one_hot(torch.argmax(x, a), x.shape[a]).movedim(-1, a).to(x.dtype)
    return _softmax_like(spec, hardmax)


@_op("Cast")
def _cast(spec):
    to = spec.attr("to")
    if to not in ONNX_TO_TORCH_DTYPE:
        raise spec.unsupported(f"to={onnx.TensorProto.DataType.Name(to)}")
    dtype = ONNX_TO_TORCH_DTYPE[to]
    saturate = spec.attr("saturate", 1)
    return lambda x: _cast_to(x, dtype, saturate)


def _cast_to(x, dtype, saturate=1):
    if dtype not in _FLOAT8 or not x.is_floating_point():
        return x.to(dtype)
    big = torch.finfo(dtype).max
    if saturate:
        return x.clamp(-big, big).to(dtype)
    # Without saturation, out-of-range values become inf where the type has one, else NaN.
    y = x.to(dtype)
    over = x.abs() > big
    if over.any():
        inf = math.inf if dtype == torch.float8_e5m2 else math.nan
        y = torch.where(over, torch.copysign(torch.tensor(inf, dtype=x.dtype, device=x.device), x), x).to(dtype)
    return y


@_op("CastLike")
def _cast_like(spec):
    saturate = spec.attr("saturate", 1)
    return lambda x, like: _cast_to(x, like.dtype, saturate)
