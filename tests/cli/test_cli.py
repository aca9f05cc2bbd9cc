"""The CLI skeleton: env, list, infer; the error policy (bad input: one line, exit 2; a bug: one line
"internal error", exit 1; --traceback shows the traceback); the shared integer argument types."""

import numpy as np
import pytest

from support import run_cli


def _one_line_error(proc, *fragments):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def test_no_subcommand_prints_help_and_exits_2():
    proc = run_cli()
    assert proc.returncode == 2
    assert "usage: deep500lite" in proc.stderr and "infer" in proc.stderr


def test_unknown_subcommand():
    _one_line_error(run_cli("frobnicate"), "invalid choice: 'frobnicate'", "'env', 'list', 'infer'")


def test_env_reports_versions_and_machine():
    proc = run_cli("env")
    assert proc.returncode == 0, proc.stderr
    for key in ("python", "numpy", "onnx", "framework torch", "framework tensorflow", "framework onnxruntime",
                "cpu", "gpu", "mpi"):
        assert any(line.startswith(key) for line in proc.stdout.splitlines()), key
    import json

    env = json.loads(run_cli("env", "--json").stdout)
    assert env["cpu"]["logical_cores"] >= 1 and env["packages"]["numpy"] == np.__version__
    try:  # x86 Linux lists the instructions on a "flags" line (other machines: no features reported)
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line for line in f if line.startswith("flags")), ":").split(":", 1)[1].split()
    except OSError:
        flags = []
    assert set(env["cpu"]["features"]) <= set(flags)
    assert ("avx2" in flags) == ("avx2" in env["cpu"]["features"])


def test_env_reports_the_variables_that_choose_cpu_kernels():
    import json

    settings = {"TF_ENABLE_ONEDNN_OPTS": "0", "OPENBLAS_CORETYPE": "Haswell"}
    proc = run_cli("env", env=settings)
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("cpu kernels"))
    assert "TF_ENABLE_ONEDNN_OPTS=0" in line and "OPENBLAS_CORETYPE=Haswell" in line, line
    env = json.loads(run_cli("env", "--json", env=settings).stdout)
    assert {k: v for k, v in env["cpu_kernels"].items() if k in settings} == settings


def test_list_names_everything():
    proc = run_cli("list")
    assert proc.returncode == 0
    for word in ("frameworks:", "reference", "torch", "datasets:", "digits", "networks:", "lenet", "recipes:"):
        assert word in proc.stdout
    assert run_cli("list", "networks").stdout.splitlines()[0] == "networks:"
    _one_line_error(run_cli("list", "models"), "invalid choice: 'models'")


def test_infer_reference_prints_outputs_and_latency(lenet_file):
    proc = run_cli("infer", lenet_file, "--framework", "reference", "--batch-size", "3", "--max-time", "0.2")
    assert proc.returncode == 0, proc.stderr
    assert "output output: float32[3, 10]" in proc.stdout
    assert "median latency" in proc.stdout and "95% CI" in proc.stdout


