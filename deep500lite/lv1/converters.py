"""Pieces shared by the executors that convert ONNX nodes one by one (torch, jax).

:func:`parse_attributes` reads a node's attributes into Python values once, when a graph is
converted; :func:`registrar` makes the ``@_op(*names)`` decorator each operator family uses to
fill its converter table.
"""

from __future__ import annotations

from typing import Callable

import onnx
from onnx import numpy_helper

__all__ = ["parse_attributes", "registrar", "assemble_converters", "resize_output"]


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


def assemble_converters(families) -> dict[str, Callable]:
    """One converter table (op type -> converter) from the ``CONVERTERS`` tables of operator families.

    Raises:
        AssertionError: two families register the same op type (a programming error).
    """
    table: dict[str, Callable] = {}
    for family in families:
        for op_type, converter in family.CONVERTERS.items():
            assert op_type not in table, f"{op_type} has converters in two families"
            table[op_type] = converter
    return table


def resize_output(shape, axes, sizes, scales, policy: str) -> tuple[dict, dict]:
    """ONNX Resize's output size and scale factor per resized axis.

    Args:
        shape: the input's shape.
        axes: the resized axes (non-negative).
        sizes: the requested output sizes (one per axis), or None to use ``scales``.
        scales: the scale factors (one per axis), used when ``sizes`` is None.
        policy: ``keep_aspect_ratio_policy``: ``stretch``, ``not_larger`` or ``not_smaller``.

    Returns:
        ``(out, factor)``: dicts from axis to output size and to scale factor.
    """
    if sizes is not None:
        out = {a: int(s) for a, s in zip(axes, sizes)}
        factor = {a: out[a] / shape[a] for a in axes}
        if policy != "stretch":
            scale = (min if policy == "not_larger" else max)(factor.values())
            factor = {a: scale for a in axes}
            out = {a: int(scale * shape[a] + 0.5) for a in axes}
    else:
        factor = {a: float(s) for a, s in zip(axes, scales)}
        out = {a: int(factor[a] * shape[a]) for a in axes}
    return out, factor
