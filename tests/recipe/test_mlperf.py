"""MLPerf training logs checked by MLCommons' own compliance checker (the mlperf-logging package).

The bundled digits_lenet recipe runs with ``--mllog``; the log must pass
``mlperf_logging.compliance_checker``'s training rules of the current ruleset, and a log that
breaks a rule must fail it (the check is not vacuous).
"""

from __future__ import annotations

import json

import pytest

from deep500lite import cli
from deep500lite.recipe.mlperf import RULESET, check_log, mlperf_score, ruleset_benchmarks, submission_fields

pytest.importorskip("mlperf_logging")


def _records(path):
    return [json.loads(line.split(" ", 1)[1]) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def bundled_log(tmp_path_factory):
    """The MLPerf log of the bundled digits_lenet recipe (onnxruntime when installed, else the reference)."""
    from deep500lite.registry import is_framework_available

    out = tmp_path_factory.mktemp("mllog") / "run"
    fw = "onnxruntime" if is_framework_available("onnxruntime") else "reference"
    code = cli.main(["run", "digits_lenet", "--set", f"executor={fw}", "--out", str(out), "--mllog",
                     "--progress", "none", "--mlperf", "org=deep500lite tests", "--mlperf", "platform=CI machine"])
    assert code == 0
    return out / "mllog.log"


def test_bundled_recipe_log_passes_the_compliance_checker(bundled_log, capsys):
    report = check_log(bundled_log)
    assert report.passed, report.messages
    assert report.ruleset == RULESET and report.rules == "common"
    keys = [r["key"] for r in _records(bundled_log)]
    # initialisation before the run, the submission fields, the cache line
    assert keys[0] == "init_start" and keys.index("init_stop") < keys.index("run_start") < keys.index("epoch_start")
    records = {r["key"]: r for r in _records(bundled_log)}
    assert records["submission_org"]["value"] == "deep500lite tests"
    assert records["submission_platform"]["value"] == "CI machine"
    assert records["submission_division"]["value"] == "open" and "cache_clear" in records
    assert records["submission_benchmark"]["value"] == "digits_lenet"
    assert [r["metadata"]["epoch_num"] for r in _records(bundled_log) if r["key"] == "eval_accuracy"] == [1, 2, 3, 4]


def test_a_broken_log_fails_the_checker(bundled_log, tmp_path):
    lines = bundled_log.read_text().splitlines()
    broken = tmp_path / "broken.log"
    broken.write_text("\n".join(line for line in lines if '"key": "init_stop"' not in line) + "\n")
    report = check_log(broken)
    assert not report.passed and any("init_stop" in m for m in report.messages)
    swapped = tmp_path / "swapped.log"  # run_start before init_stop breaks the start/stop order
    keys = [json.loads(line.split(" ", 1)[1])["key"] for line in lines]
    i, j = keys.index("init_stop"), keys.index("run_start")
    lines[i], lines[j] = lines[j], lines[i]
    swapped.write_text("\n".join(lines) + "\n")
    assert not check_log(swapped).passed


def test_a_declared_mlperf_benchmark_gets_its_benchmark_rules(bundled_log, tmp_path):
    # a recipe that says it is MLPerf's flux1 is held to flux1's rules (a validation loss it never logs)
    assert "flux1" in ruleset_benchmarks()
    text = bundled_log.read_text().replace('"value": "digits_lenet"', '"value": "flux1"')
    log = tmp_path / "flux1.log"
    log.write_text(text)
    report = check_log(log)
    assert report.rules == "benchmark" and not report.passed
    assert any("averaged_validation_loss" in m for m in report.messages)


def test_the_run_prints_the_checkers_verdict(tmp_path, capsys):
    code = cli.main(["run", "digits_lenet", "--set", "executor=reference", "--set", "batch_size=512", "--out",
                     str(tmp_path / "r"), "--mllog", "--progress", "none"])
    out = capsys.readouterr().out
    assert code in (0, 1)
    assert f"MLPerf compliance (mlperf_logging, training {RULESET}, common rules): passed" in out


@pytest.mark.requires("jax")
def test_compilation_is_initialisation_and_left_out_of_time_to_accuracy(tmp_path, capsys):
    from deep500lite.recipe.results import read_results

    code = cli.main(["run", "digits_lenet", "--set", "executor=jax", "--out", str(tmp_path / "j"), "--mllog",
                     "--progress", "lines"])
    out = capsys.readouterr().out
    assert code == 0
    records = _records(tmp_path / "j" / "mllog.log")
    init_stop = next(r for r in records if r["key"] == "init_stop")
    run_stop = next(r for r in records if r["key"] == "run_stop")
    assert init_stop["metadata"]["compile_seconds"] > 0  # jax.jit compiled before run_start
    assert run_stop["metadata"]["compile_seconds_in_run"] == 0
    assert "compiling the training function (jax" in out and "compiled the training function (jax) in" in out
    assert out.index("compiled the training function") < out.index("epoch 1/4")
    data = read_results(tmp_path / "j" / "results.json")
    tta = data["summaries"]["time_to_accuracy"]
    assert check_log(tmp_path / "j" / "mllog.log").passed
    assert data["compile_seconds"] >= init_stop["metadata"]["compile_seconds"]
    if tta["seconds"] is not None:
        assert tta["seconds"] == pytest.approx(tta["wall_seconds"] - tta["compile_seconds"])


def test_mlperf_score_drops_the_fastest_and_slowest():
    assert mlperf_score([5.0, 1.0, 3.0, 9.0, 4.0]) == pytest.approx(4.0)  # mean of 3, 4, 5
    assert mlperf_score([2.0, None, 4.0, 6.0]) == pytest.approx(5.0)  # the miss counts as the slowest
    assert mlperf_score([2.0, None, None, 6.0]) is None  # two misses: no score
    assert mlperf_score([1.0, 2.0]) is None


def test_submission_fields_are_checked():
    from deep500lite.errors import UserError

    assert submission_fields({"org": "A"}, {"division": "closed"}, "r")["org"] == "A"
    with pytest.raises(UserError, match="division must be one of"):
        submission_fields(None, {"division": "secret"})
    with pytest.raises(UserError, match="unknown submission field 'orgg'"):
        submission_fields({"orgg": "x"})
    assert cli.main(["run", "digits_lenet", "--mlperf", "org=x"]) == 2  # --mlperf without --mllog
