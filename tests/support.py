"""Plain helpers shared by the tests (fixtures and markers live in ``conftest.py``).

``tests/`` is on ``sys.path`` through the root conftest, so any test module can
``from support import ...``. Nothing here is a fixture: these are the helpers that module-level
code (parametrization, skip conditions) needs before any fixture exists.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deep500lite.registry import FRAMEWORKS as _REGISTRY
from deep500lite.registry import is_framework_available
from deep500lite.utils import is_package_available

__all__ = ["MPIEXEC", "REPO", "framework_params", "mpirun", "requires_mpi", "run_cli"]

# the repository root: the first folder above this file that holds pyproject.toml
REPO = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())

MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")

requires_mpi = pytest.mark.skipif(
    not (is_package_available("mpi4py") and MPIEXEC),
    reason="needs mpi4py and mpiexec: pip install 'deep500lite[mpi]'")


def framework_params(names=None):
    """pytest params for frameworks, each skipped with a reason when not installed.

    Args:
        names: the framework keys to include; every registered framework when None.

    Returns:
        A list of ``pytest.param`` objects with the framework key as id.
    """
    return [pytest.param(n, marks=pytest.mark.skipif(not is_framework_available(n),
                                                     reason=f"needs {n}: pip install 'deep500lite[{n}]'"),
                         id=n)
            for n in (names or list(_REGISTRY))]


def run_cli(*args, cwd=None, env=None, timeout=300):
    """Run ``deep500lite ARGS`` in a fresh interpreter; returns the CompletedProcess."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "deep500lite", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=full_env, timeout=timeout)


def mpirun(p: int, script, *args: str, timeout: float = 90):
    """Run the Python file ``script`` on ``p`` ranks; returns (exit code, stdout + stderr, seconds).

    The job runs in its own process group and is killed (and the test failed) past ``timeout``.
    """
    cmd = [MPIEXEC, "-n", str(p), sys.executable, "-m", "mpi4py", str(script), *args]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("DEEP500LITE_COMM_TIMEOUT", None)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        name = os.path.basename(str(script))
        pytest.fail(f"mpiexec -n {p} {name} {' '.join(args)} did not end within {timeout} s:\n{out[-4000:]}")
    return proc.returncode, out, time.monotonic() - start
