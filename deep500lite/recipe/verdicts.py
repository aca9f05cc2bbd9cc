"""Acceptable metrics and verdicts: the entries of a recipe's ``METRICS``, checked and judged.

``_acceptable`` checks one ``METRICS`` entry (``(metric, threshold)``, ``(metric, threshold,
'higher'|'lower')`` or a bare metric) and normalizes it into an :class:`AcceptableMetric` (an
accuracy threshold from 0 to 1 is a fraction); ``_judge`` compares a measured value with it and
gives a :class:`Verdict`; :func:`metric_name` is a metric's display name.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from deep500lite.errors import UserError
from deep500lite.recipe.keys import _qualified

__all__ = ["AcceptableMetric", "Verdict", "metric_name"]

_DIRECTIONS = {"higher": "higher", "lower": "lower", ">=": "higher", "<=": "lower", "at least": "higher",
               "at most": "lower", "max": "higher", "min": "lower"}


def _percent_metric(metric) -> bool:
    from deep500lite.metrics.training import TestAccuracy, TrainingAccuracy

    return isinstance(metric, (TestAccuracy, TrainingAccuracy))


_UNITS = {"TestAccuracy": "%", "TrainingAccuracy": "%", "TimeToAccuracy": "s", "Throughput": "samples/s",
          "PeakMemory": "bytes", "WallclockTime": "s"}


def metric_name(metric) -> str:
    """The metric's display name (``repr`` for parametrized ones such as ``TimeToAccuracy(90)``)."""
    r = repr(metric)
    return r[:-2] if r.endswith("()") else r


@dataclasses.dataclass
class AcceptableMetric:
    """One entry of ``METRICS``, checked and normalized.

    Attributes:
        metric: the metric object as given (each run measures with a deep copy).
        threshold: the threshold as written (None: measured, not judged).
        direction: ``"higher"`` (the value must be at least ``required``) or ``"lower"`` (at most).
        required: the threshold in the metric's unit (a fraction given for an accuracy becomes percent).
        explicit_direction: whether the recipe stated the direction.
    """

    metric: Any
    threshold: float | None
    direction: str
    required: float | None
    explicit_direction: bool = False

    @property
    def name(self) -> str:
        """The metric's display name."""
        return metric_name(self.metric)

    @property
    def unit(self) -> str:
        """The metric's unit (``%``, ``s``, ...) or ``""``."""
        return _UNITS.get(type(self.metric).__name__, "")

    def describe(self) -> dict:
        """A JSON-ready description."""
        return {"metric": self.name, "class": _qualified(type(self.metric)), "threshold": self.threshold,
                "required": self.required, "direction": self.direction, "unit": self.unit,
                "explicit_direction": self.explicit_direction}


