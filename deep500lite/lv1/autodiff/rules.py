"""Level 1 autodiff: the per-operator gradient rules.

A rule takes the :class:`~deep500lite.lv1.autodiff.builder.RuleContext` of one forward node and
returns one gradient name (or None) per input of the node, appending the nodes that compute them.
:data:`RULES` maps ONNX operator types to rules; :func:`custom_rule` gives the rule of a registered
custom operator (one ``<op_type>_Grad`` node).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from deep500lite.lv1.autodiff.builder import GraphBuilder, RuleContext

__all__ = ["RULES", "NOT_DIFFERENTIABLE", "differentiable_operators", "operators_without_gradient", "custom_rule"]

#: ONNX operator type -> gradient rule, filled by the ``@_rule`` decorators below and in :mod:`.rules_nn`,
#: :mod:`.rules_index`, :mod:`.rules_math` and :mod:`.rules_recurrent`; :mod:`.gradients` imports them
#: all (use its ``RULES``: the table is complete only once every family is imported).
RULES: dict[str, Callable] = {}

#: ONNX operators declared not differentiable: their outputs are integer or boolean, or they are
#: piecewise constant (zero gradient almost everywhere), or they produce new values (random,
#: constants). The autodiff sends no gradient through them.
NOT_DIFFERENTIABLE: frozenset = frozenset({
    # shapes, sizes, constants and index generators
    "Shape", "Size", "Constant", "ConstantOfShape", "Range", "NonZero", "EyeLike", "OneHot",
    # random values
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial",
    # comparisons and logic (boolean outputs)
    "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf",
    # integer results and bit operations
    "ArgMax", "ArgMin", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot",
    # piecewise constant (zero gradient almost everywhere)
    "Floor", "Ceil", "Round", "Sign", "Hardmax",
})


def _rule(*op_types):
    def wrap(fn):
        for t in op_types:
            RULES[t] = fn
        return fn
    return wrap


def differentiable_operators() -> list[str]:
    """The ONNX operators deep500lite's autodiff has a gradient rule for."""
    return sorted(RULES)


def operators_without_gradient(op_types) -> list[str]:
    """The operators among ``op_types`` with neither a gradient rule nor a "not differentiable" entry.

    Args:
        op_types: ONNX operator types (of the default domain), for example those of a model's nodes.

    Returns:
        The sorted, distinct operator types the autodiff would refuse on a gradient path.
    """
    return sorted({t for t in op_types if t not in RULES and t not in NOT_DIFFERENTIABLE})


# ------------------------------------------------------------------------------- gradient rules
@_rule("Identity")
def _identity(c: RuleContext):
    return [c.dy()]


@_rule("Flatten", "Reshape", "Squeeze", "Unsqueeze")
def _reshape(c: RuleContext):
    return [c.b.reshape_like(c.dy(), c.node.input[0])] + [None] * (len(c.node.input) - 1)


@_rule("Cast")
def _cast(c: RuleContext):
    x = c.node.input[0]
    return [c.b.op("Cast", [c.dy()], to=c.info.types.get(x, onnx.TensorProto.FLOAT))]


@_rule("Expand")
def _expand(c: RuleContext):
    y = c.node.output[0]
    return [c.b.unbroadcast(c.dy(), c.info.shape(y), c.node.input[0]), None]


@_rule("Relu")
def _relu(c: RuleContext):
    b, x = c.b, c.node.input[0]
    return [b.op("Where", [b.op("Greater", [x, b.scalar(0, x)]), c.dy(), b.scalar(0, x)])]


@_rule("LeakyRelu")
def _leaky_relu(c: RuleContext):
    b, x = c.b, c.node.input[0]
    dy = c.dy()
    alpha = c.attr("alpha", 0.01)
    return [b.op("Where", [b.op("Greater", [x, b.scalar(0, x)]), dy, b.op("Mul", [dy, b.scalar(alpha, x)])])]


@_rule("Sigmoid")
def _sigmoid(c: RuleContext):
    b, y = c.b, c.node.output[0]
    return [b.op("Mul", [c.dy(), b.op("Mul", [y, b.op("Sub", [b.scalar(1, y), y])])])]


@_rule("Tanh")
def _tanh(c: RuleContext):
    b, y = c.b, c.node.output[0]
    return [b.op("Mul", [c.dy(), b.op("Sub", [b.scalar(1, y), b.op("Mul", [y, y])])])]


