"""``deep500lite bench ...``: benchmarks with statistics (speed targets are checked here)."""

from __future__ import annotations

import sys

from deep500lite.cli.args import Choice, Integer, ListOf, Path, Text, positive_int, positive_seconds
from deep500lite.errors import DeviceError, UserError
from deep500lite.lv1.device import as_device
from deep500lite.metrics.tables import format_ci, format_table
from deep500lite.registry import FRAMEWORKS, is_framework_available
from deep500lite.utils import atomic_write_text, check_allocation, finite_json

BENCHMARKS = ("overhead", "op", "dataset", "allreduce", "zoo", "spatial", "distributed")


#: ``--op`` without a value: the built-in Swish against each framework's own SiLU.
BUILTIN_OP = "swish"


def add_parser(subparsers):
    p = subparsers.add_parser("bench", help="run a benchmark",
                              description="Run a benchmark and print its table; --json keeps every raw sample.")
    sub = p.add_subparsers(dest="benchmark", metavar="BENCHMARK", parser_class=type(p))
    o = sub.add_parser("overhead", help="deep500lite executor vs the framework's own call",
                       description=("Time LeNet and ResNet-20 through the deep500lite executor and through the "
                                    "framework's native call, in alternation, and print the ratio "
                                    "deep500lite/native with its 95% CI (target <= 1.05)."))
    o.add_argument("--framework", "-f", type=ListOf(Text(max_length=256)), default=None,
                   help="torch, tensorflow, onnxruntime or jax (with --training also reference); with --op a "
                        "comma-separated list (default: every installed framework; with --op FILE:FACTORY every "
                        "executor variant, torch:compile and tensorflow:xla included)")
    o.add_argument("--op", type=Text(), nargs="?", const=BUILTIN_OP, default=None, metavar="FILE:FACTORY",
                   help="time a custom operator forward and backward through each framework: alone, the built-in "
                        "Swish (C++) against the framework's own; FILE.py:FACTORY (or MODULE:FACTORY), your operator "
                        "(or a function returning it) through every executor variant against its own direct call")
    o.add_argument("--op-kinds", type=ListOf(Choice(("cpp", "python")), unique=True), default="cpp", help="with --op: cpp, python or cpp,python (default cpp)")
    o.add_argument("--elements", type=Integer(minimum=1, maximum=2**31 - 1), default=1 << 16, help="with --op: vector length (default 65536)")
    o.add_argument("--training", action="store_true",
                   help="time training steps (forward, backward, momentum update) instead of inference")
    o.add_argument("--all", action="store_true", dest="all_targets",
                   help="measure every speed target in one table (inference overhead, every executor's "
                        "training step against its framework's own loop, training steps against the torch "
                        "executor, gradient check); --models, --batch-size and --max-time apply "
                        "(--models lenet --max-time 3 for a short run)")
    o.add_argument("--threads", type=Integer(minimum=1, maximum=4096), default=None,
                   help="with --all: intra-op threads of torch and TensorFlow in the rows that compare a "
                        "framework with itself, and of torch's loop in ONNX Runtime's training row (1 steadies "
                        "torch on a shared machine; default: the framework's)")
    o.add_argument("--models", type=ListOf(Text(max_length=256)), default="lenet,resnet20", help="comma-separated: lenet, resnet20 (default both)")
    o.add_argument("--batch-size", type=positive_int, default=64, help="samples per call (default 64)")
    o.add_argument("--max-time", type=positive_seconds, default=20.0,
                   help="seconds of timed work per model (default 20)")
    o.add_argument("--device", type=Text(max_length=64), default="cpu",
                   help="cpu or gpu:N: both sides run there (torch and jax; not with --all or --op; default cpu)")
    o.add_argument("--json", type=Path("output"), default=None, metavar="FILE", help="write results, raw samples and environment here")
    o.set_defaults(func=run_overhead)
    from deep500lite.cli import bench_allreduce, bench_dataset, bench_op, bench_zoo

    bench_op.add_subparser(sub)
    bench_dataset.add_subparser(sub)
    bench_allreduce.add_subparser(sub)
    bench_zoo.add_subparser(sub)
    from deep500lite.cli import bench_distributed, bench_spatial

    bench_spatial.add_subparser(sub)
    bench_distributed.add_subparser(sub)
    p.set_defaults(func=lambda args: _no_benchmark(p))
    return p


