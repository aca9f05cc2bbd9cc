"""``deep500lite bench op``: operator benchmarks (GEMM, convolution, custom) with a measured roofline.

Wired into ``deep500lite bench`` by :func:`add_subparser`; the work is in :mod:`deep500lite.bench.op`.
"""

from __future__ import annotations

import sys

from deep500lite.cli.args import Integer, ListOf, Path, Text, positive_seconds
from deep500lite.errors import UserError
from deep500lite.escaping import terminal
from deep500lite.metrics.tables import TABLE_FORMATS
from deep500lite.utils import atomic_write_text, finite_json

__all__ = ["add_subparser", "run"]


def add_subparser(sub):
    """Add ``op`` to the ``bench`` subparsers ``sub``; returns its parser."""
    p = sub.add_parser(
        "op", help="operator benchmarks: GEMM and convolution on each framework, roofline style",
        description=("Time GEMM and convolution cases (DeepBench-style sizes, including the skinny GEMMs of small "
                     "per-node batches) on torch, TensorFlow, ONNX Runtime and the numpy reference; print the "
                     "median with its 95% CI, GFLOP/s, and the fraction of this machine's measured peak and of the "
                     "roofline bound. See docs/operator-benchmarks.md."))
    p.add_argument("--suite", type=ListOf(Text(max_length=64)), default="gemm,conv",
                   help="comma-separated: gemm, conv, skinny (the GEMMs of AlexNet's and GoogLeNet's layers at "
                        "per-node batches 1 to 256; feeds 'model scaling --gemm-from'), custom (default gemm,conv)")
    p.add_argument("--frameworks", type=ListOf(Text(max_length=256)), default="torch,tensorflow,onnxruntime,reference",
                   help="comma-separated: torch, tensorflow, onnxruntime, reference, jax (default the first four; "
                        "missing ones are skipped with a note)")
    p.add_argument("--size", type=Text(max_length=64), default="default", help="size preset: small, default or large (default: default)")
    p.add_argument("--max-time", type=positive_seconds, default=2.0, metavar="SECONDS",
                   help="seconds of timed work per case and framework at most (default 2); stops earlier when the "
                        "median's 95%% CI is within 5%%")
    p.add_argument("--device", type=Text(max_length=64), default="cpu", help="cpu or gpu:N (gpu needs torch with CUDA; default cpu)")
    p.add_argument("--threads", type=Integer(minimum=1, maximum=4096), default=None,
                   help="CPU threads for every framework and for the peak (default: the usable cores)")
    p.add_argument("--format", choices=TABLE_FORMATS, default="table", help="table, markdown or csv (default table)")
    p.add_argument("--json", type=Path("output"), default=None, metavar="FILE",
                   help="write every raw sample, the peak measurements and the environment here")
    p.add_argument("--plot", type=Path("folder"), default=None, metavar="DIR", help="write one box plot per suite (op-SUITE.png) here")
    p.add_argument("--custom-op", type=Text(), default=None, metavar="MODULE:NAME",
                   help="the custom suite's cases: MODULE:NAME or FILE.py:NAME naming a custom_case(...), a list of "
                        "them or a function of the size (default: the built-in saxpy example)")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    """Run ``deep500lite bench op`` from parsed arguments; returns the exit status."""
    from deep500lite.bench import op

    suites = op.parse_suites(args.suite)
    op.parse_frameworks(args.frameworks)
    op.check_size(args.size)
    custom = None
    if args.custom_op is not None:
        if "custom" not in suites:
            raise UserError(f"--custom-op gives the cases of the custom suite; add custom to --suite. "
                            f"Received: --suite {','.join(args.suite)!r}")
        custom = op.load_custom_cases(args.custom_op, args.size)

    def progress(msg):
        print(f"... {msg}", file=sys.stderr, flush=True)

    bench = op.run_op_benchmark(suites, args.frameworks, args.size, args.max_time, args.device, custom_cases=custom,
                                progress=progress, threads=args.threads)
    # A CSV on stdout stays machine-readable: the text around it goes to stderr.
    text = sys.stderr if args.format == "csv" else sys.stdout
    print(f"machine: {_machine()}, {bench.threads} threads per framework, device {bench.device}", file=text)
    print(bench.peak.describe(), file=text)
    print(f"operator time and throughput, size {args.size}", file=text)
    print(bench.table(args.format), flush=True)
    for line in bench.skip_lines() + [f"note: {n}" for n in bench.notes]:
        print(terminal(line), file=text)
    if args.json:
        from deep500lite.environment import collect_environment

        payload = bench.to_dict()
        payload["environment"] = collect_environment(include_mpi=False)
        atomic_write_text(args.json, finite_json(payload, indent=1))
        print(f"results: {args.json}", file=text)
    if args.plot:
        paths = op.plot_results(bench, args.plot)
        print(f"plots: {', '.join(paths)}", file=text)
    return 0


def _machine() -> str:
    from deep500lite.environment import cpu_model, gpu_info

    gpus = gpu_info()
    return cpu_model() + (f", GPU {gpus[0]['name']}" if gpus else "")
