"""The framework matrix and shared fixtures.

Every test that needs a framework takes the ``framework`` fixture (or the ``FRAMEWORKS``
parameter list) and is skipped, with the reason, when that framework is not installed.
``pytest --framework torch`` narrows the matrix to one framework.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from deep500lite.registry import FRAMEWORKS as _REGISTRY
from deep500lite.registry import is_framework_available

NAMES = list(_REGISTRY)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pytest_addoption(parser):
    parser.addoption("--framework", action="append", default=None,
                     help="run framework-parametrized tests only for this framework (repeatable)")


def framework_params(names=None):
    """pytest params for frameworks, each skipped with a reason when not installed."""
    return [pytest.param(n, marks=pytest.mark.skipif(not is_framework_available(n),
                                                     reason=f"needs {n}: pip install 'deep500lite[{n}]'"),
                         id=n)
            for n in (names or NAMES)]


FRAMEWORKS = framework_params()


def pytest_collection_modifyitems(config, items):
    wanted = config.getoption("--framework")
    if not wanted:
        return
    skip = pytest.mark.skip(reason=f"--framework {','.join(wanted)}")
    for item in items:
        callspec = getattr(item, "callspec", None)
        fw = callspec.params.get("framework") if callspec else None
        if fw is not None and fw not in wanted:
            item.add_marker(skip)


def require(package: str):
    """Skip unless ``package`` is importable (named like accelerate's ``require_*``)."""
    from deep500lite.utils import is_package_available

    return pytest.mark.skipif(not is_package_available(package), reason=f"needs {package}")


require_torch = require("torch")
require_tensorflow = require("tensorflow")
require_tf2onnx = require("tf2onnx")


def run_cli(*args, cwd=None, env=None, timeout=300):
    """Run ``deep500lite ARGS`` in a fresh interpreter; returns the CompletedProcess."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "deep500lite", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=full_env, timeout=timeout)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def lenet_file(tmp_path_factory):
    """A zoo LeNet for 8x8 inputs with an open batch dimension, saved as ONNX."""
    from deep500lite import networks

    net, _, _ = networks.create_model("lenet", None, classes=10, shape=(1, 8, 8))
    path = tmp_path_factory.mktemp("models") / "lenet.onnx"
    net.save(path)
    return path


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """Models written by real exporters (see ``exporters.py``), for the frameworks installed."""
    import deep500lite as d5
    import exporters
    from deep500lite.utils import is_package_available

    folder = tmp_path_factory.mktemp("exported")
    made = {}
    if d5.is_framework_available("torch"):
        made["torch"] = exporters.torch_cnn(folder)
        made["torch_dynamo"] = exporters.torch_cnn(folder, dynamo=True)
    if d5.is_framework_available("tensorflow") and is_package_available("tf2onnx"):
        made["keras"] = exporters.keras_cnn(folder)
    return made


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory):
    """deep500lite built as a wheel and installed into a fresh folder (no dependencies).

    Returns ``(wheel_path, site_folder)``; put ``site_folder`` on PYTHONPATH to import the
    installed layout, where ``frameworks/`` and ``metrics/`` sit under ``deep500lite/``.
    """
    import shutil

    tmp = tmp_path_factory.mktemp("wheel")
    # build from a copy: setuptools reuses the tree's build/ folder, which may still hold modules
    # deleted since it was made
    source = tmp / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "d5-results", "results", ".pytest_cache"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
                            str(tmp / "dist"), str(source)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = (tmp / "dist").glob("deep500lite-*.whl")
    site = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    return wheel, site
