"""The framework matrix, markers and shared fixtures.

A test that takes the ``framework`` argument runs once per registered framework, each skipped
with the reason when that framework is not installed (``pytest_generate_tests`` below), unless the
test parametrizes ``framework`` itself (``support.framework_params(names)`` for a subset).
``pytest --framework torch`` narrows the matrix to one framework.

``@pytest.mark.requires("torch", ...)`` skips a test (or one ``pytest.param``) unless every named
package is importable. Plain helpers (``run_cli``, ``mpirun``, ``REPO``) are in ``support.py``;
nothing imports this file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from support import REPO, framework_params

from deep500lite.utils import is_package_available

__all__ = ["exported", "installed_wheel", "lenet_file", "repo_root", "rng"]

# The commands tests run record their results nowhere (their default database would be
# d5-results/deep500lite.sqlite in the working folder); tests/results names databases of its own.
os.environ["DEEP500LITE_DB"] = "none"
os.environ.pop("DEEP500LITE_LABEL", None)


def pytest_addoption(parser):
    parser.addoption("--framework", action="append", default=None,
                     help="run framework-parametrized tests only for this framework (repeatable)")
    parser.addoption("--fuzz-long", action="store_true", default=False,
                     help="run the hypothesis fuzz tests long (many examples, no time bound); "
                          "also DEEP500LITE_FUZZ=long")


def pytest_configure(config):
    # A test run started in the background by a shell without job control inherits SIGINT ignored, and
    # Python then installs no KeyboardInterrupt handler; the interruption tests need the usual one.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Fuzz tests (tests/reliability/test_fuzz_*.py) use hypothesis's active profile: "ci" is bounded
    # and seeded (derandomized, so a CI failure reproduces); "long" runs for hours.
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:  # hypothesis is a test extra; the fuzz tests skip without it
        return
    import os

    settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True, database=None,
                              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    settings.register_profile("long", max_examples=200_000, deadline=None, derandomize=False,
                              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    long_run = config.getoption("--fuzz-long") or os.environ.get("DEEP500LITE_FUZZ") == "long"
    settings.load_profile("long" if long_run else "ci")


def _parametrized_names(metafunc):
    """The argument names the test's own ``parametrize`` marks cover."""
    names = set()
    for mark in metafunc.definition.iter_markers("parametrize"):
        argnames = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
        if isinstance(argnames, str):
            argnames = argnames.split(",")
        names.update(n.strip() for n in argnames)
    return names


# trylast: after the test's own parametrize marks, so the framework id comes last, as it did when
# every test stacked @pytest.mark.parametrize("framework", FRAMEWORKS) on top
@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc):
    if "framework" in metafunc.fixturenames and "framework" not in _parametrized_names(metafunc):
        metafunc.parametrize("framework", framework_params())


def pytest_collection_modifyitems(config, items):
    for item in items:
        for mark in item.iter_markers("requires"):
            missing = [p for p in mark.args if not is_package_available(p)]
            if missing:
                item.add_marker(pytest.mark.skip(reason=f"needs {missing[0]}"))
                break
    wanted = config.getoption("--framework")
    if not wanted:
        return
    skip = pytest.mark.skip(reason=f"--framework {','.join(wanted)}")
    for item in items:
        callspec = getattr(item, "callspec", None)
        fw = callspec.params.get("framework") if callspec else None
        if fw is not None and fw not in wanted:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def repo_root():
    """The repository root (the folder holding pyproject.toml), as a ``pathlib.Path``."""
    return REPO


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
    skipped = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "d5-results",
                                     ".pytest_cache")

    def ignore(folder, names):
        # the top-level results/ folder of local measurements, not the deep500lite.results package
        top = os.path.abspath(folder) == os.path.abspath(REPO) and "results" in names
        return set(skipped(folder, names)) | ({"results"} if top else set())

    shutil.copytree(REPO, source, ignore=ignore)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
                            str(tmp / "dist"), str(source)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = (tmp / "dist").glob("deep500lite-*.whl")
    site = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    return wheel, site
