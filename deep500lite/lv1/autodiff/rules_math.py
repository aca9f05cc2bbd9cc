"""Level 1 autodiff: gradient rules of elementwise math, reductions, GroupNormalization and Resize.

Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, ThresholdedRelu, Celu, Shrink,
Mean, CastLike, ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceProd,
LpNormalization, GroupNormalization (opset 18: scale and bias per group; 21: per channel) and
Resize (nearest and linear, 1-D to N-D with constant scales or sizes). The rules register
themselves in :data:`~deep500lite.lv1.autodiff.rules.RULES` when this module is imported (:mod:`.gradients`
imports it at its end).

Resize is linear in its input: along each resized axis the output is ``A @ x`` with an
interpolation matrix ``A`` built here with numpy from the static shapes, so the gradient is
``A^T @ dy`` per axis (a MatMul against a constant).
"""

from __future__ import annotations

import numpy as np
import onnx

from deep500lite.lv1.autodiff.builder import RuleContext
from deep500lite.lv1.autodiff.rules import _reduce_axes, _rule
from deep500lite.lv1.autodiff.rules_nn import _standardize, _standardized_grad

__all__: list[str] = []


def _times(c: RuleContext, deriv: str):
    return [c.b.op("Mul", [c.dy(), deriv])]


# --------------------------------------------------------------------------- elementwise
@_rule("Sin")
def _sin(c: RuleContext):
    return _times(c, c.b.op("Cos", [c.node.input[0]]))


@_rule("Cos")
def _cos(c: RuleContext):
    return _times(c, c.b.op("Neg", [c.b.op("Sin", [c.node.input[0]])]))


@_rule("Tan")
def _tan(c: RuleContext):
    b, y = c.b, c.node.output[0]
    return _times(c, b.op("Add", [b.scalar(1, y), b.op("Mul", [y, y])]))


@_rule("Sinh")
def _sinh(c: RuleContext):
    return _times(c, c.b.op("Cosh", [c.node.input[0]]))


@_rule("Cosh")
def _cosh(c: RuleContext):
    return _times(c, c.b.op("Sinh", [c.node.input[0]]))


def _inv_sqrt_of(c: RuleContext, sign_sq: float, const: float) -> str:
    """``1 / sqrt(sign_sq * x^2 + const)`` of the node's input."""
    b, x = c.b, c.node.input[0]
    sq = b.op("Mul", [b.op("Mul", [x, x]), b.scalar(sign_sq, x)])
    return b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [sq, b.scalar(const, x)])])])


@_rule("Asin")
def _asin(c: RuleContext):
    return _times(c, _inv_sqrt_of(c, -1.0, 1.0))


@_rule("Acos")
def _acos(c: RuleContext):
    return _times(c, c.b.op("Neg", [_inv_sqrt_of(c, -1.0, 1.0)]))


@_rule("Asinh")
def _asinh(c: RuleContext):
    return _times(c, _inv_sqrt_of(c, 1.0, 1.0))


@_rule("Acosh")
def _acosh(c: RuleContext):
    return _times(c, _inv_sqrt_of(c, 1.0, -1.0))


@_rule("Atan", "Atanh")
def _atan(c: RuleContext):
    # atan' = 1 / (1 + x^2), atanh' = 1 / (1 - x^2)
    b, x = c.b, c.node.input[0]
    sq = b.op("Mul", [x, x])
    den = b.op("Add" if c.node.op_type == "Atan" else "Sub", [b.scalar(1, x), sq])
    return [b.op("Div", [c.dy(), den])]


@_rule("ThresholdedRelu")
def _thresholded_relu(c: RuleContext):
    b, x = c.b, c.node.input[0]
    alpha = c.attr("alpha", 1.0)
    return [b.op("Where", [b.op("Greater", [x, b.scalar(alpha, x)]), c.dy(), b.scalar(0, x)])]


@_rule("Celu")
def _celu(c: RuleContext):
    # y = max(0, x) + min(0, alpha (exp(x / alpha) - 1)): y' = 1 for x > 0, exp(x / alpha) otherwise.
    b, x = c.b, c.node.input[0]
    alpha = c.attr("alpha", 1.0)
    dy = c.dy()
    neg = b.op("Mul", [dy, b.op("Exp", [b.op("Div", [x, b.scalar(alpha, x)])])])
    return [b.op("Where", [b.op("Greater", [x, b.scalar(0, x)]), dy, neg])]


