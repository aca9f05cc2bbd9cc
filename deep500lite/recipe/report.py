"""Tables and plots from results files (``deep500lite compare`` and ``deep500lite report``).

:func:`comparison_table` renders :func:`deep500lite.recipe.compare.compare_results` as text, Markdown
or CSV (one unit per column, in the header; numbers only in CSV; a noise flag on rows whose
step times spread widely); :func:`significance_lines` says in words which step-time differences are
significant; :func:`write_plots` draws, with matplotlib's Agg canvas (imported only here), each
framework variant in its fixed colour (:mod:`deep500lite.metrics.plots`), legends outside the axes:

- ``step_times.png``: a horizontal violin per framework with a box plot inside (median,
  quartiles), on a log scale when the times span more than 10x;
- ``loss.png``: training loss per step (thin) and its mean per epoch (markers), per framework, on
  a log scale when the losses span more than 10x;
- ``accuracy.png``: test accuracy (solid) and training accuracy (dashed) per epoch (from 1), per
  framework, and the recipe's target accuracy (dotted).
"""

from __future__ import annotations

import io
import math
import os
from typing import Sequence

from deep500lite.errors import FrameworkNotAvailableError, UserError
from deep500lite.metrics.plots import legend_outside, log_scale_if_wide, new_figure, palette

__all__ = ["load_results", "comparison_table", "comparison_unit_table", "comparison_csv", "significance_lines",
           "write_plots", "comparison_figures", "require_matplotlib"]


def load_results(paths: Sequence) -> list[dict]:
    """Read results files, expanding folders (searched recursively for ``results.json``)."""
    from deep500lite.recipe.results import find_results, read_results

    return [read_results(p) for p in find_results(paths)]


def _p(p: float) -> str:
    return f"{p:.2g}" if p >= 1e-300 else "<1e-300"


def _vs_fastest(row: dict, comparison: dict) -> tuple:
    """``(words for text, ratio to the fastest's median, Holm-adjusted p, verdict)`` of one row."""
    if comparison.get("fastest") is None or row["step_time"] is None:
        return None, None, None, None
    if row["label"] == comparison["fastest"]:
        return "fastest", 1.0, None, "fastest"
    test = next((t for t in comparison["tests"] if t["label"] == row["label"]), None)
    if test is None:
        return None, None, None, None
    if test["significant"]:
        word = "slower" if test["ratio"] >= 1 else "faster"
        return f"x{test['ratio']:.2f} {word} (p={_p(test['p_adjusted'])})", test["ratio"], test["p_adjusted"], word
    return (f"indistinguishable (p={_p(test['p_adjusted'])})", test["ratio"], test["p_adjusted"],
            "indistinguishable")


def _metrics_cell(row: dict) -> str:
    if row["errors"]:
        return "error"
    judged = [v for v in row["verdicts"] if v.get("passed") is not None]
    if not judged:
        return "measured"
    return "pass" if row["passed"] else "FAIL"


