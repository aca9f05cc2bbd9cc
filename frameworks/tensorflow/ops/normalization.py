"""Normalization operators and Dropout as TensorFlow ops: BatchNormalization (inference and
training mode), InstanceNormalization, LayerNormalization, GroupNormalization, LRN, Dropout — the operators
whose training mode differs from inference live here with their training forms.

Converters follow the contract of :mod:`deep500lite.frameworks.tensorflow.ops` (layout kinds:
:mod:`deep500lite.frameworks.tensorflow.ops._common`).
"""

from __future__ import annotations

import tensorflow as tf

from deep500lite.frameworks.tensorflow.ops._common import (SPATIAL, UNARY, _axis, _dims, _rank, _static, registrar,
                                                           training_registrar)

__all__ = ["CONVERTERS", "TRAINING_CONVERTERS", "TRAINING_STATE_OUTPUTS"]

CONVERTERS: dict = {}
"""ONNX op type -> (layout kind, converter) of this family."""
op = registrar(CONVERTERS)

TRAINING_CONVERTERS: dict = {}
"""Training-mode converters: op type -> (layout kind, converter, minimum number of outputs it returns)."""
training_op = training_registrar(TRAINING_CONVERTERS)


# Operators whose training-mode form updates state: op type -> [(input index of the state,
# converter output index of its new value)]. BatchNormalization's running mean and variance.
TRAINING_STATE_OUTPUTS = {"BatchNormalization": [(3, 1), (4, 2)]}


@op("Dropout", kind=UNARY)
def _dropout(ctx, x, *rest):
    # Inference semantics: the identity, and a mask of ones.
    if ctx.n_outputs > 1:
        return x, tf.ones_like(x, dtype=tf.bool)
    return x


@op("BatchNormalization", kind=SPATIAL)
def _batch_norm(ctx, x, scale, bias, mean, var):
    eps = ctx.get("epsilon", 1e-5)
    training = ctx.get("training_mode", 0) if ctx.opset >= 14 else ctx.n_outputs > 1
    if training:
        axes = list(range(_rank(ctx, x) - 1))
        m, v = tf.nn.moments(x, axes)
        mom = ctx.get("momentum", 0.9)
        y = (x - m) * (scale * tf.math.rsqrt(v + eps)) + bias
        return y, mean * mom + m * (1 - mom), var * mom + v * (1 - mom)
    mul = scale * tf.math.rsqrt(var + tf.cast(eps, var.dtype))
    return x * mul + (bias - mean * mul)


#: Training-mode BatchNormalization takes TensorFlow's fused kernel only with at least this many
#: values per channel (batch x pixels); fewer take the composite path, whose gradient holds there.
_FUSED_MIN_VALUES = 256


@training_op("BatchNormalization", kind=SPATIAL, outputs=3)
def _batch_norm_training(ctx, x, scale, bias, mean, var):
    """Batch statistics (biased variance); returns y, the new running mean and variance
    (``running * momentum + batch * (1 - momentum)``, ONNX's rule), the batch mean and variance."""
    eps = float(ctx.get("epsilon", 1e-5))
    mom = ctx.get("momentum", 0.9)
    rank = _rank(ctx, x)
    # TensorFlow's fused kernel (about 25% faster for ResNet-20 training on the CPU) takes
    # channels-last float32 images; cuDNN refuses epsilon below 1e-5, so on a GPU small epsilons
    # (ONNX's float32 1e-5 is 9.99999975e-6) take the composite path. So do statistics over few
    # values (the last stage of a small-image CNN at batch 2): there the gradient is
    # ill-conditioned, and the fused kernel's is further from float64 than float32 allows
    # (GhostNet's BatchNorm over two values: 11x the reference executor's float32 error; the
    # composite's, differentiated by TensorFlow, 1.1x).
    count = 1
    for d in x.shape[:-1]:
        count = count * d if d is not None and count is not None else None
    if (rank == 4 and x.dtype == tf.float32 and scale.dtype == tf.float32 and bias.dtype == tf.float32
            and (not ctx.gpu or eps >= 1.001e-5) and (count is None or count >= _FUSED_MIN_VALUES)):
        empty = tf.zeros([0], tf.float32)
        y, m, v, _, _, _ = tf.raw_ops.FusedBatchNormV3(
            x=x, scale=scale, offset=bias, mean=empty, variance=empty, epsilon=eps, data_format="NHWC",
            is_training=True)
        n = tf.cast(tf.reduce_prod(tf.shape(x)[:-1]), tf.float32)
        v = v * ((n - 1) / tf.maximum(n, 1))  # the kernel returns the unbiased variance
    else:
        axes = list(range(rank - 1))
        m, v = tf.nn.moments(x, axes)
        y = (x - m) * (scale * tf.math.rsqrt(v + tf.cast(eps, v.dtype))) + bias
    sm, sv = tf.stop_gradient(m), tf.stop_gradient(v)
    new_mean = mean * mom + tf.cast(sm, mean.dtype) * (1 - mom)
    new_var = var * mom + tf.cast(sv, var.dtype) * (1 - mom)
    return y, new_mean, new_var, sm, sv


