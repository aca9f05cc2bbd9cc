"""``deep500lite bench allreduce``: allreduce algorithms over message sizes, against the alpha-beta model.

Wired into ``deep500lite bench`` by :func:`add_subparser`; the work is in :mod:`deep500lite.bench.allreduce`.
"""

from __future__ import annotations

import json
import sys

__all__ = ["add_subparser", "run"]


def add_subparser(sub):
    """Add ``allreduce`` to the ``bench`` subparsers ``sub``; returns its parser."""
    p = sub.add_parser(
        "allreduce", help="allreduce algorithms over MPI: time, algbw/busbw and the alpha-beta prediction",
        description=("Launch an MPI job on N ranks (mpiexec underneath) and time each allreduce algorithm (native, "
                     "ring, recursive_doubling, rabenseifner, tree, auto) for each message size; print the median "
                     "with its 95% CI, algbw and busbw (nccl-tests definitions), the alpha-beta model's prediction "
                     "and the number of wrong elements. See docs/distributed.md."))
    p.add_argument("-n", "--ranks", type=int, default=2, help="number of MPI ranks (default 2)")
    p.add_argument("--algorithms", default=",".join(_default_algorithms()),
                   help="comma-separated: native, ring, recursive_doubling, rabenseifner, tree, auto (default all)")
    p.add_argument("--min-bytes", default="4", help="smallest message, e.g. 4, 1KiB (default 4)")
    p.add_argument("--max-bytes", default="256MiB", help="largest message, e.g. 64MiB (default 256MiB)")
    p.add_argument("--factor", type=int, default=4, help="each size is this many times the last (default 4)")
    p.add_argument("--max-time", type=float, default=0.5, metavar="SECONDS",
                   help="seconds of timed calls per size and algorithm, roughly; at least 3 calls (default 0.5)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                   help="a rank waiting longer than this in one communication ends the job with an error naming "
                        "it (default 120)")
    p.add_argument("--mpiexec", default=None, help="the MPI launcher (default: the one beside this Python, else PATH)")
    p.add_argument("--format", default="table", help="table, markdown or csv (default table)")
    p.add_argument("--json", default=None, metavar="FILE",
                   help="write every raw sample, the model and the environment here")
    p.add_argument("--plot", default=None, metavar="FILE",
                   help="write a PNG: time per size and algorithm with the alpha-beta prediction, and busbw "
                        "(needs matplotlib)")
    p.set_defaults(func=run)
    return p


def _default_algorithms():
    from deep500lite.bench.allreduce import DEFAULT_ALGORITHMS

    return DEFAULT_ALGORITHMS


def run(args) -> int:
    """Run ``deep500lite bench allreduce`` from parsed arguments; returns the exit status (1 if any data was wrong)."""
    from deep500lite.bench import allreduce as bench
    from deep500lite.errors import UserError, format_choices
    from deep500lite.metrics.tables import TABLE_FORMATS
    from deep500lite.utils import atomic_write_text

    if args.format not in TABLE_FORMATS:
        raise UserError(f"--format must be one of {format_choices(TABLE_FORMATS)}. Received: {args.format!r}")
    sizes = bench.message_sizes(bench.parse_bytes(args.min_bytes), bench.parse_bytes(args.max_bytes), args.factor)
    algorithms = bench.parse_algorithms(args.algorithms)
    if args.timeout <= 0:
        raise UserError(f"--timeout must be a positive number of seconds. Received: {args.timeout}")
    result = bench.run_allreduce_benchmark(args.ranks, sizes, algorithms, max_time=args.max_time,
                                           comm_timeout=args.timeout, mpiexec=args.mpiexec)
    text = sys.stderr if args.format == "csv" else sys.stdout
    print(f"allreduce of float32 sums on {result.ranks} ranks ({result.mpi_library})", file=text)
    print(result.describe_model(), file=text)
    print(result.table(args.format), flush=True)
    wrong = result.total_wrong()
    print(f"data check: {wrong} wrong elements" + (" -- SOME RESULTS ARE WRONG" if wrong else ""), file=text)
    if args.json:
        from deep500lite.environment import collect_environment

        payload = result.to_dict()
        payload["environment"] = collect_environment()
        atomic_write_text(args.json, json.dumps(payload, indent=1, default=str))
        print(f"wrote {args.json}", file=text)
    if args.plot:
        print(f"wrote {result.plot(args.plot)}", file=text)
    return 1 if wrong else 0
