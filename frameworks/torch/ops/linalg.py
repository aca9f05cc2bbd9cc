"""Linear-algebra operators as torch functions: MatMul, Gemm, Einsum.

Converters follow the contract of :mod:`deep500lite.frameworks.torch.ops`.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from deep500lite.frameworks.torch.ops._common import _wide_unsigned, registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict[str, Callable] = {}
"""ONNX op type -> converter (``NodeSpec -> function of tensors``) of this family."""
_op = registrar(CONVERTERS)


@_op("MatMul")
def _matmul(spec):
    return _wide_unsigned(torch.matmul)


@_op("Gemm")
def _gemm(spec):
    alpha, beta = spec.attr("alpha", 1.0), spec.attr("beta", 1.0)
    ta, tb = spec.attr("transA", 0), spec.attr("transB", 0)
    if alpha == 1.0 and beta == 1.0 and not ta and tb:
        return lambda a, b, c=None: F.linear(a, b, c) if c is None or c.dim() <= 1 else F.linear(a, b) + c

    def run(a, b, c=None):
        if ta:
            a = a.t()
        if tb:
            b = b.t()
        y = a @ b
        if alpha != 1.0:
            y = y * alpha
        if c is not None:
            y = y + (c * beta if beta != 1.0 else c)
        return y
    return run


@_op("Einsum")
def _einsum(spec):
    equation = spec.attr("equation")
    return lambda *xs: torch.einsum(equation, *xs)
