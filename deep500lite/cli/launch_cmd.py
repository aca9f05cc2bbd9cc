"""``deep500lite launch -n N [--] COMMAND ...``: run a command on N MPI ranks (mpiexec underneath).

Python scripts and modules run under ``python -m mpi4py``; a rank that raises, exits early or is
killed ends the whole job in one line naming it (:mod:`deep500lite.lv3.job_watch`), and launch
exits with that rank's status, else the job's; ``--timeout`` ends a job that runs too long (status 124, default 6 hours), and
``--startup-timeout`` one where a rank does not reach MPI initialisation in time (status 2, the
rank named; default 120 s). Before any rank starts, the script, module or program is checked.
``--hosts``/``--hostfile`` (or ``$DEEP500LITE_HOSTFILE``, or a Slurm allocation) start the ranks on
other hosts (:mod:`deep500lite.lv3.hosts`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import stat
import sys

from deep500lite.cli.args import Path, add_host_options, hosts_from_args, positive_int, positive_seconds
from deep500lite.errors import Deep500Error, RankFailure, StartupTimeout, UserError
from deep500lite.lv3.hosts import launcher_args
from deep500lite.lv3.launch import (DEFAULT_JOB_TIMEOUT, DEFAULT_STARTUP_TIMEOUT, JOB_TIMEOUT_ENV, STARTUP_TIMEOUT_ENV,
                                    JobTimeout, check_ranks, find_mpiexec, oversubscription_note, resolve_timeouts,
                                    run_job)

__all__ = ["add_parser", "run", "build_command", "check_command", "main", "EXIT_TIMEOUT"]

EXIT_TIMEOUT = 124


def add_parser(subparsers):
    """Add ``launch`` to the CLI's subparsers; returns its parser."""
    p = subparsers.add_parser(
        "launch", help="run a command or Python script on N MPI ranks (mpiexec underneath)",
        description=("Run COMMAND on N MPI ranks with mpiexec (the one beside this Python, else on PATH). A Python "
                     "script (SCRIPT.py ...), module (-m MODULE ...) or 'python ...' command runs under "
                     "'python -m mpi4py'. A rank that raises, exits early or with a status other than 0, or is "
                     "killed (a segfault included), before or after MPI initialisation, ends the whole job within "
                     "seconds with one line naming the rank and the cause, and launch exits with that rank's status; "
                     "otherwise the job's exit status is returned. Ctrl-C, SIGTERM and SIGHUP end every process of "
                     "the job. Put '--' before COMMAND when it starts with another option. "
                     "See docs/distributed.md."))
    p.add_argument("-n", "--ranks", type=positive_int, required=True, help="number of MPI ranks")
    p.add_argument("--timeout", type=positive_seconds, default=None, metavar="SECONDS",
                   help=f"end the whole job after this many seconds, exit status 124 (default: ${JOB_TIMEOUT_ENV}, "
                        f"else {DEFAULT_JOB_TIMEOUT:g})")
    p.add_argument("--startup-timeout", type=positive_seconds, default=None, metavar="SECONDS",
                   help=f"a Python rank that has not reached MPI initialisation (imported mpi4py.MPI) after this many "
                        f"seconds is named and the whole job killed, exit status 2 (default: ${STARTUP_TIMEOUT_ENV}, "
                        f"else {DEFAULT_STARTUP_TIMEOUT:g}); a script that never uses mpi4py needs a value longer "
                        f"than it runs")
    p.add_argument("--oversubscribe", action="store_true",
                   help="allow more ranks than 4 per usable core (at least 16 are always allowed)")
    p.add_argument("--comm-timeout", type=positive_seconds, default=None, metavar="SECONDS",
                   help="set DEEP500LITE_COMM_TIMEOUT: a communication of deep500lite's communicator waiting longer "
                        "raises an error naming the rank and operation (default: none)")
    p.add_argument("--mpiexec", type=Path("program"), default=None, metavar="PATH",
                   help="the MPI launcher (default: the mpiexec beside this Python, else on PATH)")
    add_host_options(p)
    # -m MODULE takes the rest of the line, so 'launch -n 2 -m pkg.mod --flag' needs no '--'.
    p.add_argument("-m", dest="module", nargs=argparse.REMAINDER, default=None, metavar="MODULE [ARGS]",
                   help="run a Python module on every rank (python -m MODULE ARGS under mpi4py)")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="SCRIPT.py [ARGS], -m MODULE [ARGS], python ... or any program")
    p.set_defaults(func=run)
    return p


def _is_python(program: str) -> bool:
    name = os.path.basename(program)
    version = name[len("python"):]
    return program == sys.executable or name == "python" or (
        name.startswith("python") and version.replace(".", "").isdigit())


