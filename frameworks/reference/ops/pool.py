"""Pooling kernels of the reference executor: vectorized numpy ``MaxPool`` and ``AveragePool``.

(``MaxPool`` windows that tile the input, kernel equal to stride without padding, are taken by a
reshape instead of a stack of strided copies.)

``onnx.reference`` computes the wrong output shape for ``ceil_mode=1`` in some cases (for
example a stride-1 ``MaxPool`` with padding gets one output too few), and loops in Python over
every output position. These kernels follow the ONNX definition: with ``ceil_mode`` the output
size is rounded up, but a last window that would start in the right padding (past the input and
the left padding) is dropped, as torch and ONNX Runtime do. Positions past the explicit padding
that ``ceil_mode`` adds take no part in a window (not in the maximum, not in an average's divisor).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from onnx.reference.op_run import OpRun

__all__ = ["MaxPool", "AveragePool", "pool_output_shape"]


def _text(value, default: str) -> str:
    if isinstance(value, bytes):
        value = value.decode()
    return value or default


def pool_output_shape(in_sizes, kernel, strides, dilations, pads, ceil_mode, auto_pad="NOTSET"):
    """Output sizes and (begin, end) padding per spatial axis of an ONNX pooling operator.

    Args:
        in_sizes: the input's spatial sizes.
        kernel, strides, dilations: per spatial axis.
        pads: ``[begin_1, ..., begin_n, end_1, ..., end_n]``.
        ceil_mode: round the output size up instead of down.
        auto_pad: ``NOTSET``, ``VALID``, ``SAME_UPPER`` or ``SAME_LOWER``.

    Returns:
        ``(out_sizes, begin, end)``: lists with one entry per spatial axis.
    """
    n = len(in_sizes)
    extent = [(kernel[i] - 1) * dilations[i] + 1 for i in range(n)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [math.ceil(in_sizes[i] / strides[i]) for i in range(n)]
        total = [max((out[i] - 1) * strides[i] + extent[i] - in_sizes[i], 0) for i in range(n)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        return (out, small, big) if auto_pad == "SAME_UPPER" else (out, big, small)
    if auto_pad == "VALID":
        return [(in_sizes[i] - extent[i]) // strides[i] + 1 for i in range(n)], [0] * n, [0] * n
    begin, end = list(pads[:n]), list(pads[n:])
    out = []
    for i in range(n):
        span = in_sizes[i] + begin[i] + end[i] - extent[i]
        size = (-(-span // strides[i]) if ceil_mode else span // strides[i]) + 1
        if ceil_mode and (size - 1) * strides[i] >= in_sizes[i] + begin[i]:
            size -= 1  # the last window would start in the right padding
        out.append(size)
    return out, begin, end


def _windows(padded, out, strides, dilations, kernel):
    """The window elements as one leading axis: shape ``(prod(kernel), N, C, *out)``."""
    n = len(out)
    views = []
    for offset in itertools.product(*(range(k) for k in kernel)):
        index = tuple(slice(offset[i] * dilations[i], offset[i] * dilations[i] + (out[i] - 1) * strides[i] + 1,
                            strides[i]) for i in range(n))
        views.append(padded[(Ellipsis, *index)])
    return np.stack(views)


def _pad_to(x, value, begin, out, strides, dilations, kernel):
    """``x`` padded with ``value``: ``begin`` before, and after as far as the last window reaches."""
    n = len(out)
    reach = [(out[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 for i in range(n)]
    shape = x.shape[:2] + tuple(max(reach[i], begin[i] + x.shape[2 + i]) for i in range(n))
    padded = np.full(shape, value, dtype=x.dtype)
    padded[(Ellipsis, *(slice(begin[i], begin[i] + x.shape[2 + i]) for i in range(n)))] = x
    return padded


def _attributes(x, kernel_shape, strides, dilations, pads, auto_pad):
    n = x.ndim - 2
    kernel = list(kernel_shape)
    strides = list(strides) if strides is not None else [1] * n
    dilations = list(dilations) if dilations is not None else [1] * n
    pads = list(pads) if pads is not None else [0] * (2 * n)
    return kernel, strides, dilations, pads, _text(auto_pad, "NOTSET")


class MaxPool(OpRun):
    """ONNX ``MaxPool`` (any number of spatial axes, dilations, padding, ``ceil_mode``, ``Indices``)."""

    op_domain = ""

    def _run(self, x, auto_pad=None, ceil_mode=None, dilations=None, kernel_shape=None, pads=None,
             storage_order=None, strides=None):
        kernel, strides, dilations, pads, auto_pad = _attributes(x, kernel_shape, strides, dilations, pads, auto_pad)
        out, begin, _ = pool_output_shape(x.shape[2:], kernel, strides, dilations, pads, bool(ceil_mode), auto_pad)
        n = len(out)
        if (kernel == strides and not any(begin) and all(d == 1 for d in dilations)
                and all(out[i] * kernel[i] <= x.shape[2 + i] for i in range(n))):
            # Windows that tile the input: one reshape and copy, the taps first in row-major order as below.
            tiles = x[(Ellipsis, *(slice(0, out[i] * kernel[i]) for i in range(n)))]
            tiles = tiles.reshape(x.shape[:2] + tuple(v for i in range(n) for v in (out[i], kernel[i])))
            tiles = tiles.transpose((*range(3, 3 + 2 * n, 2), 0, 1, *range(2, 2 + 2 * n, 2)))
            windows, axis = tiles.reshape((-1,) + x.shape[:2] + tuple(out)), 0
        else:
            lowest = -np.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min
            windows, axis = _windows(_pad_to(x, lowest, begin, out, strides, dilations, kernel), out, strides,
                                     dilations, kernel), 0
        if len(self.onnx_node.output) < 2 or not self.onnx_node.output[1]:
            return (windows.max(axis=axis),)
        y, best = _max_and_first_argmax(windows)
        sizes = list(x.shape[2:])
        # flat offset of each spatial axis within one (n, c) image; column-major with storage_order
        order = range(n - 1, -1, -1) if not storage_order else range(n)
        step, elem = 1, [0] * n
        for i in order:
            elem[i] = step
            step *= sizes[i]
        taps = np.zeros(int(np.prod(kernel)), dtype=np.int64)
        for t, offset in enumerate(itertools.product(*(range(k) for k in kernel))):
            taps[t] = sum(offset[i] * dilations[i] * elem[i] for i in range(n))
        corner = np.zeros(tuple(out), dtype=np.int64)
        for i in range(n):
            start = (np.arange(out[i]) * strides[i] - begin[i]) * elem[i]
            corner = corner + start.reshape((-1,) + (1,) * (n - 1 - i))
        plane = int(np.prod(sizes))
        base = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(x.shape[:2] + (1,) * n) * plane
        return y, taps[best] + corner + base


def _max_and_first_argmax(windows):
    """The maximum over the leading (taps) axis and the first tap that holds it (NaN first, as ``argmax``).

    One elementwise pass per tap: ``argmax`` over a leading axis copies the array to make the axis
    contiguous, which costs more than the pooling itself.
    """
    best = np.zeros(windows.shape[1:], dtype=np.intp)
    y = windows[0].copy()
    floating = windows.dtype.kind in "fc"
    for t in range(1, windows.shape[0]):
        w = windows[t]
        better = w > y
        if floating:
            better |= np.isnan(w) & ~np.isnan(y)
        best[better] = t
        np.copyto(y, w, where=better)
    return y, best


class AveragePool(OpRun):
    """ONNX ``AveragePool`` (every opset: any spatial axes, dilations, padding, ``ceil_mode``,
    ``count_include_pad``)."""

    op_domain = ""

    def _run(self, x, auto_pad=None, ceil_mode=None, dilations=None, kernel_shape=None, pads=None, strides=None,
             count_include_pad=None):
        kernel, strides, dilations, pads, auto_pad = _attributes(x, kernel_shape, strides, dilations, pads, auto_pad)
        out, begin, end = pool_output_shape(x.shape[2:], kernel, strides, dilations, pads, bool(ceil_mode),
                                            auto_pad)
        total = _windows(_pad_to(x, 0, begin, out, strides, dilations, kernel), out, strides, dilations,
                         kernel).sum(axis=0, dtype=np.float64 if x.dtype == np.float64 else np.float32)
        n = len(out)
        counted = np.ones((1, 1) + tuple(x.shape[2:]), dtype=np.float32)
        pad_begin = begin
        if count_include_pad:  # padding counts; the extra positions ceil_mode adds do not
            counted = np.pad(counted, [(0, 0), (0, 0)] + [(begin[i], end[i]) for i in range(n)], constant_values=1)
            pad_begin = [0] * n
        counts = _windows(_pad_to(counted, 0, pad_begin, out, strides, dilations, kernel), out, strides, dilations,
                          kernel).sum(axis=0)
        return ((total / np.maximum(counts, 1)).astype(x.dtype),)
