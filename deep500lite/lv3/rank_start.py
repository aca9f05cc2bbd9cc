"""The first code of every rank deep500lite starts: a supervisor that keeps the launcher told how the
rank is doing, and the rank itself.

:func:`deep500lite.lv3.launch.run_job` runs ``python .../rank_start.py ARGS`` in place of
``python -m mpi4py ARGS``, and ``python .../rank_start.py --exec PROGRAM ARGS`` in place of a
program that is not Python. With the launcher's address in the environment (:data:`CHANNEL_ENV`,
``tcp://HOST:PORT/TOKEN``), the rank:

1. connects to the launcher and keeps the connection open for its whole life;
2. forks: the child is the rank (it runs ARGS exactly as ``python -m mpi4py ARGS`` would, or execs
   PROGRAM) in a process group of its own, and dies with its parent (``PR_SET_PDEATHSIG``); the
   parent stays behind as the rank's supervisor;
3. the child reports, through a pipe whose messages the supervisor passes on: reaching MPI
   initialisation (its first import of ``mpi4py.MPI``), the end of its code with the exit status,
   or the exception that ended it with its traceback (which the launcher prints once, instead of
   every rank printing the same one); :func:`report_failure` gives the launcher a one-line cause;
4. the supervisor reports how the child ended (its exit status, or the signal that killed it). After
   a failure it waits for the launcher's ``end`` and then exits with status 0, so that MPICH's
   launcher neither kills the other ranks itself nor prints its multi-line "BAD TERMINATION" block
   (the launcher names the rank and the cause in one line); otherwise (and when the launcher is
   gone) it exits with the rank's status, a signal N as 128 + N. It
   passes the signals it gets (SIGINT, SIGTERM, SIGHUP, SIGUSR1, ...) on to the child, and kills the
   child's process group when the launcher says ``end`` or the connection closes (the launcher died).

On the wire, the supervisor's first line is ``TOKEN NAME`` (``rank3``; ``pid123`` under a launcher
that does not give the rank number), then one JSON object a line: ``{"event": "alive", "pid": P,
"child": C}``, ``{"event": "mpi"}``, ``{"event": "failure", "message": M}``, ``{"event": "error",
"status": S, "error": "TYPE: MESSAGE", "traceback": T}``, ``{"event": "done", "status": S}`` (the
rank's code has ended, the interpreter is shutting down), and last ``{"event": "exit", "status": S}``
or ``{"event": "exit", "signal": N}``. The launcher sends the line ``end`` to end the rank.

Without the variable, or when the launcher cannot be reached, the rank runs unwatched, as
``python -m mpi4py`` (or the program) would. The file is run by path, so it needs only the standard
library (and mpi4py, for a Python rank) in whichever interpreter runs the rank.
"""

from __future__ import annotations

import json
import os
import signal
import sys

__all__ = ["main", "report_failure", "is_watched", "CHANNEL_ENV", "REPORT_ENV", "RANK_ENV", "EXEC_FLAG"]

#: The launcher's address, ``tcp://HOST:PORT/TOKEN`` (set by the launcher, removed from the rank's environment).
CHANNEL_ENV = "DEEP500LITE_JOB_CHANNEL"
#: Where a rank's own code reports to its supervisor: ``PID:FD:INODE`` of the pipe (only that process may use it).
REPORT_ENV = "DEEP500LITE_RANK_REPORT"
#: Variables that MPICH's, Open MPI's and PMIx launchers set to the rank number.
RANK_ENV = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
#: The first argument that makes the rank a program rather than Python code.
EXEC_FLAG = "--exec"

_FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGWINCH", "SIGCONT")
_TRACEBACK_CHARS = 32768
_POLL_SECONDS = 0.05


def _mark_name() -> str:
    for var in RANK_ENV:
        value = os.environ.get(var, "")
        if value.isdigit():
            return f"rank{int(value)}"
    return f"pid{os.getpid()}"  # an unknown launcher: the rank number is not known here


def _connect(address: str):
    """A connection to the launcher at ``tcp://HOST:PORT/TOKEN`` that has said who this rank is; None if unreachable."""
    import socket

    where, _, token = address[len("tcp://"):].partition("/")
    host, _, port = where.rpartition(":")
    try:
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
        conn.sendall(f"{token} {_mark_name()}\n".encode("ascii"))
    except (OSError, ValueError):  # the launcher has gone, or cannot be reached: its message says where it listened
        return None
    conn.settimeout(None)
    return conn