@_rule("Shrink")
def _shrink(c: RuleContext):
    b, x = c.b, c.node.input[0]
    lambd = c.attr("lambd", 0.5)
    outside = b.op("Greater", [b.op("Abs", [x]), b.scalar(lambd, x)])
    return [b.op("Where", [outside, c.dy(), b.scalar(0, x)])]


@_rule("Mean")
def _mean(c: RuleContext):
    b, y = c.b, c.node.output[0]
    g = b.op("Mul", [c.dy(), b.scalar(1.0 / len(c.node.input), y)])
    ys = c.info.shape(y)
    return [b.unbroadcast(g, ys, x) if need else None for x, need in zip(c.node.input, c.need)]


@_rule("CastLike")
def _cast_like(c: RuleContext):
    x = c.node.input[0]
    return [c.b.op("Cast", [c.dy()], to=c.info.types.get(x, onnx.TensorProto.FLOAT)), None]


# --------------------------------------------------------------------------- reductions
def _reduced_back(c: RuleContext):
    """``(axes, dy, y)`` with the reduced axes of ``dy`` and ``y`` kept (size 1), ready to broadcast."""
    axes = _reduce_axes(c)
    if axes is None:
        c.unsupported("noop_with_empty_axes=1 with empty axes is not supported", "empty axes")
    dy, y = c.dy(), c.node.output[0]
    if not c.attr("keepdims", 1):
        dy, y = c.b.unsqueeze(dy, axes), c.b.unsqueeze(y, axes)
    return axes, dy, y


@_rule("ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceProd")
def _reduce_smooth(c: RuleContext):
    b, x = c.b, c.node.input[0]
    _, dy, y = _reduced_back(c)
    t = c.node.op_type
    if t == "ReduceSumSquare":  # 2 x
        d = b.op("Mul", [x, b.scalar(2.0, x)])
    elif t == "ReduceL1":  # sign(x)
        d = b.op("Sign", [x])
    elif t == "ReduceL2":  # x / y
        d = b.op("Div", [x, y])
    elif t == "ReduceLogSum":  # 1 / sum(x) = exp(-y)
        d = b.op("Exp", [b.op("Neg", [y])])
        d = b.op("Expand", [d, b.shape(x)])
    elif t == "ReduceLogSumExp":  # exp(x - y)
        d = b.op("Exp", [b.op("Sub", [x, y])])
    else:  # ReduceProd: y / x (inputs must be nonzero)
        d = b.op("Div", [y, x])
    return [b.op("Mul", [dy, d])] + [None] * (len(c.node.input) - 1)


@_rule("LpNormalization")
def _lp_normalization(c: RuleContext):
    # y = x / n, n = ||x||_p along axis: dx = (dy - s * sum(dy * y)) / n, s = y (p=2) or sign(x) (p=1).
    b, x, y = c.b, c.node.input[0], c.node.output[0]
    rank = c.info.rank(x, c.node)
    axis = c.attr("axis", -1) % rank
    p = c.attr("p", 2)
    if p not in (1, 2):
        c.unsupported("p must be 1 or 2", f"p={p}")
    if p == 2:
        n = b.op("Sqrt", [b.reduce("ReduceSum", b.op("Mul", [x, x]), [axis], keepdims=1)])
        s = y
    else:
        n = b.reduce("ReduceSum", b.op("Abs", [x]), [axis], keepdims=1)
        s = b.op("Sign", [x])
    dy = c.dy()
    dot = b.reduce("ReduceSum", b.op("Mul", [dy, y]), [axis], keepdims=1)
    return [b.op("Div", [b.op("Sub", [dy, b.op("Mul", [s, dot])]), n])]


