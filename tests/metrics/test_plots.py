"""Plots that stay readable with 25 series: legends outside the axes, one colour per variant, epochs from 1.

Each figure is drawn with matplotlib's Agg canvas and the window extents of its legend, axes and
title are compared (:func:`deep500lite.metrics.plots.overlaps`).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from deep500lite.metrics.plots import VARIANT_COLORS, overlaps, palette, variant_color  # noqa: E402
from deep500lite.recipe.compare import compare_results  # noqa: E402
from deep500lite.recipe.report import comparison_figures, write_plots  # noqa: E402
#: The built-in variants (those with a fixed colour, whatever plugins are installed) and plugin names: 25 series.
BUILTIN = list(VARIANT_COLORS)
LABELS = BUILTIN + [f"plugin{i}" for i in range(25 - len(BUILTIN))]


def _results(label: str, k: int, epochs: int = 5, steps_per_epoch: int = 6) -> dict:
    """A results dict shaped like deep500lite's: step times spanning decades across the labels."""
    rng = np.random.default_rng(k)
    fw = label.split(":")[0]
    base = 1e-3 * 10 ** (k / 8)  # 1 ms to ~1 s over the 25 labels
    steps, epoch_records = [], []
    for e in range(epochs):
        for s in range(steps_per_epoch):
            g = e * steps_per_epoch + s
            steps.append({"epoch": e, "step": s, "global_step": g, "loss": 3.0 * math.exp(-g / 4) + 1e-3 * (k + 1),
                          "step_time": base * (1 + 0.1 * rng.random()), "data_time": 1e-4})
        epoch_records.append({"epoch": e, "global_step_end": (e + 1) * steps_per_epoch,
                              "train_loss": steps[-1]["loss"], "test_accuracy": min(99.0, 40 + 12 * e + k / 3),
                              "train_accuracy": min(99.0, 42 + 12 * e + k / 3)})
    return {"framework": fw, "executor_variant": label, "recipe": {"name": "r"},
            "summaries": {"warmup_steps": 1, "final_test_accuracy": epoch_records[-1]["test_accuracy"],
                          "time_to_accuracy": {"target": 90.0, "seconds": 1.0 + k}},
            "samples": {"steps": steps, "epochs": epoch_records}, "verdicts": [], "passed": True}


@pytest.fixture(scope="module")
def twenty_five():
    results = [_results(label, k) for k, label in enumerate(LABELS)]
    return results, compare_results(results)


def test_25_series_no_legend_over_axes_or_title(twenty_five):
    results, comparison = twenty_five
    figures = comparison_figures(results, comparison)
    assert set(figures) == {"step_times.png", "loss.png", "accuracy.png"}
    for name, fig in figures.items():
        assert overlaps(fig) == [], name
    loss, accuracy = figures["loss.png"], figures["accuracy.png"]
    assert len(loss.legends) == 1 and len(loss.legends[0].get_texts()) == 25
    # one entry per framework, then the line styles and the target
    texts = [t.get_text() for t in accuracy.legends[0].get_texts()]
    assert texts[:25] == LABELS and texts[25:] == ["test (solid)", "training (dashed)", "target 90%"]


def test_scales_epochs_and_target(twenty_five):
    results, comparison = twenty_five
    figures = comparison_figures(results, comparison)
    step_ax = figures["step_times.png"].axes[0]
    assert step_ax.get_xscale() == "log"  # medians span 1 ms to about 1 s
    rows = sorted(zip(step_ax.get_yticks(), (t.get_text() for t in step_ax.get_yticklabels())), reverse=True)
    assert [label for _, label in rows] == LABELS  # one row each, the first on top
    assert figures["loss.png"].axes[0].get_yscale() == "log"  # losses span decades
    acc_ax = figures["accuracy.png"].axes[0]
    xs = acc_ax.get_lines()[0].get_xdata()
    assert list(xs) == [1, 2, 3, 4, 5]  # epochs counted from 1
    assert any(list(line.get_ydata()) == [90.0, 90.0] for line in acc_ax.get_lines())  # the target line


def test_each_variant_keeps_its_colour_whatever_the_order(twenty_five):
    from matplotlib.colors import to_hex

    results, _ = twenty_five
    forward = palette(LABELS)
    backward = palette(sorted(LABELS))  # report's order is not compare's
    assert forward == backward
    assert len(set(forward.values())) == 25  # all different
    for label in BUILTIN:
        assert forward[label] == VARIANT_COLORS[label] == variant_color(label)
    # the plots use them: the loss plot's epoch line of 'jax' has jax's colour, in either order
    for order in (results, list(reversed(results))):
        fig = comparison_figures(order, compare_results(order))["loss.png"]
        legend = fig.legends[0]
        colours = {t.get_text(): to_hex(h.get_color()) for t, h in zip(legend.get_texts(), legend.legend_handles)}
        assert colours["jax"] == VARIANT_COLORS["jax"] and colours["torch:compile"] == VARIANT_COLORS["torch:compile"]


def test_run_plots_count_epochs_from_1_with_the_target(tmp_path):
    from matplotlib.colors import to_hex

    from deep500lite.lv2.events import PlotWriter

    class Stats:
        pass

    data = _results("torch:compile", 3)
    stats = Stats()
    stats.steps, stats.epochs = data["samples"]["steps"], data["samples"]["epochs"]
    writer = PlotWriter(tmp_path, target=90, label="torch:compile")
    loss, accuracy = writer.figures(stats)
    for fig in (loss, accuracy):
        assert overlaps(fig) == []
    ax = accuracy.axes[0]
    test_line = next(line for line in ax.get_lines() if line.get_label() == "test accuracy")
    assert list(test_line.get_xdata()) == [1, 2, 3, 4, 5]
    assert to_hex(test_line.get_color()) == VARIANT_COLORS["torch:compile"]
    assert any(line.get_label() == "target 90%" for line in ax.get_lines())
    assert writer.plot(stats) == [str(tmp_path / "loss.png"), str(tmp_path / "accuracy.png")]
    assert (tmp_path / "accuracy.png").read_bytes()[:4] == b"\x89PNG"


def test_overlaps_finds_a_legend_inside_the_axes():
    # the check is not vacuous: a legend drawn over the axes, as before, is reported
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for i in range(25):
        ax.plot([0, 1], [i, i + 1], label=f"series {i}")
    ax.set_title("title")
    ax.legend()
    assert any("over axes 0" in p for p in overlaps(fig))


def test_write_plots_writes_the_pngs(twenty_five, tmp_path):
    results, comparison = twenty_five
    paths = write_plots(results, tmp_path, comparison)
    assert [p.rsplit("/", 1)[1] for p in paths] == ["step_times.png", "loss.png", "accuracy.png"]
    for p in paths:
        assert open(p, "rb").read(4) == b"\x89PNG"
