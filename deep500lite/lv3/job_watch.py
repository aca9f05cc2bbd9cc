"""The launcher's side of a watched MPI job: what every rank reports, and when the job must end.

Each rank of a job started by :func:`deep500lite.lv3.launch.run_job` runs under a supervisor
(:mod:`deep500lite.lv3.rank_start`) that connects to a :class:`JobChannel` (TCP: 127.0.0.1 for a
job on this machine, every interface for one across hosts; a random token keeps other programs'
connections from counting) and reports the rank's life: started, reached MPI initialisation, its
code ended (with the exit status), the exception that ended it, how the process ended (exit
status or signal). :meth:`JobChannel.failures` turns that into verdicts. A rank has failed when:

- its code raised (the error and its traceback), or it reported a cause of its own;
- it exited with a status other than 0 (``sys.exit(3)``, ``os._exit(3)``, ``MPI_Abort``);
- a signal killed it (SIGSEGV, SIGKILL, ...);
- a Python rank ended with status 0 without its code having ended (``os._exit(0)``);
- its supervisor's connection closed without saying how it ended (the supervisor was killed);
- it ended, with status 0, before MPI initialisation while another rank has initialised MPI
  and runs on: that rank would wait for it forever (MPICH's ranks do).

The launcher ends the job at the first such verdict: it tells every supervisor ``end`` (each
kills its rank, then exits, so that mpiexec passes on the ranks' last output and ends), and kills
what is left of the process tree after a short grace period.
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
import selectors
import socket
import time

from deep500lite.processes import signal_name

__all__ = ["JobChannel", "RankState", "Failure", "describe_failures"]

_NAME = re.compile(r"^(rank|pid)(\d+)$")
_LINE_LIMIT = 1 << 20


@dataclasses.dataclass
class RankState:
    """What one rank's supervisor has reported (see :mod:`deep500lite.lv3.rank_start`)."""

    name: str
    python: bool = True
    pid: int | None = None
    child: int | None = None
    mpi: bool = False
    cause: str | None = None
    error: str | None = None
    traceback: str | None = None
    error_status: int | None = None
    done: int | None = None
    message: str | None = None
    exit_status: int | None = None
    exit_signal: int | None = None
    closed: bool = False
    failed_at: float | None = None

    @property
    def rank(self) -> int | None:
        """The rank number (None under a launcher that does not give it)."""
        m = _NAME.match(self.name)
        return int(m.group(2)) if m and m.group(1) == "rank" else None

    @property
    def ended(self) -> bool:
        """The rank's process has ended (or its supervisor is gone)."""
        return self.closed or self.exit_status is not None or self.exit_signal is not None

    def verdict(self) -> tuple[str, int] | None:
        """``(what happened, exit status)`` when this rank failed on its own terms, else None."""
        when = " after MPI initialisation" if self.mpi else " before MPI initialisation"
        if self.error is not None:
            return f"failed{when}: {self.error}", self.error_status or 1
        status = self.done if self.done is not None else self.exit_status
        if self.cause is not None and (status or self.exit_signal is not None or self.closed):
            return f"failed{when}: {self.cause}", status or 1
        if self.exit_signal is not None:
            return f"was killed by {signal_name(self.exit_signal)}{when}", 128 + self.exit_signal
        if self.done:
            said = f" ({self.message})" if self.message else ""
            return f"exited with status {self.done}{when}{said}", self.done
        if self.exit_status:
            return f"exited with status {self.exit_status}{when}", self.exit_status
        if self.exit_status == 0 and self.python and self.done is None:
            return (f"ended{when} without its code having ended (exit status 0 from os._exit, or a library that "
                    f"ended the process)"), 1
        if self.closed and self.exit_status is None:
            return (f"was lost{when}: its supervisor ended without saying how the rank ended (killed, or its host "
                    f"went away)"), 1
        return None


@dataclasses.dataclass
class Failure:
    """A failed rank: ``who`` (``rank 1 of 2``), ``what`` happened, the ``status`` for the shell, its traceback."""

    state: RankState
    what: str
    status: int


class _Conn:
    def __init__(self, sock):
        self.sock, self.buffer, self.state = sock, b"", None


