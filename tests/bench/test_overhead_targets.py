"""``deep500lite bench overhead --all``: the rows, their verdicts and the refusals.

Nothing here asserts a time: the measuring functions are replaced where a row's structure is
checked, and the real ones are run by the benchmark command itself.
"""

import json

import pytest

from deep500lite.bench import targets
from deep500lite.bench.targets import TARGETS, TRAINING_ROWS, TargetRow, run_all_targets
from deep500lite.errors import UserError
from support import run_cli


def test_verdict_follows_the_ci_and_the_median():
    def row(median, low, high):
        return TargetRow("inference", "x", median, low, high, 1.02, "ratio")

    assert row(1.0, 0.99, 1.02).verdict == "meets"
    assert row(1.01, 1.0, 1.03).verdict == "likely"
    assert row(1.03, 1.025, 1.04).verdict == "misses"
    assert row(None, None, None).verdict == "error"
    assert TargetRow("gradient-check", "g", 0.019, 0.018, 0.021, 0.020, "s").verdict == "likely"
    assert row(1.0, 0.99, 1.02).to_dict()["verdict"] == "meets"


def test_every_target_has_a_row_and_failures_say_why(monkeypatch):
    import deep500lite.bench.overhead as overhead

    def refuse(framework, *args, **kwargs):
        raise UserError(f"no {framework} here. Received: {framework!r}")

    monkeypatch.setattr(overhead, "run_overhead", refuse)
    monkeypatch.setattr(targets, "_against_torch", lambda fw, *a: refuse(fw))
    monkeypatch.setattr(targets, "_against_torch_native", lambda fw, *a: refuse(fw))
    monkeypatch.setattr(targets, "_gradient_check_row", lambda max_time: refuse("gradcheck"))
    monkeypatch.setattr("deep500lite.registry.is_framework_available", lambda fw: True)
    rows = run_all_targets(models=("lenet", "resnet20"))
    training = [f"{fw} {m} training step" for m in ("lenet", "resnet20")
                for fw in ("torch", "tensorflow", "jax", "onnxruntime")]
    assert [r.what.split(" vs ")[0] for r in rows] == (
        [f"{fw} LeNet inference" for fw in ("torch", "tensorflow", "onnxruntime")] + training
        + ["onnxruntime resnet20 training step", "reference lenet training step", "test_op_gradient"])
    assert [r.target for r in rows] == ["inference"] * 3 + ["training"] * 8 + [
        "onnxruntime-training", "reference-training", "gradient-check"]
    assert {r.target for r in rows} == set(TARGETS)
    assert all(r.verdict == "error" and "not measured: UserError: no " in r.note for r in rows)
    assert [r.limit for r in rows[:3]] == [1.02] * 3 and rows[-1].limit == 0.020
    assert {r.limit for r in rows if r.target == "training"} == {1.03}
    # Every executor's row names the loop it is compared with.
    assert [r.what.split(" vs ")[1] for r in rows[3:7]] == [loop for _, loop in TRAINING_ROWS]
    json.dumps([r.to_dict() for r in rows])
    # LeNet only: no ResNet-20 rows (ONNX Runtime's target against the torch executor is on ResNet-20).
    short = run_all_targets(models=("lenet",))
    assert [r.target for r in short] == ["inference"] * 3 + ["training"] * 4 + ["reference-training",
                                                                               "gradient-check"]


def test_a_framework_that_is_not_installed_gets_an_error_row(monkeypatch):
    import deep500lite.bench.overhead as overhead

    def measured(framework, *args, **kwargs):
        raise AssertionError(f"{framework} is not installed and must not be timed")

    monkeypatch.setattr(overhead, "run_overhead", measured)
    monkeypatch.setattr(targets, "_against_torch", measured)
    monkeypatch.setattr(targets, "_against_torch_native", measured)
    monkeypatch.setattr("deep500lite.registry.is_framework_available", lambda fw: False)
    rows = run_all_targets(models=("lenet",), max_time=0.05)[:-1]  # the gradient check needs no framework
    assert len(rows) == 8 and all(r.verdict == "error" and "not installed" in r.note for r in rows)


def test_unknown_models_are_refused():
    with pytest.raises(UserError, match=r"--models must name some of 'lenet', 'resnet20'. Received: 'vgg'"):
        run_all_targets(models=("vgg",))


def test_cli_all_refuses_framework_and_training():
    proc = run_cli("bench", "overhead", "--all", "--framework", "torch")
    assert proc.returncode == 2 and "leave out --framework and --training" in proc.stderr
    assert "Received: --framework='torch', --training=False" in proc.stderr
    proc = run_cli("bench", "overhead", "--all", "--models", "vgg")
    assert proc.returncode == 2 and "--models must name some of" in proc.stderr
    proc = run_cli("bench", "overhead", "--framework", "torch", "--threads", "1")
    assert proc.returncode == 2 and "--threads applies to bench overhead --all only" in proc.stderr


def test_threads_reach_the_same_framework_rows_only(monkeypatch):
    import contextlib

    import deep500lite.bench.overhead as overhead
    from deep500lite.errors import UserError as Refused

    seen = []

    @contextlib.contextmanager
    def fake_threads(framework, threads, notes):
        seen.append((framework, threads))
        notes.append(f"{framework} threads {threads}")
        yield

    def refuse(framework, *args, **kwargs):
        raise Refused(f"no {framework} here. Received: {framework!r}")

    monkeypatch.setattr(targets, "_framework_threads", fake_threads)
    monkeypatch.setattr(overhead, "run_overhead", refuse)
    monkeypatch.setattr(targets, "_against_torch", lambda fw, *a: refuse(fw))
    monkeypatch.setattr(targets, "_against_torch_native", lambda fw, *a: refuse(fw))
    monkeypatch.setattr(targets, "_gradient_check_row", lambda max_time: refuse("gradcheck"))
    monkeypatch.setattr("deep500lite.registry.is_framework_available", lambda fw: True)
    run_all_targets(models=("lenet",), threads=1)
    # In the order they run: every torch timing before TensorFlow starts.
    # The rows against the torch executor keep the defaults; torch's own loop against ONNX Runtime takes --threads.
    assert seen == [("torch", 1), ("torch", 1), ("torch", 1), ("jax", 1), ("torch", None),
                    ("tensorflow", 1), ("onnxruntime", 1), ("tensorflow", 1)]