def _report_fd() -> int | None:
    """The pipe to this process's supervisor, when this very process is a watched rank."""
    pid, fd, inode = (os.environ.get(REPORT_ENV, "").split(":") + ["", "", ""])[:3]
    if not (pid.isdigit() and fd.isdigit() and inode.isdigit()) or int(pid) != os.getpid():
        return None
    try:
        if os.fstat(int(fd)).st_ino != int(inode):  # the pipe was closed and its number reused
            return None
    except OSError:
        return None
    return int(fd)


def _emit(event: dict) -> bool:
    fd = _report_fd()
    if fd is None:
        return False
    data = (json.dumps(event, default=str) + "\n").encode("utf-8", "replace")
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        return False
    return True


def is_watched() -> bool:
    """Whether this process is a rank that deep500lite's launcher watches (its errors reach the launcher)."""
    return _report_fd() is not None


def report_failure(message: str) -> bool:
    """Give the launcher this rank's cause of failure in one line, to name in its own one-line error.

    For errors that are already one clear line (deep500lite's recipe worker reports a bad recipe
    this way): the launcher shows the line once for the job, with the rank, instead of every rank
    printing it. The rank still ends itself (an exit status other than 0).

    Returns:
        True when a launcher watches this rank (the caller need not print the message), else False.
    """
    return _emit({"event": "failure", "message": " ".join(str(message).split())})


class _StartMark:
    """A meta-path finder that reports MPI initialisation when ``mpi4py.MPI`` is first imported; it finds nothing."""

    def find_spec(self, name, path=None, target=None):
        if name == "mpi4py.MPI":
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            _emit({"event": "mpi"})
        return None


def _status(code) -> int:
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _no_abort() -> None:
    # mpi4py ends a failed rank with MPI_Abort, which makes MPICH's launcher kill every rank by signal and print
    # its block; the launcher ends the job itself once told, so MPI is finalized as usual instead.
    mpi = sys.modules.get("mpi4py.MPI")
    setter = getattr(mpi, "_set_abort_status", None)
    if setter is not None:
        try:
            setter(0)
        except Exception:  # noqa: BLE001 - an mpi4py without it: it aborts, the job ends all the same
            pass


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _fix_path() -> None:
    # Run by path, sys.path[0] is this file's folder; 'python -m mpi4py' has the working directory there.
    # In safe-path mode (PYTHONSAFEPATH, -P) nothing was prepended, and 'python -P -m' adds nothing:
    # sys.path[0] is then the first PYTHONPATH entry, kept.
    if not getattr(sys.flags, "safe_path", False) and sys.path \
            and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path[0] = os.getcwd()


def _user_frames(tb):
    """``tb`` from the first frame of the rank's own code on (this file's, mpi4py.run's and runpy's left out)."""
    import runpy

    import mpi4py.run

    ours = {os.path.abspath(__file__), os.path.abspath(mpi4py.run.__file__), os.path.abspath(runpy.__file__),
            "<frozen runpy>"}
    while tb is not None and (tb.tb_frame.f_code.co_filename in ours
                              or os.path.abspath(tb.tb_frame.f_code.co_filename) in ours):
        tb = tb.tb_next
    return tb


def _run_python() -> None:
    """Run ``sys.argv[1:]`` as ``python -m mpi4py`` does, reporting how it ends (when watched)."""
    import traceback

    _fix_path()
    from mpi4py.run import main as run_mpi4py

    try:
        run_mpi4py()
    except SystemExit as exc:
        status = _status(exc.code)
        event = {"event": "done", "status": status}
        if isinstance(exc.code, str):
            event["message"] = " ".join(exc.code.split())
        if _emit(event) and status:
            _no_abort()
        raise
    except BaseException as exc:  # noqa: BLE001 - reported, then the rank ends with its status
        status = 130 if isinstance(exc, KeyboardInterrupt) else 1
        text = "".join(traceback.format_exception(type(exc), exc, _user_frames(exc.__traceback__)))
        text = text[-_TRACEBACK_CHARS:]
        if not _emit({"event": "error", "status": status, "error": _one_line(exc), "traceback": text}):
            raise
        _no_abort()
        sys.stdout.flush()
        raise SystemExit(status) from None
    _emit({"event": "done", "status": 0})


def _exec(argv: list[str], report: int | None = None) -> None:
    for name in ("SIGPIPE", "SIGXFSZ"):  # as subprocess does: Python ignores these, a program expects the default
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        if report is not None:
            event = {"event": "failure", "message": f"cannot run {argv[0]!r}: {exc.strerror or exc}"}
            try:
                os.write(report, (json.dumps(event) + "\n").encode())
            except OSError:
                pass
        print(f"deep500lite: cannot run {argv[0]!r}: {exc.strerror or exc}", file=sys.stderr, flush=True)
        os._exit(127)


