"""The one accuracy rule of deep500lite's cross-executor checks (``verify`` and the real-model zoo).

An executor's answer is compared with a float64 ground truth by its largest error relative to
the tensor's scale::

    error = max |got - want| / scale

- an output's (or an intermediate tensor's) scale is its largest ``|want|``: an absolute
  tolerance would pass all-zero outputs of a model whose logits are 1e-9;
- a parameter gradient's scale is ``max(max |g64|, GRADIENT_FLOOR * G)``, ``G`` the largest
  gradient entry of the whole model: the floor keeps a parameter whose exact gradient is ~0 (a
  bias just before a batch normalization) from being judged on float32 noise alone.

The verdict compares that error with the float32 *noise floor* of the same model, the error of
another float32 computation of it against the same ground truth (``verify``: the reference
executor run in float32; the zoo: the larger of the producer's own float32 answer and the
reference executor's)::

    passes  <=>  error <= max(BASE, FLOOR_FACTOR * floor)

with ``BASE`` = :data:`INFERENCE_TOLERANCE` (outputs, forward tensors) or
:data:`GRADIENT_TOLERANCE` (gradients). Well-conditioned models have floors of 1e-7..1e-5, so
the base decides and a wrong kernel or gradient rule (a missing factor, a transposed weight) is
off by orders of magnitude more; ill-conditioned ones (training-mode batch normalization over
two values) have floors of 1e-2 and more, where no float32 executor can do better than float32
itself, and an executor then passes when it is within :data:`FLOOR_FACTOR` times the floor.
"""

from __future__ import annotations

import numpy as np

__all__ = ["INFERENCE_TOLERANCE", "GRADIENT_TOLERANCE", "GRADIENT_FLOOR", "FLOOR_FACTOR", "relative_error",
           "tensor_error", "gradient_scales", "gradient_errors", "tolerance", "passes"]

INFERENCE_TOLERANCE = 1e-4
"""The base tolerance of outputs and forward tensors, relative to the tensor's scale."""
GRADIENT_TOLERANCE = 1e-3
"""The base tolerance of gradients, relative to the gradient's (floored) scale."""
GRADIENT_FLOOR = 1e-3
"""A gradient's scale is at least this fraction of the model's largest gradient entry."""
FLOOR_FACTOR = 10.0
"""An executor passes within this many times the model's float32 noise floor."""

_CHECKS = ("inference", "gradient")


def relative_error(got, want, scale: float) -> float:
    """``max |got - want| / scale``; ``inf`` for a shape mismatch or a non-finite difference.

    Non-float arrays (indices, masks, shapes) are compared exactly: 0.0 when equal, ``inf``
    otherwise. Lists (ONNX sequences) are compared element by element (the largest error).
    """
    if isinstance(got, (list, tuple)) or isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or not isinstance(want, (list, tuple)) or len(got) != len(want):
            return float("inf")
        return max((relative_error(g, w, scale) for g, w in zip(got, want)), default=0.0)
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return float("inf")
    if want.dtype.kind not in "fc" or got.dtype.kind not in "fc":
        return 0.0 if np.array_equal(got, want) else float("inf")
    if got.size == 0:
        return 0.0
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    finite_want = np.isfinite(want)
    # the same non-finite value on both sides (an -inf mask, say) is no error
    same = ~finite_want & (got.astype(np.float64) == want.astype(np.float64))
    diff = np.where(same, 0.0, diff)
    if not np.all(np.isfinite(diff)):
        return float("inf")
    return float(diff.max() / max(scale, np.finfo(np.float64).tiny))


def _scale(want) -> float:
    if isinstance(want, (list, tuple)):
        return max((_scale(w) for w in want), default=0.0)
    want = np.asarray(want)
    if want.dtype.kind not in "fc" or want.size == 0:
        return 1.0
    finite = np.abs(want[np.isfinite(want)])
    return float(finite.max()) if finite.size else 1.0


def tensor_error(got, want) -> float:
    """An output's (or a forward tensor's) error relative to its scale, its largest finite ``|want|``."""
    return relative_error(got, want, _scale(want))


def gradient_scales(want: dict) -> dict[str, float]:
    """Each gradient's scale: ``max(max |g64|, GRADIENT_FLOOR * G)``, ``G`` the largest entry of all."""
    tops = {k: float(np.abs(np.asarray(v, dtype=np.float64)).max()) if np.size(v) else 0.0 for k, v in want.items()}
    floor = max(GRADIENT_FLOOR * max(tops.values(), default=0.0), np.finfo(np.float64).tiny)
    return {k: max(t, floor) for k, t in tops.items()}


def gradient_errors(got: dict, want: dict, scales: dict | None = None) -> dict[str, float]:
    """Each gradient's error relative to its scale (:func:`gradient_scales` of ``want`` unless given).

    A gradient missing from ``got`` counts as ``inf``.
    """
    scales = gradient_scales(want) if scales is None else scales
    return {k: (relative_error(got[k], w, scales[k]) if k in got else float("inf")) for k, w in want.items()}


def tolerance(check: str, floor: float | None) -> float:
    """``max(BASE, FLOOR_FACTOR * floor)``: BASE of ``check`` (``"inference"`` or ``"gradient"``)."""
    if check not in _CHECKS:
        raise ValueError(f"check must be one of {list(_CHECKS)}. Received: {check!r}")
    base = INFERENCE_TOLERANCE if check == "inference" else GRADIENT_TOLERANCE
    # a floor that is not finite (the float32 run itself broke down) widens nothing
    usable = floor if floor is not None and np.isfinite(floor) else 0.0
    return max(base, FLOOR_FACTOR * usable)


def passes(error: float, check: str, floor: float | None) -> bool:
    """Whether ``error`` is within :func:`tolerance` of ``check`` for the noise floor ``floor``."""
    return bool(error <= tolerance(check, floor))
