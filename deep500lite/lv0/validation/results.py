"""The result objects of the level-0 checks: :class:`OpTestResult` and :class:`DeterminismResult`."""

from __future__ import annotations

import dataclasses

__all__ = ["OpTestResult", "DeterminismResult"]


@dataclasses.dataclass
class OpTestResult:
    """The verdict of :func:`test_op_forward` or :func:`test_op_gradient`.

    Attributes:
        passed: whether every output (forward) or every input gradient (gradient) is within
            tolerance.
        metrics: tensor name -> metric name -> value. Forward: one entry per output with the
            given metrics (default ``MaxError`` and ``RelativeL2Error``). Gradient: one entry per
            differentiable input with ``max_abs_error`` and ``max_rel_error`` (and the given
            metrics where a full numerical gradient was computed).
        reason: why it passed or failed; a failure names the worst tensor and element (or
            direction) with the two values and the allowed error.
        kind: ``"forward"`` or ``"gradient"``.
        method: how the comparison was made: ``"compare"`` (forward), ``"batched"``,
            ``"directional"``, ``"directional+elementwise"`` or ``"elementwise"`` (gradient).
        forward_calls: how many times ``op.forward`` was called.
        tolerances: tensor name -> ``(rtol, atol)`` used.
        compute_dtype: the dtype the numerical gradient was computed in (``None`` for forward).
        details: tensor name -> extra facts (worst element, failing count, chunk size, number of
            elements that passed only by the one-sided rule at a kink, directions used); the
            key ``"_notes"`` holds notes on the method (for example why float64 was not used).
        numerical: input name -> numerical gradient (same shape as the input), where one was
            computed element by element (``None`` for directional-only checks).
        analytic: input name -> the gradient ``op.backward`` returned.
        elapsed_s: wall time of the whole check.
        values: Deep500's result list (forward): for each output, the value of each given metric,
            in the order given. The result iterates over it, so ``l2, maxerr = d5.test_op_forward(
            op, inputs, refs, metrics=[d5.L2Error(), d5.MaxError()])`` works as in Deep500.
    """

    passed: bool
    metrics: dict
    reason: str
    kind: str
    method: str
    forward_calls: int
    tolerances: dict
    compute_dtype: str | None = None
    details: dict = dataclasses.field(default_factory=dict)
    numerical: dict = dataclasses.field(default_factory=dict, repr=False)
    analytic: dict = dataclasses.field(default_factory=dict, repr=False)
    elapsed_s: float = 0.0
    values: list = dataclasses.field(default_factory=list, repr=False)

    def __iter__(self):
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, index):
        return self.values[index]

    def summary(self) -> str:
        """A few lines: the verdict, the method, one line per tensor with its metrics, the reason."""
        what = "test_op_forward" if self.kind == "forward" else "test_op_gradient"
        how = self.method if self.kind == "forward" else f"{self.method}, {self.compute_dtype}"
        lines = [f"{what}: {'PASSED' if self.passed else 'FAILED'} ({how}, {self.forward_calls} forward "
                 f"calls, {self.elapsed_s:.3g} s)"]
        for name, values in self.metrics.items():
            vals = ", ".join(f"{k}={v:.3g}" for k, v in values.items())
            tol = self.tolerances.get(name)
            tol_text = f" [rtol={tol[0]:g}, atol={tol[1]:g}]" if tol else ""
            ok = self.details.get(name, {}).get("passed", True)
            lines.append(f"  {'ok  ' if ok else 'FAIL'} {name}: {vals}{tol_text}")
        lines.append(f"  {self.reason}")
        for note in self.details.get("_notes", []):
            lines.append(f"  note: {note}")
        return "\n".join(lines)

    def __bool__(self) -> bool:
        return self.passed


@dataclasses.dataclass
class DeterminismResult:
    """The verdict of :func:`test_op_determinism`.

    Attributes:
        deterministic: whether every rerun's outputs are bit-identical to the first run's.
        reruns: how many times ``op.forward`` ran (the first run included).
        differing_elements: output elements that differ (in their bytes) in at least one rerun.
        max_deviation: the largest ``|rerun - first|`` over all outputs (``inf`` where a value
            became NaN or infinite in one run only).
        variance: output name -> per-element variance over all runs (float64, the output's shape).
        outputs: output name -> ``{"elements", "differing_elements", "max_deviation"}``.
        heatmap: the path of the variance heatmap written, or ``None``.
        reason: a sentence on the verdict.
    """

    deterministic: bool
    reruns: int
    differing_elements: int
    max_deviation: float
    variance: dict = dataclasses.field(repr=False)
    outputs: dict
    heatmap: str | None
    reason: str

    @property
    def passed(self) -> bool:
        """Same as :attr:`deterministic`."""
        return self.deterministic

    def summary(self) -> str:
        """The verdict and one line per output."""
        lines = [f"test_op_determinism: {'DETERMINISTIC' if self.deterministic else 'NOT DETERMINISTIC'} "
                 f"({self.reruns} runs)"]
        for name, info in self.outputs.items():
            lines.append(f"  {name}: {info['differing_elements']} of {info['elements']} elements differ, "
                         f"max deviation {info['max_deviation']:.3g}")
        lines.append(f"  {self.reason}")
        if self.heatmap:
            lines.append(f"  variance heatmap: {self.heatmap}")
        return "\n".join(lines)

    def __bool__(self) -> bool:
        return self.deterministic
