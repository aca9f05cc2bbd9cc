"""Convolution kernels of the reference executor: a vectorized numpy ``ConvTranspose``.

``onnx.reference`` computes ``ConvTranspose`` with a Python loop over every output position
(``col2im``), which makes it the bulk of a training step of a convolutional network (the input
gradient of a convolution is a transposed convolution). :class:`ConvTranspose` here computes the
same thing with one ``einsum`` per kernel position and group; the tests compare it with
``onnx.reference``'s own implementation, and ONNX's backend tests run it as part of the reference
executor's conformance.
"""

from __future__ import annotations

import itertools

import numpy as np
from onnx.reference.op_run import OpRun

__all__ = ["ConvTranspose"]


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


class ConvTranspose(OpRun):
    """ONNX ``ConvTranspose`` (any number of spatial axes, groups, strides, dilations, padding)."""

    op_domain = ""

    def _run(self, X, W, B=None, auto_pad=None, dilations=None, group=None, kernel_shape=None,
             output_padding=None, output_shape=None, pads=None, strides=None):
        if isinstance(auto_pad, bytes):
            auto_pad = auto_pad.decode()
        auto_pad = auto_pad or "NOTSET"
        group = int(group or 1)
        n_spatial = X.ndim - 2
        kernel = list(kernel_shape) if kernel_shape is not None else list(W.shape[2:])
        strides = list(strides) if strides is not None else [1] * n_spatial
        dilations = list(dilations) if dilations is not None else [1] * n_spatial
        output_padding = list(output_padding) if output_padding is not None else [0] * n_spatial
        in_sizes = list(X.shape[2:])
        begin, end = _pads(auto_pad, in_sizes, kernel, strides, dilations, output_padding, output_shape, pads)

        n, c_in = X.shape[:2]
        c_out_g = W.shape[1]
        c_in_g = c_in // group
        full = [strides[i] * (in_sizes[i] - 1) + (kernel[i] - 1) * dilations[i] + 1 + output_padding[i]
                for i in range(n_spatial)]
        dtype = np.result_type(X.dtype, W.dtype)
        y = np.zeros((n, c_out_g * group, *full), dtype=dtype)
        for g in range(group):
            xg = X[:, g * c_in_g:(g + 1) * c_in_g]
            wg = W[g * c_in_g:(g + 1) * c_in_g]
            out_channels = slice(g * c_out_g, (g + 1) * c_out_g)
            for offset in itertools.product(*(range(k) for k in kernel)):
                contribution = np.tensordot(xg, wg[(slice(None), slice(None), *offset)], axes=([1], [0]))
                contribution = np.moveaxis(contribution, -1, 1)  # (n, c_out_g, *in_sizes)
                window = tuple(slice(offset[i] * dilations[i],
                                     offset[i] * dilations[i] + strides[i] * (in_sizes[i] - 1) + 1, strides[i])
                               for i in range(n_spatial))
                y[(slice(None), out_channels, *window)] += contribution
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
