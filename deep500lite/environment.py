"""What machine and software a measurement came from (``deep500lite env`` and results files).

Framework versions are read from package metadata, so collecting the environment imports no
framework. The MPI library is asked in a short subprocess, so this process does not initialize MPI.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys

from deep500lite.registry import FRAMEWORKS, framework_version
from deep500lite.utils import package_version

__all__ = ["collect_environment", "cpu_model", "cpu_features", "gpu_info", "mpi_library", "git_commit", "machine_name"]

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")

# Variables that choose which CPU kernels the frameworks run (see docs/executors.md, "What depends on the CPU").
_KERNEL_VARS = ("TF_ENABLE_ONEDNN_OPTS", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY",
                "MKL_ENABLE_INSTRUCTIONS", "OPENBLAS_CORETYPE", "XLA_FLAGS")

# The vector instructions whose presence changes which kernels the frameworks pick, as /proc/cpuinfo names them.
_FEATURES = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
             "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux, ``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_features() -> list[str]:
    """The vector instructions of :data:`_FEATURES` this CPU has (from /proc/cpuinfo; empty elsewhere).

    They decide which kernels the frameworks pick, and TensorFlow's choice of oneDNN.
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [name for name in _FEATURES if name in have]
    except OSError:
        pass
    return []


def gpu_info() -> list[dict]:
    """One dict per NVIDIA GPU (name, memory, driver), from ``nvidia-smi``; empty without one."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            gpus.append({"name": parts[0], "memory": parts[1], "driver": parts[2]})
    return gpus


def mpi_library() -> str | None:
    """The MPI library's version string (via mpi4py in a subprocess), or None without mpi4py."""
    if package_version("mpi4py") is None:
        return None
    code = ("import mpi4py; mpi4py.rc.initialize = False; mpi4py.rc.finalize = False\n"
            "from mpi4py import MPI; print(' '.join(MPI.Get_library_version().split(chr(10))[0].split()))")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unavailable ({exc})"
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["unknown error"])[-1]
        return f"unavailable ({last})"
    return out.stdout.strip()


def git_commit(folder: str | os.PathLike | None = None) -> str | None:
    """The git commit of ``folder`` (with ``-dirty`` when it has changes), or None outside git."""
    if shutil.which("git") is None:
        return None
    folder = os.fspath(folder or os.getcwd())
    try:
        sha = subprocess.run(["git", "-C", folder, "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=20)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", folder, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha.stdout.strip() + ("-dirty" if dirty else "")


def machine_name() -> str:
    """The machine's name in results: ``DEEP500LITE_MACHINE`` when set (name CI runners, whose host
    names change, this way), else the host name."""
    return os.environ.get("DEEP500LITE_MACHINE") or socket.gethostname() or "unknown"


def collect_environment(folder=None, include_mpi: bool = True) -> dict:
    """Everything that may change a measurement, as a JSON-ready dict.

    Args:
        folder: the folder whose git commit is recorded (default: the current directory).
        include_mpi: ask the MPI library for its version (a subprocess, about a second).
    """
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    from deep500lite.version import __version__

    return {
        "deep500lite": __version__,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "packages": {
            "numpy": package_version("numpy"), "onnx": package_version("onnx"),
            "protobuf": package_version("protobuf"), "scipy": package_version("scipy"),
            "mpi4py": package_version("mpi4py"), "onnxruntime-extensions": package_version("onnxruntime-extensions"),
        },
        "frameworks": {k: framework_version(k) for k in FRAMEWORKS},
        "cpu": {"model": cpu_model(), "logical_cores": os.cpu_count(), "usable_cores": affinity,
                "machine": platform.machine(), "features": cpu_features()},
        "threads": {v: os.environ.get(v) for v in _THREAD_VARS if os.environ.get(v) is not None},
        "cpu_kernels": {v: os.environ.get(v) for v in _KERNEL_VARS if os.environ.get(v) is not None},
        "gpus": gpu_info(),
        "mpi_library": mpi_library() if include_mpi else None,
        "git_commit": git_commit(folder),
        "machine": machine_name(),
    }