class JobChannel:
    """The server the ranks' supervisors report to; :meth:`poll` reads what has arrived.

    Args:
        host: the address the ranks reach this machine at (a job across hosts: every interface
            listens), or None for a job on this machine (127.0.0.1 only).
    """

    def __init__(self, host: str | None = None):
        self.token = secrets.token_hex(8)
        if host is None:
            self.sock = socket.create_server(("127.0.0.1", 0), backlog=1024)
            host = "127.0.0.1"
        elif socket.has_dualstack_ipv6():
            self.sock = socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True, backlog=1024)
        else:
            self.sock = socket.create_server(("", 0), backlog=1024)
        self.sock.setblocking(False)
        port = self.sock.getsockname()[1]
        self.where = f"{host}:{port}"
        self.address = f"tcp://{self.where}/{self.token}"
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.sock, selectors.EVENT_READ, None)
        self.states: dict[str, RankState] = {}
        self.python = True

    def poll(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for reports and take in all that have arrived."""
        for key, _ in self.selector.select(timeout):
            if key.data is None:
                self._accept()
            else:
                self._read(key.data)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ, _Conn(sock))

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        conn.buffer += data
        *lines, conn.buffer = conn.buffer.split(b"\n")
        if len(conn.buffer) > _LINE_LIMIT:  # not a supervisor of ours
            self._drop(conn)
            return
        for line in lines:
            if conn.state is None:
                token, _, name = line.decode("ascii", "replace").strip().partition(" ")
                if token != self.token or not _NAME.match(name) or name in self.states:
                    self._drop(conn, said=False)
                    return
                conn.state = self.states[name] = RankState(name, python=self.python)
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                self._take(conn.state, event)

    def _drop(self, conn: _Conn, said: bool = True) -> None:
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        if said and conn.state is not None:
            conn.state.closed = True
            if conn.state.failed_at is None and conn.state.verdict() is not None:
                conn.state.failed_at = time.monotonic()

    @staticmethod
    def _take(state: RankState, event: dict) -> None:
        kind = event.get("event")

        def number(key):
            value = event.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        def text(key):
            value = event.get(key)
            return str(value) if value is not None else None

        if kind == "alive":
            state.pid, state.child = number("pid"), number("child")
        elif kind == "mpi":
            state.mpi = True
        elif kind == "failure" and state.cause is None:
            state.cause = text("message")
        elif kind == "error" and state.error is None:
            state.error, state.traceback, state.error_status = text("error"), text("traceback"), number("status")
        elif kind == "done" and state.done is None:
            state.done, state.message = number("status") or 0, text("message")
        elif kind == "exit":
            state.exit_status, state.exit_signal = number("status"), number("signal")
        if state.failed_at is None and state.verdict() is not None:
            state.failed_at = time.monotonic()

    def failures(self) -> list[Failure]:
        """The ranks that have failed, first failed first (see the module documentation)."""
        found = []
        in_mpi = [s for s in self.states.values() if s.mpi and not s.ended]
        for state in self.states.values():
            verdict = state.verdict()
            if verdict is None and in_mpi and state.ended and not state.mpi and state.python:
                users = ", ".join(str(s.rank if s.rank is not None else s.name) for s in in_mpi)
                verdict = (f"ended (exit status 0) before MPI initialisation while rank {users} had initialised "
                           f"MPI (ranks that use MPI wait for every rank of the job: they would wait forever)"), 1
                if state.failed_at is None:
                    state.failed_at = time.monotonic()
            if verdict is not None:
                found.append(Failure(state, *verdict))
        return sorted(found, key=lambda f: (f.state.failed_at or 0.0, f.state.rank or 0))

    def missing(self, ranks: int):
        """``(not at MPI initialisation, never started)``: rank lists, or counts where the launcher did not say which
        rank is which; None when every rank has reached MPI initialisation."""
        if any(n.startswith("pid") for n in self.states):
            reached = sum(1 for s in self.states.values() if s.mpi)
            missing = max(0, ranks - reached)
            return (missing, max(0, ranks - len(self.states))) if missing else None
        missing = [r for r in range(ranks) if not (f"rank{r}" in self.states and self.states[f"rank{r}"].mpi)]
        return (missing, [r for r in missing if f"rank{r}" not in self.states]) if missing else None

    def all_connected(self, ranks: int) -> bool:
        """Every rank's supervisor has connected and is still there."""
        return len(self.states) >= ranks and not any(s.closed for s in self.states.values())

    def end_ranks(self) -> None:
        """Tell every supervisor still connected to kill its rank and exit."""
        for key in list(self.selector.get_map().values()):
            conn = key.data
            if conn is not None and conn.state is not None:
                try:
                    conn.sock.send(b"end\n")
                except OSError:
                    pass

    def close(self) -> None:
        """Close every connection and the server."""
        for key in list(self.selector.get_map().values()):
            try:
                key.fileobj.close()
            except OSError:
                pass
        self.selector.close()


def describe_failures(failures: list[Failure], ranks: int | None) -> str:
    """One line: the first failed rank and what happened, then the other ranks that failed on their own."""
    def who(state: RankState) -> str:
        if state.rank is None:
            return f"a rank (process {state.name[3:]})"
        return f"rank {state.rank} of {ranks}" if ranks else f"rank {state.rank}"

    first, rest = failures[0], failures[1:]
    line = f"{who(first.state)} {first.what}"
    same = [f for f in rest if f.what == first.what]
    other = [f for f in rest if f.what != first.what]
    if same:
        names = ", ".join(str(f.state.rank) if f.state.rank is not None else f.state.name for f in same)
        line += f" (so did rank{'s' if len(same) > 1 else ''} {names})"
    if other:
        line += f"; {who(other[0].state)} also {other[0].what}"
        if len(other) > 1:
            line += f" (and {len(other) - 1} more rank{'s' if len(other) > 2 else ''})"
    return line
