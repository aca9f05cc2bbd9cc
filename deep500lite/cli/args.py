"""Argument types shared by the subcommands: positive and non-negative integers, positive seconds; the job
limit and host options of the multi-rank commands.

The integer types live in :mod:`deep500lite.utils`, so the recipe worker (below the CLI) uses the
same ones; :func:`positive_seconds` is for time limits (``--max-time``, ``--timeout``).

Each reports a bad value through argparse (a one-line usage error, exit status 2) in one wording::
    deep500lite infer: error: argument --batch-size: must be a positive integer (1, 2, 3, ...). Received: '0'
    deep500lite infer: error: argument --max-time: must be a finite number of seconds > 0 (0.5, 2, 60). Received: 'nan'
"""

from __future__ import annotations

import argparse
import math

from deep500lite.utils import nonnegative_int, positive_int

__all__ = ["positive_int", "nonnegative_int", "positive_seconds", "add_job_limit_options", "add_host_options",
           "hosts_from_args"]


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0 (``-1``, ``0``, ``nan`` and ``inf`` are refused).

    Args:
        text: the command-line value.

    Returns:
        The number of seconds.

    Raises:
        argparse.ArgumentTypeError: anything else (argparse reports it as a usage error).
    """
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0 (0.5, 2, 60). Received: {text!r}")
    return value


def add_job_limit_options(parser, job_flag: str = "--timeout", when: str = "") -> None:
    """Add the job timeout, start-up timeout and ``--oversubscribe`` options of a multi-rank command.

    Args:
        parser: the subcommand's parser (or argument group).
        job_flag: the flag of the whole-job limit (``--job-timeout`` where ``--timeout`` means another limit).
        when: a prefix for the help texts (``"with -n: "`` for options that only apply with ranks).
    """
    parser.add_argument(job_flag, type=positive_seconds, default=None, metavar="SECONDS",
                        dest=job_flag.lstrip("-").replace("-", "_"),
                        help=f"{when}kill the whole job after this many seconds (default: $DEEP500LITE_JOB_TIMEOUT, "
                             "else 21600 = 6 hours)")
    parser.add_argument("--startup-timeout", type=positive_seconds, default=None, metavar="SECONDS",
                        help=f"{when}a rank not at MPI initialisation after this long is named and the job killed "
                             "(default: $DEEP500LITE_STARTUP_TIMEOUT, else 120)")
    parser.add_argument("--oversubscribe", action="store_true",
                        help=f"{when}allow more than 4 ranks per usable core (at least 16 are always allowed)")


def add_host_options(parser, when: str = "") -> None:
    """Add ``--hosts`` and ``--hostfile`` (the hosts a multi-rank command starts its ranks on).

    Without either, the ranks run on the hosts of ``$DEEP500LITE_HOSTFILE``, else those of a Slurm
    allocation this process runs in, else on this machine (:func:`deep500lite.lv3.hosts.resolve_hosts`).

    Args:
        parser: the subcommand's parser (or argument group).
        when: a prefix for the help texts (``"with -n: "``).
    """
    parser.add_argument("--hosts", default=None, metavar="HOST:SLOTS,...",
                        help=f"{when}start the ranks on these hosts through mpiexec (ssh unless $HYDRA_LAUNCHER "
                             "says otherwise), filling each host's slots in order: node1:2,node2:2 (default: "
                             "$DEEP500LITE_HOSTFILE, else a Slurm allocation this runs in, else this machine)")
    parser.add_argument("--hostfile", default=None, metavar="FILE",
                        help=f"{when}the hosts from a file, one HOST[:SLOTS] (or Open MPI's 'HOST slots=N') a line")


def hosts_from_args(args):
    """The :class:`~deep500lite.lv3.hosts.Hosts` of parsed ``--hosts``/``--hostfile`` (or their defaults), or None.

    Raises:
        UserError: both flags, a malformed list or file, or a Slurm allocation without ``srun``.
    """
    from deep500lite.lv3.hosts import resolve_hosts

    return resolve_hosts(getattr(args, "hosts", None), getattr(args, "hostfile", None))
