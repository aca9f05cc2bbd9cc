"""ONNX operators as JAX functions: the converter table, assembled from one module per family.

A converter is ``fn(ctx, *inputs)`` (see :mod:`._common`): it gets the node's
:class:`~._common.NodeContext` and one value per declared input (numpy when known while tracing,
else a traced ``jax.Array``) and returns the output, or a tuple with one entry per declared
output. The executor calls the converters while ``jax.jit`` traces the graph.

Families (the same module names as :mod:`deep500lite.frameworks.torch.ops`):
:mod:`.elementwise`, :mod:`.linalg`, :mod:`.conv` (convolution, pooling, resize),
:mod:`.normalization` (with Dropout), :mod:`.shape`, :mod:`.reduction`, :mod:`.recurrent`,
:mod:`.losses`, :mod:`.control` (If, Loop, Scan, NonMaxSuppression); the dtype tables are in :mod:`deep500lite.frameworks.jax.dtypes`.
"""

from __future__ import annotations

from typing import Callable

from deep500lite.errors import UnsupportedOperatorError
from deep500lite.lv1.converters import assemble_converters
from deep500lite.frameworks.jax.ops import (control, conv, elementwise, linalg, losses, normalization, recurrent,
                                            reduction, shape)
from deep500lite.frameworks.jax.ops._common import NodeContext, is_static, parse_attributes

__all__ = ["SUPPORTED_OPS", "CONVERTERS", "FAMILIES", "NodeContext", "lookup", "is_static", "parse_attributes"]

FAMILIES = (elementwise, linalg, conv, normalization, shape, reduction, recurrent, losses, control)


CONVERTERS: dict[str, Callable] = assemble_converters(FAMILIES)
"""ONNX op type -> converter, over every family."""

SUPPORTED_OPS: frozenset = frozenset(CONVERTERS)


def lookup(op_type: str, node_name: str = "") -> Callable:
    """The converter for ``op_type``.

    Raises:
        UnsupportedOperatorError: the jax executor has no converter for it.
    """
    try:
        return CONVERTERS[op_type]
    except KeyError:
        raise UnsupportedOperatorError(
            f"The jax executor does not support operator '{op_type}' (node '{node_name}'); it converts the "
            f"operators in its SUPPORTED_OPS. Received: op_type={op_type!r}") from None
