"""Reductions as TensorFlow ops: the Reduce* operators, ArgMax, ArgMin, CumSum, TopK.

Converters follow the contract of :mod:`deep500lite.frameworks.tensorflow.ops` (layout kinds:
:mod:`deep500lite.frameworks.tensorflow.ops._common`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from deep500lite.frameworks.tensorflow.layout import Value, inverse
from deep500lite.frameworks.tensorflow.ops._common import VALUE, _axis, _ints, _rank, registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict = {}
"""ONNX op type -> (layout kind, converter) of this family."""
op = registrar(CONVERTERS)


def _reduce_axes(ctx, x_rank, axes_input):
    """Static axes list, ``None`` for all axes, or a tensor of dynamic axes; plus a noop flag."""
    if "axes" in ctx.attrs:
        axes = list(ctx.attrs["axes"])
    elif axes_input is not None:
        axes = _ints(axes_input)
        if axes is None:
            return axes_input, False
    else:
        axes = []
    if not axes:
        return (None, bool(ctx.get("noop_with_empty_axes", 0)))
    return [_axis(a, x_rank) for a in axes], False


def _reduction(name, f):
    def fn(ctx, x, axes_in=None):
        keep = bool(ctx.get("keepdims", 1))
        axes_in = None if axes_in is None else axes_in.plain
        rank = x.rank
        axes, noop = _reduce_axes(ctx, rank if rank is not None else 0, axes_in)
        if noop:
            return Value(x.tensor, x.perm)
        if axes is None:
            return Value(f(x.tensor, None, keep), x.perm if keep else None)
        if not isinstance(axes, list):
            t = x.plain
            dyn = tf.cast(axes, tf.int32)
            dyn = tf.where(dyn < 0, dyn + tf.cast(tf.rank(t), tf.int32), dyn)
            empty = tf.equal(tf.size(dyn), 0)
            all_axes = tf.range(tf.cast(tf.rank(t), tf.int32))
            if ctx.get("noop_with_empty_axes", 0):
                return Value(tf.cond(empty, lambda: t, lambda: f(t, dyn, keep)))
            return Value(f(t, tf.cond(empty, lambda: all_axes, lambda: dyn), keep))
        if x.perm is None:
            return Value(f(x.tensor, axes, keep))
        stored = [x.perm[a] for a in axes]
        y = f(x.tensor, stored, keep)
        if keep:
            return Value(y, x.perm)
        inv = inverse(x.perm)
        remaining = [inv[j] for j in range(rank) if j not in stored]  # plain axes in stored order
        order = sorted(remaining)
        renum = [order.index(a) for a in remaining]
        return Value(y, inverse(renum))
    op(name, kind=VALUE)(fn)


def _reduce_max(x, axes, keep):
    if x.dtype == tf.bool:
        return tf.reduce_any(x, axis=axes, keepdims=keep)
    y = tf.reduce_max(x, axis=axes, keepdims=keep)
    if x.dtype.is_floating:  # TensorFlow's identity for an empty max is the lowest finite value
        y = tf.where(tf.equal(y, x.dtype.min), tf.cast(-np.inf, x.dtype), y) if _may_be_empty(x) else y
    return y


def _reduce_min(x, axes, keep):
    if x.dtype == tf.bool:
        return tf.reduce_all(x, axis=axes, keepdims=keep)
    y = tf.reduce_min(x, axis=axes, keepdims=keep)
    if x.dtype.is_floating and _may_be_empty(x):
        y = tf.where(tf.equal(y, x.dtype.max), tf.cast(np.inf, x.dtype), y)
    return y


def _may_be_empty(x):
    return x.shape.num_elements() is None or x.shape.num_elements() == 0


_reduction("ReduceSum", lambda x, a, k: tf.reduce_sum(x, axis=a, keepdims=k))
_reduction("ReduceMean", lambda x, a, k: tf.reduce_mean(x, axis=a, keepdims=k))
_reduction("ReduceMax", _reduce_max)
_reduction("ReduceMin", _reduce_min)
_reduction("ReduceProd", lambda x, a, k: tf.reduce_prod(x, axis=a, keepdims=k))
_reduction("ReduceL1", lambda x, a, k: tf.reduce_sum(tf.abs(x), axis=a, keepdims=k))
_reduction("ReduceL2", lambda x, a, k: tf.sqrt(tf.reduce_sum(tf.square(x), axis=a, keepdims=k)))
_reduction("ReduceSumSquare", lambda x, a, k: tf.reduce_sum(tf.square(x), axis=a, keepdims=k))
_reduction("ReduceLogSum", lambda x, a, k: tf.math.log(tf.reduce_sum(x, axis=a, keepdims=k)))
_reduction("ReduceLogSumExp", lambda x, a, k: tf.reduce_logsumexp(x, axis=a, keepdims=k))


def _arg(f):
    def fn(ctx, x):
        rank = _rank(ctx, x)
        axis = _axis(ctx.get("axis", 0), rank)
        if ctx.get("select_last_index", 0):
            n = tf.cast(tf.shape(x)[axis], tf.int64)
            y = n - 1 - f(tf.reverse(x, [axis]), axis=axis, output_type=tf.int64)
        else:
            y = f(x, axis=axis, output_type=tf.int64)
        return tf.expand_dims(y, axis) if ctx.get("keepdims", 1) else y
    return fn


op("ArgMax")(_arg(tf.argmax))
op("ArgMin")(_arg(tf.argmin))


@op("CumSum")
def _cumsum(ctx, x, axis):
    return tf.math.cumsum(x, axis=tf.reshape(axis, []), exclusive=bool(ctx.get("exclusive", 0)),
                          reverse=bool(ctx.get("reverse", 0)))


@op("TopK")
def _top_k(ctx, x, k=None):
    rank = _rank(ctx, x)
    axis = _axis(ctx.get("axis", -1), rank)
    k = ctx.get("k") if ctx.opset < 10 else tf.reshape(tf.cast(k, tf.int32), [])
    last = axis == rank - 1
    if not last:
        order = list(range(rank))
        order[axis], order[-1] = order[-1], order[axis]
        x = tf.transpose(x, order)
    largest = ctx.get("largest", 1)
    if largest:
        keys = x
    elif x.dtype.is_floating:
        keys = -x
    else:  # ~v reverses the order of integers without overflow
        keys = tf.bitwise.invert(x)
    _, indices = tf.math.top_k(keys, k, sorted=True)  # ties: the lower index first, as ONNX asks
    values = tf.gather(x, indices, batch_dims=rank - 1)
    indices = tf.cast(indices, tf.int64)
    if not last:
        values, indices = tf.transpose(values, order), tf.transpose(indices, order)
    return values, indices
