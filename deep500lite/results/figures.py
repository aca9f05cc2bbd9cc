"""Plotly figures of the results store: the chart JSON the dashboard's pages and ``history --plot
FILE.html`` carry, and plotly.js itself (from the ``plotly`` pip package, so pages open offline)."""

from __future__ import annotations

import datetime as _dt
import os

from deep500lite.errors import FrameworkNotAvailableError, UserError
from deep500lite.results.history import check_out, format_value, panels, series_colors
from deep500lite.results.pages import figure_block, page, plot_text

__all__ = ["history_figure", "plotly_js", "plotly_js_path", "plot_html"]


def plotly_js_path() -> str:
    """The ``plotly.min.js`` the ``plotly`` pip package ships.

    Raises:
        FrameworkNotAvailableError: plotly is not installed (``pip install 'deep500lite[dashboard]'``).
    """
    try:
        import plotly
    except ImportError as exc:
        raise FrameworkNotAvailableError("The dashboard's charts need plotly, which is not installed: "
                                         "pip install 'deep500lite[dashboard]'") from exc
    path = os.path.join(os.path.dirname(plotly.__file__), "package_data", "plotly.min.js")
    if not os.path.isfile(path):
        raise FrameworkNotAvailableError(f"The plotly package at {os.path.dirname(plotly.__file__)} has no "
                                         "package_data/plotly.min.js; reinstall it: "
                                         "pip install --force-reinstall plotly")
    return path


def plotly_js() -> str:
    """plotly.js itself (to inline in a page)."""
    with open(plotly_js_path(), encoding="utf-8") as f:
        return f.read()


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    return f"rgba({int(h[0:2], 16)},{int(h[2:4], 16)},{int(h[4:6], 16)},{alpha})"


def _hover(p: dict) -> str:
    ci = f"[{format_value(p['ci_low'], p['unit'])}, {format_value(p['ci_high'], p['unit'])}]"
    lines = [plot_text(p["series"]), f"{plot_text(p['x'])}: {format_value(p['median'], p['unit'])} {ci}, n={p['n']}",
             "runs " + ", ".join(map(str, p["runs"]))]
    if p["labels"]:
        lines.append("label " + plot_text(", ".join(p["labels"])))
    if p["commits"]:
        lines.append("commit " + plot_text(", ".join(c[:12] for c in p["commits"])))
    return "<br>".join(lines)


def history_figure(series: dict, title: str, by: str, markers: list | None = None, time_axis: bool = False) -> dict:
    """A Plotly figure (plain JSON) of points: per series its median line and 95% confidence band.

    Args:
        series: ``{series name: [points in x order]}`` (:func:`deep500lite.results.history.panels`).
        title: the chart's title.
        by: the x axis' name.
        markers: points to mark as slower than the point before (a red cross each).
        time_axis: x is the runs' start time (a date axis) instead of the points' ``x`` labels.
    """
    colors = series_colors(series)
    unit = next(iter(series.values()))[0]["unit"] if series else ""

    def xs(pts):
        if time_axis:
            return [_dt.datetime.fromtimestamp(p["time"]).isoformat(timespec="milliseconds") for p in pts]
        return [plot_text(p["x"]) for p in pts]

    data = []
    for k, (name, pts) in enumerate(series.items()):
        color, group = colors[name], f"s{k}"
        lo = [p["ci_low"] if p["ci_low"] is not None else p["median"] for p in pts]
        hi = [p["ci_high"] if p["ci_high"] is not None else p["median"] for p in pts]
        band = {"type": "scatter", "x": xs(pts), "mode": "lines", "line": {"width": 0, "color": color},
                "hoverinfo": "skip", "showlegend": False, "legendgroup": group}
        data.append({**band, "y": hi, "name": plot_text(name) + " (CI high)"})
        data.append({**band, "y": lo, "name": plot_text(name) + " (CI low)", "fill": "tonexty",
                     "fillcolor": _rgba(color, 0.18)})
        data.append({"type": "scatter", "x": xs(pts), "y": [p["median"] for p in pts], "mode": "lines+markers",
                     "name": plot_text(name), "legendgroup": group, "line": {"color": color},
                     "text": [_hover(p) for p in pts], "hovertemplate": "%{text}<extra></extra>",
                     "meta": "median"})
    if markers:
        data.append({"type": "scatter", "x": xs(markers), "y": [p["median"] for p in markers], "mode": "markers",
                     "name": "slower than the run before", "marker": {"symbol": "x", "size": 14, "color": "#b00020"},
                     "text": [_hover(p) for p in markers], "hovertemplate": "%{text}<extra></extra>",
                     "meta": "slower"})
    yaxis = {"title": {"text": plot_text(unit)}, "rangemode": "tozero"}
    if unit == "s":
        yaxis.update({"tickformat": "~s", "ticksuffix": "s", "title": {"text": "seconds"}})
    layout = {"title": {"text": plot_text(title)}, "yaxis": yaxis, "hovermode": "closest",
              "xaxis": {"title": {"text": plot_text(by)}, "type": "date" if time_axis else "category"},
              "legend": {"orientation": "h", "y": -0.25}, "margin": {"t": 50, "r": 20, "l": 70, "b": 40}}
    return {"data": data, "layout": layout}


def plot_html(points: list, path, by: str) -> str:
    """Write the history as one HTML page of Plotly charts (plotly.js inlined: it opens offline)."""
    from deep500lite.utils import atomic_write_text

    groups = panels(points)
    if not groups:
        raise UserError("Nothing to plot: no recorded series match the filters. Received: no points")
    blocks = [figure_block(f"fig-{i}", history_figure(series, f"{suite}: {metric}", by))
              for i, ((suite, metric), series) in enumerate(groups.items())]
    html = page("deep500lite history", "".join(blocks), scripts_inline=plotly_js())
    atomic_write_text(check_out(path), html)
    return os.fspath(path)
