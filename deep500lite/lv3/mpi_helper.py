"""Level 3: Deep500's two MPI script helpers, :func:`mpi_end_barrier` and :func:`mpi_fork`.

A Deep500 distributed script ends with ``d5.mpi_end_barrier()`` (wait for every rank, then
finalize MPI) and may start itself on several ranks with ``with d5.mpi_fork(n) as role:``.
Neither imports mpi4py unless MPI is in use: without it both do nothing, so the same script runs
in one process too.
"""

from __future__ import annotations

import os
import subprocess
import sys

from deep500lite.errors import RankFailure, UserError
from deep500lite.lv3.launch import find_mpiexec, run_job

__all__ = ["mpi_end_barrier", "mpi_fork", "FORK_ENV"]

#: Set in the environment of the ranks that :class:`mpi_fork` starts.
FORK_ENV = "D500_IN_MPI"
#: Variables that MPICH's and Open MPI's launchers set on every rank they start.
_LAUNCHER_ENV = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")


def _initialized_mpi():
    """``mpi4py.MPI`` if this process has imported it and MPI is initialized and not finalized, else None."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return None
    return mpi


def mpi_end_barrier() -> None:
    """Wait until every rank gets here, then finalize MPI; do nothing when MPI is not running.

    Call it once, at the very end of a distributed script on every rank (as Deep500's samples
    do): no communicator can be used afterwards. MPI counts as running when this process has
    imported mpi4py (creating a :class:`~deep500lite.lv3.mpi.MPICommunicator` does) and MPI is
    initialized and not yet finalized.
    """
    mpi = _initialized_mpi()
    if mpi is None:
        return
    mpi.COMM_WORLD.Barrier()
    mpi.Finalize()


class mpi_fork:  # noqa: N801 - Deep500's name
    """Run this script on ``n`` MPI ranks: ``with d5.mpi_fork(4) as role: if role == "child": ...``.

    On entry, in a process that is not yet an MPI rank, it runs ``mpiexec -n n python -m mpi4py
    <this script and its arguments>`` and waits for it, then yields ``"parent"`` (the parent does
    no work of its own). In a rank (MPI already initialized here, a launcher's environment, or
    :data:`FORK_ENV` set), or with ``n <= 1``, it yields ``"child"`` at once. On exit from the
    ``with`` block a child finalizes MPI if it is running.

    Args:
        n: the number of ranks.
        timeout: seconds after which the job is killed (None: no limit). Every rank must also
            reach MPI initialisation within the start-up timeout (``DEEP500LITE_STARTUP_TIMEOUT``,
            else 120 s; see :func:`deep500lite.lv3.launch.run_job`), or the job is killed and
            :class:`~deep500lite.errors.StartupTimeout` names the ranks.

    Raises:
        UserError: ``n`` is not an integer >= 1, or no ``mpiexec`` is found.
        StartupTimeout: a rank did not reach MPI initialisation in time.
        subprocess.CalledProcessError: the job ended with a non-zero exit status (as Deep500's,
            which ran it with ``subprocess.check_call``); when a rank failed, ``stderr`` names
            it and the cause, and the :class:`~deep500lite.errors.RankFailure` is its ``__cause__``.
    """

    def __init__(self, n: int, timeout: float | None = None):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise UserError(f"mpi_fork needs a number of ranks, an integer >= 1. Received: n={n!r}")
        self.n, self.timeout = n, timeout
        self.role: str | None = None

    @staticmethod
    def _in_rank() -> bool:
        return (_initialized_mpi() is not None or os.environ.get(FORK_ENV) is not None
                or any(os.environ.get(v) is not None for v in _LAUNCHER_ENV))

    def __enter__(self) -> str:
        if self.n <= 1 or self._in_rank():
            self.role = "child"
            return self.role
        cmd = [find_mpiexec(what="mpi_fork"), "-n", str(self.n), sys.executable, "-m", "mpi4py", *sys.argv]
        try:
            rc = run_job(cmd, self.timeout, env=dict(os.environ, **{FORK_ENV: "1"}))
        except RankFailure as exc:  # Deep500's exception, with the rank and the cause as its stderr
            raise subprocess.CalledProcessError(exc.status, cmd, stderr=str(exc)) from exc
        if rc != 0:
            raise subprocess.CalledProcessError(rc, cmd)
        self.role = "parent"
        return self.role

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.role == "child" and exc_type is None:
            mpi = _initialized_mpi()
            if mpi is not None:
                mpi.Finalize()
        return False
