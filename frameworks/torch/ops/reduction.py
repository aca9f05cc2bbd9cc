"""Reductions as torch functions: the Reduce* operators, ArgMax, ArgMin, CumSum, TopK.

Converters follow the contract of :mod:`deep500lite.frameworks.torch.ops`.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

from deep500lite.frameworks.torch.ops._common import _const_ints, _ints, _scalar, _wide_unsigned, registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict[str, Callable] = {}
"""ONNX op type -> converter (``NodeSpec -> function of tensors``) of this family."""
_op = registrar(CONVERTERS)


@_op("CumSum")
def _cumsum(spec):
    exclusive, reverse = spec.attr("exclusive", 0), spec.attr("reverse", 0)

    def run(x, axis):
        a = int(axis.item()) % x.dim()
        y = x.flip(a) if reverse else x
        y = torch.cumsum(y, a).to(x.dtype)
        if exclusive:
            y = F.pad(y.narrow(a, 0, y.shape[a] - 1), [0, 0] * (x.dim() - 1 - a) + [1, 0])
        return y.flip(a) if reverse else y
    return run


@_op("TopK")
def _topk(spec):
    axis = spec.attr("axis", -1)
    largest = spec.attr("largest", 1)
    k_attr = spec.attr("k") if spec.opset < 10 else None

    def run(x, k=None):
        kk = k_attr if k_attr is not None else int(_scalar(k))
        # A stable sort keeps the lower index first among equal values, as ONNX requires.
        values, idx = torch.sort(x, dim=axis, descending=bool(largest), stable=True)
        return values.narrow(axis, 0, kk), idx.narrow(axis, 0, kk)
    return run


def _reduce_axes(spec, attr_opset):
    if spec.opset < attr_opset:
        return spec.attr("axes"), False
    return _const_ints(spec, 1) if spec.has(1) else None, True


def _identity_value(op, dtype):
    if dtype == torch.bool:
        return {"ReduceMax": False, "ReduceMin": True, "ReduceProd": True}.get(op, False)
    big = math.inf if dtype.is_floating_point else torch.iinfo(dtype).max
    return {"ReduceMax": -big if dtype.is_floating_point else torch.iinfo(dtype).min,
            "ReduceMin": big, "ReduceProd": 1, "ReduceLogSumExp": -math.inf,
            "ReduceLogSum": -math.inf}.get(op, 0)


def _mean(x, dims, keep):
    if x.is_floating_point():
        return x.mean(dim=dims, keepdim=keep)
    return x.to(torch.float64).mean(dim=dims, keepdim=keep).to(x.dtype)


def _prod(x, dims, keep):
    for d in sorted(dims, reverse=True):
        x = x.prod(dim=d, keepdim=True)
    return x if keep else x.squeeze(dims)


_REDUCE = {
    "ReduceSum": lambda x, d, k: x.sum(dim=d, keepdim=k).to(x.dtype),
    "ReduceMean": _mean,
    "ReduceMax": lambda x, d, k: x.amax(dim=d, keepdim=k),
    "ReduceMin": lambda x, d, k: x.amin(dim=d, keepdim=k),
    "ReduceProd": _prod,
    "ReduceL1": lambda x, d, k: x.abs().sum(dim=d, keepdim=k).to(x.dtype),
    "ReduceL2": lambda x, d, k: torch.sqrt((x * x).sum(dim=d, keepdim=k)).to(x.dtype),
    "ReduceLogSum": lambda x, d, k: torch.log(x.sum(dim=d, keepdim=k)),
    "ReduceLogSumExp": lambda x, d, k: torch.logsumexp(x, dim=d, keepdim=k),
    "ReduceSumSquare": lambda x, d, k: (x * x).sum(dim=d, keepdim=k).to(x.dtype),
}


@_op(*_REDUCE)
def _reduce(spec):
    fn = _REDUCE[spec.op]
    keep = bool(spec.attr("keepdims", 1))
    noop = spec.attr("noop_with_empty_axes", 0)
    axes, _ = _reduce_axes(spec, 13 if spec.op == "ReduceSum" else 18)
    op = spec.op

    def run(x, ax=None):
        a = axes if axes is not None else (_ints(ax) if ax is not None else [])
        if not a:
            if noop:
                return x
            a = list(range(x.dim()))
        dims = tuple(sorted(i % x.dim() for i in a)) if x.dim() else ()
        if x.dim() == 0:
            return fn(x.reshape(1), (0,), False).reshape(())
        if x.numel() == 0 and any(x.shape[d] == 0 for d in dims):
            shape = [1 if i in dims else s for i, s in enumerate(x.shape)] if keep else \
                [s for i, s in enumerate(x.shape) if i not in dims]
            return torch.full(shape, _identity_value(op, x.dtype), dtype=x.dtype, device=x.device)
        return fn(x, dims, keep)
    return _wide_unsigned(run)


@_op("ArgMax", "ArgMin")
def _arg(spec):
    axis, keep = spec.attr("axis", 0), bool(spec.attr("keepdims", 1))
    last = spec.attr("select_last_index", 0)
    fn = torch.argmax if spec.op == "ArgMax" else torch.argmin

    def run(x):
        a = axis % x.dim()
        if last:
            return x.shape[a] - 1 - fn(x.flip(a), dim=a, keepdim=keep)
        return fn(x, dim=a, keepdim=keep)
    return run
