"""``deep500lite verify``: a zoo model and a user's file, run as a user runs them; a planted fault; bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from support import run_cli


@pytest.mark.requires("torch", "transformers", "onnxruntime")
def test_zoo_model_prints_the_table_and_verdicts(tmp_path):
    out = tmp_path / "verify.json"
    proc = run_cli("verify", "zoo:resnet/torchscript", "--frameworks", "reference,torch,onnxruntime", "--train",
                   "--json", out, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = proc.stdout
    assert "ground truth: the reference executor in float64" in text
    for executor in ("reference", "torch", "onnxruntime"):
        assert f"{executor}: pass" in text
    assert "output logits" in text and "gradients (" in text
    assert "verdict: 3 of 3 executors pass" in text
    data = json.loads(out.read_text())
    assert data["passed"] and data["train"]
    assert [r["executor"] for r in data["reports"]] == ["reference", "torch", "onnxruntime"]
    for report in data["reports"]:
        assert report["status"] == "pass"
        assert len(report["gradients"]) > 10 and max(report["gradients"].values()) < 1e-3
    assert data["floor_gradients"] is not None and data["floor_outputs"]["logits"] < 1e-5


@pytest.mark.requires("torch")
def test_a_planted_fault_is_named_by_the_command(tmp_path, monkeypatch, capsys, exported):
    from deep500lite.cli import main
    from deep500lite.frameworks.torch import ops as torch_ops

    path, feeds, _ = exported["torch"]
    np.savez(tmp_path / "feeds.npz", **feeds)
    original = torch_ops.CONVERTERS["MaxPool"]

    def converter(spec):
        fn = original(spec)
        return lambda *xs: fn(*xs) * 1.01  # torch's MaxPool 1% off: the fault

    monkeypatch.setitem(torch_ops.CONVERTERS, "MaxPool", converter)
    status = main(["verify", str(path), "--frameworks", "reference,torch", "--inputs", str(tmp_path / "feeds.npz")])
    text = capsys.readouterr().out
    assert status == 1, text
    line = next(ln for ln in text.splitlines() if ln.startswith("torch: FAIL"))
    assert "forward: node" in line and "(MaxPool, inputs [2,4,8,8] -> [2,4,4,4])" in line, line
    assert "reference: pass" in text


@pytest.mark.parametrize("args, expected", [
    (["nosuch.onnx"], "nosuch.onnx"),
    (["{model}", "--frameworks", "caffe"], "Received: 'caffe'"),
    (["{model}", "--frameworks", "reference", "--loss", "nosuch"], "Received: 'nosuch'"),
    (["{model}", "--frameworks", "reference", "--inputs", "{bad}"], "must have shape"),
    (["{model}", "--seed", "-1"], "-1"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, lenet_file, args, expected):
    bad = tmp_path / "bad.npz"
    np.savez(bad, **{"input": np.zeros((2, 1, 3, 3), np.float32)})
    import deep500lite as d5

    name = d5.load_model(lenet_file).inputs[0]
    np.savez(bad, **{name: np.zeros((2, 1, 3, 3), np.float32)})
    argv = [a.format(model=lenet_file, bad=bad) for a in args]
    proc = run_cli("verify", *argv)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert len(lines) == 1 and expected in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.requires("torch", "onnxruntime")
def test_a_zoo_graph_beyond_classifiers_is_verified_with_its_own_loss(tmp_path):
    out = tmp_path / "verify.json"
    proc = run_cli("verify", "zoo:loop/torchscript", "--train", "--frameworks", "reference,torch,onnxruntime",
                   "--json", out, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "verdict: 3 of 3 executors pass" in proc.stdout
    data = json.loads(out.read_text())
    assert data["loss"].startswith("cross_entropy of 'logits'"), data["loss"]
    assert all(r["gradients"] and r["status"] == "pass" for r in data["reports"])


@pytest.mark.requires("tensorflow", "tf2onnx")
def test_training_a_zoo_graph_the_autodiff_cannot_differentiate_is_one_line_saying_why():
    proc = run_cli("verify", "zoo:while_loop/tf2onnx", "--train", "--frameworks", "reference", timeout=600)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("deep500lite verify: error")]  # not TF's log
    assert len(lines) == 1 and "inference only" in lines[0] and "trip count" in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
