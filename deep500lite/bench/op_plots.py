"""Box plots of ``deep500lite bench op``'s results (matplotlib's Agg canvas, the ``plots`` extra)."""

from __future__ import annotations

import io
import os

from deep500lite.bench.op_cases import SUITES

__all__ = ["plot_results"]


def plot_results(bench, folder) -> list[str]:
    """Box plots of GFLOP/s (each raw sample's FLOP / time), one PNG per suite: ``<folder>/op-<suite>.png``.

    Cases are groups along the x axis, one box per framework; the dashed line is the measured
    peak and the black tick over each case its roofline bound (attainable GFLOP/s). Uses
    matplotlib's Agg canvas (no display needed).

    Returns:
        The paths written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from deep500lite.metrics.plots import legend_outside, new_figure, variant_color
    from deep500lite.utils import atomic_write_bytes

    paths = []
    for suite in SUITES:
        rows = [r for r in bench.results if r.case.suite == suite]
        if not rows:
            continue
        case_names = list(dict.fromkeys(r.case.name for r in rows))
        fws = list(dict.fromkeys(r.framework for r in rows))
        width = 0.8 / len(fws)
        fig = new_figure(max(6.0, 1.1 * len(case_names) + 2), 4.8)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        for r in rows:
            x = case_names.index(r.case.name) + (fws.index(r.framework) - (len(fws) - 1) / 2) * width
            rates = [r.case.flops / t / 1e9 for t in r.measurement.raw_times]
            box = ax.boxplot(rates, positions=[x], widths=width * 0.85, patch_artist=True, showfliers=True,
                             flierprops={"markersize": 2}, medianprops={"color": "black"})
            for patch in box["boxes"]:
                patch.set_facecolor(variant_color(r.framework))
                patch.set_alpha(0.8)
        for j, name in enumerate(case_names):
            attainable = next(r.roofline.attainable for r in rows if r.case.name == name) / 1e9
            ax.plot([j], [attainable], marker="_", markersize=14, markeredgewidth=1.6, color="black")
        ax.axhline(bench.peak.flops / 1e9, color="black", linestyle="--", linewidth=0.8)
        ax.set_xticks(range(len(case_names)))
        ax.set_xticklabels(case_names, rotation=30, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("GFLOP/s (per run)")
        ax.set_title(f"bench op: {suite} on {bench.device}", fontsize=10)
        handles = [Patch(facecolor=variant_color(fw), label=fw) for fw in fws]
        handles += [Line2D([], [], color="black", ls="--", lw=0.8,
                           label=f"measured peak ({bench.peak.flops / 1e9:.0f} GFLOP/s)"),
                    Line2D([], [], color="black", marker="_", ls="", markersize=14, label="roofline bound")]
        legend_outside(fig, handles, [h.get_label() for h in handles], fontsize=8)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        path = os.path.join(os.fspath(folder), f"op-{suite}.png")
        atomic_write_bytes(path, buf.getvalue())
        paths.append(path)
    return paths
