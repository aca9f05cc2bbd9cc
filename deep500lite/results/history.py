"""History: a metric over commits, labels, dates or runs, one series per benchmark and machine.

:func:`history_points` pools the raw samples of the runs that share a point (the same commit,
label, day or run) and summarizes them as the median with its distribution-free 95% confidence
interval; :func:`history_rows` gives the table ``deep500lite history`` prints; :func:`plot_png`
draws the points with matplotlib (one panel per recipe or bench command and metric, a line per
series with its confidence band shaded) and :func:`deep500lite.results.figures.plot_html` with Plotly (interactive, the
JavaScript inlined, so the file opens offline).
"""

from __future__ import annotations

import datetime as _dt
import math
import os

from deep500lite.errors import FrameworkNotAvailableError, UserError, format_choices
from deep500lite.metrics.statistics import summarize

__all__ = ["history_points", "history_rows", "plot_png", "panels", "BY", "series_name", "series_colors", "check_out", "format_value",
           "format_time", "x_value"]

#: What the x axis is: a point per commit, label, day or run.
BY = ("commit", "label", "date", "run")


def series_name(row: dict) -> str:
    """A series' name: its benchmark without the recipe's name, and its machine (``torch @ host``)."""
    bench = row["benchmark"]
    prefix = f"{row['suite']}/"
    short = bench[len(prefix):] if bench.startswith(prefix) else bench
    return f"{short} @ {row['machine'] or '?'}"


def series_colors(names) -> dict:
    """One colour per series name (``variant @ machine``): the variant's fixed colour from
    :func:`deep500lite.metrics.plots.palette` (the one every deep500lite plot uses), distinct colours
    for the same variant on other machines."""
    from deep500lite.metrics.plots import palette

    names = list(names)
    by_label = {}
    for name in names:
        variant, _, machine = name.partition(" @ ")
        by_label[name] = f"{machine}/{variant}"
    colors = palette(by_label.values())
    return {name: colors[label] for name, label in by_label.items()}


def _when(row: dict) -> float:
    return row["started"] if row.get("started") is not None else row["recorded"]


def x_value(row: dict, by: str) -> str:
    """The point a run belongs to on the x axis."""
    if by == "commit":
        return (row.get("git_commit") or "(no commit)")[:12]
    if by == "label":
        return row.get("label") or "(no label)"
    if by == "date":
        return _dt.datetime.fromtimestamp(_when(row)).strftime("%Y-%m-%d")
    if by == "run":
        return f"run {row['run_id']}"
    raise UserError(f"history goes by {format_choices(BY)}. Received: {by!r}")


def history_points(rows: list, by: str = "commit") -> list:
    """Points of the history: one per series and x value, in the order the x values first occurred.

    Args:
        rows: series rows (:meth:`deep500lite.results.store.Store.series`, with ``values``).
        by: ``commit``, ``label``, ``date`` or ``run``.

    Returns:
        Dicts with ``suite``, ``metric``, ``unit``, ``better``, ``benchmark``, ``machine``,
        ``series``, ``x``, ``order`` (the x value's position), ``runs`` (ids), ``labels``,
        ``commits``, ``time`` (the first run's start), ``n``, ``median``, ``ci_low``, ``ci_high``.
    """
    if by not in BY:
        raise UserError(f"history goes by {format_choices(BY)}. Received: {by!r}")
    order: dict = {}
    for row in sorted(rows, key=_when):
        order.setdefault(x_value(row, by), len(order))
    groups: dict = {}
    for row in rows:
        x = x_value(row, by)
        key = (row["suite"], row["metric"], row["benchmark"], row["machine"], x)
        groups.setdefault(key, []).append(row)
    points = []
    for (suite, metric, bench, machine, x), members in groups.items():
        values = [v for r in members for v in r["values"]]
        if values:
            s = summarize(values)
            n, median, lo, hi = s.n, s.median, s.ci_low, s.ci_high
        else:  # summaries only (a run -n aggregate): the latest run's
            last = max(members, key=_when)
            n, median, lo, hi = last["n"], last["median"], last["ci_low"], last["ci_high"]
        first = members[0]
        points.append({"suite": suite, "metric": metric, "unit": first["unit"], "better": first["better"],
                       "benchmark": bench, "machine": machine, "series": series_name(first), "x": x,
                       "order": order[x], "runs": sorted({r["run_id"] for r in members}),
                       "labels": sorted({r["label"] for r in members if r.get("label")}),
                       "commits": sorted({r["git_commit"] for r in members if r.get("git_commit")}),
                       "time": min(_when(r) for r in members), "n": n, "median": median, "ci_low": lo,
                       "ci_high": hi})
    points.sort(key=lambda p: (p["suite"], p["metric"], p["series"], p["order"]))
    return points


