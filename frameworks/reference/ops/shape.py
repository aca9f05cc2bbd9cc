"""Indexing kernels of the reference executor: numpy ``GatherElements`` and ``ScatterElements``.

``onnx.reference`` implements ``GatherElements`` with ``np.choose``, which accepts at most 32
choices and so fails on any real gather. :class:`GatherElements` here is one
``np.take_along_axis``, with negative indices counted from the end of the axis.
``onnx.reference`` runs ``ScatterElements`` (the gradient of ``MaxPool`` in deep500lite's
autodiff) as a Python loop over every update; :class:`ScatterElements` here is one numpy
advanced-index assignment, or one ``ufunc.at`` for a reduction.
"""

from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun

from deep500lite.errors import UserError

__all__ = ["GatherElements", "ScatterElements"]


class GatherElements(OpRun):
    """ONNX ``GatherElements``: ``out[i][j][k] = data[index[i][j][k]][j][k]`` along ``axis``."""

    op_domain = ""

    def _run(self, data, indices, axis=None):
        axis = int(axis or 0)
        if not -data.ndim <= axis < data.ndim:
            raise UserError(f"GatherElements: axis must be in [-{data.ndim}, {data.ndim - 1}] for an input of rank "
                            f"{data.ndim}. Received: axis={axis}")
        size = data.shape[axis]
        indices = np.asarray(indices, dtype=np.int64)
        if indices.size and (indices.min() < -size or indices.max() >= size):
            raise UserError(f"GatherElements: indices must be in [-{size}, {size - 1}] (the size of axis {axis}). "
                            f"Received: indices from {indices.min()} to {indices.max()}")
        return (np.take_along_axis(data, np.where(indices < 0, indices + size, indices), axis=axis),)


_SCATTER_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


class ScatterElements(OpRun):
    """ONNX ``ScatterElements``: ``out[index[i][j][k]][j][k] = updates[i][j][k]`` along ``axis``.

    ``reduction`` ``none`` assigns (of duplicate indices, the last update wins, as in
    ``onnx.reference``'s loop); ``add``, ``mul``, ``max`` and ``min`` combine every update with
    ``np.<ufunc>.at``.
    """

    op_domain = ""

    def _run(self, data, indices, updates, axis=None, reduction=None):
        axis = int(axis or 0)
        if not -data.ndim <= axis < data.ndim:
            raise UserError(f"ScatterElements: axis must be in [-{data.ndim}, {data.ndim - 1}] for an input of rank "
                            f"{data.ndim}. Received: axis={axis}")
        if isinstance(reduction, bytes):
            reduction = reduction.decode()
        reduction = reduction or "none"
        if reduction != "none" and reduction not in _SCATTER_REDUCTIONS:
            raise UserError("ScatterElements: reduction must be one of none, add, mul, max, min. "
                            f"Received: reduction={reduction!r}")
        axis %= data.ndim
        size = data.shape[axis]
        indices = np.asarray(indices, dtype=np.int64)
        if indices.size and (indices.min() < -size or indices.max() >= size):
            raise UserError(f"ScatterElements: indices must be in [-{size}, {size - 1}] (the size of axis {axis}). "
                            f"Received: indices from {indices.min()} to {indices.max()}")
        where = list(np.indices(indices.shape, sparse=True))
        where[axis] = np.where(indices < 0, indices + size, indices)
        where = tuple(where)
        out = np.array(data, copy=True)
        if reduction == "none":
            out[where] = updates
        else:
            _SCATTER_REDUCTIONS[reduction].at(out, where, updates)
        return (out,)
