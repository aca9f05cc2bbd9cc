"""``deep500lite bench zoo``: the CI slice of the real-model zoo, run as a user runs it.

The slice (deep500lite.bench.zoo.CI_SLICE) covers each kind of architecture and each exporter:
a BatchNorm CNN and a depthwise one, a vision transformer, BERT and GPT-2, an LSTM, a Keras
MobileNetV2 through tf2onnx. Every cell must pass; docs/models.md holds the whole matrix.
"""

from __future__ import annotations

import json

import pytest

from deep500lite.bench.zoo import CI_SLICE
from deep500lite.bench.zoo_ops import ZOO_OP_TYPES
from support import run_cli

pytestmark = pytest.mark.requires("torch", "transformers", "tensorflow", "tf2onnx", "onnxruntime")


def test_ci_slice_passes_on_every_executor(tmp_path):
    out = tmp_path / "zoo.json"
    proc = run_cli("bench", "zoo", "--slice", "ci", "--json", out, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    result = json.loads(out.read_text())["result"]
    cases = {(c["name"], c["exporter"]) for c in result["cases"]}
    assert cases == set(CI_SLICE)
    cells = result["cells"]
    assert len(cells) == len(CI_SLICE) * 4 * 2
    assert {c["status"] for c in cells} == {"pass"}, [c for c in cells if c["status"] != "pass"]
    assert {c["executor"] for c in cells} == {"reference", "torch", "tensorflow", "onnxruntime"}
    # every cell is a real comparison: a relative error was measured, and it is small
    assert all(c["error"] is not None and c["error"] <= 1e-3 or c["check"] == "training" for c in cells)
    assert "ok " in proc.stdout and "cells pass" in proc.stdout
    # the zoo's operator list (checked for gradient rules in tests/bench/test_zoo_ops.py) is current
    used = {op for ops in result["op_types"].values() for op in ops} - {"Constant"}
    assert used <= ZOO_OP_TYPES, used - ZOO_OP_TYPES


def test_list_names_models_of_every_source():
    proc = run_cli("bench", "zoo", "--list")
    assert proc.returncode == 0, proc.stderr
    for source in ("transformers", "keras.applications", "torch.nn"):
        assert source in proc.stdout
    for exporter in ("torchscript", "dynamo", "tf2onnx"):
        assert exporter in proc.stdout


@pytest.mark.parametrize("args, expected", [
    (["--models", "nosuchnet"], "Received: nosuchnet"),
    (["--exporters", "onnxmltools"], "Received: onnxmltools"),
    (["--models", "bert", "--frameworks", "caffe"], "Received: 'caffe'"),
    (["--format", "html", "--list"], "Received: 'html'"),
])
def test_bad_input_is_one_line_and_exit_2(args, expected):
    proc = run_cli("bench", "zoo", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1 and expected in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
