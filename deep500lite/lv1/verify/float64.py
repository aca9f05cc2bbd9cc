"""A model's float64 twin: the ground truth ``verify`` compares every executor with.

:func:`to_float64` rewrites an ONNX model so that every floating-point value is computed in
float64: float initializers, graph inputs and outputs, ``Constant`` and ``ConstantOfShape``
values, the target type of ``Cast`` and the ``dtype`` of the generating operators
(``RandomNormal``, ``EyeLike``, ...), in the main graph, in every subgraph (``If``, ``Loop``,
``Scan`` bodies) and in the model's local functions. Integer and boolean values are untouched,
so indices, shapes and masks are the same. The reference executor (numpy through
``onnx.reference``) runs the result in float64.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["FLOAT_TYPES", "to_float64", "feeds_as_float64"]

#: ONNX element types that become DOUBLE.
FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16})

# operators whose "dtype" (or "to") attribute names the element type of a value they make
_TYPE_ATTRIBUTES = {"Cast": "to", "RandomNormal": "dtype", "RandomUniform": "dtype", "RandomNormalLike": "dtype",
                    "RandomUniformLike": "dtype", "EyeLike": "dtype", "Bernoulli": "dtype", "Multinomial": "dtype",
                    "SequenceEmpty": "dtype"}


def _tensor64(t: TensorProto) -> TensorProto:
    if t.data_type not in FLOAT_TYPES:
        return t
    out = numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name)
    return out


def _type64(tp: onnx.TypeProto) -> None:
    which = tp.WhichOneof("value")
    if which == "tensor_type":
        if tp.tensor_type.elem_type in FLOAT_TYPES:
            tp.tensor_type.elem_type = TensorProto.DOUBLE
    elif which == "sequence_type":
        _type64(tp.sequence_type.elem_type)
    elif which == "optional_type":
        _type64(tp.optional_type.elem_type)
    elif which == "map_type":
        _type64(tp.map_type.value_type)


def _node64(node: onnx.NodeProto) -> None:
    type_attr = _TYPE_ATTRIBUTES.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.TENSOR:
            attr.t.CopyFrom(_tensor64(attr.t))
        elif attr.type == onnx.AttributeProto.TENSORS:
            new = [_tensor64(t) for t in attr.tensors]
            del attr.tensors[:]
            attr.tensors.extend(new)
        elif attr.type == onnx.AttributeProto.GRAPH:
            _graph64(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for g in attr.graphs:
                _graph64(g)
        elif attr.name == type_attr and attr.type == onnx.AttributeProto.INT and attr.i in FLOAT_TYPES:
            attr.i = TensorProto.DOUBLE
    if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
        for attr in list(node.attribute):
            if attr.name in ("value_float", "value_floats"):
                value = np.asarray(helper.get_attribute_value(attr), dtype=np.float64)
                node.attribute.remove(attr)
                node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(value)))
    if type_attr is not None and node.op_type.startswith("Random") and not any(
            a.name == type_attr for a in node.attribute) and not node.op_type.endswith("Like"):
        # RandomNormal/RandomUniform default to float32
        node.attribute.append(helper.make_attribute(type_attr, TensorProto.DOUBLE))


def _graph64(graph: onnx.GraphProto) -> None:
    inits = [_tensor64(t) for t in graph.initializer]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    for sparse in graph.sparse_initializer:
        sparse.values.CopyFrom(_tensor64(sparse.values))
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        _type64(vi.type)
    for node in graph.node:
        _node64(node)


def to_float64(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` computing every floating-point value in float64 (see the module docs).

    Args:
        model: the model (not changed).

    Returns:
        The float64 model: same nodes, names, inputs and outputs; float32, float16 and bfloat16
        values are float64.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    _graph64(out.graph)
    for function in out.functions:
        for node in function.node:
            _node64(node)
    return out


def feeds_as_float64(feeds: dict) -> dict:
    """``feeds`` with every floating-point array cast to float64 (others unchanged)."""
    out = {}
    for name, value in feeds.items():
        arr = np.asarray(value) if not isinstance(value, (list, tuple)) else value
        out[name] = arr.astype(np.float64) if isinstance(arr, np.ndarray) and arr.dtype.kind == "f" else arr
    return out