def test_infer_with_inputs_file(lenet_file, tmp_path):
    x = np.random.default_rng(0).standard_normal((2, 1, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", input=x)
    proc = run_cli("infer", lenet_file, "--inputs", tmp_path / "in.npz", "--max-time", "0.1")
    assert proc.returncode == 0, proc.stderr
    assert "output output: float32[2, 10]" in proc.stdout


def test_infer_missing_model(tmp_path):
    _one_line_error(run_cli("infer", tmp_path / "missing.onnx"), "missing.onnx' does not exist")


def test_infer_truncated_model(lenet_file, tmp_path):
    p = tmp_path / "cut.onnx"
    p.write_bytes(lenet_file.read_bytes()[:500])
    _one_line_error(run_cli("infer", p), "cut.onnx'", "truncated")


def test_infer_unknown_framework(lenet_file):
    _one_line_error(run_cli("infer", lenet_file, "--framework", "caffe"), "Unknown framework 'caffe'", "'onnxruntime'")


def test_infer_gpu_on_reference(lenet_file):
    _one_line_error(run_cli("infer", lenet_file, "--device", "gpu:0"), "cannot run on gpu:0")


def test_infer_bad_device_string(lenet_file):
    _one_line_error(run_cli("infer", lenet_file, "--device", "tpu"), "Device must be 'cpu', 'gpu' or 'gpu:N'")


@pytest.mark.parametrize("arrays,fragment", [
    ({"image": np.zeros((1, 1, 8, 8), np.float32)}, "Unknown input(s) ['image']"),
    ({"input": np.zeros((1, 1, 8, 8), np.float64)}, "must have dtype float32. Received: float64"),
    ({"input": np.zeros((1, 8, 8), np.float32)}, "must have shape [?, 1, 8, 8]. Received: [1, 8, 8]"),
])
def test_infer_bad_inputs_file(lenet_file, tmp_path, arrays, fragment):
    np.savez(tmp_path / "in.npz", **arrays)
    _one_line_error(run_cli("infer", lenet_file, "--inputs", tmp_path / "in.npz"), fragment)


def test_infer_inputs_not_npz(lenet_file, tmp_path):
    (tmp_path / "in.npz").write_text("not numpy")
    _one_line_error(run_cli("infer", lenet_file, "--inputs", tmp_path / "in.npz"), "is not a readable .npz file")
    _one_line_error(run_cli("infer", lenet_file, "--inputs", tmp_path / "nothere.npz"), "does not exist")


def test_infer_bad_batch_size(lenet_file):
    _one_line_error(run_cli("infer", lenet_file, "--batch-size", "0"),
                    "argument --batch-size: must be a positive integer (1, 2, 3, ...). Received: '0'")


def _raising(exc):
    def run(args):
        raise exc
    return run


def test_a_deep500error_from_a_subcommand_is_one_line_and_exit_2(monkeypatch, capsys):
    from deep500lite import cli
    from deep500lite.cli import env_cmd
    from deep500lite.errors import FrameworkNotAvailableError, UserError

    monkeypatch.delenv("DEEP500LITE_TRACEBACK", raising=False)
    monkeypatch.setattr(env_cmd, "run", _raising(UserError("x must be 1. Received: 2")))
    assert cli.main(["env"]) == 2
    assert capsys.readouterr().err.splitlines() == ["deep500lite env: error: x must be 1. Received: 2"]
    # Not only UserError: every Deep500Error is the user's to act on (here, install a package).
    monkeypatch.setattr(env_cmd, "run", _raising(FrameworkNotAvailableError("needs torch: pip install x")))
    assert cli.main(["env"]) == 2
    assert capsys.readouterr().err.splitlines() == ["deep500lite env: error: needs torch: pip install x"]


def test_a_multi_line_error_shows_its_first_line(monkeypatch, capsys):
    from deep500lite import cli
    from deep500lite.cli import env_cmd
    from deep500lite.errors import CompilationError

    monkeypatch.delenv("DEEP500LITE_TRACEBACK", raising=False)
    exc = CompilationError("Compiling C++ operator 'op' from op.cpp failed: op.cpp:3: error: expected ';'\n"
                           "  op.cpp:3 | int x\nCommand: g++ op.cpp\nCompiler output:\nop.cpp:3: error: expected ';'",
                           source_path="op.cpp", line=3, command=["g++", "op.cpp"], compiler_output="...")
    monkeypatch.setattr(env_cmd, "run", _raising(exc))
    assert cli.main(["env"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["deep500lite env: error: Compiling C++ operator 'op' from op.cpp failed: op.cpp:3: error: "
                     "expected ';' [4 more line(s): rerun with --traceback]"]


@pytest.mark.parametrize("exc", [KeyError("learning_rate"), ValueError("bad"), TypeError("bad"),
                                 FileNotFoundError(2, "No such file")], ids=lambda e: type(e).__name__)
def test_any_other_exception_is_an_internal_error_exit_1(monkeypatch, capsys, exc):
    from deep500lite import cli
    from deep500lite.cli import list_cmd

    monkeypatch.delenv("DEEP500LITE_TRACEBACK", raising=False)
    monkeypatch.setattr(list_cmd, "run", _raising(exc))
    assert cli.main(["list"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"deep500lite list: internal error: {type(exc).__name__}: ")
    assert "--traceback" in lines[0] and "Traceback" not in lines[0]


def test_traceback_flag_and_variable_show_the_traceback(monkeypatch, capsys):
    from deep500lite import cli
    from deep500lite.cli import env_cmd
    from deep500lite.errors import UserError

    monkeypatch.delenv("DEEP500LITE_TRACEBACK", raising=False)
    monkeypatch.setattr(env_cmd, "run", _raising(KeyError("learning_rate")))
    assert cli.main(["--traceback", "env"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "KeyError: 'learning_rate'" in err
    assert "internal error" not in err
    monkeypatch.setattr(env_cmd, "run", _raising(UserError("x must be 1. Received: 2")))
    monkeypatch.setenv("DEEP500LITE_TRACEBACK", "1")
    assert cli.main(["env"]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last):" in err and "UserError: x must be 1. Received: 2" in err


def test_internal_error_from_a_fresh_process(tmp_path):
    # The console entry point returns main()'s status: a subcommand that crashes exits 1, not 2.
    script = tmp_path / "crash.py"
    script.write_text("import sys\nfrom deep500lite import cli\nfrom deep500lite.cli import env_cmd\n"
                      "env_cmd.run = lambda args: {}['missing']\nsys.exit(cli.main(['env']))\n")
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "deep500lite env: internal error: KeyError: 'missing' (rerun with --traceback for details)"]


@pytest.mark.parametrize("text,value", [("1", 1), ("12", 12), (" 3 ", 3)])
def test_positive_int_accepts(text, value):
    from deep500lite.cli.args import positive_int

    assert positive_int(text) == value


@pytest.mark.parametrize("text", ["0", "-2", "1.5", "two", ""])
def test_positive_int_refuses_with_one_wording(text):
    import argparse

    from deep500lite.cli.args import positive_int

    with pytest.raises(argparse.ArgumentTypeError) as err:
        positive_int(text)
    assert str(err.value) == f"must be a positive integer (1, 2, 3, ...). Received: {text!r}"


def test_nonnegative_int():
    import argparse

    from deep500lite.cli.args import nonnegative_int

    assert nonnegative_int("0") == 0 and nonnegative_int("7") == 7
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be an integer >= 0 \(0, 1, 2, ...\). Received: '-1'"):
        nonnegative_int("-1")


def test_cli_has_one_integer_type():
    """The subcommands use cli.args' integer types, not validators of their own."""
    import os
    import re

    from deep500lite import cli

    folder = os.path.dirname(cli.__file__)
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py") and name != "args.py":
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                source = f.read()
            assert not re.search(r'ArgumentTypeError\(f?"[^"]*\binteger\b', source), name


def test_cli_reference_documents_every_command_and_option(repo_root):
    import argparse
    import os

    from deep500lite.cli import build_parser

    with open(os.path.join(repo_root, "docs", "cli.md"), encoding="utf-8") as f:
        doc = f.read()

    def commands(parser, prefix):
        sub = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not sub:
            yield prefix, parser
        for action in sub:
            for name, p in action.choices.items():
                yield from commands(p, f"{prefix} {name}")

    found = list(commands(build_parser(), "deep500lite"))
    assert len(found) >= 4
    for name, p in found:
        assert f"## `{name}`" in doc, name
        for action in p._actions:
            if action.help == argparse.SUPPRESS:  # internal options (run --rank-job) are not for users
                continue
            for opt in action.option_strings:
                if opt not in ("-h", "--help"):
                    assert f"`{opt}`" in doc, f"{name} {opt}"
