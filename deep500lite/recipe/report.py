"""Tables and plots from results files (``deep500lite compare`` and ``deep500lite report``).

:func:`comparison_table` renders :func:`deep500lite.recipe.compare.compare_results` as text, Markdown
or CSV; :func:`significance_lines` says in words which step-time differences are significant;
:func:`write_plots` draws, with matplotlib's Agg canvas (imported only here):

- ``step_times.png``: a violin plot of every framework's step times with a box plot inside
  (median, quartiles), on a log scale when medians differ by more than 10x;
- ``loss.png``: training loss per step (thin) and its mean per epoch (markers), per framework;
- ``accuracy.png``: test accuracy (solid) and training accuracy (dashed) per epoch, per framework.
"""

from __future__ import annotations

import io
import math
import os
from typing import Sequence

from deep500lite.errors import FrameworkNotAvailableError, UserError

__all__ = ["load_results", "comparison_table", "significance_lines", "write_plots", "TABLE_HEADERS"]

TABLE_HEADERS = ("framework", "runs", "test acc", "time to acc", "throughput", "step latency median [95% CI]",
                 "compile time", "peak memory", "max |d out|", "max |d grad|", "step time vs fastest", "metrics")


def load_results(paths: Sequence) -> list[dict]:
    """Read results files, expanding folders (searched recursively for ``results.json``)."""
    from deep500lite.recipe.results import find_results, read_results

    return [read_results(p) for p in find_results(paths)]


def _num(x, fmt: str, missing: str = "-") -> str:
    return missing if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def _sci(x) -> str:
    if x is None:
        return "-"
    return "0" if x == 0 else f"{x:.2g}"


def _p(p: float) -> str:
    return f"{p:.2g}" if p >= 1e-300 else "<1e-300"


def _vs_fastest(row: dict, comparison: dict) -> str:
    if comparison.get("fastest") is None or row["step_time"] is None:
        return "-"
    if row["label"] == comparison["fastest"]:
        return "fastest"
    test = next((t for t in comparison["tests"] if t["label"] == row["label"]), None)
    if test is None:
        return "-"
    if test["significant"]:
        word = "slower" if test["ratio"] >= 1 else "faster"
        return f"x{test['ratio']:.2f} {word} (p={_p(test['p_adjusted'])})"
    return f"indistinguishable (p={_p(test['p_adjusted'])})"


def _metrics_cell(row: dict) -> str:
    if row["errors"]:
        return "error"
    judged = [v for v in row["verdicts"] if v.get("passed") is not None]
    if not judged:
        return "measured"
    return "pass" if row["passed"] else "FAIL"


