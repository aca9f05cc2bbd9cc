"""The executor registry: lazy imports, unknown names, missing packages."""

import subprocess
import sys

import pytest

import deep500lite as d5
from deep500lite.registry import canonical_framework, import_framework


def test_aliases_and_unknown_framework():
    assert canonical_framework("PyTorch") == "torch"
    assert canonical_framework("ort") == "onnxruntime"
    with pytest.raises(d5.UserError, match=r"Unknown framework 'caffe'. Known frameworks: 'reference', 'torch', "
                                           r"'tensorflow', 'onnxruntime'"):
        canonical_framework("caffe")


def test_reference_is_always_available(lenet_file):
    ex = d5.executor(d5.load_model(lenet_file), "reference")
    assert type(ex).__name__ == "ReferenceExecutor" and ex.framework == "reference"
    assert import_framework("reference").from_model


@pytest.mark.parametrize("fw,package,extra", [("torch", "torch", "torch"), ("tensorflow", "tensorflow", "tensorflow"),
                                              ("onnxruntime", "onnxruntime", "onnxruntime")])
def test_missing_framework_names_the_extra(fw, package, extra):
    # A fresh interpreter where the package cannot be imported, as on a machine without it.
    code = (f"import sys; sys.modules[{package!r}] = None\n"
            "import deep500lite as d5\n"
            f"assert not d5.is_framework_available({fw!r})\n"
            "try:\n"
            f"    d5.executor('unused.onnx', {fw!r})\n"
            "except ImportError as e:\n"
            "    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("FrameworkNotAvailableError")
    assert f"pip install 'deep500lite[{extra}]'" in out and f"'{package}'" in out