def _acceptable(item, index: int) -> AcceptableMetric:
    from deep500lite.metrics.base import TestMetric

    where = f"METRICS[{index}]"
    if isinstance(item, (tuple, list)):
        if not 1 <= len(item) <= 3:
            raise UserError(f"{where} must be (metric, threshold) or (metric, threshold, 'higher'|'lower'). "
                            f"Received: {len(item)} items, {item!r}")
        metric, threshold, direction = (list(item) + [None, None])[:3]
    else:
        metric, threshold, direction = item, None, None
    if isinstance(metric, type) and issubclass(metric, TestMetric):
        try:
            metric = metric()
        except TypeError as exc:
            raise UserError(f"{where}: {metric.__name__} needs arguments ({exc}); write {metric.__name__}(...). "
                            f"Received: the class {metric.__name__}") from exc
    if not isinstance(metric, TestMetric):
        raise UserError(f"{where}: the metric must be a d5.TestMetric such as d5.TestAccuracy(). "
                        f"Received: {type(metric).__name__} {metric!r}")
    if type(metric).__name__ == "StepTimeBreakdown" and threshold is not None:
        raise UserError(f"{where}: StepTimeBreakdown measures several parts, so it takes no threshold; give it as "
                        "(StepTimeBreakdown(), None), or judge the whole step with Throughput. "
                        f"Received: threshold={threshold!r}")
    if threshold is not None:
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer, np.floating)) \
                or not math.isfinite(float(threshold)):
            raise UserError(f"{where}: the threshold must be a finite number (or None to only measure). "
                            f"Received: {threshold!r}")
        threshold = float(threshold) if isinstance(threshold, (np.floating, float)) else int(threshold)
    if direction is None:
        stated = getattr(metric, "higher_is_better", None)
        if stated is None and threshold is not None:
            raise UserError(f"{where}: {metric_name(metric)} does not say whether higher or lower is better, so the "
                            f"threshold {threshold!r} cannot be judged; write ({metric_name(metric)}, {threshold!r}, "
                            f"'higher') or ({metric_name(metric)}, {threshold!r}, 'lower'), or set higher_is_better "
                            f"on the metric class. Allowed directions: 'higher', 'lower'. Received: no direction")
        direction_name, explicit = ("lower" if stated is False else "higher"), False
    else:
        key = str(direction).strip().lower()
        if key not in _DIRECTIONS:
            raise UserError(f"{where}: the direction must be 'higher' or 'lower' (or '>=', '<=') for "
                            f"{metric_name(metric)}. Received: {direction!r}")
        direction_name, explicit = _DIRECTIONS[key], True
    required = None if threshold is None else float(threshold)
    if required is not None and _percent_metric(metric):
        if not 0 <= required <= 100:
            raise UserError(f"{where}: {metric_name(metric)} is a percentage, so its threshold must be from 0 to 100 "
                            f"(or a fraction from 0 to 1). Received: {threshold!r}")
        if required <= 1:
            required *= 100.0
    return AcceptableMetric(metric, threshold, direction_name, required, explicit)


@dataclasses.dataclass
class Verdict:
    """Whether one acceptable metric held.

    Attributes:
        metric: the metric's name.
        measured: the measured value (None when it was not measured or not finite).
        required: the threshold in the metric's unit (None: not judged).
        direction: ``"higher"`` or ``"lower"``.
        passed: True, False, or None for a metric that is only measured.
        unit: the metric's unit.
        note: why it failed when the value is missing, or ``""``.
    """

    metric: str
    measured: float | None
    required: float | None
    direction: str
    passed: bool | None
    unit: str = ""
    note: str = ""

    def line(self) -> str:
        """One line for the terminal: measured, required, direction and the verdict."""
        value = _format_value(self.measured, self.unit) if self.measured is not None else (self.note or "not measured")
        if self.required is None:
            return f"{self.metric}: {value} (measured only)"
        sign = ">=" if self.direction == "higher" else "<="
        better = "higher is better" if self.direction == "higher" else "lower is better"
        verdict = "PASS" if self.passed else "FAIL"
        return (f"{self.metric}: measured {value}, required {sign} {_format_value(self.required, self.unit)} "
                f"({better}): {verdict}")

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return dataclasses.asdict(self)


def _format_value(value, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "%":
        return f"{value:.2f}%"
    if unit == "s":
        from deep500lite.metrics.tables import format_seconds

        return format_seconds(value)
    if unit == "bytes":
        return f"{value / 2**20:.1f} MiB" if abs(value) >= 2**20 else f"{value:.0f} bytes"
    if unit:
        return f"{value:.4g} {unit}"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _judge(acceptable: AcceptableMetric, value) -> Verdict:
    note = ""
    number = None
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in value):
        value = float(np.median(value))  # Deep500's list results (WallclockTime's averages) by their median
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        number = float(value)
        if not math.isfinite(number):
            note = "never reached" if number == math.inf else f"{number}"
            number = None
    elif value is None:
        note = "not measured"
    elif isinstance(value, dict):
        from deep500lite.metrics.tables import format_seconds

        note = ", ".join(f"{k} {format_seconds(v) if isinstance(v, float) and math.isfinite(v) else 'n/a'}"
                         for k, v in value.items())
    else:
        note = f"not a number ({type(value).__name__})"
    if acceptable.required is None:
        return Verdict(acceptable.name, number, None, acceptable.direction, None, acceptable.unit, note)
    if number is None:
        passed = False
    elif acceptable.direction == "higher":
        passed = number >= acceptable.required
    else:
        passed = number <= acceptable.required
    return Verdict(acceptable.name, number, acceptable.required, acceptable.direction, passed, acceptable.unit, note)
