"""Statistics and timing: checked against scipy and with an injected fake timer."""

import itertools

import numpy as np
import pytest

from deep500lite.metrics import median_ci, median_ci_ranks, summarize, time_function

scipy_stats = pytest.importorskip("scipy.stats", reason="the check against scipy needs scipy")


@pytest.mark.parametrize("n", [6, 7, 10, 25, 50, 99, 100, 1000, 5000])
def test_median_ci_ranks_match_binomial(n):
    lo, hi, coverage = median_ci_ranks(n, 0.95)
    binom = scipy_stats.binom(n, 0.5)
    assert hi == n - lo + 1
    assert coverage == pytest.approx(1 - 2 * binom.cdf(lo - 1), abs=1e-12)
    assert coverage >= 0.95
    # one rank further in would no longer cover 95%
    assert 1 - 2 * binom.cdf(lo) < 0.95


def test_too_few_samples_report_their_real_coverage():
    lo, hi, coverage = median_ci_ranks(5)
    assert (lo, hi) == (1, 5) and coverage == pytest.approx(1 - 2 / 32)


def test_median_ci_brackets_median():
    x = np.random.default_rng(0).lognormal(size=200)
    lo, hi, _ = median_ci(x)
    assert lo <= np.median(x) <= hi
    s = summarize(x)
    assert s.median == pytest.approx(np.median(x)) and s.ci_low == lo and s.n == 200


def test_time_function_with_fake_timer_keeps_every_sample():
    durations = itertools.cycle([0.010, 0.011, 0.012])
    clock = [0.0]
    pending = []

    def timer():
        if pending:
            clock[0] += pending.pop()
        else:
            pending.append(next(durations))
        return clock[0]

    calls = []
    m = time_function(lambda: calls.append(1), warmup=2, min_runs=12, max_runs=12, target_rel_ci=0.0,
                      timer=timer)
    assert len(calls) == 14 and len(m.raw_times) == 12
    assert sorted(set(round(t, 6) for t in m.raw_times)) == [0.010, 0.011, 0.012]
    assert m.median == pytest.approx(0.011)
    assert m.to_dict()["raw"] == list(m.raw_times)


def test_time_function_stops_when_ci_is_tight():
    t = [0.0]

    def timer():
        t[0] += 0.5  # every run lasts exactly 0.5 s of fake time
        return t[0]

    m = time_function(lambda: None, warmup=0, min_runs=10, max_runs=1000, timer=timer)
    assert m.stopped_by == "ci" and len(m.raw_times) == 10 and not m.is_noisy
