"""Shape and data-movement operators as torch functions: Shape, Size, Constant, ConstantOfShape,
Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Concat, Split, Slice, Gather, GatherElements,
GatherND, ScatterND, ScatterElements (with their ``reduction``), Expand, Tile, Range, Pad,
DepthToSpace, SpaceToDepth, Trilu, NonZero.

Converters follow the contract of :mod:`deep500lite.frameworks.torch.ops`.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from deep500lite.frameworks.torch.dtypes import to_torch
from deep500lite.frameworks.torch.ops._common import _const_ints, _ints, _torch_pad_list, registrar
from deep500lite.lv1.network import constant_attribute_value

__all__ = ["CONVERTERS"]

CONVERTERS: dict[str, Callable] = {}
"""ONNX op type -> converter (``NodeSpec -> function of tensors``) of this family."""
_op = registrar(CONVERTERS)


@_op("Shape")
def _shape(spec):
    start, end = spec.attr("start", 0), spec.attr("end")
    return lambda x: torch.tensor(x.shape[start:end], dtype=torch.int64, device=x.device)


@_op("Size")
def _size(spec):
    return lambda x: torch.tensor(x.numel(), dtype=torch.int64, device=x.device)


@_op("Constant")
def _constant(spec):
    value = constant_attribute_value(spec.attrs)
    if value is None or value.dtype == object:
        raise spec.unsupported(f"attribute(s) {sorted(spec.attrs)} (string and sparse constants have no torch type)")
    t = to_torch(value, spec.device)
    return lambda: t


@_op("ConstantOfShape")
def _constant_of_shape(spec):
    value = spec.attr("value")
    value = np.zeros(1, np.float32) if value is None else value
    fill = to_torch(value.reshape(-1)[:1], spec.device).reshape(())
    return lambda shape: fill.expand(_ints(shape)).clone()


def _reshape_target(x, shape, allowzero):
    if allowzero:
        return shape
    return [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]


@_op("Reshape")
def _reshape(spec):
    allowzero = spec.attr("allowzero", 0)
    if spec.opset < 5:
        shape = spec.attr("shape")
        return lambda x: x.reshape(_reshape_target(x, shape, allowzero))
    shape = _const_ints(spec, 1)
    if shape is not None and (allowzero or 0 not in shape):
        return lambda x, s: x.reshape(shape)
    return lambda x, s: x.reshape(_reshape_target(x, _ints(s), allowzero))


@_op("Flatten")
def _flatten(spec):
    axis = spec.attr("axis", 1)

    def run(x):
        a = axis % x.dim() if axis < 0 else axis
        return x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))
    return run


@_op("Transpose")
def _transpose(spec):
    perm = spec.attr("perm")
    if perm is None:
        return lambda x: x.permute(*reversed(range(x.dim())))
    return lambda x: x.permute(perm)


def _axes_input(spec, attr_opset: int, index: int = 1):
    """Axes as an attribute (``opset < attr_opset``) or an input: (static axes, from_input)."""
    if spec.opset < attr_opset:
        return spec.attr("axes"), False
    return _const_ints(spec, index), True


@_op("Squeeze")
def _squeeze(spec):
    axes, from_input = _axes_input(spec, 13)

    def run(x, ax=None):
        a = axes if axes is not None else (_ints(ax) if ax is not None else None)
        if a is None:
            return x.squeeze()
        return x.squeeze(tuple(i % x.dim() for i in a)) if a else x
    return run


@_op("Unsqueeze")
def _unsqueeze(spec):
    axes, from_input = _axes_input(spec, 13)

    def run(x, ax=None):
        a = axes if axes is not None else _ints(ax)
        rank = x.dim() + len(a)
        for i in sorted(i % rank for i in a):
            x = x.unsqueeze(i)
        return x
    return run


@_op("Concat")
def _concat(spec):
    axis = spec.attr("axis")
    return lambda *xs: torch.cat(xs, axis)


@_op("Split")
def _split(spec):
    axis = spec.attr("axis", 0)
    n = spec.n_outputs
    if spec.opset < 13:
        split = spec.attr("split")
    else:
        split = _const_ints(spec, 1) if spec.has(1) else None

    def run(x, s=None):
        sizes = split if split is not None else (_ints(s) if s is not None else None)
        if sizes is None:
            return tuple(torch.split(x, math.ceil(x.shape[axis] / n), axis))
        return tuple(torch.split(x, sizes, axis))
    return run


def _slice(x, starts, ends, axes, steps):
    index = [slice(None)] * x.dim()
    flips = []
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis %= x.dim()
        size = x.shape[axis]
        lo, hi, st = slice(start, end, step).indices(size)
        if step > 0:
            index[axis] = slice(lo, max(hi, lo), st)
        else:
            count = len(range(lo, hi, st))
            # Walk backwards on the flipped axis: position p of x is size-1-p there.
            flips.append(axis)
            first = size - 1 - lo
            index[axis] = slice(first, first + count * (-st), -st) if count else slice(0, 0)
    if flips:
        x = x.flip(flips)
    return x[tuple(index)]


@_op("Slice")
def _slice_op(spec):
    if spec.opset < 10:
        starts, ends = spec.attr("starts"), spec.attr("ends")
        axes = spec.attr("axes") or list(range(len(starts)))
        return lambda x: _slice(x, starts, ends, axes, [1] * len(starts))
    consts = [_const_ints(spec, i) if spec.has(i) else None for i in range(1, 5)]

    def run(x, starts, ends, axes=None, steps=None):
        s = consts[0] if consts[0] is not None else _ints(starts)
        e = consts[1] if consts[1] is not None else _ints(ends)
        a = consts[2] if consts[2] is not None else (_ints(axes) if axes is not None else list(range(len(s))))
        st = consts[3] if consts[3] is not None else (_ints(steps) if steps is not None else [1] * len(s))
        return _slice(x, s, e, a, st)
    return run


def _fix_negative(idx, size):
    return torch.where(idx < 0, idx + size, idx)


@_op("Gather")
def _gather(spec):
    axis = spec.attr("axis", 0)
    static = spec.const(1)
    if static is not None and static.ndim == 0:
        k = int(static)  # one index (the usual Gather on a Shape): no tensor arithmetic per call
        return lambda x, idx: x.select(axis, k)

    def run(x, idx):
        a = axis % x.dim()
        i = _fix_negative(idx.to(torch.int64), x.shape[a])
        if i.dim() == 0:
            return x.select(a, int(i))
        out = x.index_select(a, i.reshape(-1))
        return out.reshape(*x.shape[:a], *i.shape, *x.shape[a + 1:])
    return run


@_op("GatherElements")
def _gather_elements(spec):
    axis = spec.attr("axis", 0)

    def run(x, idx):
        a = axis % x.dim()
        return torch.gather(x, a, _fix_negative(idx.to(torch.int64), x.shape[a]))
    return run


@_op("Expand")
def _expand(spec):
    def run(x, shape):
        return x.expand(torch.broadcast_shapes(tuple(x.shape), tuple(_ints(shape))))
    return run


@_op("Tile")
def _tile(spec):
    return lambda x, reps: x.repeat(_ints(reps))


@_op("Range")
def _range(spec):
    def run(start, limit, delta):
        s, l, d = start.item(), limit.item(), delta.item()
        n = max(math.ceil((l - s) / d), 0)
        return (torch.arange(n, dtype=torch.float64 if start.is_floating_point() else torch.int64,
                             device=start.device) * d + s).to(start.dtype)
    return run


@_op("Pad")
def _pad(spec):
    mode = spec.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise spec.unsupported(f"mode={mode!r}")
    if spec.opset < 11:
        static_pads, static_value = spec.attr("pads"), spec.attr("value", 0.0)
    else:
        static_pads, static_value = _const_ints(spec, 1), None

    def run(x, pads=None, value=None, axes=None):
        p = static_pads if static_pads is not None else _ints(pads)
        ax = list(range(x.dim())) if axes is None else [a % x.dim() for a in _ints(axes)]
        n = len(ax)
        begins, ends = [0] * x.dim(), [0] * x.dim()
        for i, a in enumerate(ax):
            begins[a], ends[a] = p[i], p[i + n]
        if mode == "constant":
            v = static_value if value is None else value.item()
            v = 0 if v is None else v
            return F.pad(x, _torch_pad_list(begins, ends), value=v)
        for a in range(x.dim()):
            b, e = begins[a], ends[a]
            if b == 0 and e == 0:
                continue
            size = x.shape[a]
            pos = torch.arange(-b, size + e, device=x.device)
            if mode == "edge":
                pos = pos.clamp(0, size - 1)
            elif mode == "wrap":
                pos = pos % size
            else:
                period = 2 * (size - 1) if size > 1 else 1
                pos = pos.abs() % period
                pos = torch.where(pos >= size, period - pos, pos)
            x = x.index_select(a, pos)
        return x
    return run


@_op("DepthToSpace")
def _depth_to_space(spec):
    bs, mode = spec.attr("blocksize"), spec.attr("mode", "DCR")

    def run(x):
        n, c, h, w = x.shape
        if mode == "DCR":
            y = x.reshape(n, bs, bs, c // bs ** 2, h, w).permute(0, 3, 4, 1, 5, 2)
        else:
            y = x.reshape(n, c // bs ** 2, bs, bs, h, w).permute(0, 1, 4, 2, 5, 3)
        return y.reshape(n, c // bs ** 2, h * bs, w * bs)
    return run


@_op("SpaceToDepth")
def _space_to_depth(spec):
    bs, mode = spec.attr("blocksize"), spec.attr("mode", "DCR")
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)

    def run(x):
        n, c, h, w = x.shape
        y = x.reshape(n, c, h // bs, bs, w // bs, bs).permute(perm)
        return y.reshape(n, c * bs * bs, h // bs, w // bs)
    return run


@_op("Trilu")
def _trilu(spec):
    upper = spec.attr("upper", 1)

    def run(x, k=None):
        kk = 0 if k is None else int(k.item())
        return torch.triu(x, kk) if upper else torch.tril(x, kk)
    return run


@_op("NonZero")
def _nonzero(spec):
    return lambda x: torch.nonzero(x.reshape(1) if x.dim() == 0 else x).t().contiguous()


def _nd_linear_index(idx, dims):
    """Row-major linear index of the last axis of ``idx`` (coordinates into ``dims``), negatives wrapped."""
    lin = torch.zeros(idx.shape[:-1], dtype=torch.int64, device=idx.device)
    for j, size in enumerate(dims):
        lin = lin * size + _fix_negative(idx[..., j], size)
    return lin


@_op("GatherND")
def _gather_nd(spec):
    batch_dims = spec.attr("batch_dims", 0)

    def run(x, idx):
        idx = idx.to(torch.int64)
        k = idx.shape[-1]
        batch = tuple(x.shape[:batch_dims])
        n_batch = math.prod(batch)
        rest = tuple(x.shape[batch_dims + k:])
        data = x.reshape(n_batch, math.prod(x.shape[batch_dims:batch_dims + k]), *rest)
        lin = _nd_linear_index(idx.reshape(n_batch, -1, k), x.shape[batch_dims:batch_dims + k])
        rows = torch.arange(n_batch, device=x.device).unsqueeze(1)
        return data[rows, lin].reshape(*batch, *idx.shape[batch_dims:-1], *rest)
    return run


# ONNX reduction attribute -> torch scatter_reduce's reduce argument.
_SCATTER_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def _scatter_reduction(spec):
    reduction = spec.attr("reduction", "none")
    if reduction != "none" and reduction not in _SCATTER_REDUCE:
        raise spec.unsupported(f"reduction={reduction!r}", f"reduction 'none', {', '.join(map(repr, _SCATTER_REDUCE))}")
    return reduction


@_op("ScatterND")
def _scatter_nd(spec):
    reduction = _scatter_reduction(spec)

    def run(x, idx, updates):
        idx = idx.to(torch.int64)
        k = idx.shape[-1]
        rest = tuple(x.shape[k:])
        data = x.reshape(math.prod(x.shape[:k]), *rest)
        lin = _nd_linear_index(idx, x.shape[:k]).reshape(-1)
        upd = updates.reshape(lin.shape[0], *rest)
        if reduction == "none":
            out = data.index_put((lin,), upd)
        elif reduction == "add":
            out = data.index_put((lin,), upd, accumulate=True)
        else:
            index = lin.reshape(-1, *(1,) * len(rest)).expand(upd.shape)
            out = data.scatter_reduce(0, index, upd, _SCATTER_REDUCE[reduction], include_self=True)
        return out.reshape(x.shape)
    return run


@_op("ScatterElements")
def _scatter_elements(spec):
    axis = spec.attr("axis", 0)
    reduction = _scatter_reduction(spec)

    def run(x, idx, updates):
        a = axis % x.dim()
        i = _fix_negative(idx.to(torch.int64), x.shape[a])
        if reduction == "none":
            return torch.scatter(x, a, i, updates)
        return torch.scatter_reduce(x, a, i, updates, _SCATTER_REDUCE[reduction], include_self=True)
    return run
