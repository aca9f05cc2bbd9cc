"""``deep500lite regress BASELINE CANDIDATE``: is the candidate slower? Exit 1 when any benchmark is."""

from __future__ import annotations

import argparse
import json
import re
import sys

__all__ = ["add_parser", "run", "fraction", "alpha_level"]


def fraction(text: str) -> float:
    """An argparse type: a minimum effect, ``5%`` or ``0.05`` (from 0 up to 1000%)."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        value = None
    if value is None or not 0 <= value < 10 or (not t.endswith("%") and value >= 1):
        raise argparse.ArgumentTypeError(f"must be a percentage (5%) or a fraction below 1 (0.05). Received: {text!r}")
    return value


def alpha_level(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be a significance level between 0 and 1 (0.05). Received: {text!r}")
    return value


def add_parser(subparsers):
    from deep500lite.cli.store_args import add_filter_options, add_store_options
    from deep500lite.results.regress import ALPHA, MIN_EFFECT

    p = subparsers.add_parser(
        "regress", help="compare a candidate's runs with a baseline's; exit 1 when a benchmark got slower",
        description="For every benchmark recorded in both selections, compare the raw samples (two-sided "
                    "Mann-Whitney U, Holm-adjusted over all benchmarks), estimate the median ratio with a 95% "
                    "bootstrap interval, and say slower, faster, same or too noisy to tell. A selection is "
                    "label:NAME, commit:SHA, run:ID[,ID|-ID] or date:START[..END] (a bare value is tried in that "
                    "order). Exit 1 when any benchmark is slower, 0 otherwise, 2 on bad input.")
    p.add_argument("baseline", metavar="BASELINE", help="the runs to compare against (label:main, commit:1a2b3c4)")
    p.add_argument("candidate", metavar="CANDIDATE", help="the runs to judge (label:pr-123, run:42)")
    p.add_argument("--min-effect", type=fraction, default=MIN_EFFECT, metavar="PCT",
                   help=f"smallest change called slower or faster (default {MIN_EFFECT:.0%}%; raise it on a "
                        "shared machine)")
    p.add_argument("--alpha", type=alpha_level, default=ALPHA, help=f"family-wise significance level (default {ALPHA})")
    p.add_argument("--metric", default=None, metavar="NAME",
                   help="compare this metric (step_time, throughput, ...; 'all' for every one); default: each "
                        "benchmark's headline metric (a recipe's step_time, a bench's timings)")
    p.add_argument("--json", action="store_true", help="print the comparisons as JSON (for CI)")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="print only the slower benchmarks, one line each (nothing when none is)")
    add_filter_options(p, label=False)
    add_store_options(p, label=False)
    p.set_defaults(func=run)
    return p


def _fmt(c) -> list:
    from deep500lite.results.history import format_value

    def side(median, ci, n):
        return f"{format_value(median, c.unit)} [{format_value(ci[0], c.unit)}, {format_value(ci[1], c.unit)}] n={n}"

    ratio = "-" if c.ratio is None else f"x{c.ratio:.3f}"
    ci = "-" if c.ratio_ci[0] is None else f"[{c.ratio_ci[0]:.3f}, {c.ratio_ci[1]:.3f}]"
    p = "-" if c.p_adjusted is None else f"{c.p_adjusted:.2g}"
    return [c.benchmark, c.metric, c.machine or "?", side(c.median_baseline, c.ci_baseline, c.n_baseline),
            side(c.median_candidate, c.ci_candidate, c.n_candidate), ratio, ci, p, c.verdict]


def run(args) -> int:
    from deep500lite.cli.store_args import filters_of, open_from_args
    from deep500lite.errors import UserError
    from deep500lite.metrics.tables import format_table
    from deep500lite.results.regress import compare_series
    from deep500lite.results.select import parse_selection

    with open_from_args(args) as store:
        sides = [parse_selection(text, store) for text in (args.baseline, args.candidate)]
        filters = filters_of(args)
        metric = None if args.metric in (None, "all") else args.metric
        headline = args.metric is None
        rows = []
        for sel in sides:
            clash = set(sel.filters) & set(filters)
            if clash:
                raise UserError(f"--{sorted(clash)[0].replace('suite', 'recipe')} and the selection {sel.text!r} both "
                                f"choose it; give one. Received: {sel.text!r}")
            got = store.series(metric=metric, headline=headline, **sel.filters, **filters)
            if not got:
                what = "" if not filters else " matching " + ", ".join(f"{k}={v}" for k, v in filters.items())
                raise UserError(f"The selection {sel.text!r} has no recorded series{what} "
                                f"{'of the metric ' + repr(args.metric) if metric else ''} in {store.target.shown}; "
                                f"`deep500lite db list` shows what is there. Received: {sel.text!r}")
            rows.append(got)
        comparisons = compare_series(rows[0], rows[1], min_effect=args.min_effect, alpha=args.alpha)
    if not comparisons:
        def names(got):
            return sorted({(r["benchmark"], r["metric"], r["machine"]) for r in got})[:6]

        raise UserError(f"No benchmark is present in both selections (same benchmark, metric and machine); "
                        f"{args.baseline!r} has {names(rows[0])}, {args.candidate!r} has {names(rows[1])}. "
                        f"Received: {args.baseline!r} and {args.candidate!r}")
    slower = [c for c in comparisons if c.verdict == "slower"]
    status = 1 if slower else 0
    if args.json:
        print(json.dumps({"baseline": args.baseline, "candidate": args.candidate, "min_effect": args.min_effect,
                          "alpha": args.alpha, "comparisons": [c.to_dict() for c in comparisons],
                          "slower": [f"{c.benchmark} {c.metric} @ {c.machine}" for c in slower],
                          "exit_status": status}, indent=1))
        return status
    if args.quiet:
        for c in slower:
            print(f"slower: {c.benchmark} {c.metric} @ {c.machine}: x{c.ratio:.3f} "
                  f"[{c.ratio_ci[0]:.3f}, {c.ratio_ci[1]:.3f}], p={c.p_adjusted:.2g}")
        return status
    print(f"baseline {sides[0].describe()} vs candidate {sides[1].describe()}: two-sided Mann-Whitney U, "
          f"Holm-adjusted over {sum(c.p is not None for c in comparisons)} test(s), alpha={args.alpha:g}, "
          f"minimum effect {args.min_effect:.0%}")
    print(format_table(["benchmark", "metric", "machine", "baseline median [95% CI]", "candidate median [95% CI]",
                        "ratio", "ratio 95% CI", "p (Holm)", "verdict"], [_fmt(c) for c in comparisons]))
    counts = {v: sum(c.verdict == v for c in comparisons) for v in ("slower", "faster", "same", "too noisy to tell")}
    print(", ".join(f"{n} {v}" for v, n in counts.items() if n))
    if slower:
        print("slower: " + "; ".join(re.sub(r"\s+", " ", f"{c.benchmark} {c.metric} @ {c.machine}") for c in slower),
              file=sys.stderr)
    return status
