"""Regression verdicts: every benchmark of a candidate selection against a baseline, from raw samples.

For each benchmark, metric and machine present in both selections (the runs of one side are
pooled), :func:`compare_series`:

1. tests whether the two samples come from one distribution with the two-sided Mann-Whitney U
   test (``scipy.stats.mannwhitneyu``; distribution-free, so skewed timing samples are fine);
2. adjusts the p-values of all benchmarks together with Holm's step-down method
   (:func:`deep500lite.metrics.statistics.holm`), which keeps the chance of any false alarm
   below ``alpha`` (0.05) however many benchmarks are compared;
3. estimates the median ratio, candidate over baseline, with a 95% percentile-bootstrap
   confidence interval (``scipy.stats.bootstrap``, 2,000 resamples, seeded);
4. gives a verdict, where *worse* is the ratio for lower-is-better metrics (times) and its
   inverse for higher-is-better ones (throughput) and ``e`` is the minimum effect (5%):

   - ``slower``: adjusted p < alpha and worse >= 1 + e;
   - ``faster``: adjusted p < alpha and worse <= 1 / (1 + e);
   - ``same``: the ratio's interval lies within [1 / (1 + e), 1 + e], or the difference is
     significant but smaller than the minimum effect;
   - ``too noisy to tell``: none of these (too few samples, or an interval too wide to say).

Step times of one run are not independent (caches, clock changes, other load come and go), and
two runs of the same code on a busy machine differ by more than their within-run spread; the
minimum effect is what stops such differences from being called regressions. Raise it on a
shared machine; record several runs per side (``--label`` on each) to pool them.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from deep500lite.errors import FrameworkNotAvailableError, UserError
from deep500lite.metrics.statistics import holm, summarize

__all__ = ["Comparison", "compare_series", "VERDICTS", "ALPHA", "MIN_EFFECT", "BOOTSTRAP_RESAMPLES"]

VERDICTS = ("slower", "faster", "same", "too noisy to tell")
ALPHA = 0.05
MIN_EFFECT = 0.05
BOOTSTRAP_RESAMPLES = 2000


@dataclasses.dataclass
class Comparison:
    """One benchmark's metric on one machine, candidate against baseline.

    Attributes:
        benchmark, metric, machine, unit, better: what was compared.
        n_baseline, n_candidate: raw samples on each side (pooled over runs).
        runs_baseline, runs_candidate: the run ids on each side.
        median_baseline, median_candidate: the medians.
        ci_baseline, ci_candidate: each median's 95% confidence interval (order statistics).
        ratio: median_candidate / median_baseline; ratio_ci: its 95% bootstrap interval.
        p: the Mann-Whitney U test's two-sided p-value; p_adjusted: Holm-adjusted over all comparisons.
        verdict: one of :data:`VERDICTS`; note: why, in words.
    """

    benchmark: str
    metric: str
    machine: str | None
    unit: str
    better: str
    n_baseline: int
    n_candidate: int
    runs_baseline: list
    runs_candidate: list
    median_baseline: float
    median_candidate: float
    ci_baseline: tuple
    ci_candidate: tuple
    ratio: float | None = None
    ratio_ci: tuple = (None, None)
    p: float | None = None
    p_adjusted: float | None = None
    verdict: str = "too noisy to tell"
    note: str = ""

    def to_dict(self) -> dict:
        """JSON-ready form."""
        d = dataclasses.asdict(self)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def _scipy():
    try:
        from scipy import stats
    except ImportError as exc:
        raise FrameworkNotAvailableError("deep500lite regress needs scipy, which is not installed: "
                                         "pip install 'deep500lite[stats]'") from exc
    return stats


def _ratio_ci(base: np.ndarray, cand: np.ndarray, seed: int) -> tuple:
    stats = _scipy()

    def ratio(b, c, axis=-1):
        return np.median(c, axis=axis) / np.median(b, axis=axis)

    res = stats.bootstrap((base, cand), ratio, n_resamples=BOOTSTRAP_RESAMPLES, confidence_level=0.95,
                          method="percentile", vectorized=True, paired=False, batch=200,
                          rng=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else (None, None)


def _verdict(c: Comparison, min_effect: float, alpha: float) -> None:
    if c.ratio is None or c.p_adjusted is None:
        return
    band_hi, band_lo = 1 + min_effect, 1 / (1 + min_effect)
    worse = c.ratio if c.better == "lower" else 1 / c.ratio
    lo, hi = c.ratio_ci
    if lo is not None and c.better != "lower":
        lo, hi = 1 / hi, 1 / lo
    significant = c.p_adjusted < alpha
    effect = f"{abs(worse - 1) * 100:.1f}%"
    if significant and worse >= band_hi:
        c.verdict, c.note = "slower", f"{effect} worse, significant; beyond the minimum effect {min_effect:.0%}"
    elif significant and worse <= band_lo:
        c.verdict, c.note = "faster", f"{effect} better, significant; beyond the minimum effect {min_effect:.0%}"
    elif lo is not None and band_lo <= lo and hi <= band_hi:
        c.verdict, c.note = "same", f"the ratio's 95% interval is within +-{min_effect:.0%}"
    elif significant:
        c.verdict, c.note = "same", f"a significant difference smaller than the minimum effect {min_effect:.0%}"
    else:
        c.verdict, c.note = "too noisy to tell", "not significant, and the interval reaches past the minimum effect"


def compare_series(baseline: list, candidate: list, *, min_effect: float = MIN_EFFECT, alpha: float = ALPHA,
                   seed: int = 0) -> list:
    """Compare the series of two selections (rows of :meth:`deep500lite.results.store.Store.series`).

    Args:
        baseline: series rows of the baseline runs (with ``values``).
        candidate: series rows of the candidate runs.
        min_effect: the smallest relative change called slower or faster (0.05 = 5%).
        alpha: the family-wise significance level.
        seed: the bootstrap's seed (the intervals are reproducible).

    Returns:
        One :class:`Comparison` per benchmark, metric and machine present on both sides, sorted
        by benchmark, metric and machine.

    Raises:
        UserError: ``min_effect`` not in [0, 10) or ``alpha`` not in (0, 1).
    """
    if not (isinstance(min_effect, (int, float)) and 0 <= min_effect < 10):
        raise UserError(f"The minimum effect is a fraction from 0 to 10 (0.05 = 5%). Received: {min_effect!r}")
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise UserError(f"alpha is a significance level between 0 and 1 (0.05). Received: {alpha!r}")
    stats = _scipy()

    def pooled(rows):
        out: dict = {}
        for r in rows:
            key = (r["benchmark"], r["metric"], r["machine"])
            entry = out.setdefault(key, {"values": [], "runs": [], "unit": r["unit"], "better": r["better"]})
            entry["values"].extend(r["values"])
            if r["run_id"] not in entry["runs"]:
                entry["runs"].append(r["run_id"])
        return out

    base, cand = pooled(baseline), pooled(candidate)
    comparisons = []
    for key in sorted(set(base) & set(cand), key=lambda k: tuple(str(x) for x in k)):
        b, c = base[key], cand[key]
        bv, cv = np.asarray(b["values"], dtype=np.float64), np.asarray(c["values"], dtype=np.float64)
        if not bv.size or not cv.size:
            continue  # a summary without raw samples (a run -n aggregate): nothing to test
        sb, sc = summarize(bv), summarize(cv)
        comp = Comparison(key[0], key[1], key[2], b["unit"], b["better"], int(bv.size), int(cv.size), b["runs"],
                          c["runs"], sb.median, sc.median, (sb.ci_low, sb.ci_high), (sc.ci_low, sc.ci_high))
        if bv.size < 2 or cv.size < 2:
            comp.note = "fewer than 2 samples on a side: nothing to test"
        elif sb.median <= 0 or sc.median <= 0:
            comp.note = "a median <= 0: no ratio"
        else:
            comp.ratio = sc.median / sb.median
            comp.p = float(stats.mannwhitneyu(bv, cv, alternative="two-sided").pvalue)
            comp.ratio_ci = _ratio_ci(bv, cv, seed)
        comparisons.append(comp)
    tested = [c for c in comparisons if c.p is not None]
    for c, p_adj in zip(tested, holm([c.p for c in tested])):
        c.p_adjusted = p_adj
        _verdict(c, min_effect, alpha)
    return comparisons