def _die_with(parent: int) -> None:
    """In the rank: get SIGKILL when the supervisor dies (Linux), and leave at once if it already has."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(137)


def _kill_group(pid: int) -> None:
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _supervise(conn, child: int, events: int) -> None:
    """The supervisor's life: pass the rank's events on, forward signals, end the rank when told; never returns."""
    import selectors

    def forward(signum, frame):
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for name in _FORWARDED:
        if hasattr(signal, name):
            try:
                signal.signal(getattr(signal, name), forward)
            except (OSError, ValueError):
                pass
    launcher_up = True

    def send(data: bytes) -> None:
        nonlocal launcher_up
        if launcher_up:
            try:
                conn.sendall(data)
            except OSError:
                launcher_up = False

    send((json.dumps({"event": "alive", "pid": os.getpid(), "child": child}) + "\n").encode())
    selector = selectors.DefaultSelector()
    selector.register(conn, selectors.EVENT_READ, "launcher")
    selector.register(events, selectors.EVENT_READ, "rank")
    pending = b""
    status = None
    told_end = False
    while status is None:
        for key, _ in selector.select(_POLL_SECONDS):
            if key.data == "rank":
                data = os.read(events, 65536)
                if not data:
                    selector.unregister(events)
                pending += data
                head, sep, pending = pending.rpartition(b"\n")
                if sep:
                    send(head + sep)
                continue
            try:
                data = conn.recv(4096)
            except OSError:
                data = b""
            if not data:  # the launcher is gone: so is the job
                launcher_up = False
                selector.unregister(conn)
            if data and b"end" in data:
                told_end = True
            if not data or told_end:
                _kill_group(child)
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid == 0:
            status = None
    os.set_blocking(events, False)
    try:  # the rank's last words (a process it forked may hold the pipe open: no waiting for its end)
        while data := os.read(events, 65536):
            pending += data
    except (BlockingIOError, OSError):
        pass
    if pending.strip():
        send(pending if pending.endswith(b"\n") else pending + b"\n")
    if os.WIFSIGNALED(status):
        send((json.dumps({"event": "exit", "signal": os.WTERMSIG(status)}) + "\n").encode())
        code = 128 + os.WTERMSIG(status)
    else:
        code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8
        send((json.dumps({"event": "exit", "status": code}) + "\n").encode())
    if code and launcher_up and not told_end:
        told_end = _hold(conn)
    try:
        conn.close()
    except OSError:
        pass
    os._exit(0 if told_end else code)


def _hold(conn, within: float = 60.0) -> bool:
    """After a failed rank: wait (up to ``within`` seconds) until the launcher says ``end`` or goes away.

    The launcher ends the job itself; a supervisor that exited with the failure at once would race
    it, and MPICH's launcher would kill the other ranks and print its "BAD TERMINATION" block.

    Returns:
        True when the launcher said ``end`` (the job's end is its to report: the supervisor exits 0).
    """
    import time

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        conn.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = conn.recv(4096)
        except (TimeoutError, OSError):
            return False
        if not data:
            return False
        if b"end" in data:
            return True
    return False


def main() -> None:
    """Run ``sys.argv[1:]`` (see the module documentation): supervised when a launcher watches, else directly."""
    address = os.environ.pop(CHANNEL_ENV, None)
    os.environ.pop(REPORT_ENV, None)
    argv = sys.argv[1:]
    program = argv[1:] if argv[:1] == [EXEC_FLAG] else None
    if program is not None and not program:
        print("deep500lite: rank_start.py --exec needs a program to run", file=sys.stderr)
        sys.exit(2)
    conn = _connect(address) if address and address.startswith("tcp://") else None
    if conn is None:
        if program is not None:
            _exec(program)
        _run_python()
        return
    events, write_end = os.pipe()
    parent = os.getpid()
    child = os.fork()
    if child:
        os.close(write_end)
        _supervise(conn, child, events)
    os.close(events)
    conn.close()
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    _die_with(parent)
    if program is not None:
        _exec(program, write_end)  # the pipe closes on exec: the supervisor reports the program's exit
    os.environ[REPORT_ENV] = f"{os.getpid()}:{write_end}:{os.fstat(write_end).st_ino}"
    sys.meta_path.insert(0, _StartMark())
    _run_python()


if __name__ == "__main__":
    main()
