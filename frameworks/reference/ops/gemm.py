"""Matrix-product kernels of the reference executor: a numpy ``Gemm``.

``onnx.reference``'s ``Gemm`` computes ``np.dot`` and then scales and adds in separate passes,
with a copy for the dtype; :class:`Gemm` here is one ``np.matmul`` on the transposed views (BLAS
reads the transposes in place), and skips the scaling when ``alpha`` and ``beta`` are 1. The
product runs in the inputs' dtype, as in ``onnx.reference``.
"""

from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun

__all__ = ["Gemm"]


class Gemm(OpRun):
    """ONNX ``Gemm``: ``alpha * A' @ B' + beta * C`` with ``A'``, ``B'`` optionally transposed."""

    op_domain = ""

    def _run(self, a, b, c=None, alpha=None, beta=None, transA=None, transB=None):
        alpha = 1.0 if alpha is None else float(alpha)
        beta = 1.0 if beta is None else float(beta)
        y = np.matmul(a.T if transA else a, b.T if transB else b)
        if alpha != 1.0:
            y *= y.dtype.type(alpha)
        if c is not None and beta != 0:
            y += c if beta == 1.0 else c * beta
        return (y.astype(a.dtype, copy=False),)
