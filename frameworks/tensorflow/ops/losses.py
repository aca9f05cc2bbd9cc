"""Loss operators as TensorFlow ops: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss.

Converters follow the contract of :mod:`deep500lite.frameworks.tensorflow.ops` (layout kinds:
:mod:`deep500lite.frameworks.tensorflow.ops._common`).
"""

from __future__ import annotations

import tensorflow as tf

from deep500lite.frameworks.tensorflow.layout import Value, channels_last
from deep500lite.frameworks.tensorflow.ops._common import VALUE, registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict = {}
"""ONNX op type -> (layout kind, converter) of this family."""
op = registrar(CONVERTERS)


def _nll(ctx, logp, target, weight):
    """Per-element loss, weights, for log-probabilities [N, d..., C] and targets [N, d...]."""
    ignore = ctx.get("ignore_index")
    target = tf.cast(target, tf.int64)
    if ignore is not None:
        valid = tf.not_equal(target, ignore)
        safe = tf.where(valid, target, tf.zeros_like(target))
    else:
        valid, safe = None, target
    picked = -tf.gather(logp, safe, batch_dims=target.shape.rank)
    w = None
    if weight is not None:
        w = tf.gather(weight, safe)
    if valid is not None:
        vw = tf.cast(valid, logp.dtype)
        w = vw if w is None else w * vw
    loss = picked if w is None else picked * w
    reduction = ctx.get("reduction", "mean")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return tf.reduce_sum(loss)
    if w is None:
        return tf.reduce_mean(loss)
    return tf.reduce_sum(loss) / tf.reduce_sum(w)


@op("NegativeLogLikelihoodLoss", kind=VALUE)
def _nll_loss(ctx, x, target, weight=None):
    logp = x.channels_last  # [N, d..., C]
    return Value(_nll(ctx, logp, target.plain, None if weight is None else weight.plain))


@op("SoftmaxCrossEntropyLoss", kind=VALUE)
def _sce_loss(ctx, x, target, weight=None):
    scores = x.channels_last  # [N, d..., C]
    logp = tf.nn.log_softmax(scores, axis=-1)  # pruned from the traced graph when unused
    rank = x.rank
    reduction = ctx.get("reduction", "mean")
    if weight is None and ctx.get("ignore_index") is None and rank == 2 and reduction in ("mean", "sum"):
        # The common case gets TF's fused kernel (one op forward, one backward).
        per_sample = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(target.plain, tf.int64),
                                                                    logits=scores)
        loss = Value(tf.reduce_mean(per_sample) if reduction == "mean" else tf.reduce_sum(per_sample))
    else:
        loss = Value(_nll(ctx, logp, target.plain, None if weight is None else weight.plain))
    return [loss, Value(logp, channels_last(rank) if rank >= 3 else None)]
