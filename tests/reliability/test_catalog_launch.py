"""Bad-input catalog, part D: multi-rank commands (``launch``, ``run -n``, ``bench allreduce``), the other
benchmarks (``bench overhead|op|zoo``) and the performance models (``model scaling|allreduce``).

Every case runs the CLI in this process and starts no MPI job: each mistake is caught before any
rank starts. Each asserts exit status 2, one clean line, and that the line names the argument and
the value received. The cases where a job really starts (a rank that never reaches MPI
initialisation, a job timeout) are in ``test_hangs.py``.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from catalog_support import cli_error

RECIPE = "digits_mlp_distributed"  # a bundled recipe with a 'distributed' component


@pytest.fixture()
def files(tmp_path, monkeypatch):
    """A working folder with a script, a non-ONNX .onnx file and a few JSON files that are not what is asked."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DEEP500LITE_JOB_TIMEOUT", raising=False)
    monkeypatch.delenv("DEEP500LITE_STARTUP_TIMEOUT", raising=False)
    (tmp_path / "ok.py").write_text("print('never run')\n")
    (tmp_path / "garbage.onnx").write_bytes(b"this is not a protobuf\xff\x00")
    (tmp_path / "list.json").write_text(json.dumps([1, 2]))
    (tmp_path / "empty.json").write_text("{}")
    (tmp_path / "notjson.json").write_text("not json at all")
    return tmp_path


def _case(argv, *needles, id):
    return pytest.param(tuple(argv.split()) if isinstance(argv, str) else tuple(argv), needles, id=id)


LAUNCH = [
    _case("launch -n 2 nothere.py", "nothere.py", "no rank was started", id="launch-missing-script"),
    _case("launch -n 2 -- -m no_such_module_d5", "no_such_module_d5", "cannot find the module",
          id="launch-missing-module"),
    _case("launch -n 2 -- no_such_program_d5 --flag", "no_such_program_d5", "not an executable",
          id="launch-missing-program"),
    _case("launch -n 2 -- python9.9 ok.py", "python9.9", "Python interpreter", id="launch-missing-interpreter"),
    _case([*"launch -n 2 --".split(), sys.executable, "missing_too.py"], "missing_too.py",
          id="launch-interpreter-with-missing-script"),
    _case([*"launch -n 2 --".split(), sys.executable, "-m"], "-m", "module", id="launch-dash-m-without-module"),
    _case("launch -n 2", "needs a command", "Received: no command", id="launch-no-command"),
    _case("launch -n 0 ok.py", "-n/--ranks", "'0'", id="launch-zero-ranks"),
    _case("launch -n -1 ok.py", "-n/--ranks", "'-1'", id="launch-negative-ranks"),
    _case("launch -n two ok.py", "-n/--ranks", "'two'", id="launch-ranks-not-a-number"),
    _case("launch -n 100000 ok.py", "-n 100000", "--oversubscribe", id="launch-more-ranks-than-sensible"),
    _case("launch -n 2 --timeout -1 ok.py", "--timeout", "'-1'", id="launch-negative-timeout"),
    _case("launch -n 2 --timeout nan ok.py", "--timeout", "'nan'", id="launch-nan-timeout"),
    _case("launch -n 2 --startup-timeout 0 ok.py", "--startup-timeout", "'0'", id="launch-zero-startup-timeout"),
    _case("launch -n 2 --comm-timeout inf ok.py", "--comm-timeout", "'inf'", id="launch-infinite-comm-timeout"),
    _case("launch -n 2 --mpiexec /no/such/mpiexec ok.py", "--mpiexec", "/no/such/mpiexec",
          id="launch-mpiexec-not-executable"),
]

RUN_N = [
    _case(f"run {RECIPE} -n 0", "-n/--ranks", "'0'", id="run-n-zero-ranks"),
    _case(f"run {RECIPE} -n -2", "-n/--ranks", "'-2'", id="run-n-negative-ranks"),
    _case(f"run {RECIPE} -n 100000", "-n/--ranks 100000", "--oversubscribe", id="run-n-more-ranks-than-sensible"),
    _case(f"run {RECIPE} -n 2 --timeout 0", "--timeout", "'0'", id="run-n-zero-timeout"),
    _case(f"run {RECIPE} -n 2 --startup-timeout nan", "--startup-timeout", "'nan'", id="run-n-nan-startup-timeout"),
    _case(f"run {RECIPE} -n 2 --mpiexec /no/such/mpiexec", "--mpiexec", "/no/such/mpiexec",
          id="run-n-mpiexec-not-executable"),
    _case(f"run {RECIPE} -n 2 --plots", "--plots", "-n 2", id="run-n-with-single-rank-only-flag"),
]

