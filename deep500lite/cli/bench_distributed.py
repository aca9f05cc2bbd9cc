"""``deep500lite bench distributed``: distributed training against the engines users would otherwise pick.

Wired into ``deep500lite bench`` by :func:`add_subparser`; the rows and the work are in
:mod:`deep500lite.bench.distributed`.
"""

from __future__ import annotations

import sys

from deep500lite.cli.args import Integer, Number, Path, Text, positive_int, positive_seconds
from deep500lite.recipe.keys import MAX_BUCKET_MB
from deep500lite.utils import atomic_write_text, finite_json

__all__ = ["add_subparser", "run"]


def add_subparser(sub):
    """Add ``distributed`` to the ``bench`` subparsers ``sub``; returns its parser."""
    from deep500lite.bench.distributed import DEFAULT_ROWS, ROWS

    p = sub.add_parser(
        "distributed", help="distributed training rows against the native engines (torch DDP), over MPI",
        description=("Run each row as one MPI job on this machine: deep500lite's distributed step and the native "
                     "engine's, each warmed up, then timed in alternation (each step after a barrier, its time "
                     "the slowest rank's). Prints the median of the per-pair ratios deep500lite/native with its "
                     "95% CI against the row's target, after checking that both sides compute the same thing "
                     "(verdict 'wrong' otherwise). Rows: " + "; ".join(f"{r.name}: {r.what} (target <= {r.target})"
                                                                     for r in ROWS.values())
                     + ". See docs/parallelism.md."))
    p.add_argument("--rows", type=Text(), default=",".join(DEFAULT_ROWS),
                   help=f"comma-separated rows: {', '.join(ROWS)} (default {','.join(DEFAULT_ROWS)})")
    p.add_argument("-n", "--ranks", type=positive_int, default=None,
                   help="ranks of every row's job, at least 2 (default 2)")
    p.add_argument("--model", type=Text(max_length=256), default=None, help="ddp: lenet or resnet20 (default lenet)")
    p.add_argument("--batch-size", type=positive_int, default=None, help="ddp: samples per rank and step (default 64)")
    p.add_argument("--bucket-mb", type=Number(minimum=0, maximum=MAX_BUCKET_MB), default=None,
                   help="ddp: gradient bucket size of both sides in MiB (deep500lite's bucket_mb, DDP's "
                        "bucket_cap_mb; 0: one bucket per gradient; default 25)")
    p.add_argument("--communicator", default=None, choices=("mpi", "torch"),
                   help="ddp: deep500lite's communicator, mpi (as recipes) or torch (gloo, as DDP; default mpi)")
    p.add_argument("--max-time", type=positive_seconds, default=None,
                   help="seconds of timed steps per row, both sides together (default 20)")
    p.add_argument("--min-pairs", type=positive_int, default=None, help="pairs timed at least (default 20)")
    p.add_argument("--warmup", type=Integer(minimum=0, maximum=1_000_000), default=None, help="untimed steps of each side first (default 5)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="intra-op threads per rank (default: CPU count // ranks)")
    p.add_argument("--mpiexec", type=Path("program"), default=None, help="the MPI launcher (default: the one beside this Python, else PATH)")
    p.add_argument("--json", type=Path("output"), default=None, metavar="FILE", help="write every row, raw time and the environment here")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    """Run ``deep500lite bench distributed`` from parsed arguments; returns the exit status (0 also when a
    row misses its target; 1 when a row's job failed or its sides differ)."""
    from deep500lite.bench.distributed import run_distributed_benchmark
    from deep500lite.metrics.tables import format_ci, format_table

    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    options = {"model": args.model, "batch_size": args.batch_size, "bucket_mb": args.bucket_mb,
               "communicator": args.communicator, "max_time": args.max_time, "min_pairs": args.min_pairs,
               "warmup": args.warmup}
    results = run_distributed_benchmark(rows, ranks=args.ranks, options=options, threads=args.threads,
                                        mpiexec=args.mpiexec,
                                        progress=lambda msg: print(f"... {msg}", file=sys.stderr, flush=True))
    table = []
    for r in results:
        if r.paired is None:
            table.append([r.row.name, r.ranks, "-", "-", "-", "-", f"<= {r.row.target}", r.verdict, r.failed])
            continue
        a, b, q = r.paired.a.summary, r.paired.b.summary, r.paired.ratio
        table.append([r.row.name, r.ranks, format_ci(a.median, a.ci_low, a.ci_high),
                      format_ci(b.median, b.ci_low, b.ci_high), f"{q.median:.3f} [{q.ci_low:.3f}, {q.ci_high:.3f}]",
                      q.n, f"<= {r.row.target}", r.verdict, r.detail])
    print("distributed training, deep500lite vs native, on this machine")
    print(format_table(["row", "ranks", "deep500lite [95% CI]", "native [95% CI]", "ratio [95% CI]", "pairs",
                        "target", "verdict", "detail"], table))
    for r in results:
        if r.check:
            print(f"{r.row.name}: {r.check}")
    if args.json:
        from deep500lite.environment import collect_environment

        payload = {"benchmark": "distributed", "threads": args.threads, "environment": collect_environment(),
                   "results": [r.to_dict() for r in results]}
        atomic_write_text(args.json, finite_json(payload, indent=1))
        print(f"results: {args.json}")
    return 1 if any(r.verdict in ("failed", "wrong") for r in results) else 0
