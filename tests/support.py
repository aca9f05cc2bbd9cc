"""Plain helpers shared by the tests (fixtures and markers live in ``conftest.py``).

``tests/`` is on ``sys.path`` through the root conftest, so any test module can
``from support import ...``. Nothing here is a fixture: these are the helpers that module-level
code (parametrization, skip conditions) needs before any fixture exists.
"""

from __future__ import annotations

import os
import shutil
import struct
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from deep500lite.registry import FRAMEWORKS as _REGISTRY
from deep500lite.registry import is_framework_available
from deep500lite.utils import is_package_available

__all__ = ["MPIEXEC", "REPO", "framework_params", "mpirun", "requires_mpi", "run_cli", "write_digits_as_cifar10",
           "write_digits_as_mnist"]

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


def _digits_split(n_train, n_test):
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)
    labels = digits.target.astype(np.uint8)
    if n_train + n_test > len(labels):
        raise ValueError(f"digits has {len(labels)} samples; asked for {n_train} + {n_test}")
    return (images[:n_train], labels[:n_train]), (images[n_train:n_train + n_test], labels[n_train:n_train + n_test])


def _idx_bytes(array):
    array = np.ascontiguousarray(array, dtype=np.uint8)
    return bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def write_digits_as_mnist(folder, n_train=1200, n_test=400):
    """Write scikit-learn's 8x8 digits as MNIST's four IDX files (28x28: each pixel 3x3, 2-pixel border).

    A learnable stand-in for MNIST that needs no download: a LeNet reaches over 90% on it in a
    few epochs. Returns the folder (give it as ``$DEEP500LITE_DATA/mnist`` or ``root=``).
    """
    os.makedirs(folder, exist_ok=True)
    for (images, labels), prefix in zip(_digits_split(n_train, n_test), ("train", "t10k")):
        big = np.pad(images.repeat(3, axis=1).repeat(3, axis=2), ((0, 0), (2, 2), (2, 2)))
        with open(os.path.join(folder, f"{prefix}-images-idx3-ubyte"), "wb") as f:
            f.write(_idx_bytes(big))
        with open(os.path.join(folder, f"{prefix}-labels-idx1-ubyte"), "wb") as f:
            f.write(_idx_bytes(labels))
    return str(folder)


def write_digits_as_cifar10(folder, n_train=1250, n_test=400):
    """Write scikit-learn's digits as CIFAR-10's binary batches (32x32x3: each pixel 4x4, same in
    every channel): ``data_batch_1.bin`` .. ``data_batch_5.bin`` and ``test_batch.bin``.

    Returns the folder (give it as ``$DEEP500LITE_DATA/cifar10`` or ``root=``).
    """
    os.makedirs(folder, exist_ok=True)
    (train_x, train_y), (test_x, test_y) = _digits_split(n_train, n_test)

    def write(path, images, labels):
        rgb = np.repeat(images.repeat(4, axis=1).repeat(4, axis=2)[:, None], 3, axis=1)
        records = np.concatenate([labels.reshape(-1, 1), rgb.reshape(len(labels), -1)], axis=1)
        with open(path, "wb") as f:
            f.write(np.ascontiguousarray(records, dtype=np.uint8).tobytes())

    for i, part in enumerate(np.array_split(np.arange(len(train_y)), 5), start=1):
        write(os.path.join(folder, f"data_batch_{i}.bin"), train_x[part], train_y[part])
    write(os.path.join(folder, "test_batch.bin"), test_x, test_y)
    return str(folder)