# --------------------------------------------------------------------------- GroupNormalization
@_rule("GroupNormalization")
def _group_normalization(c: RuleContext):
    """Standardized over (channels of a group, spatial axes); opset 18: scale/bias per group, 21: per channel."""
    b, x, scale = c.b, c.node.input[0], c.node.input[1]
    xs = c.info.shape(x)
    if xs is None or len(xs) < 3 or xs[1] is None:
        c.unsupported("the rank and channel count of X must be known to shape inference", f"X shape {xs}")
    groups, channels, rank = c.attr("num_groups"), xs[1], len(xs)
    per_channel = b.opset >= 21
    # Y = xhat * scale + bias with xhat of X reshaped to [N, G, -1].
    xg = b.op("Reshape", [x, b.ints([0, groups, -1])])
    c.info.types[xg] = c.info.types.get(x, onnx.TensorProto.FLOAT)  # the constants _standardize adds take it
    xhat, invstd = _standardize(c, xg, [2], c.attr("epsilon", 1e-5))
    xhat_x = b.reshape_like(xhat, x)
    dy = c.dy()
    bshape = b.ints([1, channels if per_channel else groups] + [1] * (rank - 2))
    spatial = [0] + list(range(2, rank))
    out = [None] * len(c.node.input)

    def per_param(g):  # sum over batch and space, per channel; per group in opset 18
        g = b.reduce("ReduceSum", g, spatial, keepdims=0)
        if not per_channel:
            g = b.reduce("ReduceSum", b.op("Reshape", [g, b.ints([groups, -1])]), [1], keepdims=0)
        return g

    if c.need[1]:
        out[1] = per_param(b.op("Mul", [dy, xhat_x]))
    if len(c.need) > 2 and c.need[2]:
        out[2] = per_param(dy)
    if c.need[0]:
        if per_channel:
            gx = b.op("Mul", [dy, b.op("Reshape", [scale, bshape])])
            gx = b.op("Reshape", [gx, b.ints([0, groups, -1])])
        else:
            gx = b.op("Reshape", [dy, b.ints([0, groups, -1])])
            gx = b.op("Mul", [gx, b.op("Reshape", [scale, b.ints([1, groups, 1])])])
        out[0] = b.reshape_like(_standardized_grad(c, gx, xhat, invstd, [2]), x)
    return out


# --------------------------------------------------------------------------- Resize
def _text_attr(c: RuleContext, name: str, default: str) -> str:
    v = c.attr(name, default)
    return v.decode() if isinstance(v, bytes) else v


def _source_coordinates(c: RuleContext, mode: str, n_in: int, n_out: int, scale: float) -> np.ndarray:
    """The input coordinate of every output position along one axis (ONNX Resize's transformation)."""
    o = np.arange(n_out, dtype=np.float64)
    if mode == "half_pixel":
        return (o + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (o + 0.5) / scale - 0.5 if n_out > 1 else np.zeros(n_out)
    if mode == "align_corners":
        return o * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros(n_out)
    if mode == "asymmetric":
        return o / scale
    c.unsupported("coordinate_transformation_mode must be half_pixel, pytorch_half_pixel, align_corners or "
                  "asymmetric", f"coordinate_transformation_mode={mode!r}")


def _nearest_index(c: RuleContext, x: np.ndarray, rule: str) -> np.ndarray:
    if rule == "round_prefer_floor":
        idx = np.where(x - np.floor(x) == 0.5, np.floor(x), np.round(x))
    elif rule == "round_prefer_ceil":
        idx = np.where(x - np.floor(x) == 0.5, np.ceil(x), np.round(x))
    elif rule == "floor":
        idx = np.floor(x)
    elif rule == "ceil":
        idx = np.ceil(x)
    else:
        c.unsupported("nearest_mode must be round_prefer_floor, round_prefer_ceil, floor or ceil",
                      f"nearest_mode={rule!r}")
    return idx.astype(np.int64)


def _interpolation_matrix(c: RuleContext, n_in: int, n_out: int, scale: float) -> np.ndarray:
    """``A`` (``n_out x n_in``) with ``y = A @ x`` along one axis."""
    mode = _text_attr(c, "mode", "nearest")
    x = _source_coordinates(c, _text_attr(c, "coordinate_transformation_mode", "half_pixel"), n_in, n_out, scale)
    a = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    if mode == "nearest":
        idx = np.clip(_nearest_index(c, x, _text_attr(c, "nearest_mode", "round_prefer_floor")), 0, n_in - 1)
        a[rows, idx] = 1.0
    else:  # linear: the two neighbours, the coordinate clamped to the input (edge padding)
        x = np.clip(x, 0, n_in - 1)
        lo = np.floor(x).astype(np.int64)
        hi = np.minimum(lo + 1, n_in - 1)
        frac = x - lo
        np.add.at(a, (rows, lo), 1.0 - frac)
        np.add.at(a, (rows, hi), frac)
    return a


_OWN_COORDINATES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def _reference_matrix(c: RuleContext, n_in: int, n_out: int, scale: float | None) -> np.ndarray:
    """``A`` for any mode (cubic, antialias): onnx.reference resizes the rows of an identity matrix.

    Resize interpolates each axis on its own with weights that depend only on the sizes, so the
    1-D map along one axis is linear and its matrix is the resize of the identity's rows.
    """
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("Resize", ["x", "", "scales"] if scale is not None else ["x", "", "", "sizes"], ["y"])
    node.attribute.extend(a for a in c.node.attribute if a.name not in ("axes", "keep_aspect_ratio_policy"))
    graph = helper.make_graph([node], "resize_matrix",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, [n_in, n_in]),
                               helper.make_tensor_value_info("scales", onnx.TensorProto.FLOAT, [2]) if scale is not None
                               else helper.make_tensor_value_info("sizes", onnx.TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(c.b.opset, 18))])
    feeds = {"x": np.eye(n_in)}
    if scale is not None:
        feeds["scales"] = np.array([1.0, scale], np.float32)
    else:
        feeds["sizes"] = np.array([n_in, n_out], np.int64)
    rows = ReferenceEvaluator(model).run(None, feeds)[0]
    return np.asarray(rows, dtype=np.float64).T


