"""The first code of every Python rank deep500lite starts: it marks the rank as started, then runs
the rank's command exactly as ``python -m mpi4py`` would.

:func:`deep500lite.lv3.launch.run_job` runs ``python .../rank_start.py ARGS`` in place of
``python -m mpi4py ARGS``. When the launcher's environment names a start-up folder
(``DEEP500LITE_STARTUP_DIR``), the rank creates the file ``alive-rank<R>`` there at once, and
``rank<R>`` as it reaches MPI initialisation (its first import of ``mpi4py.MPI``), or as it ends if
it never does; when the start-up timeout passes, the launcher names the ranks without ``rank<R>``
(and, apart, those that never even ran this file). A job across hosts names a TCP address
instead of a folder (``tcp://HOST:PORT/TOKEN``): the rank then sends ``TOKEN alive-rank<R>`` and
``TOKEN rank<R>``, one line a connection, and the launcher writes the files. The file is run by
path, so it needs only the standard library and mpi4py in whichever interpreter runs the rank.
"""

from __future__ import annotations

import os
import sys

__all__ = ["main", "STARTUP_DIR_ENV", "RANK_ENV"]

#: The folder (or ``tcp://HOST:PORT/TOKEN``) where ranks mark their start (set by the launcher, removed from the
#: rank's environment).
STARTUP_DIR_ENV = "DEEP500LITE_STARTUP_DIR"
#: Variables that MPICH's, Open MPI's and PMIx launchers set to the rank number.
RANK_ENV = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")


def _touch(path: str) -> None:
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError:  # the launcher has gone and removed its folder: nobody is waiting
        pass


def _send(address: str, name: str) -> None:
    """Send the mark ``name`` to the launcher at ``tcp://HOST:PORT/TOKEN``."""
    import socket

    where, _, token = address[len("tcp://"):].partition("/")
    host, _, port = where.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=10) as conn:
            conn.sendall(f"{token} {name}\n".encode("ascii"))
    except (OSError, ValueError):  # the launcher has gone, or cannot be reached: its message says where it listened
        pass


def _mark(where: str, name: str) -> None:
    if where.startswith("tcp://"):
        _send(where, name)
    else:
        _touch(os.path.join(where, name))


def _mark_name() -> str:
    for var in RANK_ENV:
        value = os.environ.get(var, "")
        if value.isdigit():
            return f"rank{int(value)}"
    return f"pid{os.getpid()}"  # an unknown launcher: the rank number is not known here


class _StartMark:
    """A meta-path finder that creates the mark when ``mpi4py.MPI`` is first imported; it finds nothing itself."""

    def __init__(self, where: str, name: str):
        self.where: str | None = where
        self.name = name

    def find_spec(self, name, path=None, target=None):
        if name == "mpi4py.MPI":
            self.mark()
        return None

    def mark(self) -> None:
        if self.where is None:
            return
        where, self.where = self.where, None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        _mark(where, self.name)


def main() -> None:
    """Mark the start (see the module documentation) and run ``sys.argv[1:]`` as ``python -m mpi4py``."""
    folder = os.environ.pop(STARTUP_DIR_ENV, None)
    start = None
    if folder:
        name = _mark_name()
        _mark(folder, f"alive-{name}")
        start = _StartMark(folder, name)
        sys.meta_path.insert(0, start)
    # Run by path, sys.path[0] is this file's folder; 'python -m mpi4py' has the working directory there.
    # In safe-path mode (PYTHONSAFEPATH, -P) nothing was prepended, and 'python -P -m' adds nothing:
    # sys.path[0] is then the first PYTHONPATH entry, kept.
    if not getattr(sys.flags, "safe_path", False) and sys.path \
            and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path[0] = os.getcwd()
    from mpi4py.run import main as run_mpi4py

    try:
        run_mpi4py()
    finally:
        if start is not None:
            start.mark()


if __name__ == "__main__":
    main()
