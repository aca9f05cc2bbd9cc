"""``deep500lite launch -n N [--] COMMAND ...``: run a command on N MPI ranks (mpiexec underneath).

Python scripts and modules run under ``python -m mpi4py``, so an uncaught exception on any rank
aborts the whole job instead of leaving the other ranks waiting. The exit status of the job is
returned; ``--timeout`` ends a job that runs too long (status 124).
"""

from __future__ import annotations

import argparse
import os
import sys

from deep500lite.cli.args import positive_int
from deep500lite.errors import Deep500Error, UserError
from deep500lite.lv3.launch import JobTimeout, find_mpiexec, run_job

__all__ = ["add_parser", "run", "build_command", "main", "EXIT_TIMEOUT"]

EXIT_TIMEOUT = 124


def add_parser(subparsers):
    """Add ``launch`` to the CLI's subparsers; returns its parser."""
    p = subparsers.add_parser(
        "launch", help="run a command or Python script on N MPI ranks (mpiexec underneath)",
        description=("Run COMMAND on N MPI ranks with mpiexec (the one beside this Python, else on PATH). A Python "
                     "script (SCRIPT.py ...), module (-m MODULE ...) or 'python ...' command runs under "
                     "'python -m mpi4py', so an exception on any rank ends the whole job. The job's exit status is "
                     "returned. Put '--' before COMMAND when it starts with an option (-- -m MODULE). "
                     "See docs/distributed.md."))
    p.add_argument("-n", "--ranks", type=positive_int, required=True, help="number of MPI ranks")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="end the whole job after this many seconds, exit status 124 (default: no limit)")
    p.add_argument("--comm-timeout", type=float, default=None, metavar="SECONDS",
                   help="set DEEP500LITE_COMM_TIMEOUT: a communication of deep500lite's communicator waiting longer "
                        "raises an error naming the rank and operation (default: none)")
    p.add_argument("--mpiexec", default=None, metavar="PATH",
                   help="the MPI launcher (default: the mpiexec beside this Python, else on PATH)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND",
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


def run(args) -> int:
    """Launch the job; returns its exit status (124 on timeout, 128 + N when killed by signal N)."""
    for option, value in (("--timeout", args.timeout), ("--comm-timeout", args.comm_timeout)):
        if value is not None and not value > 0:
            raise UserError(f"{option} must be a number of seconds > 0. Received: {option} {value}")
    per_rank = build_command(args.command)
    cmd = [find_mpiexec(args.mpiexec, "deep500lite launch"), "-n", str(args.ranks), *per_rank]
    env = dict(os.environ)
    if args.comm_timeout is not None:
        env["DEEP500LITE_COMM_TIMEOUT"] = str(args.comm_timeout)
    try:
        return run_job(cmd, timeout=args.timeout, env=env)
    except JobTimeout:
        print(f"deep500lite launch: the job did not end within {args.timeout:g} s and was killed: {' '.join(cmd)}",
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
