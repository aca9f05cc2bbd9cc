"""Starting MPI jobs: find ``mpiexec``, check the rank count and time limits, and run a job in its own
process group with a job timeout and a start-up timeout.

Used by ``deep500lite launch``, ``deep500lite bench allreduce``, ``deep500lite run RECIPE -n N``
and :class:`~deep500lite.lv3.mpi_helper.mpi_fork`.

Two limits keep a job from hanging:

- the **start-up timeout** (:data:`DEFAULT_STARTUP_TIMEOUT`, or :data:`STARTUP_TIMEOUT_ENV`):
  every Python rank must reach MPI initialisation (its first import of ``mpi4py.MPI``) within it,
  or the job is killed and :class:`~deep500lite.errors.StartupTimeout` names the ranks that did
  not. Ranks run under :mod:`deep500lite.lv3.rank_start`, which marks each rank's start in a
  temporary folder; a command that is not ``python -m mpi4py ...`` is not watched;
- the **job timeout** (:data:`DEFAULT_JOB_TIMEOUT`, or :data:`JOB_TIMEOUT_ENV`, for the commands
  that use :func:`resolve_timeouts`): the whole job is killed when it runs longer.

A job across hosts (``hosts=``, :mod:`deep500lite.lv3.hosts`) keeps both: its ranks report their
start over TCP instead of in a local folder (:class:`_MarkServer`; the address is this machine's
host name, as hydra gives its proxies, or :data:`STARTUP_HOST_ENV`), and a killed job's
``mpiexec`` first gets SIGTERM, so that hydra ends the ranks on the other hosts, then SIGKILL.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from deep500lite.errors import JobTimeout  # noqa: F401 - defined in errors, re-exported here
from deep500lite.errors import StartupTimeout, UserError
from deep500lite.lv3.rank_start import STARTUP_DIR_ENV

__all__ = ["find_mpiexec", "run_job", "JobTimeout", "StartupTimeout", "resolve_timeouts", "check_ranks",
           "usable_cores", "oversubscription_note", "max_sensible_ranks", "DEFAULT_JOB_TIMEOUT",
           "DEFAULT_STARTUP_TIMEOUT", "JOB_TIMEOUT_ENV", "STARTUP_TIMEOUT_ENV", "STARTUP_HOST_ENV", "RANK_START",
           "KILL_GRACE", "kill_pids"]

#: Seconds a multi-rank command's job may run by default: 6 hours, longer than any bundled recipe by
#: far, short enough that a job hung after start-up still ends the same working day.
DEFAULT_JOB_TIMEOUT = 6 * 3600.0
#: Seconds every rank has by default to reach MPI initialisation: room for importing TensorFlow
#: or torch on several ranks sharing a few cores, with a margin.
DEFAULT_STARTUP_TIMEOUT = 120.0
#: Environment variables overriding the two defaults (a command-line flag overrides both).
JOB_TIMEOUT_ENV = "DEEP500LITE_JOB_TIMEOUT"
STARTUP_TIMEOUT_ENV = "DEEP500LITE_STARTUP_TIMEOUT"
#: This machine's address as the ranks on other hosts reach it (default: its host name, as hydra uses).
STARTUP_HOST_ENV = "DEEP500LITE_STARTUP_HOST"
#: Seconds a killed job across hosts has to end its ranks after SIGTERM, before SIGKILL.
KILL_GRACE = 5.0
#: The script every watched Python rank runs first (in place of ``-m mpi4py``).
RANK_START = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank_start.py")

_POLL_SECONDS = 0.05
_DEFAULT = object()


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


def _seconds(value, name: str, source: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise UserError(f"{name} must be a finite number of seconds > 0 (e.g. 60). Received: {source}{value!r}")
    return seconds


def resolve_timeouts(timeout=None, startup_timeout=None, flag: str = "--timeout",
                     startup_flag: str = "--startup-timeout") -> tuple[float, float]:
    """The job and start-up timeouts of a multi-rank command: the given value, else the environment
    variable (:data:`JOB_TIMEOUT_ENV`, :data:`STARTUP_TIMEOUT_ENV`), else the default.

    Args:
        timeout: the job timeout in seconds from the command line (None: not given).
        startup_timeout: the start-up timeout in seconds (None: not given).
        flag, startup_flag: the options' names, for messages.

    Returns:
        ``(job_timeout, startup_timeout)`` in seconds.

    Raises:
        UserError: a value (given or from the environment) that is not a finite number > 0.
    """
    out = []
    for given, name, env, default in ((timeout, flag, JOB_TIMEOUT_ENV, DEFAULT_JOB_TIMEOUT),
                                      (startup_timeout, startup_flag, STARTUP_TIMEOUT_ENV, DEFAULT_STARTUP_TIMEOUT)):
        if given is not None:
            out.append(_seconds(given, name, name + " "))
        elif os.environ.get(env, "").strip():
            out.append(_seconds(os.environ[env], f"{name} (from the environment variable {env})", f"{env}="))
        else:
            out.append(default)
    return out[0], out[1]


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; ``os.cpu_count()`` where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def oversubscription_note(ranks: int, what: str = "step", hosts=None) -> str | None:
    """A one-line note when ``ranks`` is above :func:`usable_cores` (or the hosts' slots), else ``None``.

    Ranks that share cores take turns on them and wait in every exchange for ranks that are not
    running, so what they measure is not what ``ranks`` ranks with a core each would measure.

    Args:
        ranks: the job's rank count.
        what: what the job measures, for the note ("step", "allreduce", ...).
        hosts: the job's :class:`~deep500lite.lv3.hosts.Hosts` (None: this machine): the note is
            then about their slots.
    """
    if hosts is not None:
        slots = hosts.slots
        if slots is None or ranks <= slots:
            return None
        return (f"note: {ranks} ranks on {slots} slot{'s' if slots > 1 else ''} of {hosts.source}: hosts run more "
                f"ranks than they have slots, so the {what} is not that of {ranks} ranks with a slot each")
    cores = usable_cores()
    if ranks <= cores:
        return None
    return (f"note: {ranks} ranks share {cores} core{'s' if cores > 1 else ''} here: they take turns on them and "
            f"wait in every exchange for ranks that are not running, so the {what} is not that of {ranks} ranks "
            f"with a core each (docs/scaling.md, Limits)")


def max_sensible_ranks() -> int:
    """The most ranks a job may have on this machine without ``--oversubscribe``: 4 per usable core, at least 16."""
    return max(16, 4 * usable_cores())


def check_ranks(ranks, flag: str = "-n", oversubscribe: bool = False, hosts=None) -> int:
    """Check a rank count: an integer >= 1, and at most :func:`max_sensible_ranks` unless ``oversubscribe``.

    With ``hosts`` (a :class:`~deep500lite.lv3.hosts.Hosts`), the limit is 4 per slot of the
    hosts (at least 16), and none where the slots are not known here (a Slurm allocation
    whose node list hydra reads itself).

    Raises:
        UserError: anything else.
    """
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise UserError(f"{flag} must be a number of ranks, an integer >= 1. Received: {flag} {ranks!r}")
    if hosts is not None:
        slots = hosts.slots
        if slots is not None and ranks > max(16, 4 * slots) and not oversubscribe:
            raise UserError(f"{flag} {ranks} starts more ranks than {hosts.source} can run sensibly (at most "
                            f"{max(16, 4 * slots)}: 4 per slot, at least 16); pass --oversubscribe to start them "
                            f"anyway. Received: {flag} {ranks}")
        return ranks
    limit = max_sensible_ranks()
    if ranks > limit and not oversubscribe:
        raise UserError(f"{flag} {ranks} starts more ranks than this machine can run sensibly (at most {limit}: 4 "
                        f"per usable core, at least 16); pass --oversubscribe to start them anyway. "
                        f"Received: {flag} {ranks}")
    return ranks


def _watched(cmd: list[str]) -> tuple[list[str], int | None]:
    """``cmd`` with ``python -m mpi4py`` replaced by ``python RANK_START``, and its rank count (None: not watched)."""
    cmd = list(cmd)
    ranks = None
    for i, arg in enumerate(cmd[1:-1], start=1):
        if arg in ("-n", "-np") and cmd[i + 1].isdigit():
            ranks = int(cmd[i + 1])
            break
    for i in range(1, len(cmd) - 2):
        if cmd[i + 1:i + 3] == ["-m", "mpi4py"] and os.path.basename(cmd[i]).startswith("python"):
            cmd[i + 1:i + 3] = [RANK_START]
            return cmd, ranks
    return cmd, None


def run_job(cmd: list[str], timeout: float | None = None, env: dict | None = None,
            startup_timeout=_DEFAULT, hosts=None) -> int:
    """Run ``cmd`` (an ``mpiexec -n N ...`` line) in a new process group and wait for it.

    When the ranks run ``python -m mpi4py ...``, each starts under :mod:`deep500lite.lv3.rank_start`
    instead (the same behaviour, plus the start mark), and every rank must reach MPI
    initialisation within ``startup_timeout`` seconds.

    Args:
        cmd: the command.
        timeout: seconds after which the whole process group is killed and :class:`JobTimeout`
            raised (None: no limit).
        env: the environment (default: this process's).
        startup_timeout: seconds every rank has to reach MPI initialisation (None: not watched;
            default: :data:`STARTUP_TIMEOUT_ENV`, else :data:`DEFAULT_STARTUP_TIMEOUT`).
        hosts: the :class:`~deep500lite.lv3.hosts.Hosts` that ``cmd`` runs on (None: this
            machine): the ranks then report their start over TCP, and a killed job gets
            :data:`KILL_GRACE` seconds after SIGTERM to end its ranks on the other hosts.

    Returns:
        The exit status; ``128 + N`` when killed by signal ``N``.

    Raises:
        JobTimeout: the job ran past ``timeout``.
        StartupTimeout: a rank had not reached MPI initialisation after ``startup_timeout``
            (names the ranks).
        UserError: a bad ``startup_timeout`` or environment variable.
    """
    if startup_timeout is _DEFAULT:
        startup_timeout = resolve_timeouts()[1]
    elif startup_timeout is not None:
        startup_timeout = _seconds(startup_timeout, "startup_timeout", "startup_timeout=")
    cmd, ranks = _watched(cmd) if startup_timeout is not None else (list(cmd), None)
    sys.stdout.flush()
    sys.stderr.flush()
    grace = KILL_GRACE if hosts is not None else 0.0
    with tempfile.TemporaryDirectory(prefix="d5-start-") as marks:
        job_env = dict(os.environ if env is None else env)
        server = None
        if ranks and hosts is not None:
            server = _MarkServer(marks, job_env.get(STARTUP_HOST_ENV) or socket.gethostname())
            job_env[STARTUP_DIR_ENV] = server.address
        elif ranks:
            job_env[STARTUP_DIR_ENV] = marks
        try:
            proc = subprocess.Popen(cmd, env=job_env, start_new_session=True)
            try:
                rc = _wait(proc, cmd, timeout, startup_timeout if ranks else None, ranks, marks, grace,
                           server.where if server is not None else None)
            except BaseException:
                _kill(proc, grace)
                raise
        finally:
            if server is not None:
                server.close()
    return 128 - rc if rc < 0 else rc


class _MarkServer:
    """Receives the start marks of ranks on other hosts over TCP and writes them into ``marks``.

    A rank connects to :attr:`address` (``tcp://HOST:PORT/TOKEN``) and sends ``TOKEN NAME``, one
    line, for each mark (``alive-rank3``, ``rank3``); the random token keeps other programs'
    connections from counting.
    """

    def __init__(self, marks: str, host: str):
        self.marks, self.token = marks, secrets.token_hex(8)
        if socket.has_dualstack_ipv6():
            self.sock = socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True)
        else:
            self.sock = socket.create_server(("", 0))
        self.sock.settimeout(_POLL_SECONDS * 4)
        port = self.sock.getsockname()[1]
        self.where = f"{host}:{port}"
        self.address = f"tcp://{host}:{port}/{self.token}"
        self.running = True
        self.thread = threading.Thread(target=self._serve, name="deep500lite-start-marks", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.running:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(2.0)
                data = b""
                try:
                    while not data.endswith(b"\n") and len(data) < 256:
                        chunk = conn.recv(256)
                        if not chunk:
                            break
                        data += chunk
                except OSError:
                    continue
            self._mark(data.decode("ascii", "replace"))

    def _mark(self, text: str) -> None:
        for line in text.splitlines():
            token, _, name = line.strip().partition(" ")
            if token == self.token and _MARK_NAME.match(name) and self.running:
                try:
                    with open(os.path.join(self.marks, name), "a", encoding="utf-8"):
                        pass
                except OSError:
                    pass

    def close(self) -> None:
        self.running = False
        self.sock.close()
        self.thread.join(timeout=5)


_MARK_NAME = re.compile(r"^(alive-)?(rank|pid)\d+$")


def _wait(proc, cmd, timeout, startup_timeout, ranks, marks, grace=0.0, remote=None) -> int:
    start = time.monotonic()
    deadline = math.inf if timeout is None else start + timeout
    startup_deadline = math.inf if startup_timeout is None else start + startup_timeout
    while True:
        now = time.monotonic()
        try:
            return proc.wait(timeout=max(0.0, min(deadline, startup_deadline, now + _POLL_SECONDS) - now))
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if now >= startup_deadline:
            missing = _missing_ranks(marks, ranks)
            if missing:
                _kill(proc, grace)
                raise StartupTimeout(_startup_message(missing, ranks, startup_timeout, cmd, remote))
            startup_deadline = math.inf
        if now >= deadline:
            _kill(proc, grace)
            raise JobTimeout(f"the job did not end within {timeout:g} s and was killed: {' '.join(cmd)}")


def _missing_ranks(marks: str, ranks: int):
    """``(not at MPI initialisation, never ran the start code)``: rank lists, or counts where the
    launcher did not say which rank is which; None when every rank has reached MPI initialisation."""
    names = set(os.listdir(marks))
    reached = {n for n in names if not n.startswith("alive-")}
    alive = {n[len("alive-"):] for n in names if n.startswith("alive-")}
    if any(n.startswith("pid") for n in names):
        missing = max(0, ranks - len(reached))
        return (missing, max(0, ranks - len(alive))) if missing else None
    missing = [r for r in range(ranks) if f"rank{r}" not in reached]
    return (missing, [r for r in missing if f"rank{r}" not in alive]) if missing else None


def _who(ranks, total: int) -> str:
    if isinstance(ranks, int):
        return f"{ranks} of the {total} ranks"
    if len(ranks) == 1:
        return f"rank {ranks[0]} of {total}"
    return f"ranks {', '.join(map(str, ranks))} of {total}"


def _startup_message(missing, ranks: int, seconds: float, cmd, remote: str | None = None) -> str:
    stuck, never_ran = missing
    if never_ran:
        rest = stuck - never_ran if isinstance(stuck, int) else [r for r in stuck if r not in never_ran]
        what = (f"{_who(never_ran, ranks)} did not start within {seconds:g} s: its Python never got to "
                f"deep500lite's start-up code, let alone MPI initialisation")
        if rest:
            what += f" ({_who(rest, ranks)} had started but not yet reached MPI initialisation)"
    else:
        what = (f"{_who(stuck, ranks)} did not start within {seconds:g} s: never reached MPI initialisation (the "
                f"first import of mpi4py.MPI)")
    where = ""
    if remote is not None and never_ran:
        where = (f" Ranks on other hosts report their start over TCP to {remote}; if the hosts cannot reach this "
                 f"machine there, set {STARTUP_HOST_ENV} to its address as they see it.")
    return (f"{what}, so the whole job was killed. Every rank must reach MPI initialisation within the start-up "
            f"timeout; a rank stuck in an import, a sleep or a slow file system looks like this. Raise the start-up "
            f"timeout (--startup-timeout or {STARTUP_TIMEOUT_ENV}) if start-up is just slow.{where} Received: "
            f"start-up timeout {seconds:g} s for {' '.join(cmd)}")


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (from /proc; empty where there is none)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill(proc: subprocess.Popen, grace: float = 0.0) -> None:
    # MPICH's hydra starts its proxy and every rank in sessions of their own, out of reach of the
    # job's process group: kill them by pid too, so that no rank outlives the job.
    below = _descendants(proc.pid) if proc.poll() is None else []
    # On other hosts only hydra can end the ranks: SIGTERM makes mpiexec tell its proxies to kill
    # them before it exits; what is left after the grace period is killed here.
    if grace > 0 and proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=grace)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    kill_pids(below)
    proc.wait()


def kill_pids(pids) -> None:
    """SIGKILL each process of ``pids``; those already gone (or not ours) are skipped."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
