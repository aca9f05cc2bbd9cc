"""``deep500lite report``: tables and plots re-rendered from results files."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from deep500lite import cli
from deep500lite.metrics.training import TestAccuracy
from deep500lite.recipe import resolve_recipe, train_recipe
from deep500lite.recipe.results import read_results


@pytest.fixture(autouse=True)
def commands(monkeypatch):
    """The run, compare and report subcommands (a no-op once deep500lite.cli lists them)."""
    wanted = tuple(c for c in ("run", "compare", "report") if c not in cli.SUBCOMMANDS)
    monkeypatch.setattr(cli, "SUBCOMMANDS", cli.SUBCOMMANDS + wanted)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Results files of two real runs: reference and onnxruntime on a small digits MLP."""
    folder = tmp_path_factory.mktemp("runs")
    fixed = {"dataset": "digits", "dataset_kwargs": dict(test_fraction=0.75), "model": "mlp",
             "model_kwargs": dict(hidden=(16,)), "epochs": 2}
    mutable = {"batch_size": 32, "executor": "reference", "optimizer": "MomentumOptimizer",
               "optimizer_kwargs": dict(learning_rate=0.1, momentum=0.9)}
    frameworks = ["reference"]
    from deep500lite.registry import is_framework_available

    if is_framework_available("onnxruntime"):
        frameworks.append("onnxruntime")
    for fw in frameworks:
        resolved = resolve_recipe(fixed, mutable, [(TestAccuracy(), 20)], overrides={"executor": fw})
        train_recipe(resolved, out=folder / fw, environment=False)
    return folder, frameworks


def test_report_csv_is_numbers_with_units_in_the_headers(two_runs, capsys):
    pandas = pytest.importorskip("pandas")
    folder, frameworks = two_runs
    files = [folder / fw / "results.json" for fw in frameworks]
    assert cli.main(["report", *map(str, files), "--format", "csv"]) == 0
    out = capsys.readouterr().out
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["framework"] for r in rows] == frameworks
    frame = pandas.read_csv(io.StringIO(out))
    unit = next(c for c in frame.columns if c.startswith("step median (")).split("(")[1].rstrip(")")
    scale = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[unit]
    for column in ("runs", "test acc (%)", "throughput (samples/s)", f"step median ({unit})",
                   f"step CI low ({unit})", f"step CI high ({unit})", "steps", "step IQR/median (%)",
                   "compile (s)", "peak memory (MiB)"):
        assert pandas.api.types.is_numeric_dtype(frame[column]), (column, frame[column].tolist())
    for i, path in enumerate(files):
        data = read_results(path)
        steps = [s["step_time"] for s in data["samples"]["steps"][1:]]
        assert frame["test acc (%)"][i] == pytest.approx(data["summaries"]["final_test_accuracy"])
        assert frame["runs"][i] == 1 and rows[i]["metrics"] == "pass"
        assert frame[f"step median ({unit})"][i] * scale == pytest.approx(float(np.median(steps)), rel=1e-9)
        assert frame["steps"][i] == len(steps)
        q1, q3 = np.percentile(steps, [25, 75])
        assert frame["step IQR/median (%)"][i] == pytest.approx((q3 - q1) / np.median(steps) * 100)
    for cell in out.splitlines()[1:]:  # no unit and no display mark inside any cell
        assert not any(mark in cell for mark in (" ms", " s,", "%", "(!", "[", "MiB"))


def test_report_text_table_has_one_unit_per_column_and_flags_noisy_rows(two_runs, capsys):
    from deep500lite.metrics.tables import NOISE_THRESHOLD
    from deep500lite.recipe.compare import compare_results
    from deep500lite.recipe.report import load_results

    folder, frameworks = two_runs
    assert cli.main(["report", str(folder)]) == 0
    text = capsys.readouterr().out
    header = text.splitlines()[0]
    assert "test acc (%)" in header and "peak memory (MiB)" in header and "compile (s)" in header
    rows = compare_results(load_results([folder]))["rows"]
    body = text.split("\n\n")[0].splitlines()[2:2 + len(rows)]
    for row, line in zip(rows, body):
        st = row["step_time"]
        noisy = (st["q3"] - st["q1"]) / st["median"] > NOISE_THRESHOLD
        assert ("(! " in line) == noisy, (line, st)
        assert " ms" not in line and "MiB" not in line  # the units are in the header
    assert ("(! XX%)" in text) == any("(! " in line for line in body)


def test_report_folder_markdown_and_plots(two_runs, capsys, tmp_path):
    folder, frameworks = two_runs
    assert cli.main(["report", str(folder), "--format", "markdown", "--plots", str(tmp_path / "plots")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("| framework") and lines[1].startswith("|---")
    assert sum(line.startswith("| ") for line in lines) == 1 + len(frameworks)
    if len(frameworks) > 1:
        assert "Mann-Whitney U against the fastest" in out
    for name in ("step_times.png", "loss.png", "accuracy.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:4] == b"\x89PNG"


def test_report_bad_inputs(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "missing.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "deep500lite-results", "samples": ')
    assert cli.main(["report", str(bad)]) == 2
    assert "is not valid JSON" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    assert cli.main(["report", str(other)]) == 2
    assert "is not a deep500lite results file" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli.main(["report", str(tmp_path / "empty")]) == 2
    assert "holds no results.json" in capsys.readouterr().err