def _write_json(path, header: dict, results) -> None:
    """Write ``header``, the environment and every result's raw samples to ``path`` (nothing when None)."""
    if not path:
        return
    from deep500lite.environment import collect_environment
    from deep500lite.utils import atomic_write_text

    payload = dict(header, environment=collect_environment(), results=[r.to_dict() for r in results])
    atomic_write_text(path, finite_json(payload, indent=1))
    print(f"results: {path}")


def _no_benchmark(parser) -> int:
    parser.print_help(sys.stderr)
    return 2


def run_overhead(args) -> int:
    from deep500lite.bench.overhead import TARGET_RATIO, run_overhead

    if args.threads is not None and not args.all_targets:
        raise UserError(f"--threads applies to bench overhead --all only; add --all or leave it out. "
                        f"Received: --threads {args.threads}")
    if args.device != "cpu" and (args.op or args.all_targets):
        raise UserError(f"--device applies to bench overhead --framework F [--training] only, not to "
                        f"{'--op' if args.op else '--all'}. Received: --device {args.device}")
    if args.op:
        return _run_op_overhead(args)
    if args.all_targets:
        return _run_all_targets(args)
    if not args.framework:
        raise UserError("bench overhead needs --framework (torch, tensorflow, onnxruntime, jax; with --training also "
                        "reference), or --op. Received: neither")
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be a positive integer. Received: {args.batch_size}")

    # The largest input (ResNet-20's 3x32x32) in float64, with the copies each side keeps.
    check_allocation(args.batch_size * 3 * 32 * 32 * 8 * 4, f"bench overhead --batch-size {args.batch_size}")
    if len(args.framework) > 1:
        raise UserError(f"bench overhead --framework takes one framework (several only with --op). Received: "
                        f"--framework {','.join(args.framework)}")
    models = list(args.models)
    results = run_overhead(args.framework[0], models, args.batch_size, args.max_time,
                           progress=lambda msg: print(f"... {msg}", file=sys.stderr, flush=True),
                           training=args.training, device=_overhead_device(args.device))
    rows = []
    for r in results:
        err = "-" if r.max_abs_error is None else f"{r.max_abs_error:.2g}"
        if not r.has_native:
            a = r.paired.summary
            rows.append([r.framework, r.model, r.batch_size, "(none)", format_ci(a.median, a.ci_low, a.ci_high),
                         "-", a.n, err, r.verdict])
            continue
        a, b, q = r.paired.a.summary, r.paired.b.summary, r.paired.ratio
        rows.append([r.framework, r.model, r.batch_size, format_ci(b.median, b.ci_low, b.ci_high),
                     format_ci(a.median, a.ci_low, a.ci_high), f"{q.median:.3f} [{q.ci_low:.3f}, {q.ci_high:.3f}]",
                     q.n, err, r.verdict])
    what = "training step" if args.training else "inference"
    print(f"{what} time, deep500lite vs native, on {args.device}")
    print(format_table(["framework", "model", "batch", "native [95% CI]", "deep500lite [95% CI]",
                        "ratio [95% CI]", "runs", "max |err|", f"target <= {TARGET_RATIO}"], rows))
    compiled = [f"{r.model}: " + ", ".join(f"{k} {v:.3g} s" for k, v in r.compile_seconds.items())
                for r in results if r.compile_seconds and any(r.compile_seconds.values())]
    if compiled:
        print("compile time (not in the times above): " + "; ".join(compiled))
    _write_json(args.json, {"benchmark": "overhead", "device": args.device}, results)
    return 0


def _run_all_targets(args) -> int:
    from deep500lite.bench.targets import run_all_targets
    from deep500lite.environment import collect_environment

    if args.framework or args.training:
        raise UserError("bench overhead --all measures every framework, inference and training; leave out "
                        f"--framework and --training. Received: --framework="
                        f"{','.join(args.framework) if args.framework else None!r}, "
                        f"--training={args.training}")
    check_allocation(args.batch_size * 3 * 32 * 32 * 8 * 4, f"bench overhead --batch-size {args.batch_size}")
    models = list(args.models)
    rows = run_all_targets(args.batch_size, args.max_time, models,
                           progress=lambda msg: print(f"... {msg}", file=sys.stderr, flush=True),
                           threads=args.threads)

    def value(row, x):
        return "-" if x is None else (f"{x:.3f}" if row.unit == "ratio" else f"{x * 1e3:.3g} ms")

    table = [[r.target, r.what, value(r, r.median), f"[{value(r, r.ci_low)}, {value(r, r.ci_high)}]",
              r.runs, ("<= " + value(r, r.limit)), r.verdict, r.note] for r in rows]
    print(f"speed targets, batch {args.batch_size}")
    print(format_table(["target", "measured", "median", "95% CI", "runs", "target", "verdict", "detail"], table))
    if args.json:
        payload = {"benchmark": "overhead --all", "environment": collect_environment(),
                   "batch_size": args.batch_size, "threads": args.threads, "results": [r.to_dict() for r in rows]}
        atomic_write_text(args.json, finite_json(payload, indent=1))
        print(f"results: {args.json}")
    return 0