ALLREDUCE = [
    _case("bench allreduce -n 1", "2 ranks", "1", id="allreduce-one-rank"),
    _case("bench allreduce -n 0", "-n/--ranks", "'0'", id="allreduce-zero-ranks"),
    _case("bench allreduce -n 100000", "-n 100000", "--oversubscribe", id="allreduce-more-ranks-than-sensible"),
    _case("bench allreduce --min-bytes abc", "size", "'abc'", id="allreduce-size-not-a-number"),
    _case("bench allreduce --min-bytes 3", "--min-bytes", "a multiple of 4", "'3'",
          id="allreduce-size-not-float32-multiple"),
    _case("bench allreduce --min-bytes 64 --max-bytes 8", "--min-bytes", "--max-bytes 8",
          id="allreduce-min-above-max"),
    _case("bench allreduce --factor 1", "factor", "1", id="allreduce-factor-one"),
    _case("bench allreduce --algorithms ring,bogus", "ring", "bogus", id="allreduce-unknown-algorithm"),
    _case("bench allreduce --max-time inf", "--max-time", "inf", id="allreduce-infinite-max-time"),
    _case("bench allreduce --timeout 0", "--timeout", "'0'", id="allreduce-zero-comm-timeout"),
    _case("bench allreduce --job-timeout -1", "--job-timeout", "'-1'", id="allreduce-negative-job-timeout"),
    _case("bench allreduce --model notjson.json", "--model", "notjson.json", id="allreduce-model-not-json"),
    _case("bench allreduce --model list.json", "--model", "list.json", id="allreduce-model-not-a-model"),
    _case("bench allreduce --model nothere.json", "calibration file", "nothere.json", id="allreduce-model-missing"),
    _case("bench allreduce --model empty.json --save-model out.json", "--save-model", "empty.json",
          id="allreduce-model-with-save-model"),
    _case("bench allreduce --format xml", "--format", "'xml'", id="allreduce-unknown-format"),
]

BENCH = [
    _case("bench overhead", "--framework", "Received: neither", id="overhead-no-framework"),
    _case("bench overhead --framework torch --max-time nan", "--max-time", "'nan'", id="overhead-nan-max-time"),
    _case("bench overhead --framework nosuch", "framework", "'nosuch'", id="overhead-unknown-framework"),
    _case("bench overhead --framework torch --models lenet,foo", "model", "foo", id="overhead-unknown-model"),
    _case("bench overhead --framework torch --batch-size 100000000", "--batch-size 100000000", "bytes",
          id="overhead-batch-beyond-memory"),
    _case("bench overhead --op --op-kinds rust", "--op-kinds", "'rust'", id="overhead-unknown-op-kind"),
    _case("bench overhead --framework tensorflow --device gpu:0", "torch', 'jax' only", "--framework tensorflow",
          id="overhead-gpu-unsupported-framework"),
    _case("bench overhead --framework torch --device xpu", "--device", "'xpu'", id="overhead-bad-device"),
    _case("bench overhead --all --device gpu:0", "--device", "--all", id="overhead-device-with-all"),
    _case("bench op --suite foo", "--suite", "'foo'", id="op-unknown-suite"),
    _case("bench op --size huge", "--size", "'huge'", id="op-unknown-size"),
    _case("bench op --device tpu", "device", "'tpu'", id="op-unknown-device"),
    _case("bench op --max-time -1", "--max-time", "'-1'", id="op-negative-max-time"),
    _case("bench op --custom-op x:y", "--custom-op", "--suite", id="op-custom-op-without-custom-suite"),
    _case("bench zoo --device tpu", "--device", "'tpu'", id="zoo-unknown-device"),
    _case("bench zoo --format xml", "--format", "'xml'", id="zoo-unknown-format"),
    _case("bench nosuch", "BENCHMARK", "'nosuch'", id="bench-unknown-benchmark"),
]

