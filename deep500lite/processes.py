"""Child processes that never outlive the command, and signals that unwind like Ctrl-C.

Every command that starts processes (``launch``, ``run -n``, ``compare``, the benchmarks across
ranks) uses these, so that whatever ends the command (an error, Ctrl-C, SIGTERM, SIGHUP, even
SIGKILL) nothing it started runs on:

- :func:`die_with_parent` gives a child (``mpiexec``, a comparison's worker) a signal when the
  process that started it dies, whatever killed it (Linux ``PR_SET_PDEATHSIG``);
- :func:`kill_tree` ends a process and every process below it: all are stopped first (SIGSTOP,
  so none can start another one or be re-parented away while the tree is read), then killed;
- :func:`signals_unwind` turns SIGTERM and SIGHUP into :class:`SystemExit` with status 128 + N in
  the main thread, so ``finally`` blocks run (staging folders are removed, jobs ended) as they do
  for Ctrl-C; :func:`terminated_by` says which signal it was;
- :func:`signals_held` holds SIGINT, SIGTERM and SIGHUP back for a few steps that must not stop
  half-way (swapping a results folder in, ending a job); they are delivered right after.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

__all__ = ["die_with_parent", "descendants", "identify", "kill_identified", "kill_pids", "kill_tree", "signals_unwind",
           "signals_held", "terminated_by", "wait_gone", "UNWIND_SIGNALS", "signal_name"]

#: The signals :func:`signals_unwind` turns into :class:`SystemExit` (SIGINT raises KeyboardInterrupt already).
UNWIND_SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s)
_HELD = tuple(s for s in (getattr(signal, "SIGINT", None), *UNWIND_SIGNALS) if s)
_PR_SET_PDEATHSIG = 1
_terminated: list[int] = []


def signal_name(signum: int) -> str:
    """``SIGSEGV (segmentation fault)`` for 11: the signal's name and what it means, where known."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
    described = signal.strsignal(signum) if hasattr(signal, "strsignal") else None
    return f"{name} ({described[0].lower() + described[1:]})" if described else name


def _prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn


def die_with_parent(signum: int = signal.SIGKILL):
    """A ``preexec_fn`` for :class:`subprocess.Popen`: the child gets ``signum`` when this process dies.

    Linux only (``PR_SET_PDEATHSIG``, which survives ``exec``); elsewhere it returns None, which
    ``Popen`` takes as no ``preexec_fn``. The signal is tied to the thread that starts the child,
    so start it from a thread that lives as long as the child should.
    """
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def set_up() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the call: nobody would send the signal
            os.kill(os.getpid(), signum)

    return set_up


def _children_table() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return children
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(pid: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """The processes below ``pid`` (from /proc, or the ``children`` table given; empty where there is none)."""
    children = _children_table() if children is None else children
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_pids(pids, signum: int = signal.SIGKILL) -> None:
    """Send ``signum`` (SIGKILL) to each process of ``pids``; those already gone (or not ours) are skipped."""
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def kill_identified(identified: dict[int, int | None], signum: int = signal.SIGKILL) -> None:
    """:func:`kill_pids` for the processes :func:`identify` saw: each is signalled only while it is still the one
    seen then (the same start time), never a later process given its number since."""
    kill_pids([pid for pid, started in identified.items() if started is not None and _started(pid) == started],
              signum)


def _started(pid: int) -> int | None:
    """The process's start time (clock ticks after boot, /proc/PID/stat field 22), None when gone or unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def identify(pids) -> dict[int, int | None]:
    """``{pid: start time}`` of ``pids``, for :func:`kill_identified` to tell them from later processes of the same
    numbers."""
    return {pid: _started(pid) for pid in pids}


def kill_tree(pid: int, include_root: bool = True) -> list[int]:
    """Kill ``pid`` and every process below it, whatever session or process group they are in.

    The tree is stopped first, pass after pass until no new process turns up (a stopped process
    cannot start another, and no process of the tree dies and leaves its children to init while
    the tree is read), then every process of it gets SIGKILL.

    Returns:
        The processes killed.
    """
    seen: list[int] = [pid] if include_root else []
    kill_pids(seen, signal.SIGSTOP)
    for _ in range(20):
        new = [p for p in descendants(pid, _children_table()) if p not in seen]
        if not new:
            break
        kill_pids(new, signal.SIGSTOP)
        seen.extend(new)
    kill_pids(seen, signal.SIGKILL)
    return seen


def _raise(signum, frame):
    if not _terminated:
        _terminated.append(signum)
    raise SystemExit(128 + signum)


def terminated_by() -> int | None:
    """The signal (SIGTERM, SIGHUP) that :func:`signals_unwind` turned into SystemExit in this process, or None."""
    return _terminated[0] if _terminated else None


@contextlib.contextmanager
def signals_unwind():
    """While inside, SIGTERM and SIGHUP raise ``SystemExit(128 + N)`` in the main thread (elsewhere: nothing changes).

    Code that cleans up in ``finally`` (or ``except BaseException``) then does so for these
    signals as it does for Ctrl-C; the process exits with 128 + N, the status a shell reports
    for a process the signal killed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with _handled(UNWIND_SIGNALS, _raise):
        yield


@contextlib.contextmanager
def _handled(signums, handler):
    """``handler`` for ``signums`` while inside (those with a handler not installed from Python are left alone)."""
    previous = {}
    for signum in signums:
        before = signal.getsignal(signum)
        if before is None:
            continue
        try:
            signal.signal(signum, handler)
        except (ValueError, OSError):
            continue
        previous[signum] = before
    try:
        yield
    finally:
        for signum, before in previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signum, before)


@contextlib.contextmanager
def signals_held():
    """Hold SIGINT, SIGTERM and SIGHUP back while inside (delivered right after); main thread only.

    The signals are taken by a handler that notes them and raised again on the way out, with the
    handlers of before in place. (Blocking them with ``pthread_sigmask`` would not do: it blocks
    them in the calling thread only, and a process-wide signal then goes to another thread, a
    BLAS pool's say, and Python still runs its handler in the main thread.)
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def note(signum, frame):
        pending.append(signum)

    try:
        with _handled(_HELD, note):
            yield
    finally:
        for signum in dict.fromkeys(pending):
            signal.raise_signal(signum)


def wait_gone(pids, within: float) -> list[int]:
    """Wait up to ``within`` seconds for ``pids`` to end; returns those still running (zombies count as ended)."""
    deadline = time.monotonic() + within
    left = list(pids)
    while True:
        left = [p for p in left if _running(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # gone, or a system without /proc: ask the kernel
        return not os.path.isdir("/proc") and _exists(pid)
    return state not in ("Z", "X")


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True
