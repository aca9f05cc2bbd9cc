"""regress's statistics on samples with a known truth: no false alarm on one distribution, 1.3x caught.

The samples are seeded draws (lognormal step times, 10% spread, as timing samples look); the
expected p-values and adjustments are computed here with scipy and plain Holm arithmetic, not by
the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest

from deep500lite.errors import UserError
from deep500lite.results.regress import compare_series

pytestmark = pytest.mark.requires("scipy")


def _rows(rng, scales, n=200, run=1, better="lower", metric="step_time"):
    return [{"benchmark": f"bench{i}", "metric": metric, "machine": "m", "unit": "s", "better": better,
             "run_id": run, "values": list(rng.lognormal(np.log(1e-3 * s), 0.1, n))} for i, s in enumerate(scales)]


def test_no_false_alarm_across_many_benchmarks_of_one_distribution():
    rng = np.random.default_rng(7)
    alarms = 0
    for _ in range(3):  # 3 x 40 benchmarks, each two samples of the same distribution
        comps = compare_series(_rows(rng, [1.0] * 40), _rows(rng, [1.0] * 40, run=2))
        assert len(comps) == 40
        alarms += sum(c.verdict in ("slower", "faster") for c in comps)
    assert alarms == 0


def test_a_1_3x_slowdown_is_caught_among_unchanged_benchmarks():
    rng = np.random.default_rng(11)
    comps = compare_series(_rows(rng, [1.0] * 10), _rows(rng, [1.3] + [1.0] * 9, run=2))
    slow = comps[0]
    assert slow.benchmark == "bench0" and slow.verdict == "slower"
    assert 1.2 < slow.ratio < 1.4 and slow.ratio_ci[0] > 1.05 and slow.ratio_ci[0] < slow.ratio < slow.ratio_ci[1]
    assert all(c.verdict != "slower" for c in comps[1:])
    # the faster direction, and throughput (higher is better): a 1.3x lower rate is slower
    assert compare_series(_rows(rng, [1.3]), _rows(rng, [1.0], run=2))[0].verdict == "faster"
    rate = compare_series(_rows(rng, [1.3], better="higher"), _rows(rng, [1.0], run=2, better="higher"))[0]
    assert rate.verdict == "slower" and rate.ratio < 1


def test_p_values_are_mann_whitney_and_holm_adjusted_over_all_benchmarks():
    from scipy.stats import mannwhitneyu

    rng = np.random.default_rng(3)
    base, cand = _rows(rng, [1.0, 1.0, 1.0], n=30), _rows(rng, [1.1, 1.0, 0.95], n=30, run=2)
    comps = compare_series(base, cand)
    raw = [mannwhitneyu(b["values"], c["values"], alternative="two-sided").pvalue for b, c in zip(base, cand)]
    assert [c.p for c in comps] == pytest.approx(raw)
    order = np.argsort(raw)
    expected, running = [0.0] * 3, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (3 - rank) * raw[i]))
        expected[i] = running
    assert [c.p_adjusted for c in comps] == pytest.approx(expected)


def test_minimum_effect_and_noise():
    rng = np.random.default_rng(5)
    # a real 3% difference with many samples: significant, but below the 5% minimum effect
    small = compare_series(_rows(rng, [1.0], n=4000), _rows(rng, [1.03], n=4000, run=2))[0]
    assert small.p_adjusted < 0.05 and small.verdict == "same"
    assert compare_series(_rows(rng, [1.0], n=4000), _rows(rng, [1.03], n=4000, run=2),
                          min_effect=0.01)[0].verdict == "slower"
    # three samples a side: no Mann-Whitney p-value can reach 0.05, whatever the change
    few = compare_series(_rows(rng, [1.0], n=3), _rows(rng, [1.3], n=3, run=2))[0]
    assert few.verdict == "too noisy to tell"
    one = compare_series(_rows(rng, [1.0], n=1), _rows(rng, [1.3], n=1, run=2))[0]
    assert one.verdict == "too noisy to tell" and one.p is None and "fewer than 2" in one.note


def test_runs_of_a_side_are_pooled_and_unmatched_benchmarks_left_out():
    rng = np.random.default_rng(9)
    base = _rows(rng, [1.0], n=50, run=1) + _rows(rng, [1.0], n=50, run=2)
    cand = _rows(rng, [1.3], n=50, run=3) + [dict(_rows(rng, [1.0], run=3)[0], benchmark="only-in-candidate")]
    (comp,) = compare_series(base, cand)
    assert comp.n_baseline == 100 and comp.runs_baseline == [1, 2] and comp.runs_candidate == [3]


def test_bad_parameters():
    with pytest.raises(UserError, match="minimum effect"):
        compare_series([], [], min_effect=-0.1)
    with pytest.raises(UserError, match="alpha"):
        compare_series([], [], alpha=1.5)
