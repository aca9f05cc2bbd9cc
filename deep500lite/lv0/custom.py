"""Custom operators as nodes of ONNX networks.

A custom operator (a :class:`~deep500lite.lv0.operator.CustomOp`: Python, C++ or CUDA) becomes a
node of an ONNX graph in a custom domain once it is registered under an op type::

    d5.register_op(op, "Swish")                       # domain ai.onnx.contrib
    network.add_custom_operation("Swish", ["x"], ["y"])

Every executor looks registered ops up by ``(domain, op_type)`` with :func:`lookup_custom_op` (one
lookup, one "not registered" message) when it checks and builds a graph: torch
wraps the op in an ``autograd.Function``, TensorFlow in a ``tf.custom_gradient``, ONNX Runtime in
an onnxruntime-extensions Python operator and the reference executor in an
``onnx.reference.op_run.OpRun``. Registering an op also registers its backward as the op type
``<op_type>_Grad`` (see :func:`grad_op_type`), whose node deep500lite's ONNX autodiff emits for the
reference and ONNX Runtime executors: its inputs are the output gradients, the forward inputs and
the forward outputs (Deep500's order), its outputs the input gradients.

The default domain is ``ai.onnx.contrib``, the one onnxruntime-extensions serves Python operators
from, so the same graph runs on ONNX Runtime too.
"""

from __future__ import annotations

import math
import threading
from typing import Sequence

import numpy as np
import onnx

from deep500lite.errors import UnsupportedOperatorError, UserError, UserTypeError
from deep500lite.lv0.operator import CustomOp, Operator
from deep500lite.lv0.tensordesc import TensorDescriptor

__all__ = ["CUSTOM_DOMAIN", "register_op", "unregister_op", "registered_op", "registered_ops",
           "lookup_custom_op", "custom_node", "grad_op_type", "is_custom_domain", "BackwardOp", "as_tuple",
           "input_shape_for"]

CUSTOM_DOMAIN = "ai.onnx.contrib"
_GRAD_SUFFIX = "_Grad"

_lock = threading.Lock()
_OPS: dict[tuple[str, str], Operator] = {}


def is_custom_domain(domain: str) -> bool:
    """Whether ``domain`` is not one of ONNX's standard operator domains."""
    return domain not in ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training")


def grad_op_type(op_type: str) -> str:
    """The op type of the backward node of ``op_type`` (``<op_type>_Grad``)."""
    return op_type + _GRAD_SUFFIX


def as_tuple(out) -> tuple:
    """An operator's result as a tuple of arrays (a single array becomes a 1-tuple)."""
    if isinstance(out, (tuple, list)):
        return tuple(out)
    return (out,)


class BackwardOp(CustomOp):
    """The backward of ``op`` as an operator of its own (the ``<op_type>_Grad`` node).

    Inputs: the gradients of ``op``'s outputs, ``op``'s inputs, ``op``'s outputs. Outputs: the
    gradients of ``op``'s inputs. Its own backward is not defined (no second derivatives).

    Args:
        op: the forward operator.
    """

    def __init__(self, op: Operator):
        ins, outs = _descriptors(op)
        super().__init__(outs + ins + outs, ins)
        self.op = op
        self._n_in, self._n_out = len(ins), len(outs)

    def forward(self, *args):
        n_in, n_out = self._n_in, self._n_out
        grads = args[:n_out]
        inputs = args[n_out:n_out + n_in]
        outputs = args[n_out + n_in:]
        return as_tuple(self.op.backward(list(grads), list(inputs), list(outputs)))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        raise NotImplementedError(f"{type(self.op).__name__}: second derivatives of custom operators "
                                  "are not supported.")

    def supports_dtype(self, dtype) -> bool:
        return _supports_dtype(self.op, dtype)


def _supports_dtype(op, dtype) -> bool:
    fn = getattr(op, "supports_dtype", None)
    return bool(fn(dtype)) if fn is not None else True


def _descriptors(op) -> tuple[list[TensorDescriptor], list[TensorDescriptor]]:
    ins = getattr(op, "input_descriptors", None)
    outs = getattr(op, "output_descriptors", None)
    if ins is None or outs is None:
        raise UserError(
            f"A custom operator needs input_descriptors and output_descriptors (subclass d5.CustomOp or "
            f"d5.CustomPythonOp). Received: {type(op).__name__} without them.")
    return list(ins), list(outs)


def register_op(op: Operator, op_type: str, domain: str = CUSTOM_DOMAIN, replace: bool = True) -> None:
    """Register ``op`` so that ONNX nodes ``domain::op_type`` run it on every executor.

    Also registers its backward as ``domain::<op_type>_Grad``.

    Args:
        op: a :class:`~deep500lite.CustomOp` (Python or compiled) with input and output descriptors.
        op_type: the node's op type (a valid identifier, e.g. ``"Swish"``).
        domain: the operator domain (default ``ai.onnx.contrib``, which ONNX Runtime runs through
            onnxruntime-extensions).
        replace: allow replacing an op already registered under this name (default True).

    Raises:
        UserError: a bad name or domain, or an operator without descriptors.
    """
    if not isinstance(op_type, str) or not op_type.isidentifier() or op_type.endswith(_GRAD_SUFFIX):
        raise UserError(f"op_type must be an identifier such as 'Swish' (not ending in '{_GRAD_SUFFIX}'). "
                        f"Received: {op_type!r}")
    if not isinstance(domain, str) or not is_custom_domain(domain):
        raise UserError(f"Custom operators need a custom domain (default '{CUSTOM_DOMAIN}'), not one of "
                        f"ONNX's own. Received: {domain!r}")
    if not isinstance(op, Operator):
        raise UserTypeError(f"register_op expects a d5.Operator (e.g. a d5.CustomPythonOp subclass). "
                        f"Received: {type(op).__name__}")
    _descriptors(op)
    with _lock:
        if not replace and (domain, op_type) in _OPS and _OPS[(domain, op_type)] is not op:
            raise UserError(f"Operator {domain}::{op_type} is already registered; pass replace=True to replace it, "
                            f"or register the operator under another op_type. Received: op_type={op_type!r}, "
                            f"domain={domain!r}, replace=False")
        _OPS[(domain, op_type)] = op
        _OPS[(domain, grad_op_type(op_type))] = BackwardOp(op)


