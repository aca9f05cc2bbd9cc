"""ONNX shape and data-movement operators as JAX functions: reshapes, slicing, gathers and
scatters, padding, constants and ``Shape``.

Targets that fix an output shape (``Reshape``'s shape, ``Slice``'s bounds, ``Pad``'s pads,
``Expand``, ``Tile``, ``Range``, ``ConstantOfShape``...) must be known while tracing and are read
with :meth:`NodeContext.static`; ``Shape`` of a traced array is known (XLA shapes are fixed), so
shape arithmetic folds. ``NonZero`` has a data-dependent output shape and works only on values
known while tracing.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from deep500lite.errors import ModelError
from deep500lite.frameworks.jax.ops._common import is_static, registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict[str, Callable] = {}
_op = registrar(CONVERTERS)


def _ints(ctx, value, what) -> list[int]:
    return [int(v) for v in np.asarray(ctx.static(value, what)).reshape(-1)]


def _axes(ctx, x_ndim, value, attr_until: int, what="axes"):
    """Axes from the attribute (opset < ``attr_until``) or the input, normalized; None when absent."""
    if ctx.opset < attr_until:
        axes = ctx.attr("axes")
    else:
        axes = None if value is None else _ints(ctx, value, what)
    return None if axes is None else [a % x_ndim for a in axes] if x_ndim else list(axes)


@_op("Shape")
def _shape(ctx, x):
    shape = np.array(np.shape(x), dtype=np.int64)
    n = len(shape)
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    start = min(max(start + n if start < 0 else start, 0), n)
    end = n if end is None else min(max(end + n if end < 0 else end, 0), n)
    return shape[start:end]


@_op("Size")
def _size(ctx, x):
    return np.array(int(np.prod(np.shape(x), dtype=np.int64)), dtype=np.int64)


@_op("Constant")
def _constant(ctx):
    attrs = ctx.attrs
    if "value" in attrs:
        return np.asarray(attrs["value"])
    if "value_float" in attrs:
        return np.array(attrs["value_float"], np.float32)
    if "value_floats" in attrs:
        return np.array(attrs["value_floats"], np.float32)
    if "value_int" in attrs:
        return np.array(attrs["value_int"], np.int64)
    if "value_ints" in attrs:
        return np.array(attrs["value_ints"], np.int64)
    raise ModelError(f"Constant node '{ctx.name}' has no value attribute the jax executor reads (value, "
                     f"value_float(s), value_int(s)). Received: attributes {sorted(attrs)}")


@_op("ConstantOfShape")
def _constant_of_shape(ctx, shape):
    value = ctx.attr("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return np.full(_ints(ctx, shape, "shape"), value[0], dtype=value.dtype)


@_op("Reshape")
def _reshape(ctx, x, shape):
    target = _ints(ctx, shape, "target shape")
    x_shape = np.shape(x)
    if not ctx.attr("allowzero", 0):
        target = [x_shape[i] if d == 0 else d for i, d in enumerate(target)]
    return jnp.reshape(x, target)


@_op("Flatten")
def _flatten(ctx, x):
    shape = np.shape(x)
    axis = ctx.attr("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    return jnp.reshape(x, (rows, -1) if rows else (0, int(np.prod(shape[axis:], dtype=np.int64))))


@_op("Squeeze")
def _squeeze(ctx, x, axes=None):
    ndim = np.ndim(x)
    axes = _axes(ctx, ndim, axes, 13)
    if axes is None:
        axes = [i for i, d in enumerate(np.shape(x)) if d == 1]
    return jnp.squeeze(x, axis=tuple(axes))


@_op("Unsqueeze")
def _unsqueeze(ctx, x, axes=None):
    axes = ctx.attr("axes") if ctx.opset < 13 else _ints(ctx, axes, "axes")
    out_ndim = np.ndim(x) + len(axes)
    return jnp.expand_dims(x, tuple(sorted(a % out_ndim for a in axes)))


@_op("Transpose")
def _transpose(ctx, x):
    perm = ctx.attr("perm")
    return jnp.transpose(x, None if perm is None else tuple(perm))


@_op("Concat")
def _concat(ctx, *xs):
    xs = [x for x in xs if x is not None]
    return jnp.concatenate([jnp.asarray(x) for x in xs], axis=ctx.attr("axis"))


@_op("Split")
def _split(ctx, x, split=None):
    axis = ctx.attr("axis", 0)
    dim = np.shape(x)[axis]
    sizes = ctx.attr("split") if ctx.opset < 13 else (None if split is None else _ints(ctx, split, "split"))
    n_out = len(ctx.node.output)
    if sizes is None:
        n = ctx.attr("num_outputs", n_out)
        chunk = -(-dim // n)
        sizes = [min(chunk, dim - i * chunk) for i in range(n)]
    offsets = np.cumsum([0] + list(sizes))
    return tuple(jax.lax.slice_in_dim(jnp.asarray(x), int(offsets[i]), int(offsets[i + 1]), axis=axis)
                 for i in range(len(sizes)))


@_op("Slice")
def _slice(ctx, x, starts=None, ends=None, axes=None, steps=None):
    shape = np.shape(x)
    if ctx.opset < 10:
        starts, ends, axes, steps = ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes"), None
    else:
        starts, ends = _ints(ctx, starts, "starts"), _ints(ctx, ends, "ends")
        axes = None if axes is None else _ints(ctx, axes, "axes")
        steps = None if steps is None else _ints(ctx, steps, "steps")
    axes = list(range(len(starts))) if axes is None else [a % len(shape) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * len(shape)
    for axis, start, end, step in zip(axes, starts, ends, steps):
        # Python slices clamp out-of-range bounds as ONNX does; only huge sentinels need care.
        index[axis] = slice(int(max(min(start, 2 ** 62), -2 ** 62)), int(max(min(end, 2 ** 62), -2 ** 62)),
                            int(step))
    return jnp.asarray(x)[tuple(index)]


def _norm_index(idx, dim):
    if is_static(idx):
        idx = np.asarray(idx)
        return np.where(idx < 0, idx + dim, idx)
    return jnp.where(idx < 0, idx + dim, idx)


@_op("Gather")
def _gather(ctx, x, idx):
    axis = ctx.attr("axis", 0) % max(np.ndim(x), 1)
    return jnp.take(jnp.asarray(x), _norm_index(idx, np.shape(x)[axis]), axis=axis, mode="clip")


@_op("GatherElements")
def _gather_elements(ctx, x, idx):
    axis = ctx.attr("axis", 0) % np.ndim(x)
    return jnp.take_along_axis(jnp.asarray(x), jnp.asarray(_norm_index(idx, np.shape(x)[axis])), axis=axis,
                               mode="clip")


def _gather_nd(x, idx, batch_dims):
    if batch_dims:
        return jax.vmap(lambda a, i: _gather_nd(a, i, batch_dims - 1))(x, idx)
    k = idx.shape[-1]
    idx = jnp.where(idx < 0, idx + jnp.asarray(x.shape[:k], dtype=idx.dtype), idx)
    return x[tuple(idx[..., i] for i in range(k))]


@_op("GatherND")
def _gather_nd_op(ctx, x, idx):
    return _gather_nd(jnp.asarray(x), jnp.asarray(idx), ctx.attr("batch_dims", 0))


def _scatter(target, index, updates, reduction):
    at = target.at[index]
    if reduction == "add":
        return at.add(updates)
    if reduction == "mul":
        return at.multiply(updates)
    if reduction == "max":
        return at.max(updates)
    if reduction == "min":
        return at.min(updates)
    return at.set(updates)


@_op("ScatterElements", "Scatter")
def _scatter_elements(ctx, x, idx, updates):
    x, idx = jnp.asarray(x), jnp.asarray(idx)
    axis = ctx.attr("axis", 0) % x.ndim
    idx = jnp.where(idx < 0, idx + x.shape[axis], idx)
    grids = jnp.meshgrid(*[jnp.arange(d) for d in idx.shape], indexing="ij")
    index = tuple(idx if d == axis else grids[d] for d in range(x.ndim))
    return _scatter(x, index, jnp.asarray(updates).astype(x.dtype), ctx.attr("reduction", "none"))


@_op("ScatterND")
def _scatter_nd(ctx, x, idx, updates):
    x, idx = jnp.asarray(x), jnp.asarray(idx)
    k = idx.shape[-1]
    idx = jnp.where(idx < 0, idx + jnp.asarray(x.shape[:k], dtype=idx.dtype), idx)
    index = tuple(idx[..., i] for i in range(k))
    return _scatter(x, index, jnp.asarray(updates).astype(x.dtype), ctx.attr("reduction", "none"))


@_op("Expand")
def _expand(ctx, x, shape):
    target = np.broadcast_shapes(np.shape(x), tuple(_ints(ctx, shape, "shape")))
    return jnp.broadcast_to(x, target)


@_op("Tile")
def _tile(ctx, x, repeats):
    return jnp.tile(x, _ints(ctx, repeats, "repeats"))


@_op("Range")
def _range(ctx, start, limit, delta):
    # ONNX's reference (np.arange) also takes one-element tensors (ONNX's expanded AffineGrid
    # passes a shape-[1] limit): read each as a scalar
    start, limit, delta = (np.asarray(ctx.static(v, w)).reshape(())
                           for v, w in ((start, "start"), (limit, "limit"), (delta, "delta")))
    n = max(int(np.ceil((limit - start) / delta)), 0)
    return (start + np.arange(n) * delta).astype(np.result_type(start))


@_op("NonZero")
def _nonzero(ctx, x):
    return np.array(np.nonzero(ctx.static(x, "input (its output shape depends on its values)")), dtype=np.int64)


@_op("Pad")
def _pad(ctx, x, pads=None, value=None, axes=None):
    ndim = np.ndim(x)
    mode = ctx.attr("mode", "constant")
    if ctx.opset < 11:
        pads, value = ctx.attr("pads"), ctx.attr("value", 0.0)
    else:
        pads = _ints(ctx, pads, "pads")
    axes = list(range(ndim)) if axes is None else [a % ndim for a in _ints(ctx, axes, "axes")]
    n = len(axes)
    widths = [(0, 0)] * ndim
    for i, a in enumerate(axes):
        widths[a] = (pads[i], pads[i + n])
    x = jnp.asarray(x)
    # Negative pads crop.
    crop = tuple(slice(-lo if lo < 0 else 0, (d + hi) if hi < 0 else d) for (lo, hi), d in zip(widths, x.shape))
    x = x[crop]
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
    if mode == "constant":
        fill = 0 if value is None else jnp.asarray(value).reshape(()).astype(x.dtype)
        return jnp.pad(x, widths, mode="constant", constant_values=fill)
    jmode = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}.get(mode)
    if jmode is None:
        raise ModelError(f"Pad node '{ctx.name}': mode must be constant, reflect, edge or wrap. Received: {mode!r}")
    return jnp.pad(x, widths, mode=jmode)


@_op("DepthToSpace")
def _depth_to_space(ctx, x):
    b = ctx.attr("blocksize")
    n, c, h, w = np.shape(x)
    if ctx.attr("mode", "DCR") == "DCR":
        y = jnp.reshape(x, (n, b, b, c // (b * b), h, w)).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = jnp.reshape(x, (n, c // (b * b), b, b, h, w)).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@_op("SpaceToDepth")
def _space_to_depth(ctx, x):
    b = ctx.attr("blocksize")
    n, c, h, w = np.shape(x)
    perm = (0, 3, 5, 1, 2, 4) if ctx.attr("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
    y = jnp.reshape(x, (n, c, h // b, b, w // b, b)).transpose(perm)
    return y.reshape(n, c * b * b, h // b, w // b)


@_op("Trilu")
def _trilu(ctx, x, k=None):
    k = 0 if k is None else int(ctx.static(k, "k").reshape(-1)[0])
    return jnp.triu(x, k) if ctx.attr("upper", 1) else jnp.tril(x, k)
