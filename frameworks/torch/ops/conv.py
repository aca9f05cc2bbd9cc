"""Convolution, pooling and resizing operators as torch functions: Conv, ConvTranspose, MaxPool,
AveragePool, GlobalAveragePool, GlobalMaxPool (1 to 3 spatial axes, ONNX padding rules), Resize
(every mode, coordinate transformation, nearest mode and aspect-ratio policy ONNX defines, with
antialiasing, as onnx.reference computes them).

Converters follow the contract of :mod:`deep500lite.frameworks.torch.ops`.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from deep500lite.frameworks.torch.ops._common import _ints, _torch_pad_list, registrar
from deep500lite.lv1.converters import resize_output

__all__ = ["CONVERTERS"]

CONVERTERS: dict[str, Callable] = {}
"""ONNX op type -> converter (``NodeSpec -> function of tensors``) of this family."""
_op = registrar(CONVERTERS)


_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _same_pads(size, kernel, stride, dilation, lower: bool):
    """Begin/end pads making ``out = ceil(in / stride)`` (ONNX auto_pad SAME_*)."""
    total = max((math.ceil(size / stride) - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    small = total // 2
    return (total - small, small) if lower else (small, total - small)


class _Padding:
    """Spatial padding of a conv or pool: symmetric ones go to torch, others to ``F.pad``."""

    def __init__(self, spec, nd, kernel, strides, dilations):
        self.auto_pad = spec.attr("auto_pad", "NOTSET")
        pads = spec.attr("pads") or [0] * (2 * nd)
        if self.auto_pad == "VALID":
            pads = [0] * (2 * nd)
        self.begins, self.ends = list(pads[:nd]), list(pads[nd:])
        self.kernel, self.strides, self.dilations = kernel, strides, dilations
        self.nd = nd

    def dynamic(self) -> bool:
        return self.auto_pad in ("SAME_UPPER", "SAME_LOWER")

    def pads_for(self, shape):
        if not self.dynamic():
            return self.begins, self.ends
        lower = self.auto_pad == "SAME_LOWER"
        pairs = [_same_pads(s, k, st, d, lower) for s, k, st, d in
                 zip(shape[-self.nd:], self.kernel, self.strides, self.dilations)]
        return [p[0] for p in pairs], [p[1] for p in pairs]


@_op("Conv")
def _conv(spec):
    w = spec.const(1)
    kernel = spec.attr("kernel_shape") or (None if w is None else list(w.shape[2:]))
    nd = len(kernel) if kernel else None
    group = spec.attr("group", 1)

    def make(nd, kernel):
        if nd not in _CONV:
            raise spec.unsupported(f"{nd} spatial dimensions (1 to 3 are supported)")
        strides = spec.attr("strides") or [1] * nd
        dilations = spec.attr("dilations") or [1] * nd
        padding = _Padding(spec, nd, kernel, strides, dilations)
        conv = _CONV[nd]
        if not padding.dynamic() and padding.begins == padding.ends:
            sym = padding.begins
            return lambda x, w, b=None: conv(x, w, b, strides, sym, dilations, group)
        if not padding.dynamic():
            pad = _torch_pad_list(padding.begins, padding.ends)
            return lambda x, w, b=None: conv(F.pad(x, pad), w, b, strides, 0, dilations, group)

        def run(x, w, b=None):
            begins, ends = padding.pads_for(x.shape)
            if begins == ends:
                return conv(x, w, b, strides, begins, dilations, group)
            return conv(F.pad(x, _torch_pad_list(begins, ends)), w, b, strides, 0, dilations, group)
        return run

    if kernel is not None:
        return make(nd, kernel)
    cache = {}

    def lazy(x, w, b=None):
        key = tuple(w.shape)
        if key not in cache:
            cache[key] = make(w.dim() - 2, list(w.shape[2:]))
        return cache[key](x, w, b)
    return lazy


@_op("ConvTranspose")
def _conv_transpose(spec):
    group = spec.attr("group", 1)
    auto_pad = spec.attr("auto_pad", "NOTSET")

    def run(x, w, b=None):
        nd = w.dim() - 2
        if nd not in _CONV_T:
            raise spec.unsupported(f"{nd} spatial dimensions (1 to 3 are supported)")
        kernel = spec.attr("kernel_shape") or list(w.shape[2:])
        strides = spec.attr("strides") or [1] * nd
        dilations = spec.attr("dilations") or [1] * nd
        out_pad = spec.attr("output_padding") or [0] * nd
        pads = spec.attr("pads") or [0] * (2 * nd)
        in_sizes = x.shape[2:]
        full = [s * (i - 1) + op + (k - 1) * d + 1
                for s, i, op, k, d in zip(strides, in_sizes, out_pad, kernel, dilations)]
        out_shape = spec.attr("output_shape")
        if out_shape is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out_shape = [i * s for i, s in zip(in_sizes, strides)]
        if out_shape is not None:
            out_shape = list(out_shape)[-nd:]
            begins, ends = [], []
            for f, o in zip(full, out_shape):
                total = f - o
                if auto_pad == "SAME_UPPER":
                    begins.append(total // 2)
                    ends.append(total - total // 2)
                else:
                    begins.append(total - total // 2)
                    ends.append(total // 2)
        else:
            begins, ends = pads[:nd], pads[nd:]
        y = _CONV_T[nd](x, w, None, strides, 0, 0, group, dilations)
        # torch's result has the size without output_padding; output_padding adds zeros at the end,
        # then ONNX's pads crop (negative F.pad) both sides.
        crop = _torch_pad_list([-p for p in begins], [op - p for op, p in zip(out_pad, ends)])
        if any(crop):
            y = F.pad(y, crop)
        if b is not None:
            y = y + b.reshape(1, -1, *([1] * nd))
        return y
    return run


# -------------------------------------------------------------------- pooling
_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def _pool_output_size(size, k, s, d, b, e, ceil_mode):
    span = size + b + e - ((k - 1) * d + 1)
    out = (span // s if not ceil_mode else -(-span // s)) + 1
    if ceil_mode and (out - 1) * s >= size + b:
        out -= 1  # the last window would start in the end padding
    return out


def _pool_geometry(spec, nd, x_shape, padding):
    begins, ends = padding.pads_for(x_shape)
    ceil_mode = spec.attr("ceil_mode", 0)
    extra = []
    for size, k, s, d, b, e in zip(x_shape[-nd:], padding.kernel, padding.strides, padding.dilations,
                                   begins, ends):
        out = _pool_output_size(size, k, s, d, b, e, ceil_mode)
        need = (out - 1) * s + (k - 1) * d + 1 - (size + b + e)
        extra.append(max(need, 0))
    return begins, ends, extra


@_op("MaxPool")
def _max_pool(spec):
    kernel = spec.attr("kernel_shape")
    nd = len(kernel)
    if nd not in _MAX_POOL:
        raise spec.unsupported(f"{nd} spatial dimensions (1 to 3 are supported)")
    strides = spec.attr("strides") or [1] * nd
    dilations = spec.attr("dilations") or [1] * nd
    padding = _Padding(spec, nd, kernel, strides, dilations)
    ceil_mode = bool(spec.attr("ceil_mode", 0))
    storage_order = spec.attr("storage_order", 0)
    want_indices = spec.n_outputs > 1 and spec.outputs_wanted[1]
    pool = _MAX_POOL[nd]
    fast = (not padding.dynamic() and padding.begins == padding.ends
            and all(p * 2 <= k for p, k in zip(padding.begins, kernel)) and not want_indices)
    if fast:
        sym = padding.begins
        return lambda x: pool(x, kernel, strides, sym, dilations, ceil_mode)

    def run(x):
        dtype = x.dtype
        if not x.is_floating_point():
            x = x.to(torch.float64)
        begins, ends, extra = _pool_geometry(spec, nd, x.shape, padding)
        ends = [e + a for e, a in zip(ends, extra)]
        xp = F.pad(x, _torch_pad_list(begins, ends), value=-math.inf) if any(begins + ends) else x
        y, idx = pool(xp, kernel, strides, 0, dilations, False, True)
        y = y.to(dtype)
        if not want_indices:
            return (y, None) if spec.n_outputs > 1 else y
        # idx indexes the padded plane; map it to the input's flattened (N, C, spatial) position.
        coords, rest = [], idx
        for size in reversed(xp.shape[2:]):
            coords.append(rest % size)
            rest = rest // size
        coords = [c - b for c, b in zip(reversed(coords), begins)]
        sizes = list(x.shape[2:])
        flat = torch.zeros_like(idx)
        order = range(nd) if storage_order == 0 else reversed(range(nd))
        for i in order:
            flat = flat * sizes[i] + coords[i]
        plane = math.prod(sizes)
        base = torch.arange(x.shape[0] * x.shape[1], device=x.device).reshape(x.shape[0], x.shape[1],
                                                                               *([1] * nd))
        return y, flat + base * plane
    return run


@_op("AveragePool")
def _avg_pool(spec):
    kernel = spec.attr("kernel_shape")
    nd = len(kernel)
    if nd not in _AVG_POOL:
        raise spec.unsupported(f"{nd} spatial dimensions (1 to 3 are supported)")
    strides = spec.attr("strides") or [1] * nd
    dilations = spec.attr("dilations") or [1] * nd
    padding = _Padding(spec, nd, kernel, strides, dilations)
    include_pad = bool(spec.attr("count_include_pad", 0))
    ceil_mode = bool(spec.attr("ceil_mode", 0))
    pool = _AVG_POOL[nd]
    if (not padding.dynamic() and padding.begins == padding.ends and not ceil_mode
            and all(d == 1 for d in dilations) and all(p * 2 <= k for p, k in zip(padding.begins, kernel))):
        sym = padding.begins
        return lambda x: pool(x, kernel, strides, sym, False, include_pad)
    conv = _CONV[nd]

    def run(x):
        begins, ends, extra = _pool_geometry(spec, nd, x.shape, padding)
        c = x.shape[1]
        ones = torch.ones((c, 1, *kernel), dtype=x.dtype, device=x.device)
        pad = _torch_pad_list(begins, [e + a for e, a in zip(ends, extra)])
        total = conv(F.pad(x, pad), ones, None, strides, 0, dilations, c)
        mask = torch.ones((1, 1, *x.shape[2:]), dtype=x.dtype, device=x.device)
        if include_pad:
            mask = F.pad(mask, _torch_pad_list(begins, ends), value=1.0)
            mask = F.pad(mask, _torch_pad_list([0] * nd, extra))
        else:
            mask = F.pad(mask, pad)
        count = conv(mask, ones[:1], None, strides, 0, dilations)
        return total / count
    return run


@_op("GlobalAveragePool")
def _global_avg_pool(spec):
    return lambda x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True)


@_op("GlobalMaxPool")
def _global_max_pool(spec):
    return lambda x: x.amax(dim=tuple(range(2, x.dim())), keepdim=True)


# Resize. ONNX defines it as separable 1-D interpolation: along each resized axis every output
# position is a fixed weighted sum of input positions (edge-clamped). The weights depend only on the
# sizes, scales and attributes, so they are built once per input shape, in float64 exactly as
# onnx.reference computes them, and applied as one matrix product per axis (an index selection for
# nearest), which torch differentiates.

_RESIZE_MODES = ("nearest", "linear", "cubic")
_COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                     "asymmetric", "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")


def _nearest_coeffs(mode):
    def coeffs(ratio, scale):
        if ratio == 1.0:
            return [0.0, 1.0]
        up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
              "floor": False, "ceil": True}[mode]
        return [0.0, 1.0] if up else [1.0, 0.0]
    return coeffs


def _linear_coeffs(antialias):
    def coeffs(ratio, scale):
        if not antialias:
            return [1.0 - ratio, ratio]
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, 2 - start) - ratio) * scale
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()
    return coeffs


def _cubic_coeffs(a, antialias):
    def kernel(x):
        x = abs(x)
        if x <= 1:
            return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
        return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a if x < 2 else 0.0

    def coeffs(ratio, scale):
        if not antialias:
            return [kernel(ratio + 1), kernel(ratio), kernel(1 - ratio), kernel(2 - ratio)]
        scale = min(scale, 1.0)
        start = int(np.floor(-2 / scale) + 1)
        c = np.array([kernel(scale * (i - ratio)) for i in range(start, 2 - start)])
        return c / c.sum()
    return coeffs


def _source_coordinates(ctm, out_w, in_w, scale, roi):
    """Input coordinate of every output position along one axis, and which ones extrapolate."""
    y = np.arange(out_w, dtype=np.float64)
    width = scale * in_w
    extrapolated = None
    if ctm == "align_corners":
        x = np.zeros(out_w) if width == 1 else y * (in_w - 1) / (width - 1)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_crop_and_resize":
        lo, hi = roi
        x = np.full(out_w, (hi - lo) * (in_w - 1) / 2) if width == 1 else y * (hi - lo) * (in_w - 1) / (width - 1)
        x = x + lo * (in_w - 1)
        extrapolated = (x < 0) | (x > in_w - 1)
    elif ctm == "pytorch_half_pixel":
        x = np.full(out_w, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    else:  # half_pixel_symmetric
        x = in_w / 2 * (1 - out_w / width) + (y + 0.5) / scale - 0.5
    return x, extrapolated


def _resize_weights(coeffs_fn, ctm, exclude_outside, out_w, in_w, scale, roi):
    """(out_w, in_w) float64 interpolation weights along one axis, and the extrapolated rows (or None)."""
    x, extrapolated = _source_coordinates(ctm, out_w, in_w, scale, roi)
    floor = np.floor(x)
    ratios = np.where(x == floor, 1.0, x - floor)
    coeffs = np.array([np.asarray(coeffs_fn(float(r), scale), dtype=np.float64) for r in ratios])
    coeffs = coeffs.reshape(out_w, -1)
    n = coeffs.shape[1]
    # The n input positions nearest to x, ties to the smaller index (onnx.reference's neighbour rule).
    pad = math.ceil(n / 2)
    p = np.floor(x + pad)
    frac = x + pad - p
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        offset = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    taps = (p + offset).astype(np.int64)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((taps < 0) | (taps >= in_w), 0.0, coeffs)
        total = coeffs.sum(axis=-1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    weights = np.zeros((out_w, in_w))
    np.add.at(weights, (np.repeat(np.arange(out_w), n), np.clip(taps, 0, in_w - 1).reshape(-1)), coeffs.reshape(-1))
    if extrapolated is not None:
        weights[extrapolated] = 0.0
        if not extrapolated.any():
            extrapolated = None
    return weights, extrapolated


def _resize_plan(shape, axes, scales, sizes, roi, policy):
    """Per resized axis: (axis, output size, scale, roi pair), as onnx.reference derives them."""
    r = len(shape)
    axes = list(range(r)) if axes is None else [a % r for a in axes]
    full_roi = None
    if roi is not None:
        full_roi = [0.0] * r + [1.0] * r
        for i, a in enumerate(axes):
            full_roi[a], full_roi[r + a] = float(roi[i]), float(roi[len(axes) + i])
    out, factor = resize_output(shape, axes, sizes, scales, policy)
    plan = []
    for a in axes:
        pair = None if full_roi is None else (full_roi[a], full_roi[r + a])
        identity = math.isclose(factor[a], 1.0) and out[a] == shape[a] and (
            pair is None or (math.isclose(pair[0], 0.0) and math.isclose(pair[1], 1.0)))
        if not identity:
            plan.append((a, out[a], factor[a], pair))
    return plan


@_op("Resize")
def _resize(spec):
    mode = spec.attr("mode", "nearest")
    ctm = spec.attr("coordinate_transformation_mode", "half_pixel" if spec.opset >= 11 else "asymmetric")
    nearest_mode = spec.attr("nearest_mode", "round_prefer_floor")
    policy = spec.attr("keep_aspect_ratio_policy", "stretch")
    antialias = bool(spec.attr("antialias", 0))
    for name, value, allowed in (("mode", mode, _RESIZE_MODES), ("coordinate_transformation_mode", ctm,
                                 _COORDINATE_MODES), ("nearest_mode", nearest_mode, _NEAREST_MODES),
                                 ("keep_aspect_ratio_policy", policy, _ASPECT_POLICIES)):
        if value not in allowed:
            raise spec.unsupported(f"{name}={value!r}", f"{name} {', '.join(map(repr, allowed))}")
    if mode == "nearest" and antialias:
        raise spec.unsupported("antialias=1, mode='nearest'", "antialias with mode 'linear' or 'cubic' (as ONNX "
                               "defines it)")
    if mode == "nearest":
        coeffs_fn = _nearest_coeffs(nearest_mode)
    elif mode == "linear":
        coeffs_fn = _linear_coeffs(antialias)
    else:
        coeffs_fn = _cubic_coeffs(spec.attr("cubic_coeff_a", -0.75), antialias)
    exclude_outside = bool(spec.attr("exclude_outside", 0))
    extrapolation = float(spec.attr("extrapolation_value", 0.0))
    axes_attr = spec.attr("axes")
    cache: dict = {}

    def weights_for(x, roi, scales, sizes):
        scales = None if scales is None or scales.numel() == 0 else scales.reshape(-1).tolist()
        sizes = None if sizes is None or sizes.numel() == 0 else _ints(sizes)
        roi = None if roi is None or roi.numel() == 0 or ctm != "tf_crop_and_resize" else roi.reshape(-1).tolist()
        key = (tuple(x.shape), x.dtype, x.device, None if scales is None else tuple(scales),
               None if sizes is None else tuple(sizes), None if roi is None else tuple(roi))
        if key not in cache:
            if len(cache) >= 64:  # inputs of ever-changing shapes: keep the memory bounded
                cache.clear()
            steps = []
            for axis, out_w, scale, pair in _resize_plan(tuple(x.shape), axes_attr, scales, sizes, roi, policy):
                w, extrapolated = _resize_weights(coeffs_fn, ctm, exclude_outside, out_w, x.shape[axis], scale, pair)
                if mode == "nearest" and extrapolated is None:
                    steps.append((axis, torch.as_tensor(w.argmax(axis=1), device=x.device), None))
                    continue
                # Half-precision inputs interpolate in float32, integers in float64, as onnx.reference rounds once.
                dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else (
                    torch.float32 if x.is_floating_point() else torch.float64)
                mask = None if extrapolated is None else torch.as_tensor(extrapolated, device=x.device)
                steps.append((axis, torch.as_tensor(w, dtype=dtype, device=x.device), mask))
            cache[key] = steps
        return cache[key]

    def run(x, roi=None, scales=None, sizes=None):
        if spec.opset < 11:
            roi, scales, sizes = None, roi, None
        y = x
        for axis, w, mask in weights_for(x, roi, scales, sizes):
            if w.dim() == 1:
                y = y.index_select(axis, w)
                continue
            moved = torch.movedim(y.to(w.dtype), axis, -1) @ w.t()
            if mask is not None:
                moved = torch.where(mask, torch.tensor(extrapolation, dtype=w.dtype, device=w.device), moved)
            y = torch.movedim(moved, -1, axis)
        if y.dtype != x.dtype and not x.is_floating_point():
            info = torch.iinfo(x.dtype)
            y = y.round().clamp(info.min, info.max)
        return y.to(x.dtype)
    return run
