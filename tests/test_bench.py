"""``deep500lite bench overhead``: runs, prints its table and JSON (no timing assertions)."""

import json

import pytest

import deep500lite as d5
from conftest import run_cli


@pytest.mark.skipif(not d5.is_framework_available("onnxruntime"), reason="needs onnxruntime")
def test_bench_overhead_table_and_json(tmp_path):
    out = tmp_path / "overhead.json"
    proc = run_cli("bench", "overhead", "--framework", "onnxruntime", "--models", "lenet", "--batch-size", "4",
                   "--max-time", "0.3", "--json", out)
    assert proc.returncode == 0, proc.stderr
    header = next(line for line in proc.stdout.splitlines() if line.startswith("framework"))
    for col in ("native [95% CI]", "deep500lite [95% CI]", "ratio [95% CI]", "target <= 1.05"):
        assert col in header
    data = json.loads(out.read_text())
    (result,) = data["results"]
    assert result["model"] == "lenet" and result["max_abs_error"] < 1e-5
    assert len(result["ratios"]) == len(result["native"]["raw"]) == len(result["deep500lite"]["raw"]) >= 20
    assert result["verdict"] in ("meets", "likely", "misses")
    assert data["environment"]["cpu"]["logical_cores"] >= 1


def test_bench_overhead_bad_input():
    proc = run_cli("bench", "overhead", "--framework", "reference")
    assert proc.returncode == 2 and "framework must be one of 'torch', 'tensorflow', 'onnxruntime'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run_cli("bench", "overhead", "--framework", "onnxruntime", "--models", "vgg")
    assert proc.returncode == 2 and "Unknown model(s) ['vgg']" in proc.stderr
    proc = run_cli("bench")
    assert proc.returncode == 2 and "overhead" in proc.stderr


@pytest.mark.skipif(not d5.is_framework_available("torch"), reason="needs torch")
def test_bench_overhead_training_torch(tmp_path):
    out = tmp_path / "train.json"
    proc = run_cli("bench", "overhead", "--training", "--framework", "torch", "--models", "lenet", "--batch-size", "8",
                   "--max-time", "0.5", "--json", out)
    assert proc.returncode == 0, proc.stderr
    assert "training step time, deep500lite vs native" in proc.stdout
    (result,) = json.loads(out.read_text())["results"]
    assert result["training"] is True and result["max_abs_error"] < 1e-5  # same weights, same first loss
    assert len(result["ratios"]) >= 20


@pytest.mark.skipif(not d5.is_framework_available("torch"), reason="needs torch")
def test_bench_overhead_op_table_and_json(tmp_path):
    out = tmp_path / "op.json"
    proc = run_cli("bench", "overhead", "--op", "--framework", "torch,reference", "--op-kinds", "cpp,python",
                   "--elements", "1024", "--max-time", "0.2", "--json", out)
    assert proc.returncode == 0, proc.stderr
    assert "custom operator vs the framework's own" in proc.stdout
    results = json.loads(out.read_text())["results"]
    assert {(r["framework"], r["kind"]) for r in results} == {
        ("torch", "cpp"), ("torch", "python"), ("reference", "cpp"), ("reference", "python")}
    for r in results:
        assert r["max_abs_error"] < 1e-5 and r["elements"] == 1024
        assert len(r["ratios"]) == len(r["custom"]["raw"]) == len(r["native"]["raw"]) >= 20


def test_bench_overhead_op_bad_input():
    proc = run_cli("bench", "overhead", "--op", "--framework", "mxnet", "--elements", "8")
    assert proc.returncode == 2 and "mxnet" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = run_cli("bench", "overhead", "--op", "--op-kinds", "fortran", "--framework", "reference")
    assert proc.returncode == 2 and "'cpp', 'python'" in proc.stderr
    proc = run_cli("bench", "overhead")
    assert proc.returncode == 2 and "needs --framework" in proc.stderr
