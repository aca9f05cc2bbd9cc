"""Starting MPI jobs: find ``mpiexec``, check the rank count and time limits, and run a job that ends
whole, whatever happens to one of its ranks or to the command that started it.

Used by ``deep500lite launch``, ``deep500lite bench allreduce``, ``deep500lite run RECIPE -n N``
and :class:`~deep500lite.lv3.mpi_helper.mpi_fork`.

Every rank runs under a supervisor (:mod:`deep500lite.lv3.rank_start`) that reports to the
launcher over TCP how the rank is doing (:mod:`deep500lite.lv3.job_watch`), so that:

- a rank that raises, exits early or with a status other than 0, or is killed by a signal, at any
  point (before MPI initialisation included), ends the whole job within a fraction of a second,
  and :class:`~deep500lite.errors.RankFailure` names the rank and the cause in one line;
- the **start-up timeout** (:data:`DEFAULT_STARTUP_TIMEOUT`, or :data:`STARTUP_TIMEOUT_ENV`):
  every Python rank must reach MPI initialisation (its first import of ``mpi4py.MPI``) within
  it, or the job is killed and :class:`~deep500lite.errors.StartupTimeout` names the ranks that
  did not;
- the **job timeout** (:data:`DEFAULT_JOB_TIMEOUT`, or :data:`JOB_TIMEOUT_ENV`, for the commands
  that use :func:`resolve_timeouts`): the whole job is killed when it runs longer;
- nothing outlives the command: ``mpiexec`` runs in a session of its own and dies with the
  process that started it (``PR_SET_PDEATHSIG``), every supervisor kills its rank when the
  launcher's connection closes, and an ended job's process tree is stopped and killed whole.

A job across hosts (``hosts=``, :mod:`deep500lite.lv3.hosts`) keeps all of it: its ranks report
to this machine's host name, as hydra gives its proxies (or :data:`STARTUP_HOST_ENV`), and an
ended job's ``mpiexec`` first gets SIGTERM, so that hydra ends the ranks on the other hosts, then
SIGKILL.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from deep500lite.errors import JobTimeout  # noqa: F401 - defined in errors, re-exported here
from deep500lite.errors import RankFailure, StartupTimeout, UserError
from deep500lite.lv3.job_watch import JobChannel, describe_failures
from deep500lite.lv3.rank_start import CHANNEL_ENV, EXEC_FLAG, REPORT_ENV
from deep500lite.processes import (descendants, die_with_parent, identify, kill_identified, kill_pids, kill_tree,
                                  signals_held, wait_gone)

__all__ = ["find_mpiexec", "run_job", "JobTimeout", "StartupTimeout", "resolve_timeouts", "check_ranks",
           "usable_cores", "oversubscription_note", "max_sensible_ranks", "DEFAULT_JOB_TIMEOUT",
           "DEFAULT_STARTUP_TIMEOUT", "JOB_TIMEOUT_ENV", "STARTUP_TIMEOUT_ENV", "STARTUP_HOST_ENV", "RANK_START",
           "KILL_GRACE", "kill_pids", "RankFailure"]

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
#: Seconds the supervisors of an ended job have to end their ranks and mpiexec to pass their output on and exit.
_SOFT_END = 2.0
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


@functools.lru_cache(maxsize=8)
def _is_hydra(mpiexec: str) -> bool:
    """Whether ``mpiexec`` is MPICH's hydra (it says so in ``--version``)."""
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "HYDRA" in out


