"""``deep500lite history``: a metric over commits, labels, dates or runs, as a table and a plot."""

from __future__ import annotations

import os

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    from deep500lite.cli.store_args import add_filter_options, add_store_options
    from deep500lite.metrics.tables import TABLE_FORMATS
    from deep500lite.results.history import BY

    p = subparsers.add_parser(
        "history", help="a metric over commits, labels or dates from the results database (table and plot)",
        description="Print a recorded metric over commits, labels, days or runs: one series per benchmark "
                    "(framework or variant) and machine, the raw samples of the runs at one point pooled into "
                    "the median and its 95% confidence interval. --plot draws it (PNG with matplotlib, HTML "
                    "with Plotly).")
    p.add_argument("--metric", default=None, metavar="NAME",
                   help="the metric (step_time, throughput, final_test_accuracy, ...; default: the headline "
                        "metric of each recipe or bench command)")
    p.add_argument("--by", choices=BY, default="commit", help="the x axis: a point per commit (default), label, day "
                                                             "or run")
    p.add_argument("--plot", default=None, metavar="FILE",
                   help="also draw the history: FILE.png (matplotlib) or FILE.html (Plotly, opens offline)")
    p.add_argument("--format", choices=TABLE_FORMATS, default="table", help="table format (default table)")
    add_filter_options(p)
    add_store_options(p, label=False)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from deep500lite.cli.store_args import filters_of, open_from_args
    from deep500lite.errors import UserError
    from deep500lite.metrics.tables import format_table
    from deep500lite.results.figures import plot_html
    from deep500lite.results.history import history_points, history_rows, plot_png

    if args.plot is not None and os.path.splitext(args.plot)[1].lower() not in (".png", ".html"):
        raise UserError(f"--plot writes a .png (matplotlib) or .html (Plotly) file. Received: --plot {args.plot}")
    filters = filters_of(args)
    with open_from_args(args) as store:
        rows = store.series(metric=args.metric, headline=args.metric is None, **filters)
        if not rows:
            known = store.distinct("suite")
            raise UserError(f"No recorded series in {store.target.shown} match "
                            f"{', '.join(f'{k}={v}' for k, v in filters.items()) or 'the filters'}"
                            f"{' and metric ' + args.metric if args.metric else ''}; recorded recipes and commands: "
                            f"{', '.join(known[:10]) or 'none'}. Received: {filters or 'no filters'}")
    points = history_points(rows, by=args.by)
    headers, table = history_rows(points)
    print(format_table(headers, table, args.format))
    if args.plot:
        path = (plot_html if args.plot.lower().endswith(".html") else plot_png)(points, args.plot, args.by)
        print(f"plot: {path}")
    return 0
