"""``deep500lite report``: re-render the comparison table and plots from results files."""

from __future__ import annotations

import sys
from deep500lite.metrics.tables import TABLE_FORMATS

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    p = subparsers.add_parser(
        "report", help="tables and plots from results files",
        description="Read results files (or folders holding them, searched recursively), print the comparison "
                    "table and the significance of step-time differences, and optionally write plots.")
    p.add_argument("results", nargs="+", metavar="RESULTS", help="results.json files or folders holding them")
    p.add_argument("--format", choices=TABLE_FORMATS, default="table", help="table format (default table)")
    from deep500lite.recipe.compare import GROUP_BY

    p.add_argument("--group-by", choices=GROUP_BY, default="framework",
                   help="rows per framework (default), or per label, git commit or machine (with the framework when "
                        "several differ): A against B")
    p.add_argument("--plots", metavar="DIR", default=None,
                   help="write step_times.png, loss.png and accuracy.png to DIR")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from deep500lite.recipe.compare import compare_results
    from deep500lite.recipe.report import comparison_table, load_results, significance_lines, write_plots

    results = load_results(args.results)
    comparison = compare_results(results, group_by=args.group_by)
    print(comparison_table(comparison, args.format))
    if args.format != "csv":
        print()
        for line in significance_lines(comparison):
            print(line)
    if args.plots:
        paths = write_plots(results, args.plots, comparison, group_by=args.group_by)
        print("plots: " + ", ".join(paths), file=sys.stderr if args.format == "csv" else sys.stdout)
    return 0
