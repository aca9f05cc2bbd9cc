"""The CLI skeleton: env, list, infer; usage errors are one line, exit 2, no traceback."""

import numpy as np
import pytest

from conftest import run_cli


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
    _one_line_error(run_cli("infer", lenet_file, "--batch-size", "0"), "expected a positive integer, got '0'")


def test_cli_reference_documents_every_command_and_option():
    import argparse
    import os

    from conftest import REPO
    from deep500lite.cli import build_parser

    with open(os.path.join(REPO, "docs", "cli.md"), encoding="utf-8") as f:
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