def comparison_unit_table(comparison: dict):
    """The comparison as a :class:`~deep500lite.metrics.tables.UnitTable`: a row per framework variant.

    One unit per column, in its header; step times in one unit for the whole column (the unit of
    the smallest median). A step-time median whose interquartile range is more than 10% of it
    carries the noise flag ``(! XX%)`` (the footer says so; CSV has the number in ``step
    IQR/median (%)``). ``time to T%`` is the training time until the test accuracy first reached
    the recipe's target, compilation left out (median over runs; empty when a run never reached
    it); ``time to T% score`` is MLPerf's score over several seeds (``compare --runs``: the fastest
    and slowest runs dropped, the mean of the rest). ``max |d out|`` and ``max |d grad|`` are the
    largest absolute differences of the first step's outputs and gradients from the reference
    executor (0, marked ``(ref)``, for the reference itself).
    """
    from deep500lite.metrics.tables import (NOISE_THRESHOLD, Column, UnitTable, noise_flag, noise_footer,
                                            relative_spread, time_unit)

    rows = comparison["rows"]
    unit, scale = time_unit([r["step_time"]["median"] for r in rows if r["step_time"]])
    target = comparison.get("target")
    tta = f"time to {target:g}%" if target is not None else "time to accuracy"
    scored = any(r.get("time_to_accuracy_score") is not None or r.get("seeds", 1) > 1 for r in rows)
    first = comparison.get("group_by") or "framework"  # report --group-by label: the rows are labels
    columns = [Column(first), Column("runs", fmt="d"), Column("test acc", "%", ".2f"),
               Column(tta, "s", ".3g")]
    if scored:
        columns.append(Column(f"{tta} score", "s", ".3g"))
    columns += [Column("throughput", "samples/s", ".0f"), Column("step median", unit, ".4g"),
                Column("step CI low", unit, ".4g"), Column("step CI high", unit, ".4g"), Column("steps", fmt="d"),
                Column("step IQR/median", "%", ".0f", only="csv"), Column("compile", "s", ".2f"),
                Column("peak memory", "MiB", ".0f"), Column("max |d out|", fmt=".2g"),
                Column("max |d grad|", fmt=".2g"), Column("step time vs fastest", only="text"),
                Column("ratio to fastest", fmt=".3f", only="csv"), Column("p adjusted", fmt=".3g", only="csv"),
                Column("difference", only="csv"), Column("metrics")]
    table = UnitTable(columns)
    index = {c.name: j for j, c in enumerate(columns)}
    noisy = False
    for i, r in enumerate(rows):
        st = r["step_time"]
        spread = relative_spread(st["q1"], st["median"], st["q3"]) if st else None
        words, ratio, p_adj, verdict = _vs_fastest(r, comparison)
        is_ref = r.get("framework") == r.get("reference") and r.get("divergence_outputs") == 0
        peak = r["peak_memory_bytes"]
        values = {
            first: r["label"], "runs": r["runs"], "test acc": r["final_test_accuracy"],
            tta: r.get("time_to_accuracy"), f"{tta} score": r.get("time_to_accuracy_score"),
            "throughput": r["throughput"],
            "step median": st["median"] / scale if st else None, "step CI low": st["ci_low"] / scale if st else None,
            "step CI high": st["ci_high"] / scale if st else None, "steps": st["n"] if st else None,
            "step IQR/median": None if spread is None else spread * 100, "compile": r.get("compile_seconds"),
            "peak memory": None if peak is None else peak / 2**20,
            "max |d out|": r.get("divergence_outputs"), "max |d grad|": r.get("divergence_gradients"),
            "step time vs fastest": words, "ratio to fastest": ratio, "p adjusted": p_adj, "difference": verdict,
            "metrics": _metrics_cell(r)}
        table.rows.append([values[c.name] for c in columns])
        flag = noise_flag(spread)
        if flag:
            table.flags[(i, index["step median"])] = flag
            noisy = True
        if is_ref:
            table.flags[(i, index["max |d out|"])] = table.flags[(i, index["max |d grad|"])] = "(ref)"
        if r.get("time_to_accuracy") is None and r.get("time_to_accuracy_target") is not None:
            table.flags[(i, index[tta])] = "not reached"
    table.footer.append(f"step times in {unit}: median of every training step after the first, with its 95% CI; "
                        f"{tta} leaves compilation out (compile: seconds apart)")
    if scored:
        table.footer.append(f"{tta} score: MLPerf's score over the runs' seeds: the fastest and the slowest run "
                            "dropped, the mean of the rest (empty when more than one run missed the target)")
    if noisy:
        table.footer.append(noise_footer(NOISE_THRESHOLD, "a framework's step times"))
    return table


def comparison_table(comparison: dict, fmt: str = "table") -> str:
    """The comparison as text, Markdown or CSV (see :func:`comparison_unit_table`; CSV cells are numbers)."""
    return comparison_unit_table(comparison).render(fmt)


def comparison_csv(comparison: dict) -> str:
    """The comparison as CSV: plain numbers, units in the headers (pandas reads every column as numbers)."""
    return comparison_table(comparison, "csv")


