"""Convolution and pooling operators as torch functions: Conv, ConvTranspose, MaxPool,
AveragePool, GlobalAveragePool, GlobalMaxPool (1 to 3 spatial axes, ONNX padding rules).

Converters follow the contract of :mod:`deep500lite.frameworks.torch.ops`.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

from deep500lite.frameworks.torch.ops._common import _torch_pad_list, registrar

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
