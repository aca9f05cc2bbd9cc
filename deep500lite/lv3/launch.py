"""Starting MPI jobs: find ``mpiexec`` and run a job in its own process group with a time limit.

Used by ``deep500lite launch``, ``deep500lite bench allreduce`` and ``deep500lite run RECIPE -n N``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

from deep500lite.errors import JobTimeout  # noqa: F401 - defined in errors, re-exported here
from deep500lite.errors import UserError

__all__ = ["find_mpiexec", "run_job", "JobTimeout"]


def find_mpiexec(given: str | None = None, what: str = "this command") -> str:
    """The MPI launcher: ``given`` (a path or a name on PATH), else the ``mpiexec`` beside this
    Python (a virtual environment's ``mpich`` wheel), else the one on PATH.

    Raises:
        UserError: ``given`` is not an executable, or no ``mpiexec`` is found.
    """
    if given is not None:
        found = shutil.which(given)
        if not found:
            raise UserError(f"--mpiexec is not an executable program. Received: --mpiexec {given!r}")
        return found
    found = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if not found:
        raise UserError(f"{what} needs mpiexec: pip install 'deep500lite[mpi]' (mpi4py and the mpich wheel), put "
                        "your MPI's mpiexec on PATH, or pass --mpiexec PATH. Received: no mpiexec beside "
                        f"{sys.executable} nor on PATH")
    return found


def run_job(cmd: list[str], timeout: float | None = None, env: dict | None = None) -> int:
    """Run ``cmd`` (an ``mpiexec ...`` line) in a new process group and wait for it.

    Args:
        cmd: the command.
        timeout: seconds after which the whole process group is killed and :class:`JobTimeout`
            raised (None: no limit).
        env: the environment (default: this process's).

    Returns:
        The exit status; ``128 + N`` when killed by signal ``N``.

    Raises:
        JobTimeout: the job ran past ``timeout``.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise JobTimeout(f"the job did not end within {timeout:g} s and was killed: {' '.join(cmd)}") from None
    except BaseException:
        _kill(proc)
        raise
    return 128 - rc if rc < 0 else rc


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
