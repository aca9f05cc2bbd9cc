"""``deep500lite bench overhead``: runs, prints its table and JSON (no timing assertions); the framework
bench modules behind every ``bench`` command, reached through ``registry.framework_module``."""

import json
import subprocess
import sys

import pytest

import deep500lite as d5
from support import run_cli


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


# The functions every framework's bench module has for the same role (reference has no native inference API).
BENCH_ROLES = {"op_runner", "op_threads", "set_seed", "training_pair", "custom_op_pair"}


@pytest.mark.parametrize("framework", [
    pytest.param(fw, marks=pytest.mark.skipif(not d5.is_framework_available(fw), reason=f"needs {fw}"))
    for fw in ("reference", "torch", "tensorflow", "onnxruntime")])
def test_every_framework_bench_module_has_the_same_roles(framework):
    from deep500lite.registry import framework_module

    bench = framework_module(framework, "bench")
    assert bench.__name__ == f"deep500lite.frameworks.{framework}.bench" and bench.__doc__
    roles = BENCH_ROLES | ({"inference_pair"} if framework != "reference" else set())
    for name in roles:
        assert callable(getattr(bench, name)) and getattr(bench, name).__doc__, name
        assert name in bench.__all__
    assert framework_module(framework.upper()) is framework_module(framework)  # canonicalized like import_framework


def test_framework_module_bad_names():
    from deep500lite.registry import framework_module

    with pytest.raises(d5.UserError, match=r"Unknown framework 'caffe'"):
        framework_module("caffe", "bench")
    with pytest.raises(d5.UserError, match=r"dotted Python name, such as 'bench'. Received: '\.\./bench'"):
        framework_module("reference", "../bench")
    with pytest.raises(TypeError, match=r"named by a string, such as 'bench'. Received: int"):
        framework_module("reference", 3)


@pytest.mark.parametrize("fw,package", [("torch", "torch"), ("tensorflow", "tensorflow"),
                                        ("onnxruntime", "onnxruntime")])
def test_framework_module_without_the_package_is_a_clear_error(fw, package):
    # A fresh interpreter where the package cannot be imported, as on a machine without it.
    code = (f"import sys; sys.modules[{package!r}] = None\n"
            "from deep500lite.registry import framework_module\n"
            "try:\n"
            f"    framework_module({fw!r}, 'bench')\n"
            "except ImportError as e:\n"
            "    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("FrameworkNotAvailableError")
    assert f"pip install 'deep500lite[{fw}]'" in out and f"'{package}'" in out


def test_bench_modules_import_no_framework():
    code = ("import sys\n"
            "import deep500lite.bench.op, deep500lite.bench.overhead, deep500lite.bench.op_overhead\n"
            "import deep500lite.perfmodel.peak, deep500lite.bench.dataset, deep500lite.bench.allreduce\n"
            "import deep500lite.lv2.checkpoint\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'tensorflow', 'keras', "
            "'onnxruntime', 'tf2onnx') or m.startswith('deep500lite.frameworks.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _torch_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _torch_cuda(), reason="needs torch with CUDA and a GPU")
def test_bench_overhead_torch_on_gpu(tmp_path):
    out = tmp_path / "gpu.json"
    for extra in ([], ["--training"]):
        proc = run_cli("bench", "overhead", "--framework", "torch", "--device", "gpu:0", "--models", "lenet",
                       "--max-time", "0.5", "--json", out, *extra)
        assert proc.returncode == 0, proc.stderr
        assert "deep500lite vs native, on gpu:0" in proc.stdout
        data = json.loads(out.read_text())
        assert data["device"] == "gpu:0" and data["results"][0]["max_abs_error"] < 1e-3