@training_op("Dropout", kind=UNARY, outputs=1)
def _dropout_training(ctx, x, ratio=None, training_mode=None):
    """Inverted dropout: ``y = x * mask / (1 - ratio)`` with ``mask = U[0, 1) >= ratio``.

    The mask is drawn from the executor's seeded generator (the node's ``seed`` attribute is not
    used). The executor's mode decides: a ``training_mode`` input is ignored.
    """
    if ctx.opset < 12 or ratio is None:
        ratio = ctx.get("ratio", 0.5)
    static = _static(ratio) if not isinstance(ratio, float) else ratio
    if static is not None and float(static) == 0.0:
        return x, tf.ones_like(x, dtype=tf.bool)
    if ctx.rng is None:
        ctx.fail("training-mode Dropout needs a random generator", "rng=None")
    ratio = tf.cast(ratio, tf.float32)
    mask = ctx.rng.uniform(tf.shape(x), dtype=tf.float32) >= ratio
    scale = tf.where(ratio < 1, 1 / (1 - ratio), tf.zeros([], tf.float32))
    y = tf.where(mask, x * tf.cast(scale, x.dtype), tf.zeros([], x.dtype))
    return y, mask


@op("InstanceNormalization", kind=SPATIAL)
def _instance_norm(ctx, x, scale, bias):
    axes = list(range(1, _rank(ctx, x) - 1))
    m, v = tf.nn.moments(x, axes, keepdims=True)
    return (x - m) * tf.math.rsqrt(v + ctx.get("epsilon", 1e-5)) * scale + bias


@op("LRN", kind=SPATIAL)
def _lrn(ctx, x):
    size = ctx.get("size")
    alpha, beta, bias = ctx.get("alpha", 1e-4), ctx.get("beta", 0.75), ctx.get("bias", 1.0)
    if size % 2 == 1 and _rank(ctx, x) == 4 and x.dtype == tf.float32:
        return tf.nn.local_response_normalization(x, (size - 1) // 2, bias, alpha / size, beta)
    sq = tf.square(x)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    rank = _rank(ctx, x)
    padded = tf.pad(sq, [[0, 0]] * (rank - 1) + [[lo, hi]])
    c = tf.shape(x)[-1]
    total = tf.add_n([padded[..., i:i + c] for i in range(size)])
    return x / tf.pow(bias + alpha / size * total, beta)


@op("LayerNormalization")
def _layer_norm(ctx, x, scale, bias=None):
    rank = _rank(ctx, x)
    axis = _axis(ctx.get("axis", -1), rank)
    eps = ctx.get("epsilon", 1e-5)
    stash = tf.float32 if ctx.get("stash_type", 1) == 1 else x.dtype
    xs = tf.cast(x, stash)
    axes = list(range(axis, rank))
    m, v = tf.nn.moments(xs, axes, keepdims=True)
    inv = tf.math.rsqrt(v + eps)
    y = tf.cast((xs - m) * inv, x.dtype) * scale
    if bias is not None:
        y = y + bias
    return y, m, inv


@op("GroupNormalization", kind=SPATIAL)
def _group_norm(ctx, x, scale, bias):
    rank = _rank(ctx, x)
    groups = ctx.get("num_groups")
    channels = x.shape[-1]
    if channels is None:
        ctx.fail("the channel dimension must be known while tracing", "an unknown channel dimension")
    stash = tf.float32 if ctx.get("stash_type", 1) == 1 else x.dtype
    dims = _dims(x)
    xs = tf.reshape(tf.cast(x, stash), dims[:-1] + [groups, channels // groups])
    axes = list(range(1, rank - 1)) + [rank]  # the spatial axes and the channels of one group
    m, v = tf.nn.moments(xs, axes, keepdims=True)
    y = tf.cast(tf.reshape((xs - m) * tf.math.rsqrt(v + ctx.get("epsilon", 1e-5)), dims), x.dtype)
    if ctx.opset < 21:  # opset 18: one scale and bias per group
        scale, bias = (tf.repeat(t, channels // groups) for t in (scale, bias))
    return y * scale + bias