def _watched(cmd: list[str], programs: bool = True) -> tuple[list[str], int | None, bool]:
    """``cmd`` with every rank under a supervisor (:mod:`~deep500lite.lv3.rank_start`), its rank count, and
    whether the ranks are Python (``python -m mpi4py`` becomes ``python RANK_START``; with ``programs``, any
    other program after ``-n N`` becomes ``python RANK_START --exec PROGRAM``). The count is None when the job
    cannot be watched."""
    cmd = list(cmd)
    ranks, at = None, None
    for i, arg in enumerate(cmd[1:-1], start=1):
        if arg in ("-n", "-np") and cmd[i + 1].isdigit():
            ranks, at = int(cmd[i + 1]), i + 2
            break
    for i in range(1, len(cmd) - 2):
        if cmd[i + 1:i + 3] == ["-m", "mpi4py"] and os.path.basename(cmd[i]).startswith("python"):
            cmd[i + 1:i + 3] = [RANK_START]
            return cmd, ranks, True
    if programs and at is not None and at < len(cmd) and not cmd[at].startswith("-"):
        return [*cmd[:at], sys.executable, RANK_START, EXEC_FLAG, *cmd[at:]], ranks, False
    return cmd, None, False


def run_job(cmd: list[str], timeout: float | None = None, env: dict | None = None,
            startup_timeout=_DEFAULT, hosts=None) -> int:
    """Run ``cmd`` (an ``mpiexec -n N ...`` line) in a new session, watch every rank, and wait for it.

    Each rank starts under a supervisor (:mod:`deep500lite.lv3.rank_start`: ``python -m mpi4py``
    becomes ``python RANK_START``, another program ``python RANK_START --exec PROGRAM`` on this
    machine) that reports to this process how the rank is doing. The first rank that fails
    (:mod:`deep500lite.lv3.job_watch`: it raised, exited early or with a status other than 0, was
    killed by a signal) ends the whole job within a fraction of a second, and :class:`RankFailure`
    names it; the traceback of a rank that raised is printed once, to stderr. Python ranks must
    also reach MPI initialisation within ``startup_timeout`` seconds. ``mpiexec`` dies with this
    process (``PR_SET_PDEATHSIG``), and every supervisor ends its rank when this process is gone,
    so nothing of the job outlives its command, even after ``kill -9``.

    Args:
        cmd: the command.
        timeout: seconds after which the whole job is ended and :class:`JobTimeout` raised (None:
            no limit).
        env: the environment (default: this process's).
        startup_timeout: seconds every Python rank has to reach MPI initialisation (None: not
            watched; default: :data:`STARTUP_TIMEOUT_ENV`, else :data:`DEFAULT_STARTUP_TIMEOUT`).
        hosts: the :class:`~deep500lite.lv3.hosts.Hosts` that ``cmd`` runs on (None: this
            machine): the ranks then report to this machine's host name (or
            :data:`STARTUP_HOST_ENV`), programs that are not Python run unwatched, and an ended
            job's ``mpiexec`` gets SIGTERM and :data:`KILL_GRACE` seconds to end the ranks on the
            other hosts before SIGKILL.

    Returns:
        The exit status (0 when every rank finished); ``128 + N`` when ``mpiexec`` was killed by signal ``N``.

    Raises:
        RankFailure: a rank failed (names it and the cause; ``status`` is the rank's exit status).
        JobTimeout: the job ran past ``timeout``.
        StartupTimeout: a rank had not reached MPI initialisation after ``startup_timeout``
            (names the ranks).
        UserError: a bad ``startup_timeout`` or environment variable.
    """
    if startup_timeout is _DEFAULT:
        startup_timeout = resolve_timeouts()[1]
    elif startup_timeout is not None:
        startup_timeout = _seconds(startup_timeout, "startup_timeout", "startup_timeout=")
    given = list(cmd)
    cmd, ranks, python = _watched(given, programs=hosts is None)
    if ranks and _is_hydra(cmd[0]):
        cmd.insert(1, "-disable-auto-cleanup")
    sys.stdout.flush()
    sys.stderr.flush()
    grace = KILL_GRACE if hosts is not None else 0.0
    job_env = dict(os.environ if env is None else env)
    job_env.pop(REPORT_ENV, None)
    channel = None
    if ranks:
        channel = JobChannel(None if hosts is None else (job_env.get(STARTUP_HOST_ENV) or socket.gethostname()))
        channel.python = python
        job_env[CHANNEL_ENV] = channel.address
    try:
        proc = subprocess.Popen(cmd, env=job_env, start_new_session=True, preexec_fn=die_with_parent())
        try:
            rc = _wait(proc, given, timeout, startup_timeout if ranks and python else None, ranks, channel, grace,
                       channel.where if channel is not None and hosts is not None else None)
        except BaseException:
            with signals_held():
                _end(proc, channel, ranks, grace)
            raise
    finally:
        if channel is not None:
            channel.close()
    return 128 - rc if rc < 0 else rc


