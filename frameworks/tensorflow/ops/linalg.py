"""Linear-algebra operators as TensorFlow ops: MatMul, Gemm, Einsum.

Converters follow the contract of :mod:`deep500lite.frameworks.tensorflow.ops` (layout kinds:
:mod:`deep500lite.frameworks.tensorflow.ops._common`).
"""

from __future__ import annotations

import tensorflow as tf

from deep500lite.frameworks.tensorflow.ops._common import _rank, registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict = {}
"""ONNX op type -> (layout kind, converter) of this family."""
op = registrar(CONVERTERS)


@op("MatMul")
def _matmul(ctx, a, b):
    ra, rb = _rank(ctx, a), _rank(ctx, b)
    if ra == 1:
        a = a[None, :]
    if rb == 1:
        b = b[:, None]
    y = tf.linalg.matmul(a, b)
    if ra == 1:
        y = tf.squeeze(y, -2)
    if rb == 1:
        y = tf.squeeze(y, -1)
    return y


@op("Gemm")
def _gemm(ctx, a, b, c=None):
    y = tf.linalg.matmul(a, b, transpose_a=bool(ctx.get("transA", 0)), transpose_b=bool(ctx.get("transB", 0)))
    alpha, beta = ctx.get("alpha", 1.0), ctx.get("beta", 1.0)
    if alpha != 1.0:
        y = y * tf.cast(alpha, y.dtype)
    if c is not None:
        if c.shape.rank == 2 and c.shape[0] == 1:
            # A [1, N] bias is fused by TensorFlow's graph rewriter into a BiasAdd that wants 1-D.
            c = tf.reshape(c, [-1])
        y = y + (c if beta == 1.0 else c * tf.cast(beta, c.dtype))
    return y


@op("Einsum")
def _einsum(ctx, *xs):
    equation = ctx.get("equation", "").replace(" ", "")
    if "->" not in equation:  # implicit output: the labels used once, in alphabetical order
        labels = equation.replace("...", "").replace(",", "")
        kept = "".join(sorted(c for c in set(labels) if labels.count(c) == 1))
        equation += "->" + ("..." if "..." in equation else "") + kept
    return tf.einsum(equation, *xs)
