"""``deep500lite run``: run a recipe file and judge its acceptable metrics.

Exit status 0 when every acceptable metric holds, 1 when one does not (or the determinism check
finds a difference), 2 on a usage error. A single run happens in this process
(:func:`deep500lite.recipe.worker.run_single`, what the workers ``compare`` starts run); ``-n N``
starts the recipe workers on N MPI ranks (:mod:`deep500lite.recipe.distributed`).
"""

from __future__ import annotations

import os

from deep500lite.cli.args import (Path, Text, add_host_options, add_job_limit_options, hosts_from_args, positive_int,
                                  positive_seconds, seed)
from deep500lite.errors import UserError
from deep500lite.recipe.determinism import check_determinism
from deep500lite.recipe.distributed import check_job, run_job
from deep500lite.recipe.loading import load_recipe, parse_set
from deep500lite.recipe.staging import staged_folder

__all__ = ["add_parser", "run", "default_out"]

PROGRESS = ("auto", "bar", "lines", "none")


def add_parser(subparsers):
    p = subparsers.add_parser(
        "run", help="run a recipe (FIXED, MUTABLE, METRICS) and check its acceptable metrics",
        description="Run a recipe file: build its dataset, model, executor, samplers and optimizer, train, "
                    "write a results file, and check every acceptable metric. Exit 0 when all hold, 1 when one "
                    "fails, 2 on a usage error.")
    p.add_argument("recipe", type=Path("input-or-name"), metavar="RECIPE", help="a recipe file (.py) or a bundled recipe name (digits_lenet)")
    p.add_argument("--set", dest="sets", type=Text(), action="append", default=[], metavar="KEY=VALUE",
                   help="change a MUTABLE key (repeatable); the value is a Python literal, else a string; "
                        "KEY may be dotted: optimizer_kwargs.learning_rate=0.1")
    p.add_argument("--out", type=Path("folder"), metavar="DIR", default=None,
                   help="folder for results.json, epochs.csv, steps.csv (default d5-results/RECIPE/FRAMEWORK; "
                        "a variant such as torch:compile gets torch-compile); written whole at the end, so an "
                        "interrupted run leaves the old results as they were")
    p.add_argument("--seed", type=seed, default=0, metavar="N",
                   help="run seed for every component whose seed the recipe leaves open (default 0)")
    p.add_argument("--check-determinism", action="store_true",
                   help="run twice with the same seed and report the first step where losses or parameters differ")
    p.add_argument("--mllog", action="store_true",
                   help="also write an MLPerf training log to DIR/mllog.log (compilation before run_start) and check "
                        "it with mlperf-logging's compliance checker when that is installed")
    p.add_argument("--mlperf", dest="mlperf", type=Text(), action="append", default=[], metavar="KEY=VALUE",
                   help="with --mllog: a submission field of the log (repeatable): org, platform, division "
                        "(open|closed), status, benchmark; overrides the recipe's MLPERF dict")
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
    d.add_argument("--mpiexec", type=Path("program"), default=None, metavar="PATH",
                   help="with -n: the MPI launcher (default: the mpiexec beside this Python, else on PATH)")
    add_job_limit_options(d, when="with -n: ")
    add_host_options(d, when="with -n: ")
    d.add_argument("--comm-timeout", type=positive_seconds, default=None, metavar="SECONDS",
                   help="with -n: a communication waiting longer ends the job with an error naming the rank and "
                        "operation (default 300)")
    p.set_defaults(func=run)
    return p


def _folder_name(resolved) -> str:
    """The results folder's framework part: the variant spelling (``torch:compile`` -> ``torch-compile``,
    as ``compare`` names it), so a compiled run never overwrites the eager run's results."""
    ex = resolved.config.get("executor")
    if isinstance(ex, str) and ":" in ex:
        from deep500lite.registry import canonical_executor_spelling

        return canonical_executor_spelling(ex).replace(":", "-")
    return resolved.framework


def default_out(recipe_name: str, framework: str) -> str:
    """The default results folder of a run: ``d5-results/<recipe>/<framework>``."""
    return os.path.join("d5-results", recipe_name, framework)


