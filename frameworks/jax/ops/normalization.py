"""Normalization operators and Dropout as JAX functions: BatchNormalization (inference and training
mode, every opset's outputs), InstanceNormalization, LayerNormalization, GroupNormalization (opset
18's per-group and opset 21's per-channel affine), LRN and Dropout (identity in inference, a
``ctx.key()`` mask in training, the ``training_mode`` input and the mask output).

Training-mode BatchNormalization normalizes with the batch mean and biased variance and records
ONNX's running-statistics update ``running * momentum + batch * (1 - momentum)`` through
``ctx.assign`` (the executor writes it back to the parameters). Converters follow the contract of
:mod:`deep500lite.frameworks.jax.ops._common`.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from deep500lite.frameworks.jax.ops._common import registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict[str, Callable] = {}
"""ONNX op type -> converter ``fn(ctx, *inputs)`` of this family."""
_op = registrar(CONVERTERS)


def _channel_shape(x):
    return (1, -1) + (1,) * (x.ndim - 2)


def _outputs(ctx, values):
    """One array for a one-output node, else a tuple with one entry per declared output."""
    n = len(ctx.node.output)
    if n == 1:
        return values[0]
    return tuple(values[:n]) + (None,) * max(n - len(values), 0)


def _upcast(ctx, x):
    """``x`` in float32 when ``stash_type`` asks for it and ``x`` is a half type."""
    if int(ctx.attr("stash_type", 1)) == 1 and x.dtype in (jnp.float16, jnp.bfloat16):
        return jnp.asarray(x, jnp.float32)
    return x


@_op("BatchNormalization")
def _batch_norm(ctx, x, scale, b, mean, var, *_):
    eps = float(ctx.attr("epsilon", 1e-5))
    momentum = float(ctx.attr("momentum", 0.9))
    shape = _channel_shape(x)
    # Batch statistics in the training trace, or when an opset >= 14 graph asks for them itself;
    # opsets 6-9 declared training by asking for the running-statistics outputs.
    batch_stats = ctx.training or (ctx.opset >= 14 and bool(ctx.attr("training_mode", 0))) or (
        ctx.opset < 14 and len([o for o in ctx.node.output if o]) > 1)
    # The per-channel factors are folded first (scale * rsqrt(var + eps) and the shift, on [C]
    # vectors), so the full-size work is one multiply-add: XLA does not fold them itself, and
    # the unfolded form made ResNet-20 8% slower than the same model written in plain JAX.
    if not batch_stats:
        factor = scale * jax.lax.rsqrt(var + eps)
        shift = b - mean * factor
        factor, shift = (jnp.reshape(v, shape).astype(x.dtype) for v in (factor, shift))
        return _outputs(ctx, [x * factor + shift])
    axes = (0,) + tuple(range(2, x.ndim))
    m = jnp.mean(x, axis=axes)
    v = jnp.mean(jnp.square(x - jnp.reshape(m, shape)), axis=axes)
    factor = scale * jax.lax.rsqrt(v + eps)
    y = x * jnp.reshape(factor, shape).astype(x.dtype) + jnp.reshape(b - m * factor, shape).astype(x.dtype)
    m_s, v_s = jax.lax.stop_gradient(m), jax.lax.stop_gradient(v)
    new_mean = jnp.asarray(mean * momentum + m_s * (1 - momentum), dtype=jnp.result_type(mean))
    new_var = jnp.asarray(var * momentum + v_s * (1 - momentum), dtype=jnp.result_type(var))
    if ctx.training:
        ctx.assign(3, new_mean)
        ctx.assign(4, new_var)
    return _outputs(ctx, [y, new_mean, new_var, m_s, v_s])


@_op("InstanceNormalization")
def _instance_norm(ctx, x, scale, b):
    eps = float(ctx.attr("epsilon", 1e-5))
    axes = tuple(range(2, x.ndim))
    m = jnp.mean(x, axis=axes, keepdims=True)
    v = jnp.mean(jnp.square(x - m), axis=axes, keepdims=True)
    shape = _channel_shape(x)
    return (x - m) * jax.lax.rsqrt(v + eps) * jnp.reshape(scale, shape) + jnp.reshape(b, shape)


@_op("LayerNormalization")
def _layer_norm(ctx, x, scale, b=None):
    eps = float(ctx.attr("epsilon", 1e-5))
    axis = int(ctx.attr("axis", -1)) % x.ndim
    axes = tuple(range(axis, x.ndim))
    xs = _upcast(ctx, x)
    m = jnp.mean(xs, axis=axes, keepdims=True)
    inv_std = jax.lax.rsqrt(jnp.mean(jnp.square(xs - m), axis=axes, keepdims=True) + eps)
    y = jnp.asarray((xs - m) * inv_std, x.dtype) * scale
    if b is not None:
        y = y + b
    return _outputs(ctx, [y, m, inv_std])


@_op("GroupNormalization")
def _group_norm(ctx, x, scale, b):
    eps = float(ctx.attr("epsilon", 1e-5))
    groups = int(ctx.attr("num_groups"))
    n, c = x.shape[0], x.shape[1]
    xs = jnp.reshape(_upcast(ctx, x), (n, groups, -1))
    m = jnp.mean(xs, axis=-1, keepdims=True)
    v = jnp.mean(jnp.square(xs - m), axis=-1, keepdims=True)
    y = jnp.asarray(jnp.reshape((xs - m) * jax.lax.rsqrt(v + eps), x.shape), x.dtype)
    if ctx.opset < 21:  # GroupNormalization-18 has one scale and bias per group
        scale, b = jnp.repeat(scale, c // groups), jnp.repeat(b, c // groups)
    shape = _channel_shape(x)
    return y * jnp.reshape(scale, shape) + jnp.reshape(b, shape)


@_op("LRN")
def _lrn(ctx, x):
    alpha, beta = float(ctx.attr("alpha", 1e-4)), float(ctx.attr("beta", 0.75))
    bias, size = float(ctx.attr("bias", 1.0)), int(ctx.attr("size"))
    front = (size - 1) // 2
    pads = [(0, 0), (front, size - 1 - front)] + [(0, 0)] * (x.ndim - 2)
    sq = jnp.pad(jnp.square(x), pads)
    c = x.shape[1]
    total = sum(jax.lax.slice_in_dim(sq, i, i + c, axis=1) for i in range(size))
    return x / (bias + (alpha / size) * total) ** beta


@_op("Dropout")
def _dropout(ctx, x, ratio=None, training_mode=None):
    # The trace decides (Dropout-6's is_test is not read), unless the graph feeds training_mode.
    training = ctx.training
    if training_mode is not None:
        training = bool(ctx.static(training_mode, "training_mode input").reshape(-1)[0])
    p = 0.0
    if training:
        p = float(ctx.attr("ratio", 0.5)) if ratio is None else float(ctx.static(ratio, "ratio").reshape(-1)[0])
    want_mask = len(ctx.node.output) > 1 and bool(ctx.node.output[1])
    if p == 0:
        mask = jnp.ones(x.shape, dtype=bool) if want_mask else None
        return _outputs(ctx, [x, mask])
    if ctx.training:
        key = ctx.key()
    else:
        # the graph itself asks for training-mode dropout in an inference run: the node's seed decides
        key = jax.random.PRNGKey(int(ctx.attr("seed", 0)))
    keep = jax.random.uniform(key, x.shape, dtype=jnp.float32) >= p
    y = jnp.where(keep, x / jnp.asarray(1 - p, x.dtype), jnp.zeros((), x.dtype))
    return _outputs(ctx, [y, keep])
