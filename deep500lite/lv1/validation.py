"""Level 1 validation: one executor's outputs against another's (or against given outputs)."""

from __future__ import annotations

import dataclasses

import numpy as np

from deep500lite.errors import UserError, UserKeyError
from deep500lite.metrics.accuracy import L2Error, MaxError, RelativeL2Error

__all__ = ["ExecutorComparison", "test_executor_inference", "test_executor_backprop"]


@dataclasses.dataclass
class ExecutorComparison:
    """The verdict of :func:`test_executor_inference` (and :func:`test_executor_backprop`).

    Attributes:
        passed: whether every output is within ``atol * scale + rtol * |reference|`` element-wise.
        metrics: output name -> metric name -> value.
        rtol: relative tolerance used.
        atol: absolute tolerance used, as a fraction of each output's scale.
        worst: output name -> largest ``|out - ref| - rtol * |ref|`` (it fails where this exceeds
            ``atol * scale``).
        scales: output name -> the output's scale: its largest finite ``|reference|`` value (1.0
            for every output where ``atol`` is absolute, as in :func:`test_executor_backprop`).
    """

    passed: bool
    metrics: dict
    rtol: float
    atol: float
    worst: dict
    scales: dict = dataclasses.field(default_factory=dict)

    def summary(self) -> str:
        """One line per output with the metric values, and the verdict."""
        lines = []
        for name, values in self.metrics.items():
            vals = ", ".join(f"{k}={v:.3g}" for k, v in values.items())
            scale = self.scales.get(name, 1.0)
            ok = self.worst[name] <= self.atol * scale
            shown = f" (scale {scale:.3g})" if self.scales else ""
            lines.append(f"{'ok  ' if ok else 'FAIL'} {name}: {vals}{shown}")
        unit = " x the output's scale" if self.scales else ""
        lines.append(f"{'PASSED' if self.passed else 'FAILED'} (rtol={self.rtol:g}, atol={self.atol:g}{unit})")
        return "\n".join(lines)

    def __bool__(self) -> bool:
        return self.passed


def test_executor_inference(executor, inputs: dict, reference, metrics=None, rtol: float = 1e-4,
                            atol: float = 1e-4, verbose: bool = False) -> ExecutorComparison:
    """Run ``executor`` and compare its outputs with a reference, within tolerances relative to each output's scale.

    An element passes when ``|out - ref| <= atol * scale + rtol * |ref|``, where ``scale`` is
    the output's largest finite ``|ref|`` value. The absolute part thus scales with the output:
    an output whose values are ~1e-9 is judged at 1e-13, so an all-zero result fails against it
    (a fixed absolute tolerance of 1e-4 would pass it), while the small elements of an output of
    scale 1000 may differ by 0.1, the rounding its large elements bring. An all-zero reference
    (scale 0) demands exact zeros. NaN must match NaN.

    Args:
        executor: the :class:`~deep500lite.GraphExecutor` under test.
        inputs: feeds for both.
        reference: another executor (run on the same inputs) or a dict of expected outputs.
        metrics: accuracy metrics (``TestMetric`` instances); default max, L2 and relative L2 error.
        rtol: relative tolerance of each element (a fraction of its ``|ref|``).
        atol: absolute tolerance, as a fraction of the output's scale (its largest ``|ref|``).
        verbose: print the summary.

    Returns:
        An :class:`ExecutorComparison` with ``passed``, every metric's value and the scale per output.

    Raises:
        UserKeyError: the executor does not return an output the reference has.
        UserError: an output's shape differs from the reference's.
    """
    outputs = executor.inference(inputs)
    expected = reference.inference(inputs) if hasattr(reference, "inference") else dict(reference)
    missing = [k for k in expected if k not in outputs]
    if missing:
        raise UserKeyError(f"The executor did not return the reference outputs {missing}; the reference's outputs "
                           f"must be among the executor's. Received: outputs {list(outputs)}")
    metrics = list(metrics) if metrics is not None else [MaxError(), L2Error(), RelativeL2Error()]
    values, worst, scales = {}, {}, {}
    for name, ref in expected.items():
        out, ref = np.asarray(outputs[name]), np.asarray(ref)
        if out.shape != ref.shape:
            raise UserError(f"Output '{name}' must have the reference's shape {list(ref.shape)}. "
                            f"Received: {list(out.shape)}")
        values[name] = {(m.name or type(m).__name__): m.measure(inputs, out, ref) for m in metrics}
        o64, r64 = out.astype(np.float64), ref.astype(np.float64)
        finite = np.abs(r64[np.isfinite(r64)])
        scales[name] = float(finite.max()) if finite.size else 0.0
        with np.errstate(invalid="ignore"):  # inf - inf where both are infinite
            excess = np.abs(o64 - r64) - rtol * np.abs(r64)
        infinite = np.isinf(r64) | np.isinf(o64)  # an infinity passes only where both have the same one
        excess = np.where(infinite, np.where(o64 == r64, -np.inf, np.inf), excess)
        worst[name] = float(np.nanmax(excess)) if excess.size and not np.isnan(excess).all() else 0.0
        if np.isnan(o64).any() or np.isnan(r64).any():
            same_nan = np.array_equal(np.isnan(o64), np.isnan(r64))
            worst[name] = worst[name] if same_nan else np.inf
    passed = all(w <= atol * scales[name] for name, w in worst.items())
    result = ExecutorComparison(passed=passed, metrics=values, rtol=rtol, atol=atol, worst=worst, scales=scales)
    if verbose:
        print(result.summary())
    return result


test_executor_inference.__test__ = False  # a library function, not a pytest test


def test_executor_backprop(executor, inputs: dict, reference, y: str = "loss", rtol: float = 1e-4,
                           verbose: bool = False) -> ExecutorComparison:
    """Run ``inference_and_backprop`` on two executors and compare every parameter gradient.

    Args:
        executor: the executor under test.
        inputs: feeds for both.
        reference: another executor of the same network (its gradients are the yardstick).
        y: the scalar to differentiate.
        rtol: largest relative L2 error ``||g - g_ref|| / ||g_ref||`` allowed per gradient.
        verbose: print the summary.

    Returns:
        An :class:`ExecutorComparison` whose metrics map each gradient name (and ``y``) to its
        ``RelativeL2Error`` and ``MaxError``; ``worst`` holds each relative error minus ``rtol``.
    """
    executor.inference_and_backprop(inputs, y)
    reference.inference_and_backprop(inputs, y)
    values, worst = {}, {}
    names = [g for _, g in reference.network.gradient(y)]
    mine = dict(zip(names, executor.network.fetch_tensors(names)))
    theirs = dict(zip(names, reference.network.fetch_tensors(names)))
    for name in names:
        rel = RelativeL2Error().measure(inputs, mine[name], theirs[name])
        values[name] = {"RelativeL2Error": rel, "MaxError": MaxError().measure(inputs, mine[name], theirs[name])}
        worst[name] = rel - rtol
    passed = all(w <= 0 for w in worst.values())
    result = ExecutorComparison(passed=passed, metrics=values, rtol=rtol, atol=0.0, worst=worst)
    if verbose:
        print(result.summary())
    return result


test_executor_backprop.__test__ = False  # a library function, not a pytest test