def _resolve(args):
    recipe = load_recipe(args.recipe)
    overrides = {}
    for text in args.sets:
        key, value = parse_set(text)
        overrides[key] = value
    resolved = recipe.resolve(overrides)
    args.mlperf_fields = None
    if args.mlperf and not args.mllog:
        from deep500lite.errors import UserError

        raise UserError(f"--mlperf sets a field of the MLPerf log; add --mllog. Received: --mlperf {args.mlperf[0]}")
    if args.mllog:
        from deep500lite.recipe.mlperf import submission_fields

        fields = {}
        for text in args.mlperf:
            key, _, value = text.partition("=")
            if not _:
                from deep500lite.errors import UserError

                raise UserError(f"--mlperf takes KEY=VALUE, such as org=ETH. Received: --mlperf {text!r}")
            fields[key.strip()] = value
        args.mlperf_fields = submission_fields(recipe.mlperf, fields, recipe_name=resolved.name)
    from deep500lite.recipe.requirements import dataset_name, missing_parts, require_parts

    # before anything runs, so a run is never lost to a library missing at its end
    require_parts("deep500lite run", missing_parts(frameworks=[str(resolved.config.get("executor"))]
                                                   if isinstance(resolved.config.get("executor"), str) else [],
                                                   dataset=dataset_name(resolved.config), plots=args.plots,
                                                   plots_flag="--plots"))
    return resolved


def _run_ranks(args, resolved, out: str, progress) -> int:
    check_job(resolved, args.ranks)
    for flag, on in (("--check-determinism", args.check_determinism), ("--mllog", args.mllog),
                     ("--divergence", args.divergence), ("--plots", args.plots)):
        if on:
            raise UserError(f"{flag} is not available with -n (a multi-rank job). Received: {flag} -n {args.ranks}")
    for flag, value in (("--timeout", args.timeout), ("--comm-timeout", args.comm_timeout)):
        if value is not None and not value > 0:
            raise UserError(f"{flag} must be a number of seconds > 0. Received: {flag} {value}")
    result, lines = run_job(resolved, args.recipe, args.ranks, out, sets=args.sets, seed=args.seed,
                            progress="lines" if progress == "auto" else progress, baseline=not args.no_baseline,
                            mpiexec=args.mpiexec, timeout=args.timeout, comm_timeout=args.comm_timeout,
                            startup_timeout=args.startup_timeout, oversubscribe=args.oversubscribe,
                            hosts=hosts_from_args(args))
    for line in lines:
        print(line)
    print(f"results: {os.path.join(os.path.abspath(out), 'results.json')}")
    return 0 if result.passed else 1


def run(args) -> int:
    # SIGTERM and SIGHUP unwind like Ctrl-C (deep500lite.cli.main), so the staging folder is removed, the job's
    # processes are ended and the old results stay whole.
    resolved = _resolve(args)
    out = args.out or default_out(resolved.name, _folder_name(resolved))
    progress = None if args.progress == "none" else args.progress
    if args.ranks is not None:
        return _run_ranks(args, resolved, out, progress)
    return _run_single(args, resolved, out, progress)


def _run_single(args, resolved, out: str, progress) -> int:
    from deep500lite.recipe.worker import header_line, run_single

    mllog = os.path.join(out, "mllog.log") if args.mllog else None
    if args.check_determinism:
        print(header_line(resolved, args.seed, args.sets), flush=True)
        with staged_folder(out) as work:
            report = check_determinism(resolved, args.seed, progress=progress, out=work)
        first = report.runs[0]
        for line in first.lines():
            print(line)
        print(report.describe())
        print(f"results: {os.path.join(out, 'results.json')}")
        return 0 if first.passed and report.identical else 1
    result = run_single(resolved, args.seed, out, sets=args.sets, progress=progress, mllog=mllog,
                        mlperf=args.mlperf_fields,
                        divergence=args.divergence, plots=args.plots, staged=True)
    if args.plots:
        print(f"plots: {os.path.join(out, 'loss.png')}, {os.path.join(out, 'accuracy.png')}")
    return 0 if result.passed else 1
