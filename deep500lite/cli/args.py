"""The CLI's option layer: every option of every command is parsed by a declared type.

The types are :mod:`deep500lite.options` (shared with the recipe checks, below the CLI); this module
re-exports them and holds the option groups several commands share (job limits, hosts). Declare a
new option with one of them, never with a bare ``type=int``/``float`` or an untyped string::

    p.add_argument("--factor", type=Integer(minimum=2), default=4, ...)
    p.add_argument("--max-time", type=positive_seconds, default=2.0, metavar="SECONDS", ...)
    p.add_argument("--max-bytes", type=Size(minimum=4, multiple_of=4), default="64MiB", ...)
    p.add_argument("--frameworks", type=ListOf(Text()), ...)
    p.add_argument("--json", type=Path("output"), ...)
    p.add_argument("--format", choices=TABLE_FORMATS, ...)       # a closed set: argparse's choices

A bad value is one usage line naming the option, what is allowed and what was received, exit 2::

    deep500lite infer: error: argument --batch-size: must be a positive integer (1, 2, 3, ...). Received: '0'
    deep500lite bench allreduce: error: argument --max-bytes: must be a size in bytes (4, 64KiB, 256MiB), ...

``tests/reliability/test_generated_options.py`` walks :func:`deep500lite.cli.build_parser`, fails on
an option without a declared type (or ``choices``), and feeds every option the wrong values its
type declares (below its minimum, above its maximum, not a power of two, ``nan``, empty, control
characters, ...).
"""

from __future__ import annotations

from deep500lite.options import (Choice, Flag, Integer, ListOf, Number, OneOf, Parsed, Path, Size, Sweep, Text,
                                 ValueType, nonnegative_int, positive_int, positive_seconds, seed)

__all__ = ["positive_int", "nonnegative_int", "positive_seconds", "seed", "add_job_limit_options",
           "add_host_options", "hosts_from_args", "ValueType", "Integer", "Number", "Size", "Text", "Path", "Choice",
           "ListOf", "Sweep", "Flag", "Parsed", "OneOf", "fraction", "name_text"]

#: A fraction in [0, 1].
fraction = Number(minimum=0, maximum=1, wording="a number from 0 to 1 (0.05 is 5%)")
#: A name: a framework, a recipe, a machine, a label filter (non-empty text, no control characters).
name_text = Text(max_length=256)


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
    parser.add_argument("--hosts", type=Text(), default=None, metavar="HOST:SLOTS,...",
                        help=f"{when}start the ranks on these hosts through mpiexec (ssh unless $HYDRA_LAUNCHER "
                             "says otherwise), filling each host's slots in order: node1:2,node2:2 (default: "
                             "$DEEP500LITE_HOSTFILE, else a Slurm allocation this runs in, else this machine)")
    parser.add_argument("--hostfile", type=Path("input"), default=None, metavar="FILE",
                        help=f"{when}the hosts from a file, one HOST[:SLOTS] (or Open MPI's 'HOST slots=N') a line")


def hosts_from_args(args):
    """The :class:`~deep500lite.lv3.hosts.Hosts` of parsed ``--hosts``/``--hostfile`` (or their defaults), or None.

    Raises:
        UserError: both flags, a malformed list or file, or a Slurm allocation without ``srun``.
    """
    from deep500lite.lv3.hosts import resolve_hosts

    return resolve_hosts(getattr(args, "hosts", None), getattr(args, "hostfile", None))
