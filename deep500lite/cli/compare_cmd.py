"""``deep500lite compare``: one recipe on several frameworks, each run in a fresh process, one table."""

from __future__ import annotations

import json
import os
import sys

from deep500lite.escaping import markdown_cell, terminal
from deep500lite.metrics.tables import TABLE_FORMATS
from deep500lite.recipe.results import jsonable
from deep500lite.utils import atomic_write_text

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    from deep500lite.cli.args import ListOf, Path, Text, positive_int, seed

    p = subparsers.add_parser(
        "compare", help="run a recipe on several frameworks (fresh process each) and compare them",
        description="Run a recipe once per framework, each in a new process, then print one table: final "
                    "accuracy, time to accuracy, throughput, step latency (median, 95% CI; compilation left "
                    "out), compile time, peak memory, the "
                    "first step's output and gradient differences from the reference executor, and which "
                    "step-time differences are significant (Mann-Whitney U). Writes plots.")
    p.add_argument("recipe", type=Path("input-or-name"), metavar="RECIPE", help="a recipe file (.py) or a bundled recipe name (digits_lenet)")
    p.add_argument("--frameworks", type=ListOf(Text(max_length=256)), default=["torch", "tensorflow", "onnxruntime", "reference"],
                   metavar="FW,FW,...", help="frameworks to compare (default torch,tensorflow,onnxruntime,reference); "
                                             "variants such as torch:compile, tensorflow:xla, onnxruntime:O0 are "
                                             "rows of their own")
    p.add_argument("--repeats", type=positive_int, default=1, metavar="N",
                   help="runs per framework with the same seed, interleaved, each in a new process (default 1)")
    p.add_argument("--runs", type=positive_int, default=1, metavar="N",
                   help="runs per framework with the seeds SEED, SEED+1, ... (N >= 3), interleaved; the table adds "
                        "MLPerf's score of the time to accuracy: the fastest and slowest runs dropped, the mean of "
                        "the rest")
    p.add_argument("--out", type=Path("folder"), metavar="DIR", default=None,
                   help="folder for the runs' results and the plots (default d5-results/RECIPE/compare)")
    p.add_argument("--format", choices=TABLE_FORMATS, default="table", help="table format (default table)")
    p.add_argument("--set", dest="sets", type=Text(), action="append", default=[], metavar="KEY=VALUE",
                   help="change a MUTABLE key in every run (repeatable), as for deep500lite run")
    p.add_argument("--seed", type=seed, default=0, metavar="N", help="run seed of every run (default 0)")
    p.add_argument("--no-plots", action="store_true", help="do not write plots")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from deep500lite.recipe.compare import run_comparison

    status = []
    # The tables and plots go into the comparison's staging folder, swapped in whole with the runs' folders.
    run_comparison(args.recipe, args.frameworks, repeats=args.repeats, out=args.out, sets=args.sets,
                   seed=args.seed, runs=args.runs, plots=not args.no_plots,
                   finish=lambda outcome: status.append(_finish(args, outcome)))
    return status[0]


def _finish(args, outcome) -> int:
    from deep500lite.recipe.report import comparison_table, significance_lines, write_plots
    from deep500lite.recipe.staging import published_path

    comparison, out = outcome["comparison"], outcome["out"]
    shown = published_path(out)
    print()
    if comparison["rows"]:
        table = comparison_table(comparison, args.format)
        print(table)
        print()
        for line in significance_lines(comparison):
            print(terminal(line))
        atomic_write_text(os.path.join(out, "comparison.md"), comparison_table(comparison, "markdown") + "\n\n"
                          + "\n".join(markdown_cell(line) for line in significance_lines(comparison)) + "\n")
        atomic_write_text(os.path.join(out, "comparison.csv"), comparison_table(comparison, "csv") + "\n")
        summary = {k: v for k, v in comparison.items() if k != "rows"}
        summary["rows"] = [{k: v for k, v in r.items() if k != "step_times"} for r in comparison["rows"]]
        summary["failures"] = outcome["failures"]
        summary["wall_time"] = outcome["wall_time"]
        atomic_write_text(os.path.join(out, "comparison.json"),
                          json.dumps(jsonable(summary), indent=1, allow_nan=False) + "\n")
    for f in outcome["failures"]:
        if f.get("log") is None:  # never started (not installed)
            print(terminal(f"{f['framework']}: {f['error']}"), file=sys.stderr)
            continue
        print(terminal(f"{f['framework']} run {f['run']} failed (exit status {f['status']}): {f['error']} "
                       f"(log: {published_path(f['log'])})"), file=sys.stderr)
    print(f"wall time {outcome['wall_time']:.1f} s for {len(outcome['frameworks'])} framework(s) x {outcome['runs']} "
          f"run(s)")
    if comparison["rows"]:
        print(f"results: {os.path.join(shown, 'FRAMEWORK', 'results.json') if outcome['runs'] == 1 else shown}; "
              f"table: {os.path.join(shown, 'comparison.md')}, {os.path.join(shown, 'comparison.csv')}")
        if not args.no_plots:
            try:
                paths = write_plots(outcome["results"], out, comparison)
            except ImportError as exc:
                print(f"plots skipped: {exc}", file=sys.stderr)
            else:
                print("plots: " + ", ".join(published_path(p) for p in paths))
    ok = not outcome["failures"] and all(r["passed"] for r in comparison["rows"])
    return 0 if ok else 1
