"""Convolution, pooling and resizing operators as JAX functions: Conv, ConvTranspose, MaxPool (with
its Indices output), AveragePool, LpPool, GlobalAveragePool, GlobalMaxPool, GlobalLpPool (1 to 3
spatial axes and more, ONNX padding rules: explicit pads, auto_pad, ceil_mode, dilations), and
Resize / Upsample (every mode, coordinate transformation, nearest mode, aspect-ratio policy and
antialiasing ONNX defines, computed as onnx.reference computes them).

Convolutions are ``jax.lax.conv_general_dilated`` (``feature_group_count`` for groups,
``lhs_dilation`` for the transposed form); pooling is ``jax.lax.reduce_window``, or a gather of
the windows where XLA's max-pool gradient does not exist (dilated windows) or the argmax is
wanted. Geometry (pads, output sizes, interpolation weights) is computed in numpy from the
shapes, which are fixed while tracing. Converters follow the contract of
:mod:`deep500lite.frameworks.jax.ops._common`.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from deep500lite.errors import UnsupportedOperatorError
from deep500lite.frameworks.jax.ops._common import registrar
from deep500lite.lv1.converters import resize_output

__all__ = ["CONVERTERS"]

CONVERTERS: dict[str, Callable] = {}
"""ONNX op type -> converter ``fn(ctx, *inputs)`` of this family."""
_op = registrar(CONVERTERS)


def _unsupported(ctx, what: str, allowed: str) -> UnsupportedOperatorError:
    return UnsupportedOperatorError(
        f"The jax executor does not support this {ctx.op} node ('{ctx.name}'); it supports {allowed}; another "
        f"executor may run it. Received: {what}")


def _window_attrs(ctx, nd: int):
    """(strides, dilations) of a conv or pool with ``nd`` spatial axes, defaults filled in."""
    strides = [int(s) for s in (ctx.attr("strides") or [1] * nd)]
    dilations = [int(d) for d in (ctx.attr("dilations") or [1] * nd)]
    return strides, dilations


def _explicit_pads(ctx, sizes, kernel, strides, dilations):
    """Begin and end pads of every spatial axis from ``pads`` / ``auto_pad``."""
    nd = len(kernel)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for size, k, s, d in zip(sizes, kernel, strides, dilations):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            small = total // 2
            if auto_pad == "SAME_UPPER":
                begins.append(small)
                ends.append(total - small)
            else:
                begins.append(total - small)
                ends.append(small)
        return begins, ends
    if auto_pad == "VALID":
        return [0] * nd, [0] * nd
    if auto_pad != "NOTSET":
        raise _unsupported(ctx, f"auto_pad={auto_pad!r}", "auto_pad 'NOTSET', 'VALID', 'SAME_UPPER', 'SAME_LOWER'")
    pads = [int(p) for p in (ctx.attr("pads") or [0] * (2 * nd))]
    return pads[:nd], pads[nd:]


def _bias(y, b, nd):
    return y if b is None else y + jnp.reshape(b, (1, -1) + (1,) * nd)


@_op("Conv")
def _conv(ctx, x, w, b=None):
    nd = w.ndim - 2
    kernel = list(w.shape[2:])
    strides, dilations = _window_attrs(ctx, nd)
    begins, ends = _explicit_pads(ctx, x.shape[2:], kernel, strides, dilations)
    y = lax.conv_general_dilated(x, w, strides, list(zip(begins, ends)), rhs_dilation=dilations,
                                 feature_group_count=int(ctx.attr("group", 1)))
    return _bias(y, b, nd)


@_op("ConvTranspose")
def _conv_transpose(ctx, x, w, b=None):
    nd = w.ndim - 2
    group = int(ctx.attr("group", 1))
    kernel = list(w.shape[2:])
    strides, dilations = _window_attrs(ctx, nd)
    out_pad = [int(p) for p in (ctx.attr("output_padding") or [0] * nd)]
    in_sizes = x.shape[2:]
    full = [s * (i - 1) + op + (k - 1) * d + 1 for s, i, op, k, d in zip(strides, in_sizes, out_pad, kernel, dilations)]
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    out_shape = ctx.attr("output_shape")
    if out_shape is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out_shape = [i * s for i, s in zip(in_sizes, strides)]
    if out_shape is not None:
        begins, ends = [], []
        for f, o in zip(full, list(out_shape)[-nd:]):
            total = f - int(o)
            if auto_pad == "SAME_UPPER":
                begins.append(total // 2)
                ends.append(total - total // 2)
            else:
                begins.append(total - total // 2)
                ends.append(total // 2)
    elif auto_pad == "VALID":
        begins, ends = [0] * nd, [0] * nd
    else:
        pads = [int(p) for p in (ctx.attr("pads") or [0] * (2 * nd))]
        begins, ends = pads[:nd], pads[nd:]
    # The transposed convolution is a convolution of the stride-dilated input with the flipped
    # kernel whose in/out channel axes are swapped within each group.
    c_in, c_out_g = w.shape[0], w.shape[1]
    wk = jnp.reshape(w, (group, c_in // group, c_out_g, *kernel))
    wk = jnp.reshape(jnp.swapaxes(wk, 1, 2), (group * c_out_g, c_in // group, *kernel))
    wk = jnp.flip(wk, axis=tuple(range(2, 2 + nd)))
    padding = [((k - 1) * d - bg, (k - 1) * d - e + op)
               for k, d, bg, e, op in zip(kernel, dilations, begins, ends, out_pad)]
    y = lax.conv_general_dilated(x, wk, [1] * nd, padding, lhs_dilation=strides, rhs_dilation=dilations,
                                 feature_group_count=group)
    return _bias(y, b, nd)


# -------------------------------------------------------------------- pooling

class _PoolGeometry:
    """Pads, output sizes and the extra end padding ``ceil_mode`` needs, for one input shape."""

    def __init__(self, ctx, sizes, kernel=None):
        kernel = [int(k) for k in (kernel or ctx.attr("kernel_shape"))]
        nd = len(kernel)
        self.kernel = kernel
        self.strides, self.dilations = _window_attrs(ctx, nd)
        self.begins, self.ends = _explicit_pads(ctx, sizes, kernel, self.strides, self.dilations)
        ceil_mode = bool(ctx.attr("ceil_mode", 0))
        self.outs, self.extra = [], []
        for size, k, s, d, b, e in zip(sizes, kernel, self.strides, self.dilations, self.begins, self.ends):
            span = size + b + e - ((k - 1) * d + 1)
            out = (-(-span // s) if ceil_mode else span // s) + 1
            if ceil_mode and (out - 1) * s >= size + b:
                out -= 1  # the last window would start inside the end padding
            self.outs.append(out)
            self.extra.append(max((out - 1) * s + (k - 1) * d + 1 - (size + b + e), 0))

    def window(self):
        """``reduce_window`` arguments: window, strides, padding (extra included), window dilation."""
        pads = [(0, 0), (0, 0)] + [(b, e + a) for b, e, a in zip(self.begins, self.ends, self.extra)]
        return ((1, 1, *self.kernel), (1, 1, *self.strides), pads, (1, 1, *self.dilations))


def _lowest(dtype):
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating) or dtype == jnp.bfloat16:
        return np.array(-np.inf, dtype=dtype)
    if dtype == np.bool_:
        return np.array(False)
    return np.array(np.iinfo(dtype).min, dtype=dtype)


def _window_patches(x, geo: _PoolGeometry, fill):
    """All window taps: ``(N, C, *outs, K)`` values and the ``(nd, *outs, K)`` input coordinates of each tap."""
    nd = len(geo.kernel)
    pads = [(0, 0), (0, 0)] + [(b, e + a) for b, e, a in zip(geo.begins, geo.ends, geo.extra)]
    xp = jnp.pad(x, pads, constant_values=fill)
    index, coords = [], []
    for i, (o, k, s, d, b) in enumerate(zip(geo.outs, geo.kernel, geo.strides, geo.dilations, geo.begins)):
        taps = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d  # padded coordinates
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = o, k
        index.append(taps.reshape(shape))
        coords.append(np.broadcast_to(taps.reshape(shape) - b, (*geo.outs, *geo.kernel)))
    patches = xp[(slice(None), slice(None), *index)]
    k_total = math.prod(geo.kernel)
    patches = jnp.reshape(patches, (*patches.shape[:2 + nd], k_total))
    coords = np.stack([c.reshape(*geo.outs, k_total) for c in coords])
    return patches, coords


@_op("MaxPool")
def _max_pool(ctx, x):
    nd = x.ndim - 2
    geo = _PoolGeometry(ctx, x.shape[2:])
    n_out = len(ctx.node.output)
    want_indices = n_out > 1 and bool(ctx.node.output[1])
    fill = _lowest(x.dtype)
    if not want_indices and all(d == 1 for d in geo.dilations):
        window, strides, pads, dil = geo.window()
        y = lax.reduce_window(x, fill, lax.max, window, strides, pads, window_dilation=dil)
        return y if n_out == 1 else (y, None)
    # XLA has no gradient for dilated max windows; gathering the taps is differentiable.
    patches, coords = _window_patches(x, geo, fill)
    y = jnp.max(patches, axis=-1)
    if not want_indices:
        return (y, None) if n_out > 1 else y
    pick = jnp.argmax(patches, axis=-1)  # first maximum of each window
    sizes = list(x.shape[2:])
    order = range(nd) if int(ctx.attr("storage_order", 0)) == 0 else reversed(range(nd))
    flat_of_tap = np.zeros(coords.shape[1:], dtype=np.int64)
    for i in order:
        flat_of_tap = flat_of_tap * sizes[i] + coords[i]
    flat = jnp.take_along_axis(jnp.asarray(flat_of_tap)[None, None], pick[..., None], axis=-1)[..., 0]
    plane = math.prod(sizes)
    base = jnp.arange(x.shape[0] * x.shape[1]).reshape(x.shape[0], x.shape[1], *([1] * nd)) * plane
    return y, (flat + base).astype(jnp.int64 if jax.config.jax_enable_x64 else jnp.int32)


@_op("AveragePool")
def _average_pool(ctx, x):
    sizes = x.shape[2:]
    geo = _PoolGeometry(ctx, sizes)
    window, strides, pads, dil = geo.window()
    total = lax.reduce_window(x, np.array(0, dtype=x.dtype), lax.add, window, strides, pads, window_dilation=dil)
    # How many taps of each window are counted: the input, plus the explicit pads when
    # count_include_pad; never the extra end padding ceil_mode adds.
    if ctx.attr("count_include_pad", 0):
        mask = np.pad(np.ones(sizes), list(zip(geo.begins, geo.ends)), constant_values=1.0)
        mask = np.pad(mask, [(0, a) for a in geo.extra])
    else:
        mask = np.pad(np.ones(sizes), [(b, e + a) for b, e, a in zip(geo.begins, geo.ends, geo.extra)])
    count = _window_sum_numpy(mask, geo.kernel, geo.strides, geo.dilations, geo.outs)
    return total / jnp.asarray(count.reshape(1, 1, *count.shape), dtype=x.dtype)


def _window_sum_numpy(a, kernel, strides, dilations, outs):
    """Sum of every (strided, dilated) window of the padded numpy array ``a``."""
    out = np.zeros(outs)
    for offset in np.ndindex(*kernel):
        sl = tuple(slice(j * d, j * d + (o - 1) * s + 1, s) for j, d, s, o in zip(offset, dilations, strides, outs))
        out += a[sl]
    return out


@_op("LpPool")
def _lp_pool(ctx, x):
    p = float(ctx.attr("p", 2))
    geo = _PoolGeometry(ctx, x.shape[2:])
    window, strides, pads, dil = geo.window()
    powered = x * x if p == 2 else jnp.abs(x) ** p
    total = lax.reduce_window(powered, np.array(0, dtype=x.dtype), lax.add, window, strides, pads,
                              window_dilation=dil)
    return jnp.sqrt(total) if p == 2 else total ** (1.0 / p)


@_op("GlobalAveragePool")
def _global_average_pool(ctx, x):
    return jnp.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True)


@_op("GlobalMaxPool")
def _global_max_pool(ctx, x):
    return jnp.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)


@_op("GlobalLpPool")
def _global_lp_pool(ctx, x):
    p = float(ctx.attr("p", 2))
    axes = tuple(range(2, x.ndim))
    if p == 2:
        return jnp.sqrt(jnp.sum(x * x, axis=axes, keepdims=True))
    return jnp.sum(jnp.abs(x) ** p, axis=axes, keepdims=True) ** (1.0 / p)


# -------------------------------------------------------------------- Resize
# ONNX defines Resize as separable 1-D interpolations: along each resized axis, every output position
# is a weighted sum of a few edge-clamped input positions. The weights depend only on shapes and
# attributes, so they are built in float64 numpy as onnx.reference builds them and applied as one
# contraction per axis (a gather for nearest), which jax differentiates.

_MODES = ("nearest", "linear", "cubic")
_TRANSFORMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_crop_and_resize")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_POLICIES = ("stretch", "not_larger", "not_smaller")


def _cubic_kernel(a: float, t: np.ndarray) -> np.ndarray:
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _tap_coefficients(mode, nearest_mode, cubic_a, antialias, ratios, scale):
    """(out, n) coefficients of the n taps around each source coordinate (``ratios`` in (0, 1])."""
    r = ratios[:, None]
    if mode == "nearest":
        up = {"round_prefer_floor": r > 0.5, "round_prefer_ceil": r >= 0.5,
              "floor": np.zeros_like(r, dtype=bool), "ceil": np.ones_like(r, dtype=bool)}[nearest_mode]
        up = up | (r == 1.0)
        return np.concatenate([~up, up], axis=1).astype(np.float64)
    if mode == "linear" and not antialias:
        return np.concatenate([1 - r, r], axis=1)
    if mode == "cubic" and not antialias:
        return _cubic_kernel(cubic_a, np.concatenate([r + 1, r, 1 - r, 2 - r], axis=1))
    s = min(scale, 1.0)
    reach = 1.0 if mode == "linear" else 2.0
    start = int(np.floor(-reach / s) + 1)
    offsets = np.arange(start, 2 - start)[None, :]
    if mode == "linear":
        c = np.clip(1 - np.abs((offsets - r) * s), 0, 1)
    else:
        c = _cubic_kernel(cubic_a, s * (offsets - r))
    return c / c.sum(axis=1, keepdims=True)


def _source_coordinates(transform, out_w, in_w, scale, roi):
    """Input coordinate of every output position along one axis, and the positions that extrapolate."""
    y = np.arange(out_w, dtype=np.float64)
    width = scale * in_w
    if transform == "align_corners":
        return (np.zeros(out_w) if width == 1 else y * (in_w - 1) / (width - 1)), None
    if transform == "asymmetric":
        return y / scale, None
    if transform == "pytorch_half_pixel":
        return (np.full(out_w, -0.5) if width == 1 else (y + 0.5) / scale - 0.5), None
    if transform == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if transform == "half_pixel_symmetric":
        return in_w / 2 * (1 - out_w / width) + (y + 0.5) / scale - 0.5, None
    lo, hi = roi  # tf_crop_and_resize
    if width == 1:
        x = np.full(out_w, (hi - lo) * (in_w - 1) / 2)
    else:
        x = y * (hi - lo) * (in_w - 1) / (width - 1)
    x = x + lo * (in_w - 1)
    return x, (x < 0) | (x > in_w - 1)


def _axis_weights(opts, out_w, in_w, scale, roi):
    """(out_w, in_w) float64 weight matrix along one axis and the extrapolated rows (or None)."""
    mode, transform, nearest_mode, cubic_a, antialias, exclude_outside = opts
    x, extrapolated = _source_coordinates(transform, out_w, in_w, scale, roi)
    base = np.floor(x)
    ratios = np.where(x == base, 1.0, x - base)
    coeffs = _tap_coefficients(mode, nearest_mode, cubic_a, antialias, ratios, scale)
    n = coeffs.shape[1]
    # The n input positions nearest to x (ties to the smaller one), in edge-padded coordinates.
    half = math.ceil(n / 2)
    shifted = x + half
    p = np.floor(shifted)
    frac = shifted - p
    if n % 2 == 0:
        first = p + np.where(frac == 0, -(n // 2), 1 - n // 2)
    else:
        first = p + np.where(frac <= 0.5, -((n - 1) // 2), 1 - (n - 1) // 2)
    taps = first.astype(np.int64)[:, None] + np.arange(n)[None, :] - half
    if exclude_outside:
        coeffs = np.where((taps < 0) | (taps >= in_w), 0.0, coeffs)
        sums = coeffs.sum(axis=1, keepdims=True)
        coeffs = coeffs / np.where(sums == 0, 1.0, sums)
    weights = np.zeros((out_w, in_w))
    rows = np.repeat(np.arange(out_w), n)
    np.add.at(weights, (rows, np.clip(taps, 0, in_w - 1).reshape(-1)), coeffs.reshape(-1))
    if extrapolated is not None:
        if not extrapolated.any():
            extrapolated = None
        else:
            weights[extrapolated] = 0.0
    return weights, extrapolated


def _resize_plan(shape, axes, scales, sizes, roi, policy):
    """Per resized axis ``(axis, output size, scale, roi pair)``, the identity axes left out."""
    rank = len(shape)
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in axes]
    roi_of = {}
    if roi is not None:
        # kept in the roi's own dtype: onnx.reference scales float32 roi values in float32
        for i, a in enumerate(axes):
            roi_of[a] = (roi[i], roi[len(axes) + i])
    out, factor = resize_output(shape, axes, sizes, scales, policy)
    plan = []
    for a in axes:
        pair = roi_of.get(a, (0.0, 1.0)) if roi is not None else None
        if (math.isclose(factor[a], 1.0) and out[a] == shape[a]
                and (pair is None or (math.isclose(float(pair[0]), 0.0) and math.isclose(float(pair[1]), 1.0)))):
            continue
        plan.append((a, out[a], factor[a], pair))
    return plan


def _resize_options(ctx, mode, transform):
    nearest_mode = ctx.attr("nearest_mode", "round_prefer_floor")
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    antialias = bool(ctx.attr("antialias", 0))
    for name, value, allowed in (("mode", mode, _MODES), ("coordinate_transformation_mode", transform, _TRANSFORMS),
                                 ("nearest_mode", nearest_mode, _NEAREST),
                                 ("keep_aspect_ratio_policy", policy, _POLICIES)):
        if value not in allowed:
            raise _unsupported(ctx, f"{name}={value!r}", f"{name} {', '.join(map(repr, allowed))}")
    if mode == "nearest" and antialias:
        raise _unsupported(ctx, "antialias=1 with mode='nearest'", "antialias with mode 'linear' or 'cubic'")
    opts = (mode, transform, nearest_mode, float(ctx.attr("cubic_coeff_a", -0.75)), antialias,
            bool(ctx.attr("exclude_outside", 0)))
    return opts, policy


def _apply_resize(x, plan, opts, extrapolation):
    """Resize ``x`` along each planned axis; integers interpolate in float and round back."""
    y = x
    integer = not jnp.issubdtype(x.dtype, jnp.floating)
    work = jnp.float32 if x.dtype not in (jnp.float32, jnp.float64) else x.dtype
    for axis, out_w, scale, pair in plan:
        w, extrapolated = _axis_weights(opts, out_w, x.shape[axis], scale, pair)
        if opts[0] == "nearest" and extrapolated is None:
            y = jnp.take(y, np.argmax(w, axis=1), axis=axis)
            continue
        moved = jnp.tensordot(jnp.asarray(y, dtype=work), jnp.asarray(w.T, dtype=work), axes=[[axis], [0]])
        if extrapolated is not None:
            moved = jnp.where(jnp.asarray(extrapolated), jnp.asarray(extrapolation, dtype=work), moved)
        y = jnp.moveaxis(moved, -1, axis)
    if integer and y.dtype != x.dtype:
        info = jnp.iinfo(x.dtype)
        y = jnp.clip(jnp.round(y), info.min, info.max)
    return jnp.asarray(y, dtype=x.dtype)


def _nonempty(ctx, value, what):
    if value is None:
        return None
    value = ctx.static(value, what)
    return None if value.size == 0 else value.reshape(-1)


@_op("Resize")
def _resize(ctx, x, roi=None, scales=None, sizes=None):
    mode = ctx.attr("mode", "nearest")
    transform = ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 11 else "asymmetric")
    opts, policy = _resize_options(ctx, mode, transform)
    if ctx.opset < 11:  # Resize-10 takes (X, scales)
        roi, scales, sizes = None, roi, None
    sizes = _nonempty(ctx, sizes, "sizes")
    scales = _nonempty(ctx, scales, "scales") if sizes is None else None
    if scales is None and sizes is None:
        raise _unsupported(ctx, "neither scales nor sizes", "one of the inputs scales and sizes")
    roi = _nonempty(ctx, roi, "roi") if transform == "tf_crop_and_resize" else None
    plan = _resize_plan(tuple(x.shape), ctx.attr("axes"), scales, sizes, roi, policy)
    return _apply_resize(x, plan, opts, float(ctx.attr("extrapolation_value", 0.0)))


@_op("Upsample")
def _upsample(ctx, x, scales=None):
    mode = ctx.attr("mode", "nearest")
    mode = "linear" if mode in ("bilinear", "trilinear") else mode
    opts, _ = _resize_options(ctx, mode, "asymmetric")
    if scales is None:
        scales = ctx.attr("scales")
        if scales is None:
            raise _unsupported(ctx, "no scales", "scales as an attribute (opset 7) or an input (opset 9)")
    if isinstance(scales, (list, tuple)):  # Upsample-7's attribute
        scales = np.asarray(scales, dtype=np.float32)
    scales = ctx.static(scales, "scales").reshape(-1)
    # Upsample's nearest mode picks floor(x / scale), as asymmetric + floor
    opts = (opts[0], "asymmetric", "floor", *opts[3:])
    plan = _resize_plan(tuple(x.shape), None, scales, None, None, "stretch")
    return _apply_resize(x, plan, opts, 0.0)
