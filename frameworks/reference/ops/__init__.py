"""What the reference executor supports, and how it runs it: ``onnx.reference`` with a few numpy kernels.

``SUPPORTED_OPS`` is every operator ONNX's reference implementation has; the executor delegates
them to ``onnx.reference.ReferenceEvaluator``, except those in ``FAST_OPS``, which it passes as
``new_ops`` so that deep500lite's vectorized numpy kernels replace the slowest ``onnx.reference``
implementations. Kernels are grouped by family with the module names the converting frameworks
use: :mod:`.conv` (``ConvTranspose``).
"""

from __future__ import annotations

import onnx
from onnx.reference.ops import _op_list

from deep500lite.frameworks.reference.ops.conv import ConvTranspose

__all__ = ["SUPPORTED_OPS", "FAST_OPS", "ConvTranspose"]


def _reference_ops() -> frozenset:
    names = set()
    for name in dir(_op_list):
        base = name.split("_")[0]
        if base and base[0].isupper() and onnx.defs.has(base):
            names.add(base)
    return frozenset(names)


SUPPORTED_OPS: frozenset = _reference_ops()

FAST_OPS = [ConvTranspose]
"""``OpRun`` classes that replace ``onnx.reference``'s own implementation of the same operator."""
