"""Indexing kernels of the reference executor: a numpy ``GatherElements`` for any number of indices.

``onnx.reference`` implements ``GatherElements`` with ``np.choose``, which accepts at most 32
choices and so fails on any real gather. :class:`GatherElements` here is one
``np.take_along_axis``, with negative indices counted from the end of the axis.
"""

from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun

from deep500lite.errors import UserError

__all__ = ["GatherElements"]


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
