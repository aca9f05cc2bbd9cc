"""What the reference executor supports, and how it runs it: ``onnx.reference`` with a few numpy kernels.

``SUPPORTED_OPS`` is derived from ``onnx.reference`` itself: every default-domain operator it has
an implementation for, plus every operator whose ONNX schema defines a function body (``Gelu``,
``HardSwish``, ``Mish``, ``GroupNormalization``, ...), which ``onnx.reference`` runs by expanding
the body. The executor delegates them to ``onnx.reference.ReferenceEvaluator``, except those in
``FAST_OPS``, which it passes as ``new_ops`` so that deep500lite's numpy kernels replace
``onnx.reference`` implementations that are wrong or slow. Kernels are grouped by family with the
module names the converting frameworks use: :mod:`.conv` (``Conv`` and ``ConvTranspose``),
:mod:`.gemm` (``Gemm``), :mod:`.pool` (``MaxPool`` and ``AveragePool``: ``onnx.reference`` gets
some ``ceil_mode`` shapes wrong) and :mod:`.shape` (``GatherElements``: ``onnx.reference`` fails
past 32 indices; ``ScatterElements``: a Python loop per update there) and :mod:`.control`
(``Loop``: ``onnx.reference`` runs no iteration of a loop with a trip count and no condition, and
concatenates scan outputs instead of stacking them); ``NonMaxSuppression`` from
:data:`deep500lite.lv1.control_flow.REFERENCE_FIXES` (``onnx.reference`` fails on its scalar inputs).
"""

from __future__ import annotations

import onnx
from onnx.reference.ops import _op_list

from deep500lite.frameworks.reference.ops.control import Loop
from deep500lite.frameworks.reference.ops.conv import Conv, ConvTranspose
from deep500lite.frameworks.reference.ops.gemm import Gemm
from deep500lite.frameworks.reference.ops.pool import AveragePool, MaxPool
from deep500lite.frameworks.reference.ops.shape import GatherElements, ScatterElements
from deep500lite.lv1.control_flow import REFERENCE_FIXES

__all__ = ["SUPPORTED_OPS", "FAST_OPS", "Conv", "ConvTranspose", "Gemm", "MaxPool", "AveragePool", "GatherElements",
           "ScatterElements", "Loop"]


def _reference_ops() -> frozenset:
    """Default-domain operators ``onnx.reference`` runs: implemented, or defined by an ONNX function."""
    implemented = set(_op_list._build_registered_operators())
    functions = {schema.name for schema in onnx.defs.get_all_schemas_with_history()
                 if schema.domain in ("", "ai.onnx")
                 and (schema.has_function or schema.has_context_dependent_function)}
    return frozenset(name for name in implemented | functions if onnx.defs.has(name))


SUPPORTED_OPS: frozenset = _reference_ops()

FAST_OPS = [Conv, ConvTranspose, Gemm, MaxPool, AveragePool, GatherElements, ScatterElements, Loop,
            *REFERENCE_FIXES]
"""``OpRun`` classes that replace ``onnx.reference``'s own implementation of the same operator."""
