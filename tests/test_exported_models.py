"""Models from real exporters run on the reference executor and through ``deep500lite infer``."""

import numpy as np
import pytest

import deep500lite as d5
from conftest import require_tensorflow, require_tf2onnx, require_torch, run_cli


@pytest.mark.parametrize("name", [
    pytest.param("torch", marks=require_torch),
    pytest.param("torch_dynamo", marks=require_torch),
    pytest.param("keras", marks=[require_tensorflow, require_tf2onnx]),
])
def test_reference_matches_producer(exported, name):
    path, feeds, expected = exported[name]
    net = d5.load_model(path)
    ops = set(net.operators())
    if name == "torch":
        assert {"Shape", "Gather", "Concat", "Reshape"} <= ops
    if name == "keras":
        assert {"Transpose", "Pad"} <= ops or {"Transpose", "Conv"} <= ops
    out = d5.executor(net, "reference").inference(feeds)
    for k, v in expected.items():
        np.testing.assert_allclose(out[k], v, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", [
    pytest.param("torch", marks=require_torch),
    pytest.param("keras", marks=[require_tensorflow, require_tf2onnx]),
])
def test_cli_infer_runs_exported_model(exported, name, tmp_path):
    path, feeds, expected = exported[name]
    np.savez(tmp_path / "feeds.npz", **feeds)
    proc = run_cli("infer", path, "--framework", "reference", "--inputs", tmp_path / "feeds.npz", "--max-time", "0.2")
    assert proc.returncode == 0, proc.stderr
    for k, v in expected.items():
        assert f"output {k}: float32{list(v.shape)}" in proc.stdout
