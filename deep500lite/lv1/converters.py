"""Pieces shared by the executors that convert ONNX nodes one by one (torch, jax).

:func:`parse_attributes` reads a node's attributes into Python values once, when a graph is
converted; :func:`registrar` makes the ``@_op(*names)`` decorator each operator family uses to
fill its converter table.
"""

from __future__ import annotations

from typing import Callable

import onnx
from onnx import numpy_helper

__all__ = ["parse_attributes", "registrar"]


def registrar(table: dict[str, Callable]) -> Callable:
    """The ``@_op(*names)`` decorator that registers a converter in ``table`` under each op type.

    Args:
        table: a family's converter table (op type -> converter).
    """
    def _op(*names):
        def register(fn):
            for name in names:
                table[name] = fn
            return fn
        return register
    return _op


def parse_attributes(node: onnx.NodeProto) -> dict:
    """The node's attributes as Python values.

    Strings are decoded, tensors become numpy arrays, repeated values become lists; graphs and
    sparse tensors stay ``AttributeProto`` objects.
    """
    out = {}
    for a in node.attribute:
        if a.type == onnx.AttributeProto.STRING:
            out[a.name] = a.s.decode()
        elif a.type == onnx.AttributeProto.STRINGS:
            out[a.name] = [s.decode() for s in a.strings]
        elif a.type == onnx.AttributeProto.TENSOR:
            out[a.name] = numpy_helper.to_array(a.t)
        elif a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS, onnx.AttributeProto.SPARSE_TENSOR):
            out[a.name] = a
        else:
            v = onnx.helper.get_attribute_value(a)
            out[a.name] = list(v) if isinstance(v, (list, tuple)) or a.type in (
                onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS) else v
    return out
