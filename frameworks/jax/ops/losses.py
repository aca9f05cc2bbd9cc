"""ONNX loss operators as JAX functions: ``SoftmaxCrossEntropyLoss`` and ``NegativeLogLikelihoodLoss``."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from deep500lite.frameworks.jax.ops._common import registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict[str, Callable] = {}
_op = registrar(CONVERTERS)


def _nll(ctx, logp, target, weight):
    """ONNX's negative log-likelihood of ``logp`` (N, C, d...) at ``target`` (N, d...)."""
    logp, target = jnp.asarray(logp), jnp.asarray(target)
    ignore = ctx.attr("ignore_index", None)
    mask = None if ignore is None else target != ignore
    safe = target if mask is None else jnp.where(mask, target, 0)
    picked = -jnp.squeeze(jnp.take_along_axis(logp, jnp.expand_dims(safe, 1), axis=1), 1)
    w = None
    if weight is not None:
        w = jnp.take(jnp.asarray(weight), safe).astype(logp.dtype)
    if mask is not None:
        w = mask.astype(logp.dtype) if w is None else jnp.where(mask, w, 0)
    loss = picked if w is None else picked * w
    reduction = ctx.attr("reduction", "mean")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return jnp.sum(loss)
    return jnp.mean(loss) if w is None else jnp.sum(loss) / jnp.sum(w)


@_op("NegativeLogLikelihoodLoss")
def _nll_loss(ctx, logp, target, weight=None):
    return _nll(ctx, logp, target, weight)


@_op("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(ctx, scores, labels, weights=None):
    logp = jax.nn.log_softmax(jnp.asarray(scores), axis=1)
    return _nll(ctx, logp, labels, weights), logp
