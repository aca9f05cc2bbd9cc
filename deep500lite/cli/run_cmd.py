"""``deep500lite run``: run a recipe file and judge its acceptable metrics.

Exit status 0 when every acceptable metric holds, 1 when one does not (or the determinism check
finds a difference), 2 on a usage error. ``python -m deep500lite.cli.run_cmd ARGS`` is the same
as ``deep500lite run ARGS`` (``deep500lite compare`` starts its runs that way).
"""

from __future__ import annotations

import argparse
import os
import sys

from deep500lite.cli.args import positive_int
from deep500lite.errors import Deep500Error

__all__ = ["add_parser", "run", "default_out", "main"]

PROGRESS = ("auto", "bar", "lines", "none")


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, received {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, received {value}")
    return value


def add_parser(subparsers):
    p = subparsers.add_parser(
        "run", help="run a recipe (FIXED, MUTABLE, METRICS) and check its acceptable metrics",
        description="Run a recipe file: build its dataset, model, executor, samplers and optimizer, train, "
                    "write a results file, and check every acceptable metric. Exit 0 when all hold, 1 when one "
                    "fails, 2 on a usage error.")
    p.add_argument("recipe", metavar="RECIPE", help="a recipe file (.py) or a bundled recipe name (digits_lenet)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="change a MUTABLE key (repeatable); the value is a Python literal, else a string; "
                        "KEY may be dotted: optimizer_kwargs.learning_rate=0.1")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="folder for results.json, epochs.csv, steps.csv (default d5-results/RECIPE/FRAMEWORK)")
    p.add_argument("--seed", type=_seed, default=0, metavar="N",
                   help="run seed for every component whose seed the recipe leaves open (default 0)")
    p.add_argument("--check-determinism", action="store_true",
                   help="run twice with the same seed and report the first step where losses or parameters differ")
    p.add_argument("--mllog", action="store_true", help="also write MLPerf-style :::MLLOG lines to DIR/mllog.log")
    p.add_argument("--divergence", action="store_true",
                   help="also record the first step's largest output and gradient differences from the "
                        "reference executor")
    p.add_argument("--plots", action="store_true", help="also write loss.png and accuracy.png to DIR")
    p.add_argument("--progress", choices=PROGRESS, default="auto",
                   help="auto: a bar on a terminal, else one line per epoch; lines: one line per epoch on stdout")
    d = p.add_argument_group("distributed recipes (a 'distributed' component; docs/distributed.md)")
    d.add_argument("-n", "--ranks", type=positive_int, default=None, metavar="N",
                   help="train on N MPI ranks (mpiexec underneath); writes DIR/rank<r>/ per rank and the aggregate "
                        "DIR/results.json: compute/communication split, bytes per step, scaling efficiency")
    d.add_argument("--no-baseline", action="store_true",
                   help="with -n N > 1: skip the 1-rank baseline run (no speedup or scaling efficiency)")
    d.add_argument("--mpiexec", default=None, metavar="PATH",
                   help="with -n: the MPI launcher (default: the mpiexec beside this Python, else on PATH)")
    d.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="with -n: kill a job running longer than this (default: no limit)")
    d.add_argument("--comm-timeout", type=float, default=None, metavar="SECONDS",
                   help="with -n: a communication waiting longer ends the job with an error naming the rank and "
                        "operation (default 300)")
    p.add_argument("--rank-job", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--max-steps", type=positive_int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=run)
    return p


def default_out(recipe_name: str, framework: str) -> str:
    """The default results folder of a run: ``d5-results/<recipe>/<framework>``."""
    return os.path.join("d5-results", recipe_name, framework)


def _resolve(args):
    from deep500lite.recipe import load_recipe, parse_set

    recipe = load_recipe(args.recipe)
    overrides = {}
    for text in args.sets:
        key, value = parse_set(text)
        overrides[key] = value
    return recipe.resolve(overrides)


def _run_ranks(args, resolved, out: str, progress) -> int:
    from deep500lite.errors import UserError
    from deep500lite.lv3.runs import DEFAULT_COMM_TIMEOUT, run_distributed

    if resolved.config.get("distributed") is None:
        raise UserError(f"-n {args.ranks} needs a recipe with a 'distributed' component (a distributed optimizer such "
                        f"as 'ConsistentDecentralized'; see recipes/digits_mlp_distributed.py). Received: recipe "
                        f"{resolved.name} has none")
    for flag, on in (("--check-determinism", args.check_determinism), ("--mllog", args.mllog),
                     ("--divergence", args.divergence), ("--plots", args.plots)):
        if on:
            raise UserError(f"{flag} is not available with -n (a multi-rank job). Received: {flag} -n {args.ranks}")
    for flag, value in (("--timeout", args.timeout), ("--comm-timeout", args.comm_timeout)):
        if value is not None and not value > 0:
            raise UserError(f"{flag} must be a number of seconds > 0. Received: {flag} {value}")
    comm_timeout = DEFAULT_COMM_TIMEOUT if args.comm_timeout is None else args.comm_timeout
    result = run_distributed(args.recipe, args.ranks, out, sets=args.sets, seed=args.seed,
                             progress="lines" if progress == "auto" else progress, baseline=not args.no_baseline,
                             mpiexec=args.mpiexec, timeout=args.timeout, comm_timeout=comm_timeout)
    for line in result.lines():
        print(line)
    print(f"results: {result.results_path}")
    return 0 if result.passed else 1


def _rank_job(args, resolved, out: str, progress) -> int:
    """One rank of a ``run -n`` job: train and write results; the parent judges. Errors end the whole job."""
    from deep500lite.lv2.events import StepBudgetStop
    from deep500lite.recipe import train_recipe

    try:
        events = [StepBudgetStop(args.max_steps)] if args.max_steps else []
        train_recipe(resolved, args.seed, progress=progress, out=out, events=events)
    except BaseException as exc:  # noqa: BLE001 - any failure must end every rank, not leave them waiting
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        detail = str(exc) if not isinstance(exc, KeyboardInterrupt) else "interrupted"
        print(f"deep500lite run: rank {world.Get_rank()} of {world.Get_size()}: error: {type(exc).__name__}: "
              f"{detail}", file=sys.stderr, flush=True)
        if not isinstance(exc, (Deep500Error, KeyboardInterrupt)):
            import traceback

            traceback.print_exc()
        world.Abort(2)
    return 0


def run(args) -> int:
    from deep500lite.recipe import check_determinism, train_recipe

    resolved = _resolve(args)
    out = args.out or default_out(resolved.name, resolved.framework)
    progress = None if args.progress == "none" else args.progress
    if args.rank_job:
        return _rank_job(args, resolved, out, progress)
    if args.ranks is not None:
        return _run_ranks(args, resolved, out, progress)
    mllog = os.path.join(out, "mllog.log") if args.mllog else None
    print(f"recipe {resolved.name}: {resolved.framework}, seed {args.seed}"
          + (f", set {', '.join(args.sets)}" if args.sets else ""), flush=True)
    if args.check_determinism:
        report = check_determinism(resolved, args.seed, progress=progress, out=out)
        first = report.runs[0]
        for line in first.lines():
            print(line)
        print(report.describe())
        print(f"results: {first.results_path}")
        return 0 if first.passed and report.identical else 1
    events = []
    if args.plots:
        from deep500lite.lv2.events import PlotWriter

        events.append(PlotWriter(out))
    result = train_recipe(resolved, args.seed, progress=progress, out=out, mllog=mllog,
                          divergence=args.divergence, events=events)
    for line in result.lines():
        print(line)
    div = result.results.get("divergence")
    if div and div.get("error"):
        print(f"first step vs {div['reference']}: not measured ({div['error']})")
    elif div and not div.get("is_reference"):
        print(f"first step vs {div['reference']}: max |outputs diff| {div['outputs']:.3g}, "
              f"max |gradients diff| {div['gradients']:.3g} ({div['worst_gradient']})")
    print(f"results: {result.results_path}" + (f"; MLPerf log: {mllog}" if mllog else ""))
    if args.plots:
        print(f"plots: {os.path.join(out, 'loss.png')}, {os.path.join(out, 'accuracy.png')}")
    return 0 if result.passed else 1


def main(argv=None) -> int:
    """``deep500lite run`` as a program (``python -m deep500lite.cli.run_cmd``)."""
    from deep500lite import cli

    if "run" not in cli.SUBCOMMANDS:
        cli.SUBCOMMANDS = (*cli.SUBCOMMANDS, "run")
    return cli.main(["run", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
