"""Distribution-free summaries of raw samples.

The confidence interval of the median uses order statistics: for ``n`` samples the number of
them below the true median follows Binomial(n, 1/2), so ``[x_(l), x_(n-l+1)]`` covers the median
with probability ``1 - 2 P(B < l)``. The binomial tail is computed exactly with integer
coefficients, so no scipy is needed at import time; the tests check these
ranks against ``scipy.stats.binom``. See Le Boudec, *Performance Evaluation of Computer and
Communication Systems*, and Hoefler & Belli, *Scientific Benchmarking of Parallel Computing
Systems* (SC'15), rule 5.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction
from typing import Sequence

import numpy as np

from deep500lite.errors import UserError

__all__ = ["Summary", "median_ci", "median_ci_ranks", "summarize", "holm"]


@functools.lru_cache(maxsize=4096)
def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int, float]:
    """1-based ranks ``(l, u)`` of the order statistics bounding the median, and their coverage.

    When ``n`` is too small for the requested confidence, the ranks are ``(1, n)`` and the
    returned coverage is lower than asked for.
    """
    if n < 1:
        raise UserError(f"median_ci_ranks needs at least one sample (n >= 1). Received: n={n}")
    if not 0 < confidence < 1:
        raise UserError(f"confidence must be a number in (0, 1), exclusive. Received: {confidence}")
    alpha_half = Fraction(1 - confidence).limit_denominator(10**9) / 2
    total = 2**n
    best, below, below_at_best = 1, 0, 1  # too few samples: the extremes, with lower coverage
    pmf = 1  # C(n, k - 1), updated exactly in integers
    for k in range(1, n // 2 + 2):
        below += pmf  # outcomes with B < k
        pmf = pmf * (n - k + 1) // k
        if below * alpha_half.denominator > alpha_half.numerator * total:
            break
        best, below_at_best = k, below
    return best, n - best + 1, float(1 - 2 * Fraction(below_at_best, total))


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """The nonparametric confidence interval of the median: ``(low, high, coverage)``."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    lo, hi, cov = median_ci_ranks(len(x), confidence)
    return float(x[lo - 1]), float(x[hi - 1]), cov


@dataclasses.dataclass(frozen=True)
class Summary:
    """Summary statistics of raw samples (median with its confidence interval first)."""

    n: int
    median: float
    ci_low: float
    ci_high: float
    ci_coverage: float
    mean: float
    std: float
    min: float
    max: float
    q1: float
    q3: float

    @property
    def iqr(self) -> float:
        """Interquartile range."""
        return self.q3 - self.q1

    @property
    def ci_relative_width(self) -> float:
        """Width of the median's confidence interval relative to the median."""
        return (self.ci_high - self.ci_low) / abs(self.median) if self.median else math.inf

    def to_dict(self) -> dict:
        """The summary as a JSON-ready dict."""
        return dataclasses.asdict(self)


def summarize(samples: Sequence[float], confidence: float = 0.95) -> Summary:
    """Summarize raw samples: median and its CI, mean, standard deviation, extremes, quartiles."""
    try:
        x = np.asarray(samples, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise UserError(f"summarize takes a sequence of numbers (seconds, samples per second, ...). Received: "
                        f"{repr(samples)[:80]}") from exc
    if x.ndim != 1:
        raise UserError(f"summarize takes a flat sequence of numbers. Received: an array of shape {list(x.shape)}")
    if x.size == 0:
        raise UserError("summarize needs at least one sample. Received: no samples")
    lo, hi, cov = median_ci(x, confidence)
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    return Summary(
        n=int(x.size), median=float(med), ci_low=lo, ci_high=hi, ci_coverage=cov,
        mean=float(x.mean()), std=float(x.std(ddof=1)) if x.size > 1 else 0.0,
        min=float(x.min()), max=float(x.max()), q1=float(q1), q3=float(q3),
    )


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of p-values (family-wise error rate), in the given order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted
