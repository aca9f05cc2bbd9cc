"""Accuracy metrics: how far outputs are from reference outputs."""

from __future__ import annotations

import numpy as np

from deep500lite.errors import UserError, UserKeyError
from deep500lite.metrics.base import TestMetric

__all__ = ["L1Error", "L2Error", "MaxError", "RelativeL2Error", "output_errors"]


def _pairs(outputs, reference_outputs):
    if isinstance(outputs, dict):
        missing = [k for k in reference_outputs if k not in outputs]
        if missing:
            raise UserKeyError(f"Outputs {missing} are in the reference but not in the measured outputs. The measured "
                               f"outputs must hold every reference output. Received: outputs {list(outputs)}")
        return [(np.asarray(outputs[k], np.float64), np.asarray(reference_outputs[k], np.float64))
                for k in reference_outputs]
    if isinstance(outputs, (list, tuple)):
        return [(np.asarray(o, np.float64), np.asarray(r, np.float64)) for o, r in zip(outputs, reference_outputs)]
    return [(np.asarray(outputs, np.float64), np.asarray(reference_outputs, np.float64))]


def _check_shapes(pairs):
    for o, r in pairs:
        if o.shape != r.shape:
            raise UserError(f"Output shape differs from the reference shape; an output must have the reference "
                             f"shape {list(r.shape)}. Received: shape {list(o.shape)}")


class _ErrorMetric(TestMetric):
    higher_is_better = False

    def measure(self, inputs, outputs, reference_outputs):
        if reference_outputs is None:
            raise UserError(f"{type(self).__name__} compares outputs with reference outputs, so it needs them; give "
                            "the reference outputs (a test with a reference). Received: reference_outputs=None")
        pairs = _pairs(outputs, reference_outputs)
        _check_shapes(pairs)
        return max((self._error(o, r) for o, r in pairs), default=0.0)

    @staticmethod
    def _error(o, r) -> float:
        raise NotImplementedError


class L1Error(_ErrorMetric):
    """Sum of absolute differences (largest over outputs)."""

    name = "L1Error"

    @staticmethod
    def _error(o, r):
        return float(np.abs(o - r).sum())


class L2Error(_ErrorMetric):
    """Euclidean norm of the difference (largest over outputs)."""

    name = "L2Error"

    @staticmethod
    def _error(o, r):
        return float(np.linalg.norm((o - r).ravel()))


class MaxError(_ErrorMetric):
    """Largest absolute difference over all elements of all outputs."""

    name = "MaxError"

    @staticmethod
    def _error(o, r):
        return float(np.abs(o - r).max()) if o.size else 0.0


class RelativeL2Error(_ErrorMetric):
    """``||o - r|| / ||r||`` (largest over outputs; absolute norm when the reference is zero)."""

    name = "RelativeL2Error"

    @staticmethod
    def _error(o, r):
        denom = np.linalg.norm(r.ravel())
        diff = np.linalg.norm((o - r).ravel())
        return float(diff / denom) if denom > 0 else float(diff)


def output_errors(outputs: dict, reference_outputs: dict) -> dict[str, dict[str, float]]:
    """Per output: max absolute error, L2 error and relative L2 error against the reference."""
    result = {}
    for name, ref in reference_outputs.items():
        pairs = _pairs({name: outputs[name]}, {name: ref})
        _check_shapes(pairs)
        o, r = pairs[0]
        result[name] = {"max_abs": MaxError._error(o, r), "l2": L2Error._error(o, r),
                        "rel_l2": RelativeL2Error._error(o, r)}
    return result
