"""Convolution kernels of the reference executor: vectorized numpy ``Conv`` and ``ConvTranspose``.

:class:`Conv` takes the windows of the padded input as a strided view
(``numpy.lib.stride_tricks.sliding_window_view``, strides and dilations as slices of it) and
contracts them with the weights in one ``np.tensordot`` per group (a BLAS matrix product, in the
inputs' dtype as ``onnx.reference``'s im2col product is); ``onnx.reference`` builds the same
matrix by fancy indexing, which costs more than the product on small networks.

``onnx.reference`` computes ``ConvTranspose`` with a Python loop over every output position
(``col2im``), which makes it the bulk of a training step of a convolutional network (the input
gradient of a convolution is a transposed convolution). :class:`ConvTranspose` here computes the
same thing as the convolution above of the input spread out by the strides with the flipped
kernel; the tests compare it with
``onnx.reference``'s own implementation, and ONNX's backend tests run it as part of the reference
executor's conformance.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from onnx.reference.op_run import OpRun

from deep500lite.errors import UserError

__all__ = ["Conv", "ConvTranspose"]


def _pads(auto_pad, in_sizes, kernel, strides, dilations, output_padding, output_shape, pads):
    """Begin and end padding per spatial axis, following the ONNX ConvTranspose definition."""
    n = len(in_sizes)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") and output_shape is None:
        output_shape = [in_sizes[i] * strides[i] for i in range(n)]
    if output_shape is not None:
        output_shape = list(output_shape)[-n:]
        begin, end = [], []
        for i in range(n):
            total = (strides[i] * (in_sizes[i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1
                     - output_shape[i])
            # A negative total (output_shape larger than the full result) extends with zeros.
            if auto_pad == "SAME_UPPER":
                begin.append(total // 2)
                end.append(total - total // 2)
            else:
                begin.append(total - total // 2)
                end.append(total // 2)
        return begin, end
    if auto_pad == "VALID" or pads is None:
        return [0] * n, [0] * n
    return list(pads[:n]), list(pads[n:])


def _attributes(X, W, auto_pad, group, kernel_shape, strides, dilations):
    """Conv's and ConvTranspose's shared attributes with ONNX's defaults filled in:
    ``(auto_pad, group, kernel, strides, dilations)``."""
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    n_spatial = X.ndim - 2
    return (auto_pad or "NOTSET", int(group or 1),
            list(kernel_shape) if kernel_shape is not None else list(W.shape[2:]),
            list(strides) if strides is not None else [1] * n_spatial,
            list(dilations) if dilations is not None else [1] * n_spatial)


class ConvTranspose(OpRun):
    """ONNX ``ConvTranspose`` (any number of spatial axes, groups, strides, dilations, padding)."""

    op_domain = ""

    def _run(self, X, W, B=None, auto_pad=None, dilations=None, group=None, kernel_shape=None,
             output_padding=None, output_shape=None, pads=None, strides=None):
        auto_pad, group, kernel, strides, dilations = _attributes(X, W, auto_pad, group, kernel_shape, strides,
                                                                  dilations)
        n_spatial = X.ndim - 2
        output_padding = list(output_padding) if output_padding is not None else [0] * n_spatial
        in_sizes = list(X.shape[2:])
        begin, end = _pads(auto_pad, in_sizes, kernel, strides, dilations, output_padding, output_shape, pads)

        n, c_in = X.shape[:2]
        c_out_g = W.shape[1]
        c_in_g = c_in // group
        full = [strides[i] * (in_sizes[i] - 1) + (kernel[i] - 1) * dilations[i] + 1 + output_padding[i]
                for i in range(n_spatial)]
        dtype = np.result_type(X.dtype, W.dtype)
        # The full transposed convolution is a cross-correlation of the input, spread out by the
        # strides (zeros between samples) and padded by the kernel's span, with the flipped kernel
        # (in and out channels swapped per group).
        spread = np.zeros((n, c_in, *[strides[i] * (in_sizes[i] - 1) + 1 for i in range(n_spatial)]), dtype=X.dtype)
        spread[(slice(None), slice(None), *(slice(None, None, s) for s in strides))] = X
        flipped = W[(slice(None), slice(None), *(slice(None, None, -1),) * n_spatial)]
        flipped = flipped.reshape(group, c_in_g, c_out_g, *kernel).swapaxes(1, 2).reshape(
            group * c_out_g, c_in_g, *kernel)
        reach = [(kernel[i] - 1) * dilations[i] for i in range(n_spatial)]
        y = _convolve(spread, flipped, reach, [reach[i] + output_padding[i] for i in range(n_spatial)],
                      [1] * n_spatial, dilations, group).astype(dtype, copy=False)
        out_sizes = [full[i] - begin[i] - end[i] for i in range(n_spatial)]
        if all(b >= 0 for b in begin) and all(e >= 0 for e in end):
            y = y[(slice(None), slice(None), *(slice(begin[i], begin[i] + out_sizes[i]) for i in range(n_spatial)))]
        else:  # output position o is full position o + begin; positions outside the full result are zero
            out = np.zeros((n, y.shape[1], *out_sizes), dtype=dtype)
            src = tuple(slice(max(begin[i], 0), min(full[i], begin[i] + out_sizes[i])) for i in range(n_spatial))
            dst = tuple(slice(s.start - begin[i], s.stop - begin[i]) for i, s in enumerate(src))
            out[(slice(None), slice(None), *dst)] = y[(slice(None), slice(None), *src)]
            y = out
        if B is not None:
            y = y + B.reshape((1, -1) + (1,) * n_spatial)
        return (np.ascontiguousarray(y.astype(X.dtype, copy=False)),)


def _conv_pads(auto_pad, in_sizes, kernel, strides, dilations, pads):
    """Begin and end padding per spatial axis of an ONNX ``Conv`` (``SAME_*`` as ``onnx.reference`` pads)."""
    n = len(in_sizes)
    if auto_pad == "VALID":
        return [0] * n, [0] * n
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for i in range(n):
            target = (in_sizes[i] + strides[i] - 1) // strides[i]
            needed = max(0, (target - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_sizes[i])
            head = (needed + 1) // 2 if auto_pad == "SAME_LOWER" else needed // 2
            begin.append(head)
            end.append(needed - head)
        return begin, end
    if pads is None:
        return [0] * n, [0] * n
    return list(pads[:n]), list(pads[n:])


def _convolve(X, W, begin, end, strides, dilations, group):
    """Cross-correlation of ``X`` (N, C, *sizes) with ``W`` (O, C / group, *kernel), padded by ``begin``/``end``.

    The windows are a strided view of the padded input. When the output has many positions per
    sample compared with the taps (forward convolutions), one batched product per sample and group
    (``W @ columns``) gives the result in (N, O, *out) order directly; otherwise (the weight
    gradients of autodiff, with a kernel as large as the image) one ``tensordot`` per group
    contracts channels and taps of all samples at once.
    """
    n_spatial = X.ndim - 2
    if any(begin) or any(end):
        X = np.pad(X, [(0, 0), (0, 0)] + [(b, e) for b, e in zip(begin, end)])
    kernel = list(W.shape[2:])
    span = [(kernel[i] - 1) * dilations[i] + 1 for i in range(n_spatial)]
    # (N, C, *out, *kernel) view: strides pick outputs, dilations pick kernel taps.
    windows = sliding_window_view(X, span, axis=tuple(range(2, 2 + n_spatial)))
    windows = windows[(slice(None), slice(None), *(slice(None, None, s) for s in strides),
                       *(slice(None, None, d) for d in dilations))]
    n = X.shape[0]
    out = list(windows.shape[2:2 + n_spatial])
    c_in_g, c_out_g = W.shape[1], W.shape[0] // group
    taps = int(np.prod(kernel))
    positions = int(np.prod(out))
    if c_in_g * taps <= 4 * positions:
        cols = windows.reshape(n, group, c_in_g, *out, *kernel)
        cols = np.moveaxis(cols, tuple(range(3, 3 + n_spatial)), tuple(range(3 + n_spatial, 3 + 2 * n_spatial)))
        cols = cols.reshape(n, group, c_in_g * taps, positions)
        y = np.matmul(W.reshape(group, c_out_g, c_in_g * taps), cols)
        return y.reshape(n, group * c_out_g, *out)
    parts = []
    for g in range(group):
        wg = W[g * c_out_g:(g + 1) * c_out_g]
        xg = windows[:, g * c_in_g:(g + 1) * c_in_g]
        parts.append(np.tensordot(xg, wg, axes=([1, *range(2 + n_spatial, 2 + 2 * n_spatial)],
                                                [1, *range(2, 2 + n_spatial)])))
    y = parts[0] if group == 1 else np.concatenate(parts, axis=-1)
    return np.moveaxis(y, -1, 1)


class Conv(OpRun):
    """ONNX ``Conv`` (any number of spatial axes, groups, strides, dilations, padding)."""

    op_domain = ""

    def _run(self, X, W, B=None, auto_pad=None, dilations=None, group=None, kernel_shape=None, pads=None,
             strides=None):
        auto_pad, group, kernel, strides, dilations = _attributes(X, W, auto_pad, group, kernel_shape, strides,
                                                                  dilations)
        n_spatial = X.ndim - 2
        if X.shape[1] != W.shape[1] * group or W.shape[0] % group != 0:
            raise UserError(f"Conv: X has {X.shape[1]} channels and W {W.shape[1]} per group with group={group}; "
                             f"X's channels must be W.shape[1] * group and W.shape[0] a multiple of group. "
                             f"Received: X {list(X.shape)}, W {list(W.shape)}")
        begin, end = _conv_pads(auto_pad, list(X.shape[2:]), kernel, strides, dilations, pads)
        y = _convolve(X, W, begin, end, strides, dilations, group)
        if B is not None:
            y = y + B.reshape((1, -1) + (1,) * n_spatial)
        return (np.ascontiguousarray(y.astype(X.dtype, copy=False)),)