MODEL = [
    _case("model scaling resnet51", "MODEL_OR_RECIPE", "resnet50", "'resnet51'", id="scaling-unknown-network"),
    _case("model scaling resnet50 --network foo", "--network", "edr-ib", "'foo'", id="scaling-unknown-interconnect"),
    _case("model scaling resnet50 --network nan,1e9", "--network", "alpha", "nan", id="scaling-nan-alpha"),
    _case("model scaling resnet50 --network 1e-6,inf", "--network", "bandwidth", "inf",
          id="scaling-infinite-bandwidth"),
    _case("model scaling resnet50 --intra foo", "--intra", "pcie3", "'foo'", id="scaling-unknown-intra-link"),
    _case("model scaling resnet50 --accelerator tpu", "--accelerator", "v100", "'tpu'",
          id="scaling-unknown-accelerator"),
    _case("model scaling resnet50 --accelerator inf,1e9", "--accelerator", "FLOP/s", "inf",
          id="scaling-infinite-flops"),
    _case("model scaling resnet50 --nodes 8..2", "--nodes", "'8..2'", id="scaling-reversed-node-range"),
    _case("model scaling resnet50 --nodes 0", "--nodes", "'0'", id="scaling-zero-nodes"),
    _case("model scaling resnet50 --batch nan", "--batch", "nan", id="scaling-nan-batch"),
    _case("model scaling resnet50 --batch inf", "--batch", "inf", id="scaling-infinite-batch"),
    _case("model scaling resnet50 --fusion-mb -1", "--fusion-mb", "-1", id="scaling-negative-fusion"),
    _case("model scaling resnet50 --min-efficiency 50", "--min-efficiency", "50", id="scaling-efficiency-as-percent"),
    _case("model scaling resnet50 --min-gain nan", "--min-gain", "nan", id="scaling-nan-min-gain"),
    _case("model scaling resnet50 --per-node 0", "--per-node", "0", id="scaling-zero-per-node"),
    _case("model scaling resnet50 --algorithm foo", "ring", "'foo'", id="scaling-unknown-algorithm"),
    _case("model scaling resnet50 --io bad", "--io", "'bad'", id="scaling-unknown-io-pattern"),
    _case("model scaling resnet50 --measured-step nan", "--measured-step", "nan", id="scaling-nan-measured-step"),
    _case("model scaling garbage.onnx", "garbage.onnx", "ONNX", id="scaling-onnx-file-not-onnx"),
    _case("model scaling nothere.onnx", "ONNX file", "nothere.onnx", id="scaling-onnx-file-missing"),
    _case("model scaling resnet50 --io-from list.json", "--io-from", "list.json", id="scaling-io-from-wrong-json"),
    _case("model scaling resnet50 --allreduce-model empty.json", "--allreduce-model", "empty.json",
          id="scaling-allreduce-model-not-a-model"),
    _case("model allreduce --nodes 1", "--nodes", "1", id="allreduce-model-one-node"),
    _case("model allreduce --gamma nan", "--gamma", "nan", id="allreduce-model-nan-gamma"),
    _case("model allreduce --min-bytes -4", "size", "'-4'", id="allreduce-model-negative-size"),
    _case("model allreduce --network foo", "--network", "'foo'", id="allreduce-model-unknown-interconnect"),
]


@pytest.mark.parametrize("argv, needles", LAUNCH + RUN_N + ALLREDUCE + BENCH + MODEL)
def test_catalog_multi_rank_and_bench(files, argv, needles):
    line = cli_error(*argv, needles=needles)
    # The command is named as the user typed it (launch once printed "deep500lite ['x.py']: error:").
    assert line.startswith(f"deep500lite {argv[0]}"), line
    assert not list(files.glob("d5-results")), "a refused command created a results folder"


@pytest.mark.parametrize("command", [
    pytest.param(("launch", "-n", "2", "ok.py"), id="launch"),
    pytest.param(("run", RECIPE, "-n", "2"), id="run-n"),
    pytest.param(("bench", "allreduce", "-n", "2"), id="bench-allreduce"),
])
@pytest.mark.parametrize("variable, value", [
    pytest.param("DEEP500LITE_STARTUP_TIMEOUT", "soon", id="startup-timeout-env-not-a-number"),
    pytest.param("DEEP500LITE_JOB_TIMEOUT", "-5", id="job-timeout-env-negative"),
])
def test_catalog_timeout_environment_variables(files, monkeypatch, command, variable, value):
    monkeypatch.setenv(variable, value)
    cli_error(*command, needles=(variable, repr(value)))


@pytest.mark.parametrize("command", [
    pytest.param(("launch", "-n", "2", "ok.py"), id="launch"),
    pytest.param(("run", RECIPE, "-n", "2"), id="run-n"),
    pytest.param(("bench", "allreduce", "-n", "2"), id="bench-allreduce"),
])
def test_catalog_no_mpiexec_anywhere(files, monkeypatch, command):
    from deep500lite.lv3 import launch

    monkeypatch.setattr(launch.sys, "executable", os.path.join(str(files), "bin", "python"))
    monkeypatch.setenv("PATH", str(files / "empty-path"))
    cli_error(*command, needles=("needs mpiexec", "--mpiexec", "nor on PATH"))
