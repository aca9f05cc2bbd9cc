"""Helpers shared by the level-0 checks: default tolerances, input checks, a counting forward runner.

Internal to :mod:`deep500lite.lv0.validation`; :func:`forward_tolerance` and
:func:`gradient_tolerance` are public (and documented in ``docs/validation.md``).
"""

from __future__ import annotations

import numpy as np

from deep500lite.errors import UserError, UserTypeError
from deep500lite.lv0.operator import Operator

__all__ = ["forward_tolerance", "gradient_tolerance", "F16", "F32", "F64", "as_tuple", "ForwardCounter",
           "check_operator", "prepare_inputs", "tensor_names", "index_text", "less_precise", "metric_name"]

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)

# (rtol, atol) per dtype. An element passes when |out - ref| <= atol * scale + rtol * |ref|, where
# scale = max(1, largest finite |ref| of that tensor).
_FORWARD_TOLERANCES = {F16: (5e-3, 5e-3), F32: (1e-5, 1e-6), F64: (1e-10, 1e-12)}
# Keyed by the precision of the analytic gradient (the operator's own dtype).
_GRADIENT_TOLERANCES = {F16: (1e-2, 1e-3), F32: (1e-3, 1e-5), F64: (1e-6, 1e-8)}


def as_tuple(out) -> tuple:
    """``out`` as a tuple: a list or tuple as it is, anything else as a one-element tuple."""
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


class ForwardCounter:
    """Calls ``op.forward`` (bypassing descriptor checks, so float64 and batched inputs pass) and counts."""

    def __init__(self, op: Operator):
        self.op = op
        self.calls = 0

    def run(self, inputs) -> tuple:
        self.calls += 1
        return tuple(np.asarray(o) for o in as_tuple(self.op.forward(*inputs)))


def check_operator(op, fn: str) -> None:
    """Raise UserTypeError unless ``op`` is an Operator or has a callable ``forward`` (``fn`` names the check)."""
    if not isinstance(op, Operator) and not (callable(getattr(op, "forward", None))):
        raise UserTypeError(f"{fn} expects a d5.Operator (with forward and backward). Received: {type(op).__name__}")


def prepare_inputs(op, inputs, fn: str) -> list:
    """``inputs`` as a list of numpy arrays, checked against ``op``'s input descriptors when it has them."""
    if isinstance(inputs, np.ndarray):
        inputs = [inputs]
    if not isinstance(inputs, (list, tuple)):
        raise UserTypeError(f"{fn}: inputs must be a list of numpy arrays, one per operator input. "
                            f"Received: {type(inputs).__name__}")
    arrays = [np.asarray(x) for x in inputs]
    descs = getattr(op, "input_descriptors", None)
    if descs is not None:
        if len(arrays) != len(descs):
            raise UserError(
                f"{fn}: {type(op).__name__} takes {len(descs)} inputs "
                f"({', '.join(str(d) for d in descs)}). Received: {len(arrays)} inputs")
        for i, (x, d) in enumerate(zip(arrays, descs)):
            if not d.matches(x):
                raise UserError(f"{fn}: input {i} of {type(op).__name__} must be {d}. "
                                f"Received: {x.dtype.name}{list(x.shape)}")
    return arrays


def tensor_names(op, attr: str, prefix: str, n: int) -> list:
    """``op.<attr>`` when it is a list of ``n`` strings, else ``prefix0``, ``prefix1``, ..."""
    names = getattr(op, attr, None)
    if isinstance(names, (list, tuple)) and len(names) == n and all(isinstance(s, str) for s in names):
        return list(names)
    return [f"{prefix}{i}" for i in range(n)]


def index_text(flat: int, shape) -> str:
    """The flat index ``flat`` as a multi-index of ``shape``, written as a tuple."""
    if not shape:
        return "()"
    idx = np.unravel_index(int(flat), shape)
    return "(" + ", ".join(str(int(i)) for i in idx) + ("," if len(idx) == 1 else "") + ")"


def _tol_lookup(table: dict, dtype) -> tuple:
    dtype = np.dtype(dtype)
    if dtype.kind in "biu":
        return (0.0, 0.0)
    if dtype in table:
        return table[dtype]
    if dtype.kind == "c":
        return table[F64 if dtype.itemsize >= 16 else F32]
    return table[F32]


def forward_tolerance(dtype) -> tuple:
    """The default ``(rtol, atol)`` of :func:`test_op_forward` for outputs of ``dtype``.

    float16: (5e-3, 5e-3); float32: (1e-5, 1e-6); float64: (1e-10, 1e-12); integers and booleans
    must match exactly. ``atol`` is multiplied by ``max(1, max |reference|)``.
    """
    return _tol_lookup(_FORWARD_TOLERANCES, dtype)


def gradient_tolerance(dtype) -> tuple:
    """The default ``(rtol, atol)`` of :func:`test_op_gradient` for an analytic gradient of ``dtype``.

    float16: (1e-2, 1e-3); float32: (1e-3, 1e-5); float64: (1e-6, 1e-8). ``atol`` is multiplied
    by ``max(1, max |numerical gradient|)`` of that input.
    """
    return _tol_lookup(_GRADIENT_TOLERANCES, dtype)


def less_precise(*dtypes) -> np.dtype:
    """The floating-point dtype with the largest eps among ``dtypes`` (the first dtype when none is one)."""
    floats = [np.dtype(d) for d in dtypes if np.dtype(d).kind in "fc"]
    if not floats:
        return np.dtype(dtypes[0])
    return max(floats, key=lambda d: np.finfo(d).eps)


def metric_name(m) -> str:
    """A metric's ``name``, or its class name."""
    return getattr(m, "name", "") or type(m).__name__
