"""Shape and data-movement operators as TensorFlow ops: Shape, Size, Constant, ConstantOfShape,
Flatten, Reshape, Transpose, Concat, Split, Squeeze, Unsqueeze, Expand, Tile, Range, Slice,
Gather, GatherElements, NonZero, Pad, DepthToSpace, SpaceToDepth, GatherND, ScatterND, ScatterElements
(and its deprecated alias Scatter), Trilu.

Converters follow the contract of :mod:`deep500lite.frameworks.tensorflow.ops` (layout kinds:
:mod:`deep500lite.frameworks.tensorflow.ops._common`).
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from deep500lite.frameworks.tensorflow.layout import Value
from deep500lite.frameworks.tensorflow.ops._common import VALUE, _axis, _cdiv, _dims, _ints, _rank, registrar
from deep500lite.lv1.network import constant_attribute_value

__all__ = ["CONVERTERS"]

CONVERTERS: dict = {}
"""ONNX op type -> (layout kind, converter) of this family."""
op = registrar(CONVERTERS)


@op("Shape", kind=VALUE)
def _shape(ctx, x):
    shape = tf.shape(x.tensor, out_type=tf.int64)
    if x.perm is not None:
        shape = tf.gather(shape, x.perm)
    rank = x.rank
    start, end = ctx.get("start", 0), ctx.get("end")
    if start or end is not None:
        if rank is None:
            return Value(shape[start:end])
        start = min(max(_axis(start, rank), 0), rank)
        end = rank if end is None else min(max(_axis(end, rank), 0), rank)
        shape = shape[start:end]
    return Value(shape)


@op("Size")
def _size(ctx, x):
    return tf.size(x, out_type=tf.int64)


@op("Constant")
def _constant(ctx):
    v = constant_attribute_value(ctx.attrs)
    if v is None:
        ctx.fail("a Constant needs one of the value attributes with a tensorflow type",
                 f"attribute(s) {sorted(ctx.attrs)}")
    return tf.constant(v)


@op("ConstantOfShape")
def _constant_of_shape(ctx, shape):
    value = ctx.get("value")
    value = np.zeros([1], np.float32) if value is None else value
    return tf.fill(tf.cast(shape, tf.int64), tf.constant(value.reshape(-1)[0], dtype=tf.as_dtype(value.dtype)))


@op("Flatten")
def _flatten(ctx, x):
    rank = _rank(ctx, x)
    axis = _axis(ctx.get("axis", 1), rank)
    dims = _dims(x)
    lead = math.prod(dims[:axis]) if all(isinstance(d, int) for d in dims[:axis]) else tf.reduce_prod(
        tf.shape(x)[:axis])
    tail = math.prod(dims[axis:]) if all(isinstance(d, int) for d in dims[axis:]) else tf.reduce_prod(
        tf.shape(x)[axis:])
    return tf.reshape(x, [lead, tail] if isinstance(lead, int) and isinstance(tail, int) else tf.stack(
        [tf.cast(lead, tf.int32), tf.cast(tail, tf.int32)]))


@op("Reshape")
def _reshape(ctx, x, shape=None):
    if ctx.opset < 5:
        shape = tf.constant(ctx.get("shape"), tf.int64)
    allowzero = ctx.get("allowzero", 0)
    static = _ints(shape)
    if static is not None:
        if allowzero or 0 not in static:
            return tf.reshape(x, static)
        dims = _dims(x)
        if all(isinstance(d, int) for d in dims) and len(dims) >= len(static):
            return tf.reshape(x, [dims[i] if s == 0 else s for i, s in enumerate(static)])
    shape = tf.cast(shape, tf.int64)
    if not allowzero:
        n = tf.size(shape)
        src = tf.concat([tf.shape(x, out_type=tf.int64), tf.ones([n], tf.int64)], 0)[:n]
        shape = tf.where(tf.equal(shape, 0), src, shape)
    return tf.reshape(x, shape)


@op("Transpose", kind=VALUE)
def _transpose(ctx, x):
    perm = ctx.get("perm")
    rank = x.rank
    if rank is None:
        return Value(tf.transpose(x.plain, perm))
    perm = list(reversed(range(rank))) if perm is None else [_axis(p, rank) for p in perm]
    mine = x.perm if x.perm is not None else tuple(range(rank))
    return Value(x.tensor, tuple(mine[p] for p in perm))


@op("Concat", kind=VALUE)
def _concat(ctx, *xs):
    xs = [x for x in xs if x is not None]
    first = next((x for x in xs if x.rank is not None and x.rank > 0), xs[0])
    rank = first.rank
    if rank is None or any(x.rank != rank for x in xs):
        return Value(tf.concat([x.plain for x in xs], _axis(ctx.get("axis"), rank or 1)))
    axis = _axis(ctx.get("axis"), rank)
    perm = first.perm
    stored_axis = axis if perm is None else perm[axis]
    return Value(tf.concat([x.as_layout(perm) for x in xs], stored_axis), perm)


@op("Split", kind=VALUE)
def _split(ctx, x, split=None):
    rank = x.rank
    if rank is None:
        ctx.fail("the input rank must be known while tracing", "an input of unknown rank")
    axis = _axis(ctx.get("axis", 0), rank)
    stored_axis = axis if x.perm is None else x.perm[axis]
    t = x.tensor
    if ctx.opset < 13 and "split" in ctx.attrs:
        sizes = list(ctx.attrs["split"])
    elif split is not None:
        sizes = _ints(split.plain)
        if sizes is None:
            sizes = tf.cast(split.plain, tf.int64)
    else:
        n = ctx.get("num_outputs", ctx.n_outputs)
        dim = t.shape[stored_axis]
        if dim is None:
            if ctx.get("num_outputs") is None:
                return [Value(p, x.perm) for p in tf.split(t, n, axis=stored_axis)]
            ctx.fail("num_outputs needs a static dimension", f"num_outputs={n} for a dimension of unknown size")
        chunk = _cdiv(dim, n)
        sizes = [min(chunk, dim - i * chunk) for i in range(n)]
    return [Value(p, x.perm) for p in tf.split(t, sizes, axis=stored_axis, num=ctx.n_outputs)]


@op("Squeeze")
def _squeeze(ctx, x, axes=None):
    if ctx.opset < 13:
        axes = ctx.get("axes")
    elif axes is not None:
        static = _ints(axes)
        if static is None:
            rank = _rank(ctx, x)
            ax = tf.cast(axes, tf.int64)
            ax = tf.where(ax < 0, ax + rank, ax)
            keep = tf.reduce_all(tf.not_equal(tf.range(rank, dtype=tf.int64)[:, None], ax[None, :]), axis=1)
            return tf.reshape(x, tf.boolean_mask(tf.shape(x, out_type=tf.int64), keep))
        axes = static
    if axes is None:
        return tf.squeeze(x)
    rank = _rank(ctx, x)
    return tf.squeeze(x, [_axis(a, rank) for a in axes])


@op("Unsqueeze")
def _unsqueeze(ctx, x, axes=None):
    if ctx.opset < 13:
        axes = ctx.get("axes")
    else:
        static = _ints(axes)
        if static is None:
            rank = _rank(ctx, x)
            n = axes.shape[0]
            if n is None:
                ctx.fail("the number of axes must be known while tracing", "axes of unknown length")
            out_rank = rank + n
            ax = tf.cast(axes, tf.int64)
            ax = tf.where(ax < 0, ax + out_rank, ax)
            is_new = tf.reduce_any(tf.equal(tf.range(out_rank, dtype=tf.int64)[:, None], ax[None, :]), axis=1)
            idx = tf.where(tf.logical_not(is_new))
            shape = tf.tensor_scatter_nd_update(tf.ones([out_rank], tf.int64), idx, tf.shape(x, out_type=tf.int64))
            return tf.reshape(x, shape)
        axes = static
    out_rank = _rank(ctx, x) + len(axes)
    for a in sorted(_axis(a, out_rank) for a in axes):
        x = tf.expand_dims(x, a)
    return x


@op("Expand")
def _expand(ctx, x, shape):
    shape = tf.cast(shape, tf.int64)
    target = tf.broadcast_dynamic_shape(tf.shape(x, out_type=tf.int64), shape)
    return tf.broadcast_to(x, target)


@op("Tile")
def _tile(ctx, x, repeats):
    return tf.tile(x, tf.cast(repeats, tf.int64))


@op("Range")
def _range(ctx, start, limit, delta):
    # ONNX's reference (np.arange) also takes one-element tensors (ONNX's expanded AffineGrid
    # passes a shape-[1] limit); tf.range wants scalars
    start, limit, delta = (tf.reshape(v, []) for v in (start, limit, delta))
    return tf.range(start, limit, delta, dtype=start.dtype)


@op("Slice")
def _slice(ctx, x, starts=None, ends=None, axes=None, steps=None):
    rank = _rank(ctx, x)
    if ctx.opset < 10:
        n = len(ctx.get("starts"))
        starts, ends = tf.constant(ctx.get("starts"), tf.int64), tf.constant(ctx.get("ends"), tf.int64)
        axes = tf.constant(ctx.get("axes") or list(range(n)), tf.int64)
    starts, ends = tf.cast(starts, tf.int64), tf.cast(ends, tf.int64)
    if axes is None:
        axes = tf.range(tf.size(starts, out_type=tf.int64), dtype=tf.int64)
    axes = tf.cast(axes, tf.int64)
    axes = tf.where(axes < 0, axes + rank, axes)[:, None]
    dims = tf.shape(x, out_type=tf.int64)
    step = tf.ones([rank], tf.int64)
    if steps is not None:
        step = tf.tensor_scatter_nd_update(step, axes, tf.cast(steps, tf.int64))
    begin = tf.tensor_scatter_nd_update(tf.zeros([rank], tf.int64), axes, starts)
    end = tf.tensor_scatter_nd_update(dims, axes, ends)
    # ONNX clamps indices per axis; strided_slice reads negative values from the end, so
    # normalise to non-negative indices and spell "before index 0" as -(dim + 1).
    forward = step > 0
    begin = tf.where(begin < 0, begin + dims, begin)
    begin = tf.where(forward, tf.clip_by_value(begin, 0, dims), tf.clip_by_value(begin, 0, dims - 1))
    end = tf.where(end < 0, end + dims, end)
    end = tf.where(forward, tf.clip_by_value(end, 0, dims), tf.clip_by_value(end, -1, dims - 1))
    end = tf.where(tf.logical_and(tf.logical_not(forward), end < 0), -dims - 1, end)
    return tf.strided_slice(x, begin, end, step)


@op("Gather")
def _gather(ctx, x, idx):
    rank = _rank(ctx, x)
    axis = _axis(ctx.get("axis", 0), rank)
    if idx.dtype.is_integer and not idx.dtype.is_unsigned:
        idx = tf.where(idx < 0, idx + tf.cast(tf.shape(x)[axis], idx.dtype), idx)
    return tf.gather(x, idx, axis=axis)


@op("GatherElements")
def _gather_elements(ctx, x, idx):
    rank = _rank(ctx, x)
    axis = _axis(ctx.get("axis", 0), rank)
    idx = tf.cast(idx, tf.int64)
    idx = tf.where(idx < 0, idx + tf.cast(tf.shape(x)[axis], tf.int64), idx)
    grids = tf.meshgrid(*[tf.range(tf.shape(idx, out_type=tf.int64)[i]) for i in range(rank)], indexing="ij")
    grids[axis] = idx
    return tf.gather_nd(x, tf.stack(grids, axis=-1))


@op("NonZero")
def _nonzero(ctx, x):
    return tf.transpose(tf.where(tf.not_equal(x, tf.zeros([], x.dtype))))


@op("Pad")
def _pad(ctx, x, pads=None, value=None, axes=None):
    rank = _rank(ctx, x)
    mode = ctx.get("mode", "constant")
    if ctx.opset < 11:
        pads = tf.constant(ctx.get("pads", ctx.get("paddings")), tf.int64)
        value = tf.constant(ctx.get("value", 0.0), x.dtype)
    pads = tf.cast(pads, tf.int64)
    if axes is not None:
        axes = tf.cast(axes, tf.int64)
        axes = tf.where(axes < 0, axes + rank, axes)
        n = tf.size(axes)
        full = tf.zeros([2 * rank], tf.int64)
        full = tf.tensor_scatter_nd_update(full, axes[:, None], pads[:n])
        pads = tf.tensor_scatter_nd_update(full, (axes + rank)[:, None], pads[n:])
    value = tf.zeros([], x.dtype) if value is None else tf.cast(tf.reshape(value, []), x.dtype)
    static = _ints(pads)
    if static is not None and min(static, default=0) >= 0 and mode in ("constant", "reflect"):
        paddings = [[static[i], static[i + rank]] for i in range(rank)]
        if mode == "constant":
            return tf.pad(x, paddings, constant_values=value)
        return tf.pad(x, paddings, mode="REFLECT")
    for i in range(rank):
        if static is not None and static[i] == 0 and static[i + rank] == 0:
            continue
        b, e = pads[i], pads[i + rank]
        n = tf.shape(x, out_type=tf.int64)[i]
        pos = tf.range(-b, n + e)
        if mode == "constant":
            inside = tf.logical_and(pos >= 0, pos < n)
            g = tf.gather(x, tf.clip_by_value(pos, 0, tf.maximum(n - 1, 0)), axis=i)
            shape = [1] * rank
            shape[i] = -1
            x = tf.where(tf.reshape(inside, shape), g, value)
        elif mode == "edge":
            x = tf.gather(x, tf.clip_by_value(pos, 0, n - 1), axis=i)
        elif mode == "wrap":
            x = tf.gather(x, tf.math.floormod(pos, n), axis=i)
        elif mode == "reflect":
            period = 2 * (n - 1)
            m = tf.math.floormod(pos, tf.maximum(period, 1))
            x = tf.gather(x, tf.where(m >= n, period - m, m), axis=i)
        else:
            ctx.fail("mode must be one of 'constant', 'reflect', 'edge', 'wrap'", repr(mode))
    return x


@op("DepthToSpace")
def _depth_to_space(ctx, x):
    b = ctx.get("blocksize")
    n, c, h, w = _dims(x)
    if ctx.get("mode", "DCR") == "DCR":
        t = tf.reshape(x, [n, b, b, c // (b * b), h, w])
        t = tf.transpose(t, [0, 3, 4, 1, 5, 2])
    else:
        t = tf.reshape(x, [n, c // (b * b), b, b, h, w])
        t = tf.transpose(t, [0, 1, 4, 2, 5, 3])
    return tf.reshape(t, [n, c // (b * b), h * b, w * b])


@op("SpaceToDepth")
def _space_to_depth(ctx, x):
    b = ctx.get("blocksize")
    n, c, h, w = _dims(x)
    t = tf.reshape(x, [n, c, h // b, b, w // b, b])
    if ctx.get("mode", "DCR") == "DCR":
        t = tf.transpose(t, [0, 3, 5, 1, 2, 4])
    else:
        t = tf.transpose(t, [0, 1, 3, 5, 2, 4])
    return tf.reshape(t, [n, c * b * b, h // b, w // b])


def _wrap_indices(idx, dims):
    """``idx`` (int64, last axis: coordinates into ``dims``) with negative coordinates counted from the end."""
    dims = tf.cast(dims, tf.int64)
    return tf.where(idx < 0, idx + dims, idx)


@op("GatherND")
def _gather_nd(ctx, x, idx):
    b = ctx.get("batch_dims", 0)
    m = idx.shape[-1]
    if m is None:
        ctx.fail("the last dimension of the indices must be known while tracing", "an unknown last dimension")
    idx = _wrap_indices(tf.cast(idx, tf.int64), tf.shape(x, out_type=tf.int64)[b:b + m])
    return tf.gather_nd(x, idx, batch_dims=b)


_SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")


def _scatter_nd(ctx, data, idx, updates):
    """ONNX ScatterND semantics (``idx`` int64 with non-negative coordinates) with ``reduction``."""
    reduction = ctx.get("reduction", "none")
    if reduction == "none":
        return tf.tensor_scatter_nd_update(data, idx, updates)
    if reduction == "add":
        return tf.tensor_scatter_nd_add(data, idx, updates)
    if reduction == "max":
        return tf.tensor_scatter_nd_max(data, idx, updates)
    if reduction == "min":
        return tf.tensor_scatter_nd_min(data, idx, updates)
    # mul: multiply every indexed slice by the product of its updates (1 where none)
    m = idx.shape[-1]
    dims = tf.shape(data, out_type=tf.int64)
    strides = tf.math.cumprod(dims[:m], exclusive=True, reverse=True)
    flat = tf.reduce_sum(tf.reshape(idx, [-1, m]) * strides, axis=-1)
    rest = dims[m:]
    slices = tf.reduce_prod(dims[:m])
    factors = tf.math.unsorted_segment_prod(tf.reshape(updates, tf.concat([[-1], rest], 0)), flat, slices)
    return data * tf.reshape(factors, dims)


def _check_reduction(ctx):
    reduction = ctx.get("reduction", "none")
    if reduction not in _SCATTER_REDUCTIONS:
        ctx.fail(f"reduction must be one of {_SCATTER_REDUCTIONS}", repr(reduction))


@op("ScatterND")
def _scatter_nd_op(ctx, data, idx, updates):
    _check_reduction(ctx)
    m = idx.shape[-1]
    if m is None:
        ctx.fail("the last dimension of the indices must be known while tracing", "an unknown last dimension")
    idx = _wrap_indices(tf.cast(idx, tf.int64), tf.shape(data, out_type=tf.int64)[:m])
    return _scatter_nd(ctx, data, idx, updates)


@op("ScatterElements", "Scatter")
def _scatter_elements(ctx, data, idx, updates):
    _check_reduction(ctx)
    rank = _rank(ctx, data)
    axis = _axis(ctx.get("axis", 0), rank)
    idx = tf.cast(idx, tf.int64)
    idx = tf.where(idx < 0, idx + tf.shape(data, out_type=tf.int64)[axis], idx)
    grids = tf.meshgrid(*[tf.range(tf.shape(idx, out_type=tf.int64)[i]) for i in range(rank)], indexing="ij")
    grids[axis] = idx
    return _scatter_nd(ctx, data, tf.stack(grids, axis=-1), updates)


@op("Trilu")
def _trilu(ctx, x, k=None):
    rank = _rank(ctx, x)
    if rank < 2:
        ctx.fail("the input must have rank 2 or more", f"rank {rank}")
    k = tf.zeros([], tf.int64) if k is None else tf.reshape(tf.cast(k, tf.int64), [])
    shape = tf.shape(x, out_type=tf.int64)
    diag = tf.range(shape[-1])[None, :] - tf.range(shape[-2])[:, None]  # column - row
    keep = diag >= k if ctx.get("upper", 1) else diag <= k
    return tf.where(keep, x, tf.zeros([], x.dtype))
