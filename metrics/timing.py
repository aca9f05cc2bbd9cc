"""Wall-clock timing that keeps every raw sample.

Method (the same for every framework, so comparisons are fair)::

    run fn `warmup` times, untimed
    repeat:
        t0 = timer(); fn(); sync(); t1 = timer()      # sync waits for the device (GPU) to finish
        keep t1 - t0
    until at least `min_runs` samples and the 95% CI of the median is within `target_rel_ci`
          of the median, or `max_time` seconds or `max_runs` samples are spent

The result is a :class:`Measurement` holding every sample; its summary is the median with a
nonparametric 95% confidence interval (:mod:`deep500lite.metrics.statistics`). A measurement
whose interval is wider than 10% of the median is flagged as noisy.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Protocol

import numpy as np

from deep500lite.errors import UserError
from deep500lite.metrics.base import TestMetric
from deep500lite.metrics.statistics import Summary, summarize
from deep500lite.metrics.tables import format_seconds

__all__ = ["Measurement", "PairedMeasurement", "time_function", "time_paired", "WallclockTime", "Timer",
           "NOISY_CI_THRESHOLD"]

NOISY_CI_THRESHOLD = 0.10


class Timer(Protocol):
    """A clock returning seconds as a float (``time.perf_counter`` by default)."""

    def __call__(self) -> float: ...


@dataclasses.dataclass(frozen=True)
class Measurement:
    """Raw timing samples (seconds) and how they were taken."""

    label: str
    raw_times: tuple
    warmup: int = 0
    stopped_by: str = ""

    @property
    def summary(self) -> Summary:
        """Median, its 95% CI, and the other summary statistics."""
        return summarize(self.raw_times)

    @property
    def median(self) -> float:
        """Median time in seconds."""
        return self.summary.median

    @property
    def is_noisy(self) -> bool:
        """Whether the median's CI is wider than :data:`NOISY_CI_THRESHOLD` of the median."""
        return self.summary.ci_relative_width > NOISY_CI_THRESHOLD

    def warning(self) -> str | None:
        """A sentence warning about a wide confidence interval, or None."""
        s = self.summary
        if s.n < 6:
            return f"{self.label}: only {s.n} samples; the 95% CI of the median needs at least 6."
        if self.is_noisy:
            return (f"{self.label}: the 95% CI of the median is {100 * s.ci_relative_width:.0f}% of "
                    "the median; the machine may be busy or the work too short to time reliably.")
        return None

    def to_dict(self) -> dict:
        """JSON-ready form: raw samples, summary and method."""
        return {"label": self.label, "unit": "s", "raw": list(self.raw_times), "warmup": self.warmup,
                "stopped_by": self.stopped_by, "summary": self.summary.to_dict()}


