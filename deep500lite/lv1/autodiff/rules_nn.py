"""Level 1 autodiff: gradient rules of activations, LayerNormalization, Clip, Where and Split.

The rules register themselves in :data:`~deep500lite.lv1.autodiff.rules.RULES` when this module
is imported (:mod:`.rules` imports it at its end). Every backward graph is written in standard
ONNX operators of opset 13 (Erf, Tanh, Softplus, Where, ...), so every executor runs it, also
for forward operators of later opsets (Gelu: 20, Mish: 18).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper

from deep500lite.lv1.autodiff.builder import RuleContext
from deep500lite.lv1.autodiff.rules import _rule

__all__: list[str] = []


def _mul(c: RuleContext, *xs: str) -> str:
    out = xs[0]
    for x in xs[1:]:
        out = c.b.op("Mul", [out, x])
    return out


@_rule("Abs")
def _abs(c: RuleContext):
    return [c.b.op("Mul", [c.dy(), c.b.op("Sign", [c.node.input[0]])])]


@_rule("Reciprocal")
def _reciprocal(c: RuleContext):
    b, y = c.b, c.node.output[0]
    return [b.op("Neg", [_mul(c, c.dy(), y, y)])]


@_rule("Erf")
def _erf(c: RuleContext):
    b, x = c.b, c.node.input[0]
    e = b.op("Exp", [b.op("Neg", [b.op("Mul", [x, x])])])
    return [_mul(c, c.dy(), e, b.scalar(2.0 / math.sqrt(math.pi), x))]


@_rule("Gelu")
def _gelu(c: RuleContext):
    b, x = c.b, c.node.input[0]
    approx = c.attr("approximate", b"none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    half, one = b.scalar(0.5, x), b.scalar(1.0, x)
    if approx == "tanh":
        # y = x/2 (1 + tanh(u)), u = k (x + 0.044715 x^3):
        # y' = (1 + t)/2 + x/2 (1 - t^2) k (1 + 3 * 0.044715 x^2)
        k, a = math.sqrt(2.0 / math.pi), 0.044715
        x2 = b.op("Mul", [x, x])
        u = _mul(c, b.op("Add", [x, _mul(c, x2, x, b.scalar(a, x))]), b.scalar(k, x))
        t = b.op("Tanh", [u])
        du = _mul(c, b.op("Add", [one, _mul(c, x2, b.scalar(3 * a, x))]), b.scalar(k, x))
        dt = b.op("Sub", [one, b.op("Mul", [t, t])])
        g = b.op("Add", [_mul(c, b.op("Add", [one, t]), half), _mul(c, x, half, dt, du)])
    elif approx == "none":
        # y = x Phi(x): y' = Phi(x) + x phi(x)
        phi_cdf = _mul(c, b.op("Add", [one, b.op("Erf", [b.op("Mul", [x, b.scalar(1 / math.sqrt(2.0), x)])])]), half)
        pdf = _mul(c, b.op("Exp", [_mul(c, x, x, b.scalar(-0.5, x))]), b.scalar(1 / math.sqrt(2 * math.pi), x))
        g = b.op("Add", [phi_cdf, b.op("Mul", [x, pdf])])
    else:
        c.unsupported("approximate must be 'none' or 'tanh'", f"approximate={approx!r}")
    return [b.op("Mul", [c.dy(), g])]


@_rule("Softplus")
def _softplus(c: RuleContext):
    return [c.b.op("Mul", [c.dy(), c.b.op("Sigmoid", [c.node.input[0]])])]


@_rule("Mish")
def _mish(c: RuleContext):
    # y = x tanh(softplus(x)): y' = tanh(sp) + x (1 - tanh(sp)^2) sigmoid(x)
    b, x = c.b, c.node.input[0]
    t = b.op("Tanh", [b.op("Softplus", [x])])
    dt = b.op("Sub", [b.scalar(1.0, x), b.op("Mul", [t, t])])
    g = b.op("Add", [t, _mul(c, x, dt, b.op("Sigmoid", [x]))])
    return [b.op("Mul", [c.dy(), g])]


@_rule("Elu")
def _elu(c: RuleContext):
    b, x, y = c.b, c.node.input[0], c.node.output[0]
    alpha = c.attr("alpha", 1.0)
    dy = c.dy()
    neg = b.op("Mul", [dy, b.op("Add", [y, b.scalar(alpha, x)])])
    return [b.op("Where", [b.op("Greater", [x, b.scalar(0, x)]), dy, neg])]


@_rule("HardSigmoid")
def _hard_sigmoid(c: RuleContext):
    b, x = c.b, c.node.input[0]
    alpha, beta = c.attr("alpha", 0.2), c.attr("beta", 0.5)
    v = b.op("Add", [b.op("Mul", [x, b.scalar(alpha, x)]), b.scalar(beta, x)])
    inside = b.op("And", [b.op("Greater", [v, b.scalar(0, x)]), b.op("Less", [v, b.scalar(1, x)])])
    return [b.op("Where", [inside, b.op("Mul", [c.dy(), b.scalar(alpha, x)]), b.scalar(0, x)])]


@_rule("HardSwish")
def _hard_swish(c: RuleContext):
    # y = x * clip(x/6 + 1/2, 0, 1): y' = 0 below -3, 1 above 3, x/3 + 1/2 between (as torch).
    b, x = c.b, c.node.input[0]
    mid = b.op("Add", [b.op("Mul", [x, b.scalar(1.0 / 3.0, x)]), b.scalar(0.5, x)])
    g = b.op("Where", [b.op("Less", [x, b.scalar(-3.0, x)]), b.scalar(0.0, x),
                       b.op("Where", [b.op("Greater", [x, b.scalar(3.0, x)]), b.scalar(1.0, x), mid])])
    return [b.op("Mul", [c.dy(), g])]


@_rule("Clip")
def _clip(c: RuleContext):
    # The gradient passes where min <= x <= max (as torch.clamp); a bound input gets the gradient
    # of the elements it clipped.
    b, x, y = c.b, c.node.input[0], c.node.output[0]
    dy = c.dy()
    lo, hi = c.input(1), c.input(2)
    if lo is None and c.attr("min") is not None:  # opsets before 11 hold the bounds as attributes
        lo = b.scalar(c.attr("min"), x)
    if hi is None and c.attr("max") is not None:
        hi = b.scalar(c.attr("max"), x)
    keep = None
    out = [None] * len(c.node.input)
    zero = b.scalar(0, x)
    ys = c.info.shape(y)
    for k, (bound, below, within) in enumerate(((lo, "Less", "GreaterOrEqual"), (hi, "Greater", "LessOrEqual"))):
        if bound is None:
            continue
        ok = b.op(within, [x, bound])
        keep = ok if keep is None else b.op("And", [keep, ok])
        if len(c.need) > k + 1 and c.need[k + 1]:
            clipped = b.op("Where", [b.op(below, [x, bound]), dy, zero])
            out[k + 1] = b.unbroadcast(clipped, ys, bound)
    if c.need[0]:
        out[0] = dy if keep is None else b.op("Where", [keep, dy, zero])
    return out


@_rule("Where")
def _where(c: RuleContext):
    b, (cond, xa, xb), y = c.b, c.node.input[:3], c.node.output[0]
    dy, ys = c.dy(), c.info.shape(y)
    zero = b.scalar(0, y)
    out = [None, None, None]
    if c.need[1]:
        out[1] = b.unbroadcast(b.op("Where", [cond, dy, zero]), ys, xa)
    if c.need[2]:
        out[2] = b.unbroadcast(b.op("Where", [cond, zero, dy]), ys, xb)
    return out


@_rule("Split")
def _split(c: RuleContext):
    axis = c.attr("axis", 0)
    g = c.b.op("Concat", [c.dy(i) for i in range(len(c.node.output))], axis=axis)
    return [g] + [None] * (len(c.node.input) - 1)


def _standardize(c: RuleContext, x: str, axes, eps: float):
    """``(xhat, invstd)``: ``x`` standardized over ``axes`` (biased variance plus ``eps``), recomputed."""
    b = c.b
    mean = b.reduce("ReduceMean", x, axes, keepdims=1)
    xc = b.op("Sub", [x, mean])
    var = b.reduce("ReduceMean", b.op("Mul", [xc, xc]), axes, keepdims=1)
    invstd = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [var, b.scalar(eps, x)])])])
    return b.op("Mul", [xc, invstd]), invstd


def _standardized_grad(c: RuleContext, g: str, xhat: str, invstd: str, axes) -> str:
    """The gradient of ``x`` from the gradient ``g`` of ``xhat``: ``invstd (g - mean(g) - xhat mean(g xhat))``."""
    b = c.b
    m1 = b.reduce("ReduceMean", g, axes, keepdims=1)
    m2 = b.reduce("ReduceMean", b.op("Mul", [g, xhat]), axes, keepdims=1)
    return b.op("Mul", [b.op("Sub", [b.op("Sub", [g, m1]), b.op("Mul", [xhat, m2])]), invstd])


@_rule("LayerNormalization")
def _layer_norm(c: RuleContext):
    """X normalized over axes ``axis..rank-1``; outputs Y, Mean and InvStdDev (kept dims).

    With ``xhat = (x - mean) * invstd`` and ``g = dY * scale``:
    ``dX = invstd * (g - mean(g) - xhat * mean(g * xhat)) + dMean / N - dInvStd * invstd^2 * xhat / N``.
    """
    b, x = c.b, c.node.input[0]
    scale, bias = c.input(1), c.input(2)
    rank = c.info.rank(x, c.node)
    axis = c.attr("axis", -1) % rank
    axes = list(range(axis, rank))
    xhat, invstd = _standardize(c, x, axes, c.attr("epsilon", 1e-5))
    xs = c.info.shape(x)
    dy = c.dys[0]
    out = [None] * len(c.node.input)
    if dy is not None and scale is not None and c.need[1]:
        out[1] = b.unbroadcast(b.op("Mul", [dy, xhat]), xs, scale)
    if dy is not None and bias is not None and len(c.need) > 2 and c.need[2]:
        out[2] = b.unbroadcast(dy, xs, bias)
    if not c.need[0]:
        return out
    terms = []
    if dy is not None:
        g = b.op("Mul", [dy, scale]) if scale is not None else dy
        terms.append(_standardized_grad(c, g, xhat, invstd, axes))
    # Mean and InvStdDev have the stash type (float32 by default), whatever X's type.
    xtype = c.info.types.get(x, onnx.TensorProto.FLOAT)
    dmean, dinv = (b.op("Cast", [c.dys[k]], to=xtype) if len(c.dys) > k and c.dys[k] is not None else None
                   for k in (1, 2))
    if dmean is not None or dinv is not None:
        ones = b.op("ConstantOfShape", [b.shape(x)], value=numpy_helper.from_array(np.ones(1, c.info.np_dtype(x))))
        n_inv = b.op("Reciprocal", [b.reduce("ReduceSum", ones, axes, keepdims=1)])  # 1 / N at run time
        if dmean is not None:
            terms.append(b.op("Mul", [b.op("Expand", [dmean, b.shape(x)]), n_inv]))
        if dinv is not None:
            terms.append(b.op("Neg", [_mul(c, dinv, invstd, invstd, xhat, n_inv)]))
    out[0] = terms[0] if len(terms) == 1 else b.op("Sum", terms)
    return out