def unregister_op(op_type: str, domain: str = CUSTOM_DOMAIN) -> None:
    """Remove a registered operator (and its backward); unknown names are ignored."""
    with _lock:
        _OPS.pop((domain, op_type), None)
        _OPS.pop((domain, grad_op_type(op_type)), None)


def registered_op(domain: str, op_type: str) -> Operator | None:
    """The operator registered as ``domain::op_type`` (a :class:`BackwardOp` for ``*_Grad``), or None."""
    return _OPS.get((domain, op_type))


def registered_ops() -> dict[tuple[str, str], Operator]:
    """A snapshot of every registered ``(domain, op_type) -> operator``."""
    with _lock:
        return dict(_OPS)


def lookup_custom_op(op_type: str, domain: str = CUSTOM_DOMAIN, node_name: str | None = None) -> Operator:
    """The operator registered as ``domain::op_type``: the one lookup every executor and converter uses.

    Every executor's support check (:meth:`GraphExecutor.check_supported`) and every framework's
    converter of custom-domain nodes call this, so a node nobody registered is refused with the same
    message everywhere.

    Args:
        op_type: the node's op type (``<op_type>_Grad`` finds the backward of a registered op).
        domain: the node's domain.
        node_name: the node's name, for the message.

    Returns:
        The registered operator (a :class:`BackwardOp` for ``*_Grad``).

    Raises:
        UnsupportedOperatorError: nothing is registered as ``domain::op_type``.
    """
    op = registered_op(domain, op_type)
    if op is None:
        with _lock:
            known = sorted(f"{d}::{t}" for d, t in _OPS if not t.endswith(_GRAD_SUFFIX))
        node = f" (node '{node_name}')" if node_name else ""
        raise UnsupportedOperatorError(
            f"Operator '{domain}::{op_type}'{node} is not a registered custom operator. Register it "
            f"with d5.register_op(op, '{op_type}', domain='{domain}'), or add the node with "
            f"Network.add_custom_operation('{op_type}', inputs, outputs, op=op, domain='{domain}'); "
            f"registered custom operators: {', '.join(known) if known else 'none'}. "
            f"Received: op_type={op_type!r}, domain={domain!r}.")
    return op


def custom_node(op_type: str, inputs: Sequence[str], outputs: Sequence[str], name: str | None = None,
                domain: str = CUSTOM_DOMAIN) -> onnx.NodeProto:
    """An ONNX node that runs the operator registered as ``domain::op_type``.

    Args:
        op_type: the registered op type.
        inputs: input tensor names, in the operator's input order.
        outputs: output tensor names, in the operator's output order.
        name: the node name (default: ``<op_type>_<first output>``).
        domain: the operator domain.
    """
    return onnx.helper.make_node(op_type, list(inputs), list(outputs), name=name or f"{op_type}_{outputs[0]}",
                                 domain=domain)


def output_value_infos(op: Operator, outputs: Sequence[str]) -> list[onnx.ValueInfoProto]:
    """Value infos (dtype and shape) of a custom node's outputs, from the op's output descriptors."""
    _, outs = _descriptors(op)
    return [d.value_info(name) for name, d in zip(outputs, outs) if name]


def input_shape_for(op: Operator, index: int, shape: Sequence[int]) -> tuple | None:
    """The shape a framework wrapper hands the operator for an input of ``shape``.

    None when ``shape`` matches the input's descriptor. An input of another shape with the
    number of elements of a fixed declared shape is given in the declared shape (Deep500's
    compiled operators saw only the buffer, so ``[5, 1]`` ran as ``[5]``); the wrapper hands the
    gradient back in the input's own shape.

    Raises:
        UserError: the shape matches neither.
    """
    ins, _ = _descriptors(op)
    desc, shape = ins[index], tuple(int(n) for n in shape)
    if desc.shape is None or (len(desc.shape) == len(shape) and all(
            s is None or s == n for s, n in zip(desc.shape, shape))):
        return None
    if all(isinstance(s, int) for s in desc.shape) and math.prod(shape) == math.prod(desc.shape):
        return tuple(desc.shape)
    raise UserError(f"{type(op).__name__} input {index} must be {desc} (or hold as many elements). "
                    f"Received: shape {list(shape)}")


def check_outputs(op: Operator, outputs: Sequence[np.ndarray]) -> tuple:
    """Check an op's results against its output descriptors (count, dtype, shape)."""
    _, outs = _descriptors(op)
    if len(outputs) != len(outs):
        raise UserError(f"{type(op).__name__}.forward returned {len(outputs)} outputs; its descriptors "
                        f"declare {len(outs)}, so it must return one array per output descriptor. "
                        f"Received: {len(outputs)} outputs")
    result = []
    for i, (x, d) in enumerate(zip(outputs, outs)):
        x = np.asarray(x)
        if not d.matches(x):
            raise UserError(f"{type(op).__name__} output {i} must be {d}. Received: "
                            f"{x.dtype.name}{list(x.shape)}")
        result.append(x)
    return tuple(result)
