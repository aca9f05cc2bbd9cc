"""Plots of the performance models' predictions (matplotlib, the ``plots`` extra)."""

from __future__ import annotations

import io
import os

from deep500lite.utils import atomic_write_bytes

__all__ = ["plot_scaling"]


def plot_scaling(result, path) -> str:
    """Draw a :class:`~deep500lite.perfmodel.scaling.ScalingResult` (speedup and efficiency; the step time and its
    parts) into a PNG at ``path``; returns the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2))
    FigureCanvasAgg(fig)
    ax_s, ax_t = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    n = [r.nodes for r in result.rows]
    ax_s.plot(n, [result.speedup(r) for r in result.rows], marker="o", markersize=3, label="speedup")
    ax_s.plot(n, [r / n[0] for r in n], linestyle=":", color="gray", label="ideal")
    ax_e = ax_s.twinx()
    ax_e.plot(n, [result.efficiency(r) * 100 for r in result.rows], color="#d62728", marker="s", markersize=3,
              label="efficiency")
    ax_e.set_ylabel("efficiency (%)")
    ax_e.set_ylim(0, 105)
    if result.stop is not None:
        ax_s.axvline(result.stop, color="black", linewidth=0.8, linestyle="--")
    ax_s.set_xscale("log", base=2)
    ax_s.set_yscale("log", base=2)
    ax_s.set_xlabel("nodes")
    ax_s.set_ylabel("speedup")
    s = result.setup
    ax_s.set_title(f"{s.model.name}, {result.mode} scaling, batch {result.batch:g}, {s.network.name}, "
                   f"{s.accelerator.name}", fontsize=9)
    ax_s.legend(loc="upper left", fontsize=7)
    ax_e.legend(loc="lower right", fontsize=7)
    parts = [("step", [r.step for r in result.rows], "-"),
             ("forward + backward", [r.forward + r.backward for r in result.rows], "--"),
             ("update (does not shrink)", [r.update for r in result.rows], ":"),
             ("allreduce, all", [r.comm for r in result.rows], "-."),
             ("allreduce, exposed", [r.comm_exposed for r in result.rows], "--"),
             ("I/O, exposed", [r.io_exposed for r in result.rows], ":")]
    for label, values, style in parts:
        if any(v > 0 for v in values):
            ax_t.plot(n, [v if v > 0 else float("nan") for v in values], linestyle=style, marker=".", label=label)
    ax_t.set_xscale("log", base=2)
    ax_t.set_yscale("log")
    ax_t.set_xlabel("nodes")
    ax_t.set_ylabel("seconds per step")
    ax_t.set_title("predicted step time and its parts", fontsize=9)
    ax_t.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    atomic_write_bytes(path, buf.getvalue())
    return os.fspath(path)