def significance_lines(comparison: dict) -> list[str]:
    """Sentences on the step-time tests: which differences are significant, which are not."""
    tests = comparison["tests"]
    if not tests:
        return ["step times: fewer than two frameworks with step times, nothing to test"]
    rows = {r["label"]: r for r in comparison["rows"]}
    fast = rows[comparison["fastest"]]["step_time"]["median"]
    lines = [f"step times, two-sided Mann-Whitney U against the fastest ({comparison['fastest']}), "
             f"Holm-adjusted, alpha={comparison['alpha']:g}:"]
    for t in tests:
        med = rows[t["label"]]["step_time"]["median"]
        verdict = "significant" if t["significant"] else "indistinguishable"
        lines.append(f"  {t['label']}: median {med * 1e3:.4g} ms vs {fast * 1e3:.4g} ms (x{t['ratio']:.2f}), "
                     f"U={t['u']:.0f}, p={_p(t['p'])}, adjusted p={_p(t['p_adjusted'])}, "
                     f"P(step slower)={t['effect']:.2f}: {verdict}")
    return lines


def _save(fig, path: str) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from deep500lite.utils import atomic_write_bytes

    buf = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buf)
    atomic_write_bytes(path, buf.getvalue())
    return path


def _groups(results: Sequence[dict], group_by: str = "framework") -> dict[str, list[dict]]:
    from deep500lite.recipe.compare import group_label

    several = len({(r.get("recipe") or {}).get("name") for r in results}) > 1
    several_fw = len({r.get("executor_variant") or r.get("framework") for r in results}) > 1
    out: dict[str, list[dict]] = {}
    for r in results:
        out.setdefault(group_label(r, several, group_by, several_fw), []).append(r)
    return out


def write_plots(results: Sequence[dict], folder, comparison: dict | None = None,
                group_by: str = "framework") -> list[str]:
    """Draw ``step_times.png``, ``loss.png`` and ``accuracy.png`` in ``folder``; returns their paths.

    Every framework variant keeps its colour (:func:`deep500lite.metrics.plots.palette`), legends
    sit outside the axes, and the plots stay readable up to about 25 frameworks. ``group_by``
    groups the runs as :func:`~deep500lite.recipe.compare.compare_results` does.

    Raises:
        FrameworkNotAvailableError: matplotlib is not installed (``pip install 'deep500lite[plots]'``);
            an ``ImportError``.
    """
    require_matplotlib("Plots")
    from deep500lite.recipe.compare import compare_results

    if not results:
        raise UserError("No results to plot: give at least one results file. Received: 0 results")
    folder = os.fspath(folder)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise UserError(f"Cannot make the plots folder '{folder}' ({exc.strerror or exc}); give a writable folder for "
                        f"the plots. Received: {folder!r}") from exc
    figures = comparison_figures(results, comparison or compare_results(results, group_by=group_by), group_by)
    return [_save(fig, os.path.join(folder, name)) for name, fig in figures.items()]


def comparison_figures(results: Sequence[dict], comparison: dict, group_by: str = "framework") -> dict:
    """The matplotlib figures :func:`write_plots` saves: ``{"step_times.png": fig, "loss.png": fig, "accuracy.png": fig}``."""
    require_matplotlib("Plots")
    groups = _groups(results, group_by)
    colors = palette(list(groups) + [r["label"] for r in comparison["rows"]])
    return {"step_times.png": _step_time_figure(comparison, colors), "loss.png": _loss_figure(groups, colors),
            "accuracy.png": _accuracy_figure(groups, colors, comparison.get("target"))}


