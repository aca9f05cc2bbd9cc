"""Deep500's metric forms: WallclockTime(reruns, avg_over), reruns=0, DatasetBias, SamplerEventMetric,
max_acc and DefaultTrainingMetrics, against values computed here."""

from __future__ import annotations

import numpy as np
import pytest

import deep500lite as d5
from deep500lite.errors import UserError


class FakeClock:
    """Advances by the next of the given steps each time it is read."""

    def __init__(self, steps):
        self.t, self.steps = 0.0, iter(steps)

    def __call__(self):
        self.t += next(self.steps)
        return self.t


def test_wallclock_time_averages_over_consecutive_runs_as_deep500():
    # reads: begin of run 0, end of run 1 (pair 1), begin of run 2, end of run 3 (pair 2)
    w = d5.WallclockTime(4, 2, timer=FakeClock([1.0, 6.0, 1.0, 10.0]))
    for _ in range(4):
        w.begin(None)
        w.end(None)
    assert w.measure(None, None, None) == [3.0, 5.0]  # (6 / 2, 10 / 2)
    assert w.measure_summary(None, None, None) == "4 s"
    assert repr(w) == "WallclockTime(reruns=4, avg_over=2)"


def test_wallclock_time_avg_over_is_capped_by_positive_reruns_only():
    assert d5.WallclockTime(reruns=3, avg_over=10).avg_over == 3
    assert d5.WallclockTime(reruns=0, avg_over=10).avg_over == 10
    w = d5.WallclockTime(reruns=0, avg_over=1, timer=FakeClock([2.0, 0.5]))
    assert w.reruns == 0
    w.begin(None)
    w.end(None)
    assert w.measure(None, None, None) == [0.5]
    with pytest.raises(UserError, match="avg_over must be an integer >= 1"):
        d5.WallclockTime(avg_over=0)
    with pytest.raises(UserError, match="reruns must be an integer >= 0. Received: -1"):
        d5.WallclockTime(-1)


def test_wallclock_time_defaults_are_deep500s_100_runs_in_10_averages():
    w = d5.WallclockTime(timer=FakeClock([step for i in range(10) for step in (1.0, 2.0 * (i + 1))]))
    assert (w.reruns, w.avg_over) == (100, 10) and repr(w) == "WallclockTime(reruns=100, avg_over=10)"
    for _ in range(100):
        w.begin(None)
        w.end(None)
    # one clock read at the start and one at the end of each group of 10 runs
    assert w.measure(None, None, None) == pytest.approx([0.2 * (i + 1) for i in range(10)])
    assert w.measure_summary(None, None, None) == "1.1 s"  # the median of 0.2, 0.4, ..., 2.0
    assert (d5.WallclockTime(5).reruns, d5.WallclockTime(5).avg_over) == (5, 5)
    assert d5.WallclockTime(reruns=0).avg_over == 1  # the test's own run, one average of one


def test_wallclock_time_keeps_deep500lites_own_form():
    w = d5.WallclockTime(avg_over=None, timer=FakeClock([1.0, 0.25, 1.0, 0.75]))
    assert (w.reruns, w.avg_over) == (100, None) and repr(w) == "WallclockTime(reruns=100, avg_over=None)"
    for _ in range(2):
        w.begin(None)
        w.end(None)
    assert w.samples == [0.25, 0.75] and w.measure(None, None, None) == 0.75
    assert w.measure_summary(None, None, None).median == 0.5
    synced = []
    positional = d5.WallclockTime(2, lambda: synced.append(1), FakeClock([1.0, 2.0]))  # (reruns, sync, timer)
    positional.begin(None)
    positional.end(None)
    assert synced == [1] and positional.measure(None, None, None) == 2.0 and positional.avg_over is None


def test_dataset_bias_counts_labels():
    bias = d5.DatasetBias(3, "label")
    assert bias.reruns == 1000
    bias.end({"label": np.array([0, 2, 2])})
    bias.end({"label": np.array([[1], [2]])})
    assert bias.measure() == [1, 1, 3]
    with pytest.raises(UserError, match="labels must be integers from 0 to num_classes - 1 = 2"):
        bias.end({"label": np.array([3])})
    with pytest.raises(KeyError, match="the batch has no feed 'label'"):
        bias.end({"y": np.array([0])})