def format_time(ts) -> str:
    """A Unix time as local ``YYYY-MM-DD HH:MM:SS`` (``-`` for none)."""
    return _dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts is not None else "-"


def format_value(value, unit: str) -> str:
    """A value with its unit (seconds scaled to ms/us; ``-`` for none)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if unit == "s":
        for name, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
            if abs(value) >= scale or name == "ns":
                return f"{value / scale:.4g} {name}"
    return f"{value:.4g}" + (f" {unit}" if unit else "")


def history_rows(points: list) -> tuple:
    """The table of :func:`history_points`: headers and rows (with the change from the previous point)."""
    headers = ["benchmark", "metric", "machine", "point", "runs", "n", "median", "95% CI", "vs previous"]
    rows, previous = [], {}
    for p in points:
        key = (p["suite"], p["metric"], p["benchmark"], p["machine"])
        prev = previous.get(key)
        change = "-"
        if prev is not None and prev["median"] and p["median"] is not None:
            change = f"x{p['median'] / prev['median']:.3f}"
        previous[key] = p
        ci = f"[{format_value(p['ci_low'], p['unit'])}, {format_value(p['ci_high'], p['unit'])}]"
        rows.append([p["benchmark"], p["metric"], p["machine"] or "?", p["x"], ",".join(map(str, p["runs"])), p["n"],
                     format_value(p["median"], p["unit"]), ci, change])
    return headers, rows


def panels(points: list) -> dict:
    """Points grouped into panels, ``(suite, metric) -> {series: [points in x order]}``."""
    out: dict = {}
    for p in points:
        out.setdefault((p["suite"], p["metric"]), {}).setdefault(p["series"], []).append(p)
    for series in out.values():
        for pts in series.values():
            pts.sort(key=lambda p: p["order"])
    return out


def check_out(path: str) -> str:
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise UserError(f"Cannot make the folder for the plot '{path}' ({exc.strerror or exc}); give a writable "
                        f"path. Received: {path!r}") from exc
    return path


def plot_png(points: list, path, by: str) -> str:
    """Draw the history with matplotlib: a panel per recipe (or bench command) and metric."""
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise FrameworkNotAvailableError("history --plot FILE.png needs matplotlib, which is not installed: "
                                         "pip install 'deep500lite[plots]'") from exc
    from deep500lite.metrics.plots import legend_outside
    from deep500lite.utils import atomic_write_bytes

    groups = panels(points)
    if not groups:
        raise UserError("Nothing to plot: no recorded series match the filters. Received: no points")
    fig = Figure(figsize=(9, 3.6 * len(groups)), layout="constrained")
    for i, ((suite, metric), series) in enumerate(groups.items()):
        ax = fig.add_subplot(len(groups), 1, i + 1)
        xs = sorted({p["x"]: p["order"] for pts in series.values() for p in pts}.items(), key=lambda kv: kv[1])
        position = {x: j for j, (x, _) in enumerate(xs)}
        unit = next(iter(series.values()))[0]["unit"]
        scale, shown = (1e3, "ms") if unit == "s" else (1.0, unit)
        colors = series_colors(series)
        for name, pts in series.items():
            color = colors[name]
            pos = [position[p["x"]] for p in pts]
            med = [p["median"] * scale for p in pts]
            lo = [(p["ci_low"] if p["ci_low"] is not None else p["median"]) * scale for p in pts]
            hi = [(p["ci_high"] if p["ci_high"] is not None else p["median"]) * scale for p in pts]
            ax.fill_between(pos, lo, hi, color=color, alpha=0.2, linewidth=0)
            ax.plot(pos, med, "o-", color=color, label=name)
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels([x for x, _ in xs], rotation=30, ha="right", fontsize="small")
        ax.set_xlabel(by)
        ax.set_ylabel(f"{metric} ({shown})" if shown else metric)
        ax.set_title(f"{suite}: {metric}, median and 95% CI")
        ax.grid(alpha=0.3)
    legend_outside(fig)
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    buf = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buf)
    atomic_write_bytes(check_out(path), buf.getvalue())
    return os.fspath(path)
