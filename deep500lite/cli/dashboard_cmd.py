"""``deep500lite dashboard --out DIR``: a static HTML site of the results database (opens offline)."""

from __future__ import annotations

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    from deep500lite.cli.regress_cmd import alpha_level, fraction
    from deep500lite.cli.store_args import add_filter_options, add_store_options
    from deep500lite.results.regress import ALPHA, MIN_EFFECT

    p = subparsers.add_parser(
        "dashboard", help="write a static HTML dashboard of the results database (open DIR/index.html)",
        description="Write a static site: a page per recipe and bench command with each metric's runs over time "
                    "(median and 95% CI band per framework and machine), regression markers (each run against "
                    "the one before, as deep500lite regress tests them), the latest comparison table and every "
                    "run with links to its raw files. The charts are Plotly's, with plotly.min.js copied from the "
                    "plotly package: no server, no network.")
    p.add_argument("--out", required=True, metavar="DIR", help="the site's folder (new, empty, or a dashboard "
                                                               "written before)")
    p.add_argument("--title", default="deep500lite results", help="the index page's title")
    p.add_argument("--min-effect", type=fraction, default=MIN_EFFECT, metavar="PCT",
                   help=f"smallest change marked as a regression (default {MIN_EFFECT:.0%}%)")
    p.add_argument("--alpha", type=alpha_level, default=ALPHA, help=f"significance level (default {ALPHA})")
    add_filter_options(p)
    add_store_options(p, label=False)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from deep500lite.cli.store_args import filters_of, open_from_args
    from deep500lite.results.dashboard import build_site

    with open_from_args(args) as store:
        site = build_site(store, args.out, filters=filters_of(args), min_effect=args.min_effect, alpha=args.alpha,
                          title=args.title)
    print(f"dashboard: {site['index']} ({site['runs']} run(s), {len(site['pages'])} page(s), "
          f"{site['regressions']} regression(s) marked)")
    return 0