def comparison_table(comparison: dict, fmt: str = "table") -> str:
    """One table: a row per framework (see :data:`TABLE_HEADERS`).

    ``time to acc`` is the training time until the test accuracy first reached the recipe's
    target (``not reached`` when it never did, ``-`` without a target); ``max |d out|`` and
    ``max |d grad|`` are the largest absolute differences of the first step's outputs and
    gradients from the reference executor.
    """
    from deep500lite.metrics.tables import format_ci, format_table

    rows = []
    for r in comparison["rows"]:
        st = r["step_time"]
        if r.get("time_to_accuracy") is not None:
            tta = f"{r['time_to_accuracy']:.1f} s"
        else:
            tta = "not reached" if r.get("time_to_accuracy_target") is not None else "-"
        rows.append([
            r["label"], str(r["runs"]),
            _num(r["final_test_accuracy"], ".2f") + ("%" if r["final_test_accuracy"] is not None else ""),
            tta,
            _num(r["throughput"], ".0f") + (" samples/s" if r["throughput"] is not None else ""),
            format_ci(st["median"], st["ci_low"], st["ci_high"]) + f" (n={st['n']})" if st else "-",
            _num(r.get("compile_seconds"), ".2f") + (" s" if r.get("compile_seconds") is not None else ""),
            _num(None if r["peak_memory_bytes"] is None else r["peak_memory_bytes"] / 2**20, ".0f")
            + (" MiB" if r["peak_memory_bytes"] is not None else ""),
            "ref" if r.get("divergence_outputs") == 0 and r.get("framework") == r.get("reference")
            else _sci(r.get("divergence_outputs")),
            "ref" if r.get("divergence_gradients") == 0 and r.get("framework") == r.get("reference")
            else _sci(r.get("divergence_gradients")),
            _vs_fastest(r, comparison), _metrics_cell(r)])
    headers = list(TABLE_HEADERS)
    headers[0] = comparison.get("group_by") or headers[0]  # report --group-by label: the rows are labels
    if comparison.get("target") is not None:
        headers[3] = f"time to {comparison['target']:g}%"
    return format_table(headers, rows, fmt)


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

    ``group_by`` groups the runs as :func:`~deep500lite.recipe.compare.compare_results` does.

    Raises:
        FrameworkNotAvailableError: matplotlib is not installed (``pip install 'deep500lite[plots]'``);
            an ``ImportError``.
    """
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise FrameworkNotAvailableError("Plots need matplotlib, which is not installed: "
                                         "pip install 'deep500lite[plots]'") from exc
    from deep500lite.recipe.compare import compare_results

    if not results:
        raise UserError("No results to plot: give at least one results file. Received: 0 results")
    folder = os.fspath(folder)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise UserError(f"Cannot make the plots folder '{folder}' ({exc.strerror or exc}); give a writable folder for "
                        f"the plots. Received: {folder!r}") from exc
    comparison = comparison or compare_results(results, group_by=group_by)
    groups = _groups(results, group_by)
    paths = []

    timed = [r for r in comparison["rows"] if r["step_times"]]
    fig = Figure(figsize=(max(5.0, 1.4 * len(timed) + 2), 4.5))
    ax = fig.add_subplot()
    if timed:
        data = [[t * 1e3 for t in r["step_times"]] for r in timed]
        positions = list(range(1, len(data) + 1))
        ax.violinplot(data, positions=positions, showextrema=False)
        ax.boxplot(data, positions=positions, widths=0.15, showfliers=False)
        ax.set_xticks(positions)
        ax.set_xticklabels([r["label"] for r in timed])
        medians = [r["step_time"]["median"] for r in timed]
        if max(medians) / max(min(medians), 1e-12) > 10:
            ax.set_yscale("log")
    ax.set_ylabel("training step time (ms)")
    ax.set_title("Step times per framework (violin: distribution; box: quartiles, median)")
    ax.grid(alpha=0.3, axis="y")
    paths.append(_save(fig, os.path.join(folder, "step_times.png")))

    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for i, (label, runs) in enumerate(groups.items()):
        samples = runs[0].get("samples") or {}
        steps = samples.get("steps") or []
        color = f"C{i % 10}"
        if steps:
            ax.plot([s["global_step"] for s in steps], [s["loss"] for s in steps], lw=0.6, alpha=0.4, color=color)
        epochs = samples.get("epochs") or []
        if epochs:
            ax.plot([e["global_step_end"] for e in epochs], [e["train_loss"] for e in epochs], "o-", color=color,
                    label=f"{label} (epoch mean)")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title("Training loss")
    ax.grid(alpha=0.3)
    if ax.get_lines():
        ax.legend()
    paths.append(_save(fig, os.path.join(folder, "loss.png")))

    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for i, (label, runs) in enumerate(groups.items()):
        epochs = (runs[0].get("samples") or {}).get("epochs") or []
        color = f"C{i % 10}"
        xs = [e["epoch"] + 1 for e in epochs]
        test = [e.get("test_accuracy") for e in epochs]
        train = [e.get("train_accuracy") for e in epochs]
        if any(v is not None for v in test):
            ax.plot(xs, [math.nan if v is None else v for v in test], "o-", color=color, label=f"{label} test")
        if any(v is not None for v in train):
            ax.plot(xs, [math.nan if v is None else v for v in train], "--", color=color, alpha=0.7,
                    label=f"{label} train")
    if comparison.get("target") is not None:
        ax.axhline(comparison["target"], color="grey", lw=0.8, ls=":", label=f"target {comparison['target']:g}%")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Accuracy per epoch")
    ax.grid(alpha=0.3)
    if ax.get_lines():
        ax.legend(fontsize="small")
    paths.append(_save(fig, os.path.join(folder, "accuracy.png")))
    return paths
