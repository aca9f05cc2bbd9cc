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
                     "and the number of wrong elements. A short calibration run of the real algorithms first fits "
                     "alpha, beta, gamma and a memory-copy cost (least squares); each row shows that model's "
                     "prediction and its relative error, and auto chooses by it. See docs/distributed.md and "
                     "docs/scaling.md."))
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
    p.add_argument("--model", default=None, metavar="FILE",
                   help="use this calibration file (from --save-model) instead of calibrating first")
    p.add_argument("--save-model", default=None, metavar="FILE",
                   help="write the model fitted to the real algorithms here, with the environment (rank counts "
                        "already in the file are kept); 'auto' uses it when DEEP500LITE_ALLREDUCE_MODEL names it")
    p.add_argument("--no-calibrate", action="store_true",
                   help="skip the short calibration of the real algorithms (no calibrated predictions)")
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
    if args.model and (args.save_model or args.no_calibrate):
        raise UserError("--model uses a calibration file; it cannot be combined with --save-model or "
                        f"--no-calibrate. Received: --model {args.model!r} with "
                        f"{'--save-model' if args.save_model else '--no-calibrate'}")
    result = bench.run_allreduce_benchmark(args.ranks, sizes, algorithms, max_time=args.max_time,
                                           comm_timeout=args.timeout, mpiexec=args.mpiexec, model_file=args.model,
                                           save_model=args.save_model, calibrate=not args.no_calibrate)
    text = sys.stderr if args.format == "csv" else sys.stdout
    print(f"allreduce of float32 sums on {result.ranks} ranks ({result.mpi_library})", file=text)
    print(result.describe_model(), file=text)
    if result.calibration:
        print(result.describe_calibration(), file=text)
    print(result.table(args.format), flush=True)
    wrong = result.total_wrong()
    print(f"data check: {wrong} wrong elements" + (" -- SOME RESULTS ARE WRONG" if wrong else ""), file=text)
    if args.json:
        from deep500lite.environment import collect_environment

        payload = result.to_dict()
        payload["environment"] = collect_environment()
        atomic_write_text(args.json, json.dumps(payload, indent=1, default=str))
        print(f"wrote {args.json}", file=text)
    if args.save_model and result.calibration:
        print(f"wrote the calibrated model to {args.save_model}", file=text)
    if args.plot:
        print(f"wrote {result.plot(args.plot)}", file=text)
    return 1 if wrong else 0