def _wait(proc, cmd, timeout, startup_timeout, ranks, channel, grace=0.0, remote=None) -> int:
    start = time.monotonic()
    deadline = math.inf if timeout is None else start + timeout
    startup_deadline = math.inf if startup_timeout is None else start + startup_timeout
    while True:
        if channel is not None:
            channel.poll(_POLL_SECONDS)
            rc = proc.poll()
        else:
            try:
                rc = proc.wait(timeout=_POLL_SECONDS)
            except subprocess.TimeoutExpired:
                rc = None
        failed = channel.failures() if channel is not None else []
        if rc is not None and channel is not None and not failed:
            _drain(channel)  # the ranks' last reports, sent before mpiexec ended
            failed = channel.failures()
        if failed:
            if rc is None:
                with signals_held():
                    _end(proc, channel, ranks, grace)
            raise _failure(failed, ranks, cmd)
        if rc is not None:
            return rc
        now = time.monotonic()
        if now >= startup_deadline:
            missing = channel.missing(ranks)
            if missing:
                with signals_held():
                    _end(proc, channel, ranks, grace)
                raise StartupTimeout(_startup_message(missing, ranks, startup_timeout, cmd, remote))
            startup_deadline = math.inf
        if now >= deadline:
            with signals_held():
                _end(proc, channel, ranks, grace)
            raise JobTimeout(f"the job did not end within {timeout:g} s and was killed: {' '.join(cmd)}")


def _drain(channel: JobChannel, within: float = 1.0) -> None:
    """Read the reports still in flight after mpiexec has ended, until every connected rank has said how it ended."""
    deadline = time.monotonic() + within
    while True:
        channel.poll(0.0 if all(s.ended for s in channel.states.values()) else _POLL_SECONDS)
        if all(s.ended for s in channel.states.values()) or time.monotonic() >= deadline:
            channel.poll(0.0)
            return


def _failure(failed, ranks, cmd) -> RankFailure:
    first = failed[0]
    if first.state.traceback:
        text = first.state.traceback
        sys.stderr.write(text if text.endswith("\n") else text + "\n")
        sys.stderr.flush()
    return RankFailure(f"{describe_failures(failed, ranks)}, so the whole job was ended", first.status,
                       first.state.traceback)


def _end(proc: subprocess.Popen, channel: JobChannel | None, ranks: int | None, grace: float = 0.0) -> None:
    """End the job: each supervisor ends its rank (so mpiexec passes their last output on and exits); what is still
    running after a short while (SIGTERM to mpiexec first across hosts) is stopped and killed, process tree and all."""
    if proc.poll() is not None:
        proc.wait()
        return
    below = identify(descendants(proc.pid))
    if channel is not None and ranks and channel.all_connected(ranks):
        channel.end_ranks()
        deadline = time.monotonic() + _SOFT_END + grace
        while proc.poll() is None and time.monotonic() < deadline:
            channel.poll(_POLL_SECONDS)
    # On other hosts only hydra can end the ranks: SIGTERM makes mpiexec tell its proxies to kill
    # them before it exits; what is left after the grace period is killed here.
    if grace > 0 and proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=grace)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass
    if proc.poll() is None:
        for pid, started in identify(kill_tree(proc.pid)).items():
            below.setdefault(pid, started)
    # MPICH's hydra starts its proxy and every rank in sessions of their own: what the tree had is killed by pid
    # too, so that no rank outlives the job (a process still in its tree was stopped and killed above).
    kill_identified(below)
    proc.wait()
    wait_gone(below, _SOFT_END)  # SIGKILL is delivered at once, but a process takes a moment to be gone


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
