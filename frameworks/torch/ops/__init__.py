"""ONNX operators as torch functions: the converter table, assembled from one module per family.

Every converter takes a :class:`NodeSpec` (the node's parsed attributes, the values of its inputs
that are constant at build time, the opset) and returns a function of the node's input tensors
that returns its output tensor, or a tuple with one entry per declared output. Attributes are
parsed once, when the function is built, so running it does no protobuf work. Converters never
modify their inputs in place.

Families (the same module names as :mod:`deep500lite.frameworks.tensorflow.ops`):
:mod:`.elementwise`, :mod:`.linalg`, :mod:`.conv` (convolution and pooling),
:mod:`.normalization` (with Dropout), :mod:`.shape`, :mod:`.reduction`, :mod:`.recurrent`,
:mod:`.losses`, :mod:`.control` (If, Loop, Scan, NonMaxSuppression); shared helpers are in :mod:`._common`, the dtype tables in
:mod:`deep500lite.frameworks.torch.dtypes`. Custom-domain nodes run registered custom operators
(:func:`deep500lite.lv0.custom.lookup_custom_op`) as ``torch.autograd.Function`` objects.
"""

from __future__ import annotations

from typing import Callable

from deep500lite.errors import UnsupportedOperatorError
from deep500lite.frameworks.torch.custom import custom_op
from deep500lite.frameworks.torch.ops import (control, conv, elementwise, linalg, losses, normalization, recurrent,
                                              reduction, shape)
from deep500lite.frameworks.torch.ops._common import NodeSpec, parse_attributes
from deep500lite.lv0.custom import lookup_custom_op
from deep500lite.lv1.converters import assemble_converters

__all__ = ["SUPPORTED_OPS", "CONVERTERS", "NodeSpec", "build_node", "parse_attributes"]

FAMILIES = (elementwise, linalg, conv, normalization, shape, reduction, recurrent, losses, control)


CONVERTERS: dict[str, Callable] = assemble_converters(FAMILIES)
"""ONNX op type -> converter, over every family."""

SUPPORTED_OPS: frozenset = frozenset(CONVERTERS)


def build_node(spec: NodeSpec) -> Callable:
    """The function computing ``spec``'s node (see module docstring)."""
    if spec.domain not in ("", "ai.onnx"):
        module = custom_op(lookup_custom_op(spec.op, spec.domain, spec.name))

        def run(*xs):
            outs = module(*xs)  # a tuple, one tensor per output; a one-output node takes the tensor
            return outs[0] if len(outs) == 1 else outs
        return run
    try:
        converter = CONVERTERS[spec.op]
    except KeyError:
        raise UnsupportedOperatorError(
            f"The torch executor does not support operator '{spec.op}' (node '{spec.name}'); it converts the "
            f"operators in its SUPPORTED_OPS. Received: op_type={spec.op!r}") from None
    return converter(spec)