def time_function(fn: Callable[[], object], *, label: str = "", sync: Callable[[], None] | None = None,
                  warmup: int = 3, min_runs: int = 10, max_runs: int = 10_000,
                  target_rel_ci: float = 0.05, max_time: float = 5.0,
                  timer: Timer = time.perf_counter) -> Measurement:
    """Time ``fn`` with warm-up, device synchronization and adaptive repetition (see module doc).

    Args:
        fn: the work to time (called with no arguments).
        label: a name for the measurement.
        sync: called after each run, inside the timed region (e.g. ``executor.synchronize``).
        warmup: untimed runs first.
        min_runs: fewest timed runs.
        max_runs: most timed runs.
        target_rel_ci: stop once the median's 95% CI is within this fraction of the median.
        max_time: stop after this many seconds of timed runs (at least ``min_runs`` are made).
        timer: the clock; tests inject a fake one.

    Returns:
        A :class:`Measurement` with every sample.
    """
    if min_runs < 1 or max_runs < min_runs:
        raise UserError(f"min_runs and max_runs are out of range; allowed: 1 <= min_runs <= max_runs. "
                         f"Received: min_runs={min_runs}, max_runs={max_runs}")
    for _ in range(warmup):
        fn()
        if sync is not None:
            sync()
    samples: list[float] = []
    spent = 0.0
    stopped_by = "max_runs"
    while len(samples) < max_runs:
        t0 = timer()
        fn()
        if sync is not None:
            sync()
        dt = timer() - t0
        samples.append(dt)
        spent += dt
        n = len(samples)
        if n >= min_runs:
            # The CI is re-checked as the sample grows by ~10%, keeping the loop O(n log n).
            if n >= 6 and n % max(1, n // 10) == 0 and summarize(samples).ci_relative_width <= target_rel_ci:
                stopped_by = "ci"
                break
            if spent >= max_time:
                stopped_by = "max_time"
                break
    return Measurement(label=label, raw_times=tuple(samples), warmup=warmup, stopped_by=stopped_by)


_DEFAULT = object()  # avg_over not given


class WallclockTime(TestMetric):
    """Wall-clock time between ``begin`` and ``end``, in seconds (lower is better); keeps every sample.

    Two forms:

    - Deep500's, the default: ``WallclockTime(reruns=100, avg_over=10)``. A test runs the work
      ``reruns`` times for this metric; the times of ``avg_over`` consecutive runs are averaged;
      :meth:`measure` is the list of those averages (10 by default) and :meth:`measure_summary`
      their median as text (``'12.30 ms'``). As in Deep500, ``avg_over`` larger than a positive
      ``reruns`` becomes ``reruns``. ``reruns=0`` times the test's own run
      (``WallclockTime(reruns=0, avg_over=1)`` around ``test_training`` gives ``[seconds]``);
      ``reruns=0`` without ``avg_over`` means ``avg_over=1`` (in Deep500 it divided by zero).
    - deep500lite's, chosen with ``avg_over=None`` (or positionally as ``WallclockTime(reruns,
      sync, timer)``): every ``begin``/``end`` pair is one sample in :attr:`samples`;
      :meth:`measure` is the last one (a float) and :meth:`measure_summary` the
      :class:`~deep500lite.metrics.statistics.Summary` of all.

    Args:
        reruns: runs of the measured work for this metric (0: the test's own run).
        avg_over: runs per averaged sample (an integer >= 1), or None for deep500lite's form.
        sync: called in ``end`` before the clock is read (e.g. ``executor.synchronize``).
        timer: the clock (``time.perf_counter``); tests inject a fake one.

    Attributes:
        samples: the averages (Deep500's form) or the raw times (deep500lite's form), in seconds.
    """

    higher_is_better = False
    name = "WallclockTime"

    def __init__(self, reruns: int = 100, avg_over=_DEFAULT, sync: Callable[[], None] | None = None,
                 timer: Timer = time.perf_counter):
        if callable(avg_over):  # deep500lite's positional form WallclockTime(reruns, sync, timer)
            avg_over, sync, timer = None, avg_over, (sync if sync is not None else timer)
        super().__init__(reruns)
        if avg_over is _DEFAULT:
            avg_over = 10 if reruns > 0 else 1
        if avg_over is not None:
            if not isinstance(avg_over, int) or isinstance(avg_over, bool) or avg_over < 1:
                raise UserError(f"avg_over must be an integer >= 1 (runs per averaged sample). "
                                f"Received: avg_over={avg_over!r}")
            if reruns > 0:
                avg_over = min(avg_over, reruns)
        self.avg_over = avg_over
        self._sync, self._timer = sync, timer
        self._t0 = None
        self._runs = 0
        self.samples: list[float] = []

    def begin(self, *inputs):
        if self.avg_over is None or self._runs % self.avg_over == 0:
            self._t0 = self._timer()
        return inputs[0] if len(inputs) == 1 else inputs

    def end(self, *outputs):
        if self._sync is not None:
            self._sync()
        self._runs += 1
        if self.avg_over is None:
            self.samples.append(self._timer() - self._t0)
        elif self._runs % self.avg_over == 0:
            self.samples.append((self._timer() - self._t0) / self.avg_over)
        return outputs[0] if len(outputs) == 1 else outputs

    def measure(self, inputs, outputs, reference_outputs):
        """The last time in seconds (deep500lite's form), or the list of averages (Deep500's form)."""
        if self.avg_over is not None:
            return list(self.samples)
        return self.samples[-1] if self.samples else None

    def measure_summary(self, inputs, outputs, reference_outputs):
        """A Summary of the samples (deep500lite's form) or their median as text (Deep500's form)."""
        if self.avg_over is not None:
            return format_seconds(float(np.median(self.samples))) if self.samples else "no samples"
        return summarize(self.samples) if self.samples else None

    def __repr__(self) -> str:
        return f"WallclockTime(reruns={self.reruns}, avg_over={self.avg_over})"


@dataclasses.dataclass(frozen=True)
class PairedMeasurement:
    """Two pieces of work timed in alternation; ``ratios[i] = a[i] / b[i]`` for each pair."""

    a: Measurement
    b: Measurement

    @property
    def ratios(self) -> tuple:
        """Per-pair time ratios a/b."""
        return tuple(x / y for x, y in zip(self.a.raw_times, self.b.raw_times))

    @property
    def ratio(self) -> Summary:
        """Median ratio a/b with its nonparametric 95% CI."""
        return summarize(self.ratios)

    def to_dict(self) -> dict:
        """JSON-ready form with both measurements and the ratios."""
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "ratios": list(self.ratios),
                "ratio_summary": self.ratio.to_dict()}


def time_paired(fn_a: Callable[[], object], fn_b: Callable[[], object], *, label_a: str = "a",
                label_b: str = "b", sync: Callable[[], None] | None = None, warmup: int = 5,
                min_pairs: int = 20, max_pairs: int = 100_000, target_rel_ci: float = 0.01,
                max_time: float = 20.0, timer: Timer = time.perf_counter) -> PairedMeasurement:
    """Time two functions in alternation and summarize the ratio of their times.

    Each pair runs ``fn_a`` and ``fn_b`` back to back, in an order that alternates from pair to
    pair, so slow drifts of the machine (frequency, other load) affect both alike. The ratio of
    each pair is kept; the result's :attr:`PairedMeasurement.ratio` is their median with a 95% CI.
    Stops when that CI is within ``target_rel_ci`` of the median (after ``min_pairs``) or after
    ``max_time`` seconds of timed work.
    """
    for _ in range(warmup):
        fn_a(), fn_b()
        if sync is not None:
            sync()

    def one(fn):
        t0 = timer()
        fn()
        if sync is not None:
            sync()
        return timer() - t0

    ta: list[float] = []
    tb: list[float] = []
    spent, stopped_by = 0.0, "max_pairs"
    while len(ta) < max_pairs:
        if len(ta) % 2 == 0:
            a = one(fn_a)
            b = one(fn_b)
        else:
            b = one(fn_b)
            a = one(fn_a)
        ta.append(a)
        tb.append(b)
        spent += a + b
        n = len(ta)
        if n >= min_pairs and n % max(1, n // 10) == 0:
            if summarize([x / y for x, y in zip(ta, tb)]).ci_relative_width <= target_rel_ci:
                stopped_by = "ci"
                break
        if n >= min_pairs and spent >= max_time:
            stopped_by = "max_time"
            break
    return PairedMeasurement(Measurement(label_a, tuple(ta), warmup, stopped_by),
                             Measurement(label_b, tuple(tb), warmup, stopped_by))