@_rule("Exp")
def _exp(c: RuleContext):
    return [c.b.op("Mul", [c.dy(), c.node.output[0]])]


@_rule("Log")
def _log(c: RuleContext):
    return [c.b.op("Div", [c.dy(), c.node.input[0]])]


@_rule("Sqrt")
def _sqrt(c: RuleContext):
    b, y = c.b, c.node.output[0]
    return [b.op("Div", [b.op("Mul", [c.dy(), b.scalar(0.5, y)]), y])]


@_rule("Neg")
def _neg(c: RuleContext):
    return [c.b.op("Neg", [c.dy()])]


def _binary(c: RuleContext, ga, gb):
    """Unbroadcast the full-shape gradients ``ga``/``gb`` (callables, evaluated when needed)."""
    b, (a, bb), y = c.b, c.node.input[:2], c.node.output[0]
    ys = c.info.shape(y)
    return [b.unbroadcast(ga(), ys, a) if c.need[0] else None,
            b.unbroadcast(gb(), ys, bb) if c.need[1] else None]


@_rule("Add")
def _add(c: RuleContext):
    dy = c.dy()
    return _binary(c, lambda: dy, lambda: dy)


@_rule("Sub")
def _sub(c: RuleContext):
    dy = c.dy()
    return _binary(c, lambda: dy, lambda: c.b.op("Neg", [dy]))


@_rule("Mul")
def _mul(c: RuleContext):
    b, dy, (x, w) = c.b, c.dy(), c.node.input[:2]
    return _binary(c, lambda: b.op("Mul", [dy, w]), lambda: b.op("Mul", [dy, x]))


@_rule("Div")
def _div(c: RuleContext):
    b, dy, w, y = c.b, c.dy(), c.node.input[1], c.node.output[0]
    return _binary(c, lambda: b.op("Div", [dy, w]),
                   lambda: b.op("Neg", [b.op("Div", [b.op("Mul", [dy, y]), w])]))


@_rule("Pow")
def _pow(c: RuleContext):
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
def _sum(c: RuleContext):
    dy, ys = c.dy(), c.info.shape(c.node.output[0])
    return [c.b.unbroadcast(dy, ys, x) if need else None for x, need in zip(c.node.input, c.need)]


@_rule("Gemm")
def _gemm(c: RuleContext):
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


def _swap_last(b: GraphBuilder, x: str, rank: int) -> str:
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return b.op("Transpose", [x], perm=perm)


@_rule("MatMul")
def _matmul(c: RuleContext):
    b, dy, info = c.b, c.dy(), c.info
    a, w = c.node.input[:2]
    sa, sw, sy = info.shape(a), info.shape(w), info.shape(c.node.output[0])
    if sa is None or sw is None:
        c.unsupported("the ranks of its inputs are unknown to shape inference", f"input shapes {sa} and {sw}")
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
def _transpose(c: RuleContext):
    perm = c.attr("perm") or list(range(c.info.rank(c.node.input[0], c.node)))[::-1]
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return [c.b.op("Transpose", [c.dy()], perm=inv)]


def _spatial(c: RuleContext, x: str, kernel):
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
            c.unsupported("auto_pad needs static spatial input dimensions", f"auto_pad={auto!r}, input shape {xs}")
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


def _static_spatial(c: RuleContext, x, y):
    """The shapes of ``x`` and ``y``, refusing the node unless their spatial sizes are static."""
    xs, ys = c.info.shape(x), c.info.shape(y)
    if xs is None or ys is None or any(d is None for d in list(xs[2:]) + list(ys[2:])):
        c.unsupported("its gradient needs static spatial dimensions of input and output",
                      f"input shape {xs}, output shape {ys}")
    return xs, ys


