"""ONNX linear-algebra operators as JAX functions: ``Gemm``, ``MatMul``, ``Einsum``.

Matrix products run at the precision the executor traces with (``jax.default_matmul_precision``,
"highest" by default, so float32 products are not computed in TF32 on GPUs).
"""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp

from deep500lite.frameworks.jax.ops._common import registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict[str, Callable] = {}
_op = registrar(CONVERTERS)


@_op("MatMul")
def _matmul(ctx, a, b):
    return jnp.matmul(a, b)


@_op("Gemm")
def _gemm(ctx, a, b, c=None):
    a, b = jnp.asarray(a), jnp.asarray(b)
    if ctx.attr("transA", 0):
        a = a.T
    if ctx.attr("transB", 0):
        b = b.T
    out = jnp.matmul(a, b)
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    if alpha != 1.0:
        out = alpha * out
    if c is not None:
        c = jnp.asarray(c).astype(out.dtype)
        out = out + (c if beta == 1.0 else beta * c)
    return out


@_op("Einsum")
def _einsum(ctx, *xs):
    return jnp.einsum(ctx.attr("equation").replace(" ", ""), *xs)
