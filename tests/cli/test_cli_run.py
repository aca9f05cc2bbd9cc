"""``deep500lite run``: exit status 0 / 1 / 2, --set, recipe files, --check-determinism, --mllog."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from deep500lite import cli
from deep500lite.recipe.results import read_results

TINY = """\
from deep500lite.metrics.training import TestAccuracy
FIXED = {{'dataset': 'digits', 'dataset_kwargs': dict(test_fraction=0.75), 'model': 'mlp',
          'model_kwargs': dict(hidden=(16,)), 'train_sampler': 'ShuffleSampler', 'epochs': 1}}
MUTABLE = {{'batch_size': 32, 'executor': 'reference', 'optimizer': 'MomentumOptimizer',
           'optimizer_kwargs': dict(learning_rate=0.1, momentum=0.9)}}
METRICS = [(TestAccuracy(), {threshold})]
"""


@pytest.fixture(autouse=True)
def commands(monkeypatch):
    """The run, compare and report subcommands (a no-op once deep500lite.cli lists them)."""
    wanted = tuple(c for c in ("run", "compare", "report") if c not in cli.SUBCOMMANDS)
    monkeypatch.setattr(cli, "SUBCOMMANDS", cli.SUBCOMMANDS + wanted)


def recipe_file(tmp_path, threshold=10, name="tiny.py", extra=""):
    path = tmp_path / name
    path.write_text(TINY.format(threshold=threshold) + extra)
    return path


def run(capsys, *args):
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line_error(code, err, *fragments):
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for f in fragments:
        assert f in lines[0], lines[0]


def test_exit_0_when_every_metric_holds(tmp_path, capsys):
    code, out, _ = run(capsys, "run", recipe_file(tmp_path), "--out", tmp_path / "out")
    assert code == 0
    assert "TestAccuracy: measured " in out and "required >= 10.00% (higher is better): PASS" in out
    data = read_results(tmp_path / "out" / "results.json")
    assert data["passed"] is True and data["framework"] == "reference"
    assert f"results: {tmp_path / 'out' / 'results.json'}" in out


def test_exit_1_when_a_metric_fails_and_says_why(tmp_path, capsys):
    code, out, _ = run(capsys, "run", recipe_file(tmp_path, threshold=100), "--out", tmp_path / "out")
    assert code == 1
    line = next(ln for ln in out.splitlines() if ln.startswith("TestAccuracy:"))
    measured = read_results(tmp_path / "out" / "results.json")["verdicts"][0]["measured"]
    assert line == f"TestAccuracy: measured {measured:.2f}%, required >= 100.00% (higher is better): FAIL"


def test_set_of_a_fixed_key_is_a_usage_error(tmp_path, capsys):
    code, _, err = run(capsys, "run", recipe_file(tmp_path), "--set", "epochs=3")
    one_line_error(code, err, "'epochs' is a FIXED key", "'batch_size'", "'executor'")


def test_set_of_an_unknown_key_is_a_usage_error(tmp_path, capsys):
    code, _, err = run(capsys, "run", recipe_file(tmp_path), "--set", "learning_rate=3")
    one_line_error(code, err, "unknown key 'learning_rate'")
    code, _, err = run(capsys, "run", recipe_file(tmp_path), "--set", "batch_size")
    one_line_error(code, err, "--set takes key=value")


def test_set_values_are_literals_else_strings(tmp_path, capsys):
    code, out, _ = run(capsys, "run", recipe_file(tmp_path), "--out", tmp_path / "out", "--set", "batch_size=16",
                       "--set", "executor=reference", "--set", "optimizer_kwargs.learning_rate=0.05", "--seed", "4")
    assert code == 0, out
    data = read_results(tmp_path / "out" / "results.json")
    config = data["recipe"]["config"]
    assert config["batch_size"] == 16 and config["executor"] == "reference"
    assert config["optimizer_kwargs"] == {"learning_rate": 0.05, "momentum": 0.9}
    assert data["recipe"]["overrides"] == {"batch_size": 16, "executor": "reference",
                                           "optimizer_kwargs": {"learning_rate": 0.05, "momentum": 0.9}}
    assert data["samples"]["steps"][0]["samples"] == 16 and data["seeds"]["run"] == 4


def test_main_block_does_not_run(tmp_path, capsys):
    marker = tmp_path / "main-ran"
    path = recipe_file(tmp_path, extra=f"if __name__ == '__main__':\n    open({str(marker)!r}, 'w').close()\n")
    code, _, _ = run(capsys, "run", path, "--out", tmp_path / "out")
    assert code == 0 and not marker.exists()
    subprocess.run([sys.executable, str(path)], check=True)
    assert marker.exists()  # the block itself works: only the CLI skipped it


@pytest.mark.parametrize("text, fragments", [
    ("FIXED = {}\nMETRICS = []\n", ["does not define MUTABLE", "A recipe file defines FIXED"]),
    ("MUTABLE = {}\nMETRICS = []\n", ["does not define FIXED"]),
    ("FIXED = {'epochs': 1\n", ["syntax error at line 1"]),
    ("import no_such_module_d5\n", ["failed while loading (line 1): ModuleNotFoundError"]),
    ("FIXED = []\nMUTABLE = {}\nMETRICS = []\n", ["FIXED must be a dict"]),
])
def test_bad_recipe_files(tmp_path, capsys, text, fragments):
    path = tmp_path / "bad.py"
    path.write_text(text)
    code, _, err = run(capsys, "run", path)
    one_line_error(code, err, str(path), *fragments)


def test_missing_recipe_file(tmp_path, capsys):
    code, _, err = run(capsys, "run", tmp_path / "nope.py")
    one_line_error(code, err, "nope.py' does not exist", "'digits_lenet'")


def test_bad_seed_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["run", str(recipe_file(tmp_path)), "--seed", "-1"]) == 2
    assert "--seed: must be an integer from 0 to 4,294,967,295" in capsys.readouterr().err


def test_check_determinism(tmp_path, capsys):
    code, out, _ = run(capsys, "run", recipe_file(tmp_path), "--check-determinism", "--out", tmp_path / "out")
    assert code == 0, out
    assert "deterministic: 14 steps with bit-identical losses and parameters in both runs" in out
    data = read_results(tmp_path / "out" / "results.json")
    assert data["determinism"]["identical"] is True
    second = read_results(tmp_path / "out" / "second-run" / "results.json")
    assert [s["loss"] for s in second["samples"]["steps"]] == [s["loss"] for s in data["samples"]["steps"]]


def test_mllog_and_plots(tmp_path, capsys):
    code, out, _ = run(capsys, "run", recipe_file(tmp_path), "--out", tmp_path / "out", "--mllog", "--plots")
    assert code == 0
    lines = (tmp_path / "out" / "mllog.log").read_text().splitlines()
    assert json.loads(lines[-1][len(":::MLLOG "):])["key"] == "run_stop"
    for name in ("loss.png", "accuracy.png"):
        assert (tmp_path / "out" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_default_out_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "run", recipe_file(tmp_path, name="small.py"), "--progress", "none")
    assert code == 0
    assert os.path.isfile(tmp_path / "d5-results" / "small" / "reference" / "results.json")


@pytest.mark.requires("onnxruntime")
def test_default_out_folder_of_a_variant_is_its_own(tmp_path, capsys, monkeypatch):
    # A variant's run must not overwrite the plain framework's results: onnxruntime:O0 -> onnxruntime-O0.
    monkeypatch.chdir(tmp_path)
    path = recipe_file(tmp_path, name="small.py")
    for spelling in ("onnxruntime", "ort:o0"):
        code, _, _ = run(capsys, "run", path, "--progress", "none", "--set", f"executor={spelling}")
        assert code == 0
    plain = json.loads((tmp_path / "d5-results" / "small" / "onnxruntime" / "results.json").read_text())
    variant = json.loads((tmp_path / "d5-results" / "small" / "onnxruntime-O0" / "results.json").read_text())
    assert plain["executor_options"]["graph_optimization_level"] == "all"
    assert variant["executor_options"]["graph_optimization_level"] == "disabled"


def test_progress_lines_on_stdout(tmp_path, capsys):
    code, out, _ = run(capsys, "run", recipe_file(tmp_path), "--out", tmp_path / "o", "--progress", "lines")
    assert code == 0
    assert "training: 1 epochs x 14 steps" in out and "epoch 1/1  loss " in out


def test_the_worker_prints_usage_errors_in_one_line(tmp_path):
    """The recipe worker (what compare and run -n start) reports a bad --set as deep500lite run does."""
    path = recipe_file(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "deep500lite.recipe.worker", str(path), "--out", str(tmp_path / "o"),
                           "--set", "model=lenet"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "deep500lite run: error: Cannot set 'model': 'model' is a FIXED key of recipe 'tiny'; only mutable keys can "
        "be set: 'batch_size', 'executor', 'executor_args', 'executor_kwargs', 'optimizer', 'optimizer_args', "
        "'optimizer_kwargs'. Received: 'model'"]


def test_the_worker_prints_what_run_prints(tmp_path, capsys):
    """One run in a worker process: the same lines and exit status as deep500lite run, and a results file."""
    path = recipe_file(tmp_path, threshold=100)
    args = [str(path), "--progress", "lines", "--set", "batch_size=48"]
    proc = subprocess.run([sys.executable, "-m", "deep500lite.recipe.worker", *args, "--out", str(tmp_path / "w")],
                          capture_output=True, text=True, timeout=300)
    code, out, _ = run(capsys, "run", *args, "--out", tmp_path / "c")
    assert proc.returncode == code == 1, proc.stderr

    def lines(text, folder):
        # Epoch lines end with the elapsed time, which differs between runs.
        return [ln.rsplit("  ", 1)[0] if ln.startswith("epoch ") else ln.replace(str(tmp_path / folder), "OUT")
                for ln in text.splitlines()]

    assert lines(proc.stdout, "w") == lines(out, "c")
    assert lines(out, "c")[0] == "recipe tiny: reference, seed 0, set batch_size=48"
    assert read_results(tmp_path / "w" / "results.json")["passed"] is False


def test_run_has_no_hidden_options():
    """Internal jobs go to the recipe worker, so every option of deep500lite run is for users."""
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert [a.option_strings for a in sub.choices["run"]._actions if a.help == argparse.SUPPRESS] == []


@pytest.mark.parametrize("name, missing", [("mnist_lenet", "mnist/train-images-idx3-ubyte"),
                                           ("cifar10_resnet20", "cifar10/data_batch_1.bin")])
def test_bundled_recipe_without_its_files_says_where_to_put_them(tmp_path, capsys, monkeypatch, name, missing):
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    code, _, err = run(capsys, "run", name, "--out", tmp_path / "out")
    one_line_error(code, err, f"needs the file '{tmp_path / missing}'", "downloads nothing")