def _output_padding(c: RuleContext, x, y, kernel, strides, dil, pads):
    xs, ys = _static_spatial(c, x, y)
    n = len(kernel)
    return [xs[2 + i] - ((ys[2 + i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - pads[i] - pads[i + n])
            for i in range(n)]


def _kernel_gradient(b, inp, out_grad, kernel, strides, dil, pads):
    """The weight gradient of a convolution of ``inp`` whose output gradient is ``out_grad``.

    dW[o, i] = sum_n inp[n, i] (*) out_grad[n, o]: a convolution over the batch axis, with the
    roles of stride and dilation swapped; the result is cut to the kernel size.
    """
    n = len(kernel)
    perm = [1, 0] + list(range(2, n + 2))
    g = b.op("Conv", [b.op("Transpose", [inp], perm=perm), b.op("Transpose", [out_grad], perm=perm)],
             strides=dil, dilations=strides, pads=pads)
    g = b.op("Slice", [g, b.ints([0] * n), b.ints(kernel), b.ints(list(range(2, n + 2)))])
    return b.op("Transpose", [g], perm=perm)


def _grouped_kernel_gradient(c: RuleContext, x, dy, ws, group, kernel, strides, dil, pads):
    """The weight gradient of a grouped convolution, in one grouped Conv whatever the group count.

    dW[g*Og + o, i] = sum_n x[n, g*Cg + i] (*) dy[n, g*Og + o]: the batch moves into the channel
    axis, grouped by g ([Cg, G*N, ...] for x, [G*Og, N, ...] for dy), so a Conv with ``group=G``
    pairs each group's inputs with its outputs only (a depthwise layer of 960 channels is one node,
    not 960).
    """
    b = c.b
    xs, ys = _static_spatial(c, x, c.node.output[0])
    n = len(kernel)
    out_ch, cg = ws[0], ws[1]
    og = out_ch // group
    spatial = list(range(3, n + 3))
    xg = b.op("Reshape", [x, b.ints([-1, group, cg] + list(xs[2:]))])
    xg = b.op("Transpose", [xg], perm=[2, 1, 0] + spatial)
    xg = b.op("Reshape", [xg, b.ints([cg, -1] + list(xs[2:]))])
    dyg = b.op("Reshape", [dy, b.ints([-1, group, og] + list(ys[2:]))])
    dyg = b.op("Transpose", [dyg], perm=[1, 2, 0] + spatial)
    dyg = b.op("Reshape", [dyg, b.ints([out_ch, -1] + list(ys[2:]))])
    g = b.op("Conv", [xg, dyg], strides=dil, dilations=strides, pads=pads, group=group)
    g = b.op("Slice", [g, b.ints([0] * n), b.ints(kernel), b.ints(list(range(2, n + 2)))])
    return b.op("Transpose", [g], perm=[1, 0] + list(range(2, n + 2)))


@_rule("Conv")
def _conv(c: RuleContext):
    b, dy, info = c.b, c.dy(), c.info
    x, w = c.node.input[:2]
    ws = info.shape(w)
    if ws is None or any(d is None for d in ws):
        c.unsupported("the weight shape is unknown to shape inference", f"weight shape {ws}")
    kernel = list(c.attr("kernel_shape") or ws[2:])
    n = len(kernel)
    group = c.attr("group", 1)
    strides, dil, pads = _spatial(c, x, kernel)
    dx = dw = db = None
    if c.need[0]:
        outpad = _output_padding(c, x, c.node.output[0], kernel, strides, dil, pads)
        # A grouped ConvTranspose with the Conv's own weight (the reference executor runs it with
        # its own kernel: onnx.reference's ConvTranspose has no groups).
        dx = b.op("ConvTranspose", [dy, w], strides=strides, dilations=dil, pads=pads, kernel_shape=kernel,
                  output_padding=outpad, group=group)
    if c.need[1]:
        if group == 1:
            dw = _kernel_gradient(b, x, dy, kernel, strides, dil, pads)
        else:
            dw = _grouped_kernel_gradient(c, x, dy, ws, group, kernel, strides, dil, pads)
    bias = c.input(2)
    if bias is not None and c.need[2]:
        db = b.reduce("ReduceSum", dy, [0] + list(range(2, n + 2)), keepdims=0)
    return [dx, dw, db]


@_rule("ConvTranspose")
def _conv_transpose(c: RuleContext):
    # <dy, ConvTranspose(x, w)> = <Conv(dy, w), x>: the input gradient is a Conv of dy, the weight
    # gradient that of a Conv with input dy and output gradient x.
    b, dy, info = c.b, c.dy(), c.info
    x, w = c.node.input[:2]
    ws = info.shape(w)
    if ws is None or any(d is None for d in ws):
        c.unsupported("the weight shape is unknown to shape inference", f"weight shape {ws}")
    auto = c.attr("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if c.attr("output_shape") is not None or auto not in ("NOTSET", "VALID"):
        c.unsupported("output_shape and auto_pad SAME_* have no gradient rule; give explicit pads",
                      f"output_shape={c.attr('output_shape')}, auto_pad={auto!r}")
    kernel = list(c.attr("kernel_shape") or ws[2:])
    n = len(kernel)
    if c.attr("group", 1) != 1:  # onnx.reference cannot run it either, so no rule could be checked
        c.unsupported("only group=1 has a gradient rule", f"group={c.attr('group')}")
    strides = list(c.attr("strides") or [1] * n)
    dil = list(c.attr("dilations") or [1] * n)
    pads = [0] * (2 * n) if auto == "VALID" else list(c.attr("pads") or [0] * (2 * n))
    dx = dw = db = None
    if c.need[0]:
        dx = b.op("Conv", [dy, w], strides=strides, dilations=dil, pads=pads, kernel_shape=kernel)
    if c.need[1]:
        dw = _kernel_gradient(b, dy, x, kernel, strides, dil, pads)  # Conv's with the roles of x and dy swapped
    if c.input(2) is not None and c.need[2]:
        db = b.reduce("ReduceSum", dy, [0] + list(range(2, n + 2)), keepdims=0)
    return [dx, dw, db]


@_rule("MaxPool")
def _maxpool(c: RuleContext):
    b, dy, x = c.b, c.dy(), c.node.input[0]
    if c.attr("storage_order", 0):
        c.unsupported("storage_order=1 (column-major indices) is not supported; only storage_order=0 is",
                      f"storage_order={c.attr('storage_order')}")
    idx = c.saved["indices"]
    kernel = list(c.attr("kernel_shape"))
    strides = list(c.attr("strides") or [1] * len(kernel))
    overlapping = any(s < k for s, k in zip(strides, kernel)) or any(d != 1 for d in c.attr("dilations") or [])
    return [_scatter_add(b, x, idx, dy, overlapping)]


def _scatter_add(b: GraphBuilder, x: str, idx: str, upd: str, accumulate: bool) -> str:
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
def _global_average_pool(c: RuleContext):
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


def _ceil_equals_floor(xs, kernel, strides, dil, pads) -> bool:
    """Whether a pool's output size is the same with ceil_mode=1 and 0 (static sizes only)."""
    if xs is None or any(d is None for d in xs[2:]):
        return False
    n = len(kernel)
    for i in range(n):
        span = xs[2 + i] + pads[i] + pads[i + n] - ((kernel[i] - 1) * dil[i] + 1)
        if span < 0 or span % strides[i]:
            return False
    return True


def _average_pool_partial_windows(c: RuleContext, x, xs, kernel, strides, dil, pads) -> str:
    """AveragePool with ceil_mode=1 and windows that run past the end.

    Each window divides by the elements it covers inside the (padded, with count_include_pad=1)
    input. With static sizes the pooling is, per spatial axis, a 0/1 matrix ``M`` (output x
    input: which inputs each window covers), so ``dx`` is ``dy / count`` multiplied by ``M`` along
    each axis (MatMul), whatever the kernel's size (transformers' EfficientNet pools a 1x1 map
    with a 320x320 kernel)."""
    if xs is None or any(d is None for d in xs[2:]):
        c.unsupported("ceil_mode=1 with partial windows needs static spatial sizes", f"input shape {xs}")
    b, dy = c.b, c.dy()
    n = len(kernel)
    rank = n + 2
    include_pad = bool(c.attr("count_include_pad", 0))
    counts, members = [], []
    for i in range(n):
        size, pb, pe, k, s, d = xs[2 + i], pads[i], pads[i + n], kernel[i], strides[i], dil[i]
        span = (k - 1) * d + 1
        out = -(-(size + pb + pe - span) // s) + 1
        if (out - 1) * s >= size + pb:  # ONNX: the last window must start inside the input or left pad
            out -= 1
        lo, hi = (-pb, size + pe) if include_pad else (0, size)
        taps = np.arange(out)[:, None] * s - pb + np.arange(k)[None, :] * d
        counts.append(((taps >= lo) & (taps < hi)).sum(axis=1).astype(np.float64))
        member = np.zeros((out, size))
        for o in range(out):
            inside = taps[o][(taps[o] >= 0) & (taps[o] < size)]
            member[o, inside] = 1.0
        members.append(member)
    count = counts[0]
    for extra in counts[1:]:
        count = np.multiply.outer(count, extra)
    dtype = c.info.np_dtype(x)
    g = b.op("Div", [dy, b.const(count.astype(dtype), hint="count")])
    for i in range(n):
        perm = list(range(rank))
        perm[2 + i], perm[-1] = perm[-1], perm[2 + i]
        g = b.op("Transpose", [g], perm=perm)
        g = b.op("MatMul", [g, b.const(members[i].astype(dtype), hint="window")])
        g = b.op("Transpose", [g], perm=perm)
    return g


@_rule("AveragePool")
def _average_pool(c: RuleContext):
    b, dy, x, y = c.b, c.dy(), c.node.input[0], c.node.output[0]
    kernel = list(c.attr("kernel_shape"))
    strides, dil, pads = _spatial(c, x, kernel)
    xs = c.info.shape(x)
    if c.attr("ceil_mode", 0) and not _ceil_equals_floor(xs, kernel, strides, dil, pads):
        return [_average_pool_partial_windows(c, x, xs, kernel, strides, dil, pads)]
    if xs is None or xs[1] is None:
        c.unsupported("the channel count is unknown to shape inference", f"input shape {xs}")
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
def _batchnorm(c: RuleContext):
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


def _axis_reduce_keep(b: GraphBuilder, x: str, axis: int) -> str:
    return b.reduce("ReduceSum", x, [axis], keepdims=1)


@_rule("Softmax")
def _softmax(c: RuleContext):
    b, dy, y = c.b, c.dy(), c.node.output[0]
    axis = c.attr("axis", -1)
    s = _axis_reduce_keep(b, b.op("Mul", [dy, y]), axis)
    return [b.op("Mul", [y, b.op("Sub", [dy, s])])]


@_rule("LogSoftmax")
def _log_softmax(c: RuleContext):
    b, dy, y = c.b, c.dy(), c.node.output[0]
    axis = c.attr("axis", -1)
    s = _axis_reduce_keep(b, dy, axis)
    return [b.op("Sub", [dy, b.op("Mul", [b.op("Exp", [y]), s])])]


def _class_loss_grads(c: RuleContext, logp: str, dlogp_of_scores: Callable[[str], str]):
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
        c.unsupported("reduction must be one of 'none', 'sum', 'mean'", repr(reduction))
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
def _softmax_cross_entropy(c: RuleContext):
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
def _nll(c: RuleContext):
    return _class_loss_grads(c, c.node.input[0], lambda g: g)


def _index_scatter(c: RuleContext, x: str, index_of: Callable[[str], str], dy: str, accumulate: bool) -> str:
    """Gradient of an indexing op: ``index_of(positions)`` applies the op to the positions of ``x``."""
    b = c.b
    numel = b.op("Cast", [b.numel(x)], to=onnx.TensorProto.INT64)
    positions = b.op("Reshape", [b.op("Range", [b.ints(0), numel, b.ints(1)]), b.shape(x)])
    return _scatter_add(b, x, index_of(positions), dy, accumulate)


@_rule("Slice")
def _slice(c: RuleContext):
    rest = list(c.node.input[1:])
    g = _index_scatter(c, c.node.input[0], lambda pos: c.b.op("Slice", [pos] + rest), c.dy(), False)
    return [g] + [None] * len(rest)


@_rule("Gather")
def _gather(c: RuleContext):
    idx, axis = c.node.input[1], c.attr("axis", 0)
    g = _index_scatter(c, c.node.input[0], lambda pos: c.b.op("Gather", [pos, idx], axis=axis), c.dy(), True)
    return [g, None]


@_rule("Concat")
def _concat(c: RuleContext):
    b, info = c.b, c.info
    axis = c.attr("axis")
    sizes = []
    for x in c.node.input:
        s = info.shape(x)
        sizes.append(None if s is None or s[axis % len(s)] is None else s[axis % len(s)])
    if None in sizes:  # sizes known only at run time: read them from the inputs' shapes
        split = b.op("Concat", [b.op("Gather", [b.shape(x), b.ints([axis])]) for x in c.node.input], axis=0)
    else:
        split = b.ints(sizes)
    parts = b.op("Split", [c.dy(), split], n_out=len(sizes), axis=axis)
    parts = [parts] if isinstance(parts, str) else parts
    return [p if need else None for p, need in zip(parts, c.need)]


@_rule("Pad")
def _pad(c: RuleContext):
    b, x = c.b, c.node.input[0]
    mode = c.attr("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode != "constant":
        c.unsupported("only mode='constant' has a gradient rule", f"mode={mode!r}")
    pads = c.info.const_value(c.input(1)) if c.input(1) else None
    if pads is None:
        c.unsupported("the pads input must be a constant (initializer or Constant node)",
                      f"pads input '{c.input(1)}', known only at run time" if c.input(1) else "no pads input")
    rank = c.info.rank(x, c.node)
    axes = list(range(rank))
    if c.input(3):
        av = c.info.const_value(c.input(3))
        if av is None:
            c.unsupported("the axes input must be a constant", f"axes input '{c.input(3)}', known only at run time")
        axes = [int(a) % rank for a in av]
    pads = [int(p) for p in pads]
    k = len(axes)
    if any(p < 0 for p in pads):
        c.unsupported("negative pads are not supported", f"pads={pads}")
    ends = [-pads[k + i] if pads[k + i] else np.iinfo(np.int64).max for i in range(k)]
    g = b.op("Slice", [c.dy(), b.ints(pads[:k]), b.ints(ends), b.ints(axes)])
    return [g] + [None] * (len(c.node.input) - 1)


def _reduce_axes(c: RuleContext):
    x = c.node.input[0]
    rank = c.info.rank(x, c.node)
    axes = c.attr("axes")
    if axes is None and c.input(1):
        v = c.info.const_value(c.input(1))
        if v is None:
            c.unsupported("the axes input must be a constant", f"axes input '{c.input(1)}', known only at run time")
        axes = [int(a) for a in v.reshape(-1)]
    if not axes:
        if c.attr("noop_with_empty_axes", 0):
            return None
        axes = list(range(rank))
    return sorted(int(a) % rank for a in axes)


@_rule("ReduceSum", "ReduceMean")
def _reduce_sum_mean(c: RuleContext):
    b, x, dy = c.b, c.node.input[0], c.dy()
    if c.attr("axes") is None and c.input(1) and c.info.const_value(c.input(1)) is None:
        return _reduce_sum_mean_run_time_axes(c, x, dy)
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


def _reduce_sum_mean_run_time_axes(c: RuleContext, x: str, dy: str):
    """The gradient of a ReduceSum/ReduceMean whose axes input is known only at run time.

    Unsqueeze takes the axes as a tensor (negative ones count from the end of ``x``'s rank);
    empty axes reduce everything (``dy`` is a scalar that Expand broadcasts) or, with
    ``noop_with_empty_axes``, nothing (Unsqueeze and Expand are then no-ops).
    """
    b = c.b
    if not c.attr("keepdims", 1):
        dy = b.op("Unsqueeze", [dy, c.input(1)])
    g = b.op("Expand", [dy, b.shape(x)])
    if c.node.op_type == "ReduceMean":
        count = b.op("Div", [b.numel(x), b.numel(dy)])
        g = b.op("Div", [g, b.op("Cast", [count], to=c.info.types.get(x, onnx.TensorProto.FLOAT))])
    return [g, None]


@_rule("Dropout")
def _dropout(c: RuleContext):
    b, dy = c.b, c.dy()
    if "mask" not in c.saved:
        return [dy, None, None]
    scale = c.saved["scale"]
    mask = b.op("Cast", [c.saved["mask"]], to=c.info.types.get(c.node.input[0], onnx.TensorProto.FLOAT))
    return [b.op("Mul", [b.op("Mul", [dy, mask]), b.scalar(scale, c.node.input[0])]), None, None]


def custom_rule(node):
    """The gradient rule of a registered custom operator: one ``<op_type>_Grad`` node."""
    from deep500lite.lv0.custom import grad_op_type, registered_op

    if registered_op(node.domain, node.op_type) is None:
        return None

    def rule(c: RuleContext):
        n_out = len(c.node.output)
        dys = [c.dy(i) for i in range(n_out)]
        outs = [c.b.fresh(f"{c.node.op_type.lower()}_dx") for _ in c.node.input]
        c.b.nodes.append(helper.make_node(
            grad_op_type(c.node.op_type), dys + list(c.node.input) + list(c.node.output), outs,
            name=c.b.fresh(f"n_{c.node.op_type}_Grad"), domain=c.node.domain))
        return outs

    return rule