def build_command(command: list[str]) -> list[str]:
    """The per-rank command: Python scripts and modules under ``python -m mpi4py``, others unchanged.

    ``x.py ARGS`` and ``-m MOD ARGS`` run with this Python; ``python[3[.X]] ARGS`` keeps its
    interpreter and gets ``-m mpi4py`` inserted (unless it already has it, or runs ``-c``, which
    mpi4py also handles).

    Raises:
        UserError: no command.
    """
    command = list(command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UserError("launch needs a command to run on every rank, e.g. 'deep500lite launch -n 4 train.py' "
                        "or 'deep500lite launch -n 2 -- python -m mypackage.train --epochs 3'. Received: no command")
    first = command[0]
    if first.endswith(".py") or first == "-m":
        return [sys.executable, "-m", "mpi4py", *command]
    if _is_python(first):
        if command[1:3] == ["-m", "mpi4py"]:
            return command
        return [first, "-m", "mpi4py", *command[1:]]
    return command


def _find_module(name: str) -> bool | None:
    """Whether module ``name`` can be found from the working directory (None: its package failed to import)."""
    sys.path.insert(0, os.getcwd())
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False
    except Exception:  # noqa: BLE001 - a package that fails to import: its rank will say why
        return None
    finally:
        sys.path.pop(0)


def check_command(command: list[str]) -> None:
    """Check, before any rank starts, that the script, module or program of a launch command exists.

    Raises:
        UserError: a missing ``.py`` script, a module that cannot be found, or a program or
            interpreter that is not on PATH.
    """
    command = command[1:] if command and command[0] == "--" else list(command)
    if not command:
        return
    first = command[0]
    python = first.endswith(".py") or first == "-m" or _is_python(first)
    rest = command if first.endswith(".py") or first == "-m" else command[1:]
    if not (first.endswith(".py") or first == "-m") and not shutil.which(first):
        what = "Python interpreter" if python else "program"
        raise UserError(f"launch runs COMMAND on every rank, but the {what} {first!r} is not an executable file nor "
                        f"on PATH. Received: {first!r}")
    if not python:
        return
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c", "-"):
        rest = rest[1:]  # interpreter options such as -u or -O
    if not rest or rest[0] in ("-c", "-"):
        return
    if rest[0] == "-m":
        if len(rest) < 2:
            raise UserError("launch -- -m needs a module name, e.g. 'deep500lite launch -n 2 -- -m mypackage.train'. "
                            "Received: -m with no module")
        if (first == "-m" or first == sys.executable) and _find_module(rest[1]) is False:
            raise UserError(f"launch cannot find the module {rest[1]!r} (from the working directory {os.getcwd()} "
                            f"and this Python's path); no rank was started. Received: -m {rest[1]}")
        return
    if not os.path.exists(rest[0]):
        raise UserError(f"launch cannot find the script {rest[0]!r} (relative paths start at {os.getcwd()}); no "
                        f"rank was started. Received: {rest[0]!r}")
    if os.path.isdir(rest[0]):
        if not os.path.isfile(os.path.join(rest[0], "__main__.py")):
            raise UserError(f"launch runs a Python script, but {rest[0]!r} is a folder without a __main__.py (Python "
                            f"runs a folder only through its __main__.py); no rank was started. Received: a folder "
                            f"{rest[0]!r}")
    elif not stat.S_ISREG(os.stat(rest[0]).st_mode):
        raise UserError(f"launch runs a Python script, a regular file, but {rest[0]!r} is not one (a pipe, a device "
                        f"or a socket); no rank was started. Received: {rest[0]!r}")
    elif not os.access(rest[0], os.R_OK):
        raise UserError(f"launch cannot read the script {rest[0]!r} (no read permission); no rank was started. "
                        f"Received: {rest[0]!r}")


def run(args) -> int:
    """Launch the job; returns its exit status (124 on timeout, 2 when a rank did not start, 128 + N when killed by
    signal N)."""
    if getattr(args, "module", None) is not None:
        args.program = ["-m", *args.module, *args.program]
    job_timeout, startup_timeout = resolve_timeouts(args.timeout, args.startup_timeout)
    hosts = hosts_from_args(args)
    check_ranks(args.ranks, "-n", args.oversubscribe, hosts)
    per_rank = build_command(args.program)
    check_command(args.program)
    cmd = [find_mpiexec(args.mpiexec, "deep500lite launch"), *launcher_args(hosts), "-n", str(args.ranks), *per_rank]
    env = dict(os.environ)
    if hosts is not None:
        print(f"deep500lite launch: {args.ranks} ranks on {hosts.describe(args.ranks)}", file=sys.stderr, flush=True)
    note = oversubscription_note(args.ranks, "job's timing", hosts)
    if note:
        print(note, file=sys.stderr, flush=True)
    if args.comm_timeout is not None:
        env["DEEP500LITE_COMM_TIMEOUT"] = str(args.comm_timeout)
    try:
        return run_job(cmd, timeout=job_timeout, env=env, startup_timeout=startup_timeout, hosts=hosts)
    except StartupTimeout:
        raise
    except RankFailure as exc:
        # the rank's exit status is the job's, as mpiexec would give it; the cause in one line
        print(f"deep500lite launch: error: {exc}", file=sys.stderr)
        return exc.status
    except JobTimeout:
        print(f"deep500lite launch: the job did not end within {job_timeout:g} s and was killed: {' '.join(cmd)}",
              file=sys.stderr)
        return EXIT_TIMEOUT


def main(argv=None) -> int:
    """``deep500lite launch`` on its own (``python -m deep500lite.cli.launch_cmd -n 2 script.py``).

    Returns the exit status; input mistakes print one line and return 2.
    """
    parser = argparse.ArgumentParser(prog="deep500lite")
    add_parser(parser.add_subparsers(dest="subcommand"))
    args = parser.parse_args(["launch", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except Deep500Error as exc:
        print(f"deep500lite launch: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