def require_matplotlib(what: str = "Plots") -> None:
    """Raise :class:`FrameworkNotAvailableError` (with the pip extra) when matplotlib is not installed."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise FrameworkNotAvailableError(f"{what} need matplotlib, which is not installed: "
                                         "pip install 'deep500lite[plots]'")


def _step_time_figure(comparison: dict, colors: dict):
    """Horizontal violins (one row per framework, so 25 names never overlap) with quartile boxes."""
    timed = [r for r in comparison["rows"] if r["step_times"]]
    fig = new_figure(8.0, max(3.0, 0.42 * len(timed) + 1.6))
    ax = fig.add_subplot()
    if timed:
        data = [[t * 1e3 for t in r["step_times"]] for r in timed]
        positions = list(range(len(data), 0, -1))  # the first row on top
        horizontal = _horizontal()
        parts = ax.violinplot(data, positions=positions, showextrema=False, **horizontal)
        for body, r in zip(parts["bodies"], timed):
            body.set_facecolor(colors[r["label"]])
            body.set_alpha(0.45)
        ax.boxplot(data, positions=positions, widths=0.15, showfliers=False, **horizontal)
        ax.set_yticks(positions)
        ax.set_yticklabels([r["label"] for r in timed])
        flat = [v for d in data for v in d]
        if log_scale_if_wide(ax, flat, axis="x"):
            ax.set_xlim(min(v for v in flat if v > 0) / 1.25, max(flat) * 1.25)
    ax.set_xlabel("training step time (ms)")
    ax.set_title("Step times (violin: distribution; box: quartiles and median)")
    ax.grid(alpha=0.3, axis="x")
    return fig


def _horizontal() -> dict:
    """The keyword for horizontal violins and boxes: ``orientation`` from matplotlib 3.10, ``vert`` before."""
    import matplotlib

    major, minor = (int(p) for p in matplotlib.__version__.split(".")[:2])
    return {"orientation": "horizontal"} if (major, minor) >= (3, 10) else {"vert": False}


def _loss_figure(groups: dict, colors: dict):
    fig = new_figure(9.0, 4.8)
    ax = fig.add_subplot()
    values = []
    for label, runs in groups.items():
        samples = runs[0].get("samples") or {}
        steps = samples.get("steps") or []
        color = colors[label]
        if steps:
            losses = [s["loss"] for s in steps]
            values.extend(losses)
            ax.plot([s["global_step"] + 1 for s in steps], losses, lw=0.6, alpha=0.35, color=color)
        epochs = samples.get("epochs") or []
        if epochs:
            ax.plot([e["global_step_end"] for e in epochs], [e["train_loss"] for e in epochs], "o-", color=color,
                    ms=3, label=label)
    log_scale_if_wide(ax, values)
    ax.set_xlabel("step (counted from 1)")
    ax.set_ylabel("training loss")
    ax.set_title("Training loss (thin: every step; markers: epoch mean)")
    ax.grid(alpha=0.3)
    legend_outside(fig)
    return fig


def _accuracy_figure(groups: dict, colors: dict, target):
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    fig = new_figure(9.0, 4.8)
    ax = fig.add_subplot()
    handles, labels = [], []
    for label, runs in groups.items():
        epochs = (runs[0].get("samples") or {}).get("epochs") or []
        color = colors[label]
        xs = [e["epoch"] + 1 for e in epochs]
        test = [e.get("test_accuracy") for e in epochs]
        train = [e.get("train_accuracy") for e in epochs]
        if any(v is not None for v in test):
            ax.plot(xs, [math.nan if v is None else v for v in test], "o-", color=color, ms=3)
        if any(v is not None for v in train):
            ax.plot(xs, [math.nan if v is None else v for v in train], "--", color=color, alpha=0.7)
        if epochs:
            handles.append(Line2D([], [], color=color, marker="o", ms=3))
            labels.append(label)
    handles += [Line2D([], [], color="black", marker="o", ms=3), Line2D([], [], color="black", ls="--")]
    labels += ["test (solid)", "training (dashed)"]
    if target is not None:
        ax.axhline(target, color="black", lw=0.9, ls=":")
        handles.append(Line2D([], [], color="black", lw=0.9, ls=":"))
        labels.append(f"target {target:g}%")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch (counted from 1)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Accuracy per epoch")
    ax.grid(alpha=0.3)
    legend_outside(fig, handles, labels)
    return fig
