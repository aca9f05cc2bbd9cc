"""ONNX <-> TensorFlow dtype tables and the check that a graph holds only types TensorFlow has.

``ONNX_TO_TF_DTYPE`` maps ONNX ``TensorProto`` element types to TensorFlow dtypes (the converters'
``Cast`` uses it through :func:`tf_dtype`); :func:`check_types` refuses, before anything is
converted, graph inputs, outputs and Cast/Constant types TensorFlow has no dtype for.
"""

from __future__ import annotations

import onnx
import tensorflow as tf

from deep500lite.errors import UnsupportedOperatorError

__all__ = ["ONNX_TO_TF_DTYPE", "tf_dtype", "check_types"]

ONNX_TO_TF_DTYPE = {
    onnx.TensorProto.FLOAT: tf.float32, onnx.TensorProto.DOUBLE: tf.float64,
    onnx.TensorProto.FLOAT16: tf.float16, onnx.TensorProto.BFLOAT16: tf.bfloat16,
    onnx.TensorProto.INT8: tf.int8, onnx.TensorProto.INT16: tf.int16, onnx.TensorProto.INT32: tf.int32,
    onnx.TensorProto.INT64: tf.int64, onnx.TensorProto.UINT8: tf.uint8, onnx.TensorProto.UINT16: tf.uint16,
    onnx.TensorProto.UINT32: tf.uint32, onnx.TensorProto.UINT64: tf.uint64, onnx.TensorProto.BOOL: tf.bool,
    onnx.TensorProto.STRING: tf.string, onnx.TensorProto.COMPLEX64: tf.complex64,
    onnx.TensorProto.COMPLEX128: tf.complex128,
}
"""ONNX ``TensorProto`` element type -> TensorFlow dtype."""


def tf_dtype(onnx_type: int) -> tf.DType:
    """The TensorFlow dtype of an ONNX ``TensorProto`` element type."""
    try:
        return ONNX_TO_TF_DTYPE[onnx_type]
    except KeyError:
        raise UnsupportedOperatorError(
            f"TensorFlow has no dtype for ONNX type {onnx.TensorProto.DataType.Name(onnx_type)}; "
            f"supported types: {sorted(onnx.TensorProto.DataType.Name(t) for t in ONNX_TO_TF_DTYPE)}. "
            f"Received: {onnx.TensorProto.DataType.Name(onnx_type)}"
        ) from None


def _type_name(t: int) -> str:
    return onnx.TensorProto.DataType.Name(t)


def check_types(network) -> None:
    """Raise UnsupportedOperatorError for graph values of a type TensorFlow cannot hold.

    Checks the graph's inputs and outputs (tensors only: no sequences or optionals), and the
    types named by Cast, Constant and ConstantOfShape nodes.
    """
    graph = network.graph
    for kind, vis in (("input", graph.input), ("output", graph.output)):
        for vi in vis:
            t = vi.type
            if t.HasField("tensor_type"):
                if t.tensor_type.elem_type and t.tensor_type.elem_type not in ONNX_TO_TF_DTYPE:
                    raise UnsupportedOperatorError(
                        f"The tensorflow executor cannot hold graph {kind} '{vi.name}' of type "
                        f"{_type_name(t.tensor_type.elem_type)}: TensorFlow has no such dtype. Supported types: "
                        f"{sorted(_type_name(t) for t in ONNX_TO_TF_DTYPE)}. "
                        f"Received: {_type_name(t.tensor_type.elem_type)}")
            elif t.WhichOneof("value") is not None:
                raise UnsupportedOperatorError(
                    f"The tensorflow executor runs tensors only (no sequences, maps or optionals). "
                    f"Received: graph {kind} '{vi.name}', a {t.WhichOneof('value').replace('_type', '')}")
    for node in graph.node:
        types = []
        for a in node.attribute:
            if node.op_type == "Cast" and a.name == "to":
                types.append(a.i)
            elif node.op_type in ("Constant", "ConstantOfShape") and a.type == onnx.AttributeProto.TENSOR:
                types.append(a.t.data_type)
        for t in types:
            if t not in ONNX_TO_TF_DTYPE:
                raise UnsupportedOperatorError(
                    f"The tensorflow executor cannot run {node.op_type} node '{node.name or node.output[0]}': "
                    f"TensorFlow has no dtype for ONNX type {_type_name(t)}. Supported types: "
                    f"{sorted(_type_name(t) for t in ONNX_TO_TF_DTYPE)}. Received: {_type_name(t)}")
