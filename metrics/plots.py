"""Plot helpers every deep500lite figure uses: one colour per framework variant, legends outside the axes.

:func:`variant_color` gives each executor variant (``torch``, ``torch:compile``, ``onnxruntime:O2``,
...) one colour that never changes, so a framework looks the same in ``run``'s, ``compare``'s and
``report``'s plots and in anything else that draws them; :func:`palette` assigns colours to a set of
labels (fixed ones first, then distinct colours for labels it does not know). :func:`legend_outside`
puts a figure's legend to the right of its axes, in as many columns as its height needs, and
:func:`log_scale_if_wide` switches an axis to a log scale when the values span more than a decade.
:func:`overlaps` tells whether a drawn legend covers an axes or a title (from matplotlib's window
extents; the tests use it).

The colours are hex strings; nothing here imports matplotlib until a figure is drawn.
"""

from __future__ import annotations

import math
import zlib
from typing import Iterable, Sequence

__all__ = ["VARIANT_COLORS", "EXTRA_COLORS", "variant_color", "palette", "legend_outside", "log_scale_if_wide",
           "overlaps", "new_figure"]

#: The fixed colour of each built-in executor variant: one hue family per framework.
VARIANT_COLORS = {
    "reference": "#7f7f7f",
    "torch": "#d62728", "torch:compile": "#ff7f0e", "torch:max-autotune": "#8c564b",
    "tensorflow": "#1f77b4", "tensorflow:xla": "#17becf",
    "onnxruntime": "#2ca02c", "onnxruntime:O0": "#98df8a", "onnxruntime:O1": "#bcbd22",
    "onnxruntime:O2": "#006d2c", "onnxruntime:O3": "#637939",
    "jax": "#9467bd",
}

#: Colours for labels :data:`VARIANT_COLORS` does not name (plugins, several recipes): distinct from
#: the fixed ones and from each other.
EXTRA_COLORS = (
    "#e377c2", "#393b79", "#e7969c", "#843c39", "#5254a3", "#d6616b", "#7b4173", "#a55194", "#ce6dbd",
    "#de9ed6", "#3182bd", "#6baed6", "#e6550d", "#fd8d3c", "#31a354", "#74c476", "#756bb1", "#9e9ac8",
    "#636363", "#bd9e39", "#e7ba52", "#8ca252", "#cedb9c", "#ad494a", "#000000", "#f7b6d2", "#c49c94",
    "#dbdb8d", "#9edae5", "#c5b0d5",
)


def _variant_part(label: str) -> str:
    """``recipe/torch:compile`` -> ``torch:compile`` (a label with the recipe in front)."""
    return label.rsplit("/", 1)[-1]


def variant_color(label: str) -> str:
    """The colour of one label: its variant's fixed colour, else one chosen by a stable hash of the label."""
    known = VARIANT_COLORS.get(_variant_part(label))
    if known is not None:
        return known
    return EXTRA_COLORS[zlib.crc32(label.encode()) % len(EXTRA_COLORS)]


def palette(labels: Iterable[str]) -> dict[str, str]:
    """A colour per label, all different where possible.

    Labels of the built-in variants keep their fixed colour; labels of one variant under several
    recipes (``a/torch``, ``b/torch``) and unknown labels take colours from :data:`EXTRA_COLORS`
    not used yet, in sorted order, each starting at its label's hash: the same set of labels gets the
    same colours in any order, and a label tends to keep its colour in other sets.
    """
    labels = list(dict.fromkeys(labels))
    out: dict[str, str] = {}
    used: set[str] = set()
    for label in labels:
        color = VARIANT_COLORS.get(_variant_part(label))
        if color is not None and color not in used:
            out[label] = color
            used.add(color)
    for label in sorted(labels):  # sorted: the same labels get the same colours in any order
        if label in out:
            continue
        start = zlib.crc32(label.encode()) % len(EXTRA_COLORS)
        for k in range(len(EXTRA_COLORS)):
            color = EXTRA_COLORS[(start + k) % len(EXTRA_COLORS)]
            if color not in used:
                break
        out[label] = color
        used.add(color)
    return out


def new_figure(width: float, height: float):
    """A matplotlib ``Figure`` with the constrained layout, which makes room for a legend outside the axes."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def legend_outside(fig, handles: Sequence | None = None, labels: Sequence[str] | None = None, *,
                   title: str | None = None, fontsize="small"):
    """Put the figure's legend to the right of its axes (never over them); returns the legend or None.

    One column up to 18 entries, then as many columns as keep it about as tall as the figure. The
    figure must use the constrained layout (:func:`new_figure`), which shrinks the axes to fit it.
    """
    if handles is None:
        handles, labels = [], []
        for ax in fig.axes:
            h, lab = ax.get_legend_handles_labels()
            handles.extend(h)
            labels.extend(lab)
    if not handles:
        return None
    ncol = max(1, math.ceil(len(handles) / 18))
    return fig.legend(handles, labels, loc="outside right upper", ncols=ncol, fontsize=fontsize, title=title,
                      title_fontsize=fontsize, frameon=False)


def log_scale_if_wide(ax, values: Iterable[float], axis: str = "y", span: float = 10.0) -> bool:
    """Use a log scale on ``axis`` when the positive ``values`` span more than ``span`` times; returns whether."""
    positive = [float(v) for v in values if v is not None and math.isfinite(float(v)) and float(v) > 0]
    if len(positive) < 2 or max(positive) / min(positive) <= span:
        return False
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    return True


def overlaps(fig) -> list[str]:
    """What a figure's legends cover, after drawing it: ``["legend over axes 0", ...]`` (empty when nothing).

    A legend overlaps when its window extent intersects an axes' extent or a title's, or reaches
    outside the figure.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    problems = []
    figure_box = fig.bbox
    for n, legend in enumerate(legends):
        box = legend.get_window_extent(renderer)
        for i, ax in enumerate(fig.axes):
            if box.overlaps(ax.get_window_extent(renderer)):
                problems.append(f"legend {n} over axes {i}")
            title = ax.title
            if title.get_text() and box.overlaps(title.get_window_extent(renderer)):
                problems.append(f"legend {n} over the title of axes {i}")
        if fig._suptitle is not None and box.overlaps(fig._suptitle.get_window_extent(renderer)):
            problems.append(f"legend {n} over the figure's title")
        if box.x0 < figure_box.x0 - 1 or box.y0 < figure_box.y0 - 1 or box.x1 > figure_box.x1 + 1 \
                or box.y1 > figure_box.y1 + 1:
            problems.append(f"legend {n} outside the figure")
    for i, ax in enumerate(fig.axes):
        title = ax.title
        if title.get_text():
            t = title.get_window_extent(renderer)
            if t.x0 < figure_box.x0 - 1 or t.x1 > figure_box.x1 + 1 or t.y1 > figure_box.y1 + 1:
                problems.append(f"title of axes {i} clipped by the figure")
    return problems