def test_sampler_event_metric_runs_its_metric_around_each_sampling():
    calls = []

    class Recorder(d5.TestMetric):
        def begin(self, inputs):
            calls.append(("begin", inputs))

        def end(self, outputs):
            calls.append(("end", outputs))

        def measure(self, *args):
            return len(calls)

    m = d5.SamplerEventMetric(Recorder(reruns=3))
    assert m.reruns == 3
    m.begin("sampler")  # its own begin/end do nothing: the sampler events time the sampling
    m.end("batch")
    m.before_sampling("sampler", 8)
    m.after_sampling("sampler", 5)
    assert calls == [("begin", 8), ("end", 5)] and m.measure(None, None, None) == 2


def _stats(values):
    return type("Stats", (), {"epochs": [{"test_accuracy": v, "train_accuracy": v} for v in values]})()


@pytest.mark.parametrize("cls", [d5.TestAccuracy, d5.TrainingAccuracy])
def test_accuracy_max_acc_measures_the_best_epoch(cls):
    last, best = cls(), cls(max_acc=True)
    for epoch, value in enumerate([40.0, 90.0, 70.0]):
        stats = _stats([40.0, 90.0, 70.0][:epoch + 1])
        last.after_epoch(None, stats, epoch)
        best.after_epoch(None, stats, epoch)
    assert last.measure(None, None, None) == 70.0 and best.measure(None, None, None) == 90.0
    with pytest.raises(UserError, match="max_acc must be True or False"):
        cls(max_acc="yes")


def test_default_training_metrics_are_fresh_training_and_test_accuracies():
    a, b = d5.DefaultTrainingMetrics(), d5.DefaultTrainingMetrics()
    assert [type(m) for m in a] == [d5.TrainingAccuracy, d5.TestAccuracy]
    assert all(x is not y for x, y in zip(a, b))


def test_norm_difference_per_output():
    a, b = np.array([1.0, -2.0]), np.array([0.0, 2.0])
    assert d5.NormDifference(1).measure(None, a, b) == 5.0
    assert d5.NormDifference(np.inf).measure(None, [a, a], [b, a]) == [4.0, 0.0]


def test_diff_heatmap_is_the_relative_difference(tmp_path):
    o, r = np.array([[1.0, 2.0]]), np.array([[1.0, 1.0]])
    m = d5.DiffHeatmap(str(tmp_path / "diff.png"))
    np.testing.assert_allclose(m.measure(None, o, r), [[0.0, 2 / 3]])
    assert m.measure_summary(None, o, r) == str(tmp_path / "diff.png") and (tmp_path / "diff.png").stat().st_size > 0


def test_var_heatmap_measures_the_variance_over_runs(tmp_path):
    # Deep500's VarHeatmap discarded every run but the first (variance 0) and failed on one output.
    runs = [np.array([[1.0, 5.0], [2.0, 2.0]]), np.array([[3.0, 5.0], [2.0, 2.0]]), np.array([[5.0, 5.0], [2.0, 2.0]])]
    m = d5.VarHeatmap(str(tmp_path / "var"), reruns=3)
    assert m.reruns == 3
    for run in runs:
        m.end(run)
    [var] = m.measure(None, None, None)
    np.testing.assert_allclose(var, np.var(np.stack(runs), axis=0))
    assert var[0, 0] == pytest.approx(8 / 3) and m.identical == [False]
    assert m.measure_summary(None, None, None) == str(tmp_path / "var")
    np.testing.assert_allclose(np.loadtxt(tmp_path / "var_000.out", delimiter=","), var)
    assert (tmp_path / "var.png").stat().st_size > 0
    same = d5.VarHeatmap(reruns=2)
    same.end([np.ones(3), np.zeros(2)])
    same.end([np.ones(3), np.zeros(2)])
    assert [v.tolist() for v in same.measure(None, None, None)] == [[0, 0, 0], [0, 0]]
    assert same.identical == [True, True]
