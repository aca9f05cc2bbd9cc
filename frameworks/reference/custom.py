"""Custom operators on the reference executor: ``onnx.reference`` ``OpRun`` classes.

``custom_op(op)`` wraps a deep500lite operator as an ``OpRun`` subclass that
``onnx.reference.ReferenceEvaluator(model, new_ops=[...])`` runs for the node
``domain::op_type``. The reference executor does this itself for every registered operator a
graph uses (forward and ``<op_type>_Grad`` backward nodes); call ``custom_op`` directly only to
run the op by hand (the returned class's ``eval(*arrays)`` runs it on numpy arrays).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx.reference.op_run import OpRun

from deep500lite.errors import UserTypeError
from deep500lite.lv0.custom import CUSTOM_DOMAIN, as_tuple, check_outputs, is_custom_domain, lookup_custom_op
from deep500lite.lv0.tensordesc import TensorDescriptor

__all__ = ["custom_op", "op_run_classes", "desc_from_tensor"]


def desc_from_tensor(array) -> TensorDescriptor:
    """The descriptor (dtype and shape) of a numpy array: Deep500's ``d5ref.desc_from_tensor``.

    The reference framework's tensors are numpy arrays, so this is the descriptor to give
    ``custom_op_from_native`` of any framework for numpy inputs and outputs.

    Raises:
        UserTypeError: ``array`` is not a numpy array (or a numpy scalar).
    """
    if not isinstance(array, (np.ndarray, np.generic)):
        raise UserTypeError(f"desc_from_tensor takes a numpy array. Received: {type(array).__name__}")
    return TensorDescriptor(array.dtype, tuple(array.shape))


def custom_op(op, op_type: str | None = None, domain: str = CUSTOM_DOMAIN) -> type[OpRun]:
    """The operator as an ``onnx.reference`` ``OpRun`` class (the reference executor's native form).

    Args:
        op: a deep500lite operator (``forward``/``backward`` on numpy arrays).
        op_type: the ONNX op type the class serves (default: the op's class name).
        domain: the ONNX domain.

    Returns:
        An ``OpRun`` subclass; ``cls.eval(*inputs)`` runs the op on numpy arrays.
    """
    op_type = op_type or type(op).__name__

    def _run(self, *inputs, **_attributes):  # onnx.reference may pass a same-named ONNX op's defaults
        return check_outputs(op, as_tuple(op.forward(*inputs)))

    return type(op_type, (OpRun,), {"op_domain": domain, "_run": _run, "deep500lite_op": op})


def op_run_classes(model: onnx.ModelProto) -> list[type[OpRun]]:
    """``OpRun`` classes for the registered custom operators the graph of ``model`` uses."""
    classes, seen = [], set()
    for node in model.graph.node:
        key = (node.domain, node.op_type)
        if is_custom_domain(node.domain) and key not in seen:
            seen.add(key)
            op = lookup_custom_op(node.op_type, node.domain, node.name or node.output[0])
            classes.append(custom_op(op, node.op_type, node.domain))
    return classes
