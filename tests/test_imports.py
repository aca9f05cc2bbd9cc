"""``import deep500lite`` stays light: numpy, onnx and protobuf only."""

import subprocess
import sys

import pytest

HEAVY = ["torch", "tensorflow", "onnxruntime", "mpi4py", "keras", "jax", "scipy", "matplotlib", "sklearn"]


def _imported_modules(code: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                          check=True)
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    assert names, "python -X importtime printed nothing; the test would pass vacuously"
    return names


@pytest.mark.parametrize("code", [
    "import deep500lite",
    "import deep500lite as d5; d5.load_model; d5.executor",
    "import deep500lite.networks, deep500lite.datasets, deep500lite.metrics, deep500lite.frameworks.reference",
    "import deep500lite.lv3",
])
def test_core_imports_no_framework(code):
    names = _imported_modules(code)
    assert "numpy" in names and "onnx" in names
    heavy = sorted(n for n in names if n.split(".")[0] in HEAVY)
    assert heavy == [], f"{code!r} imported {heavy}"


def test_public_names_exist():
    import deep500lite as d5

    for name in d5.__all__:
        assert hasattr(d5, name), name
    for name in ["tensordesc", "TensorDescriptor", "CustomOp", "CustomPythonOp", "Network", "GraphExecutor",
                 "Dataset", "Sampler", "Optimizer", "ThreeStepOptimizer", "UpdateRuleOptimizer", "TestMetric",
                 "CPUDevice", "GPUDevice", "load_model", "executor"]:
        assert name in d5.__all__
    assert d5.distributed.CommunicationNetwork and d5.distributed.DistributedOptimizer


def test_only_namespaced_import_names():
    """frameworks/ and metrics/ are importable only under deep500lite."""
    import importlib.util
    import os

    import deep500lite.frameworks
    import deep500lite.metrics

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    assert os.path.realpath(os.path.dirname(deep500lite.frameworks.__file__)) == os.path.realpath(
        os.path.join(here, "frameworks"))
    code = "import importlib.util as u; print(u.find_spec('frameworks'), u.find_spec('metrics'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/",
                         check=True).stdout
    assert out.strip() == "None None"
    assert importlib.util.find_spec("deep500lite.metrics") is not None