@_rule("Resize")
def _resize(c: RuleContext):
    b, x = c.b, c.node.input[0]
    mode = _text_attr(c, "mode", "nearest")
    if _text_attr(c, "keep_aspect_ratio_policy", "stretch") != "stretch":
        c.unsupported("only keep_aspect_ratio_policy='stretch' is supported",
                      f"keep_aspect_ratio_policy={_text_attr(c, 'keep_aspect_ratio_policy', '')!r}")
    xs, ys = c.info.shape(x), c.info.shape(c.node.output[0])
    if xs is None or None in xs:
        c.unsupported("the input shape must be static", f"input shape {xs}")
    rank = len(xs)
    axes = [int(a) % rank for a in (c.attr("axes") or range(rank))]
    scales_in, sizes_in = c.input(2), c.input(3)
    if len(c.node.input) < 3:
        c.unsupported("Resize needs the opset 11+ form with scales or sizes inputs", f"inputs {list(c.node.input)}")
    scales = c.info.const_value(scales_in) if scales_in else None
    sizes = c.info.const_value(sizes_in) if sizes_in else None
    if (scales is None or scales.size == 0) and sizes is None:
        c.unsupported("scales or sizes must be constants", f"scales '{scales_in}', sizes '{sizes_in}'")
    full_scale = [1.0] * rank
    out_shape = list(xs)
    for k, a in enumerate(axes):
        if sizes is not None and sizes.size:
            out_shape[a] = int(sizes.reshape(-1)[k])
            full_scale[a] = out_shape[a] / xs[a]
        else:
            full_scale[a] = float(scales.reshape(-1)[k])
            out_shape[a] = int(np.floor(xs[a] * full_scale[a]))
    if ys is not None and None not in ys and list(ys) != out_shape:
        c.unsupported("the output shape must follow from scales or sizes", f"output shape {ys}, expected {out_shape}")
    dtype = c.info.np_dtype(x)
    g = c.dy()
    for a in range(rank):
        if out_shape[a] == xs[a] and full_scale[a] == 1.0:
            continue
        ctm = _text_attr(c, "coordinate_transformation_mode", "half_pixel")
        if mode in ("nearest", "linear") and not c.attr("antialias", 0) and ctm in _OWN_COORDINATES:
            mat = _interpolation_matrix(c, xs[a], out_shape[a], full_scale[a])
        else:
            mat = _reference_matrix(c, xs[a], out_shape[a], None if sizes is not None and sizes.size
                                    else full_scale[a])
        # dx along axis a: A^T @ dy; move axis a last, multiply by A, move it back.
        perm = list(range(rank))
        perm[a], perm[-1] = perm[-1], perm[a]
        g = b.op("Transpose", [g], perm=perm)
        g = b.op("MatMul", [g, b.const(mat.astype(dtype), hint="interp")])
        g = b.op("Transpose", [g], perm=perm)
    return [g] + [None] * (len(c.node.input) - 1)