def _overhead_device(text: str):


    try:
        return as_device(text)
    except DeviceError:
        raise UserError(f"--device must be cpu, gpu or gpu:N (N a GPU index). Received: {text!r}") from None


def _run_user_op_overhead(args) -> int:
    from deep500lite.bench.user_op import load_user_op, run_user_op_overhead
    from deep500lite.metrics.tables import Column, UnitTable, time_unit
    from deep500lite.registry import EXECUTOR_VARIANTS, FRAMEWORKS, is_framework_available, split_executor_spelling

    op = load_user_op(args.op)
    if args.framework:
        variants = list(args.framework)
        for v in variants:
            split_executor_spelling(v)  # an unknown name: one line before anything runs
    else:
        ordered = []
        for fw in FRAMEWORKS:
            ordered.append(fw)
            ordered += [v for v, (key, _) in EXECUTOR_VARIANTS.items() if key == fw and not v.startswith("onnxruntime:")]
        variants = [v for v in ordered if is_framework_available(split_executor_spelling(v)[0])]
    results = run_user_op_overhead(op, variants, args.max_time,
                                   progress=lambda msg: print(f"... {msg}", file=sys.stderr, flush=True))
    timed = [r for r in results if r.paired is not None]
    unit, scale = time_unit([r.paired.b.summary.median for r in timed])
    table = UnitTable([Column("executor"), Column("through the executor", unit), Column("CI low", unit),
                       Column("CI high", unit), Column("direct call", unit), Column("ratio", fmt=".2f"),
                       Column("ratio CI low", fmt=".2f"), Column("ratio CI high", fmt=".2f"), Column("pairs", fmt="d"),
                       Column("compile", "s", ".2f"), Column("max |err|", fmt=".2g"), Column("refused")])
    for r in results:
        if r.paired is None:
            table.rows.append([r.variant] + [None] * 10 + [r.refused])
            continue
        a, b, q = r.paired.a.summary, r.paired.b.summary, r.paired.ratio
        table.rows.append([r.variant, a.median / scale, a.ci_low / scale, a.ci_high / scale, b.median / scale,
                           q.median, q.ci_low, q.ci_high, q.n, r.compile_seconds, r.max_abs_error, None])
    table.footer.append("median [95% CI] of one forward and backward; ratio: through the executor over the "
                        "operator's own forward then backward on numpy (median of per-pair ratios); compilation is "
                        "left out")
    print(f"{type(op).__name__} forward + backward: through each executor vs called directly")
    print(table.render())
    _write_json(args.json, {"benchmark": "overhead --op FILE:FACTORY", "op": args.op}, results)
    return 0


def _run_op_overhead(args) -> int:
    if args.op != BUILTIN_OP:
        return _run_user_op_overhead(args)
    from deep500lite.bench.op_overhead import OP_FRAMEWORKS, run_op_overhead

    if args.framework:
        frameworks = list(args.framework)
    else:  # every installed framework that runs custom operators (a plugin may not)
        frameworks = [f for f in FRAMEWORKS if f in OP_FRAMEWORKS and is_framework_available(f)]
    kinds = list(args.op_kinds)
    results = run_op_overhead(frameworks, kinds, args.elements, args.max_time,
                              progress=lambda msg: print(f"... {msg}", file=sys.stderr, flush=True))
    rows = []
    for r in results:
        a, b, q = r.paired.a.summary, r.paired.b.summary, r.paired.ratio
        rows.append([r.framework, r.kind, r.elements, format_ci(b.median, b.ci_low, b.ci_high),
                     format_ci(a.median, a.ci_low, a.ci_high), f"{q.median:.2f} [{q.ci_low:.2f}, {q.ci_high:.2f}]",
                     q.n, f"{r.max_abs_error:.2g}"])
    print("Swish forward + backward: custom operator vs the framework's own")
    print(format_table(["framework", "custom op", "elements", "native [95% CI]", "custom [95% CI]",
                        "ratio [95% CI]", "pairs", "max |err|"], rows))
    _write_json(args.json, {"benchmark": "overhead --op"}, results)
    return 0
