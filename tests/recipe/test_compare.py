"""``deep500lite compare`` and its statistics: Holm-adjusted Mann-Whitney U tests on step times,
fresh processes per framework, the table, the plots, and its errors."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from scipy import stats

from deep500lite import cli
from deep500lite.recipe.compare import compare_results, holm
from deep500lite.recipe.results import read_results


TINY = """\
from deep500lite.metrics.training import TestAccuracy
FIXED = {'dataset': 'digits', 'dataset_kwargs': dict(test_fraction=0.75), 'model': 'mlp',
         'model_kwargs': dict(hidden=(16,)), 'train_sampler': 'ShuffleSampler', 'epochs': 2}
MUTABLE = {'batch_size': 32, 'executor': 'reference', 'optimizer': 'MomentumOptimizer',
           'optimizer_kwargs': dict(learning_rate=0.1, momentum=0.9)}
METRICS = [(TestAccuracy(), 20)]
"""


@pytest.fixture(autouse=True)
def commands(monkeypatch):
    """The run, compare and report subcommands (a no-op once deep500lite.cli lists them)."""
    wanted = tuple(c for c in ("run", "compare", "report") if c not in cli.SUBCOMMANDS)
    monkeypatch.setattr(cli, "SUBCOMMANDS", cli.SUBCOMMANDS + wanted)


def fake_results(framework, step_times, accuracy=90.0, recipe="r"):
    """A minimal results dict with the given raw step times (no warm-up step)."""
    return {"format": "deep500lite-results", "version": 1, "framework": framework, "recipe": {"name": recipe},
            "passed": True, "verdicts": [],
            "samples": {"steps": [{"step_time": float(t)} for t in step_times], "epochs": []},
            "summaries": {"warmup_steps": 0, "final_test_accuracy": accuracy,
                          "throughput": {"samples_per_second": 1000.0}, "peak_memory_bytes": 2**27}}


def test_holm_adjustment():
    # By hand: sorted p 0.01, 0.03, 0.04 -> 3*0.01, max(0.03, 2*0.03), max(0.06, 1*0.04).
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_significant_and_indistinguishable_differences():
    rng = np.random.default_rng(0)
    fast = rng.lognormal(np.log(0.010), 0.05, 200)
    same = rng.lognormal(np.log(0.010), 0.05, 200)
    slow = rng.lognormal(np.log(0.013), 0.05, 200)
    comparison = compare_results([fake_results("a", fast), fake_results("b", same), fake_results("c", slow)])
    assert comparison["fastest"] in ("a", "b")
    tests = {t["label"]: t for t in comparison["tests"]}
    fastest = {"a": fast, "b": same}[comparison["fastest"]]
    other = "b" if comparison["fastest"] == "a" else "a"
    for label, sample in ((other, {"a": fast, "b": same}[other]), ("c", slow)):
        expected = stats.mannwhitneyu(sample, fastest, alternative="two-sided")
        assert tests[label]["p"] == pytest.approx(expected.pvalue)
        assert tests[label]["u"] == pytest.approx(expected.statistic)
    p_holm = holm([tests[other]["p"], tests["c"]["p"]])
    assert [tests[other]["p_adjusted"], tests["c"]["p_adjusted"]] == pytest.approx(p_holm)
    assert tests["c"]["significant"] and tests["c"]["ratio"] == pytest.approx(
        np.median(slow) / np.median(fastest))
    assert not tests[other]["significant"]


def test_repeats_are_pooled_and_rows_summarized():
    a1, a2 = [0.01, 0.012, 0.011], [0.013, 0.009]
    comparison = compare_results([fake_results("x", a1, 91.0), fake_results("x", a2, 93.0),
                                  fake_results("y", [0.02] * 4)])
    row = next(r for r in comparison["rows"] if r["label"] == "x")
    assert row["runs"] == 2 and sorted(row["step_times"]) == sorted(a1 + a2)
    assert row["step_time"]["median"] == pytest.approx(np.median(a1 + a2))
    assert row["final_test_accuracy"] == pytest.approx(92.0) and row["accuracies"] == [91.0, 93.0]


def _csv_rows(text):
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.requires("torch")
def test_compare_reference_and_torch_end_to_end(tmp_path, capsys):
    recipe = tmp_path / "tiny.py"
    recipe.write_text(TINY)
    out = tmp_path / "cmp"
    code = cli.main(["compare", str(recipe), "--frameworks", "reference,pytorch", "--out", str(out),
                     "--format", "csv"])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    text = captured.out
    # progress while it ran, from each child process
    assert "[reference] starting in a new process" in text and "[torch    ] epoch 2/2" in text
    table = text[text.index("framework,runs"):].split("\n\n")[0]
    rows = {r["framework"]: r for r in _csv_rows(table)}
    assert set(rows) == {"reference", "torch"}
    for fw in ("reference", "torch"):
        data = read_results(out / fw / "results.json")
        assert data["framework"] == fw
        assert float(rows[fw]["test acc (%)"]) == pytest.approx(data['summaries']['final_test_accuracy'])
        assert rows[fw]["metrics"] == "pass"
    torch_div = read_results(out / "torch" / "results.json")["divergence"]
    assert torch_div["reference"] == "reference" and torch_div["gradients"] < 1e-4
    assert float(rows["reference"]["max |d grad|"]) == 0
    assert float(rows["torch"]["max |d grad|"]) == pytest.approx(torch_div["gradients"], rel=1e-9)
    vs = {fw: rows[fw]["difference"] for fw in rows}
    assert sorted(v == "fastest" for v in vs.values()) == [False, True]
    assert (out / "comparison.csv").read_text().startswith("framework,runs,test acc (%)")
    assert "Mann-Whitney U against the fastest" in text
    for name in ("step_times.png", "loss.png", "accuracy.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
        assert str(out / name) in text
    summary = json.loads((out / "comparison.json").read_text())
    assert summary["failures"] == [] and len(summary["tests"]) == 1
    assert (out / "comparison.md").read_text().startswith("| framework")


def test_compare_usage_errors(tmp_path, capsys):
    recipe = tmp_path / "tiny.py"
    recipe.write_text(TINY)
    assert cli.main(["compare", str(recipe), "--frameworks", "reference,caffe"]) == 2
    assert "Unknown framework 'caffe'" in capsys.readouterr().err
    fixed = tmp_path / "fixed.py"
    fixed.write_text(TINY.replace("'epochs': 2}", "'epochs': 2, 'executor': 'reference'}")
                     .replace("'executor': 'reference', 'optimizer'", "'optimizer'"))
    assert cli.main(["compare", str(fixed), "--frameworks", "reference"]) == 2
    assert "has 'executor' in FIXED" in capsys.readouterr().err
    assert cli.main(["compare", str(recipe), "--frameworks", "reference", "--set", "epochs=1"]) == 2
    assert "'epochs' is a FIXED key" in capsys.readouterr().err


def test_a_failing_framework_run_is_reported(tmp_path, capsys):
    recipe = tmp_path / "tiny.py"
    recipe.write_text(TINY)
    code = cli.main(["compare", str(recipe), "--frameworks", "reference", "--out", str(tmp_path / "c"),
                     "--set", "optimizer=reference.NoSuchOptimizer", "--no-plots"])
    captured = capsys.readouterr()
    assert code == 1
    assert "[reference] FAILED (exit status 2)" in captured.out
    assert "has no native optimizer 'NoSuchOptimizer'" in captured.err
    assert (tmp_path / "c" / "reference.stderr.log").exists()  # beside the folder: no earlier set is touched
    assert not (tmp_path / "c" / "reference").exists()


def test_runs_over_seeds_score_time_to_accuracy_like_mlperf(tmp_path, capsys):
    recipe = tmp_path / "tiny.py"
    recipe.write_text(TINY)
    out = tmp_path / "seeds"
    code = cli.main(["compare", str(recipe), "--frameworks", "reference", "--runs", "3", "--seed", "5", "--out",
                     str(out), "--format", "csv", "--no-plots"])
    text = capsys.readouterr().out
    assert code == 0
    times = []
    for seed in (5, 6, 7):
        data = read_results(out / "reference" / f"seed-{seed}" / "results.json")
        assert data["seeds"]["run"] == seed
        times.append(data["summaries"]["time_to_accuracy"]["seconds"])
    assert all(t is not None for t in times)
    rows = _csv_rows(text[text.index("framework,runs"):].split("\n\n")[0])
    (row,) = rows
    assert row["runs"] == "3"
    # MLPerf's score: drop the fastest and the slowest, the mean of the rest (of three: the middle one)
    assert float(row["time to 20% score (s)"]) == pytest.approx(sorted(times)[1])
    assert cli.main(["compare", str(recipe), "--frameworks", "reference", "--runs", "2"]) == 2
    assert "at least 3" in capsys.readouterr().err


def test_time_to_accuracy_leaves_compilation_out():
    from deep500lite.metrics.training import TimeToAccuracy

    class Executor:
        compile_seconds = 2.0

    class Trainer:
        executor = Executor()

    class Stats:
        epochs = [{"test_accuracy": 50.0, "elapsed": 3.0}, {"test_accuracy": 95.0, "elapsed": 9.5}]

    metric = TimeToAccuracy(90)
    trainer, stats = Trainer(), Stats()
    metric.before_training(trainer, stats)  # 2 s compiled before training: initialisation
    trainer.executor.compile_seconds = 5.0  # 3 s more compiled during training
    metric.after_epoch(trainer, stats, 1)
    assert metric.wall_seconds == 9.5 and metric.compile_seconds == 3.0 and metric.seconds == 6.5
