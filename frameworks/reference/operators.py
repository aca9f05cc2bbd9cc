"""What the reference executor supports: the operators ONNX's reference implementation has."""

from __future__ import annotations

import onnx
from onnx.reference.ops import _op_list

__all__ = ["SUPPORTED_OPS"]


def _reference_ops() -> frozenset:
    names = set()
    for name in dir(_op_list):
        base = name.split("_")[0]
        if base and base[0].isupper() and onnx.defs.has(base):
            names.add(base)
    return frozenset(names)


SUPPORTED_OPS: frozenset = _reference_ops()
