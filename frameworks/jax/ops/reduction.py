"""ONNX reductions as JAX functions: ``Reduce*``, ``ArgMax``/``ArgMin``, ``CumSum``, ``TopK``.

Reduction axes come from the ``axes`` attribute before the opset that moved them to an input
(13 for ``ReduceSum``, 18 for the others) and from the input after it; they must be known while
tracing.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from deep500lite.frameworks.jax.ops._common import registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict[str, Callable] = {}
_op = registrar(CONVERTERS)


def _reduce(fn: Callable, attr_until: int = 18):
    def convert(ctx, x, axes=None):
        x = jnp.asarray(x)
        if ctx.opset < attr_until:
            axes = ctx.attr("axes")
        elif axes is not None:
            axes = [int(a) for a in ctx.static(axes, "axes").reshape(-1)]
        if axes is not None and len(axes) == 0:
            axes = None
        if axes is None and ctx.attr("noop_with_empty_axes", 0):
            return x
        keep = bool(ctx.attr("keepdims", 1))
        axis = None if axes is None else tuple(a % max(x.ndim, 1) for a in axes)
        return fn(x, axis, keep)
    return convert


def _sum_square(x, axis, keep):
    return jnp.sum(x * x, axis=axis, keepdims=keep)


def _extreme(fn, largest: bool):
    """``jnp.max``/``jnp.min``; over an empty set ONNX gives the identity (-inf/+inf, the int limits, False/True)."""
    def reduce(x, axis, keep):
        axes = range(x.ndim) if axis is None else axis
        if all(x.shape[a] for a in axes):
            return fn(x, axis=axis, keepdims=keep)
        if x.dtype == jnp.bool_:
            initial = not largest
        elif jnp.issubdtype(x.dtype, jnp.integer):
            info = jnp.iinfo(x.dtype)
            initial = info.min if largest else info.max
        else:
            initial = -np.inf if largest else np.inf
        return fn(x, axis=axis, keepdims=keep, initial=initial)
    return reduce


CONVERTERS.update({
    "ReduceSum": _reduce(lambda x, a, k: jnp.sum(x, axis=a, keepdims=k), 13),
    "ReduceMean": _reduce(lambda x, a, k: jnp.mean(x, axis=a, keepdims=k)),
    "ReduceMax": _reduce(_extreme(jnp.max, True)),
    "ReduceMin": _reduce(_extreme(jnp.min, False)),
    "ReduceProd": _reduce(lambda x, a, k: jnp.prod(x, axis=a, keepdims=k)),
    "ReduceL1": _reduce(lambda x, a, k: jnp.sum(jnp.abs(x), axis=a, keepdims=k)),
    "ReduceL2": _reduce(lambda x, a, k: jnp.sqrt(_sum_square(x, a, k)).astype(x.dtype)),
    "ReduceSumSquare": _reduce(_sum_square),
    "ReduceLogSum": _reduce(lambda x, a, k: jnp.log(jnp.sum(x, axis=a, keepdims=k))),
    "ReduceLogSumExp": _reduce(lambda x, a, k: jax.scipy.special.logsumexp(x, axis=a, keepdims=k)),
})


def _arg(fn):
    def convert(ctx, x):
        x = jnp.asarray(x)
        axis = ctx.attr("axis", 0) % max(x.ndim, 1)
        keep = bool(ctx.attr("keepdims", 1))
        if ctx.attr("select_last_index", 0):
            flipped = jnp.flip(x, axis)
            out = x.shape[axis] - 1 - fn(flipped, axis=axis, keepdims=keep)
        else:
            out = fn(x, axis=axis, keepdims=keep)
        return out.astype(jnp.int64)
    return convert


CONVERTERS["ArgMax"] = _arg(jnp.argmax)
CONVERTERS["ArgMin"] = _arg(jnp.argmin)


@_op("CumSum")
def _cumsum(ctx, x, axis):
    x = jnp.asarray(x)
    axis = int(ctx.static(axis, "axis").reshape(-1)[0]) % x.ndim
    if ctx.attr("reverse", 0):
        x = jnp.flip(x, axis)
    out = jnp.cumsum(x, axis=axis, dtype=x.dtype)
    if ctx.attr("exclusive", 0):
        out = jnp.concatenate([jnp.zeros_like(jax.lax.slice_in_dim(out, 0, 1, axis=axis)),
                               jax.lax.slice_in_dim(out, 0, x.shape[axis] - 1, axis=axis)], axis=axis)
    if ctx.attr("reverse", 0):
        out = jnp.flip(out, axis)
    return out


@_op("TopK")
def _topk(ctx, x, k=None):
    x = jnp.asarray(x)
    k = ctx.attr("k") if ctx.opset < 10 else int(ctx.static(k, "k").reshape(-1)[0])
    axis = ctx.attr("axis", -1) % x.ndim
    largest = ctx.attr("largest", 1)
    moved = jnp.moveaxis(x, axis, -1)
    if largest:
        values, idx = jax.lax.top_k(moved, k)
    else:
        # Sort ascending; ties keep the lower index first (a stable sort), as ONNX asks.
        idx = jnp.argsort(moved, axis=-1, stable=True)[..., :k]
        values = jnp.take_along_axis(moved, idx, axis=-1)
    return jnp.moveaxis(values, -1, axis), jnp.moveaxis(idx.astype(np.int64), -1, axis)
