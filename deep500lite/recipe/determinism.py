"""Determinism: the same recipe run twice with the same seed, compared step by step.

:func:`check_determinism` (``deep500lite run --check-determinism``) runs a recipe twice in this
process and names the first step where the losses or the parameters differ bit for bit.
"""

from __future__ import annotations

import dataclasses
import math
import os

from deep500lite.recipe import results as res
from deep500lite.recipe.loading import Recipe
from deep500lite.recipe.running import _ParameterDigest, train_recipe

__all__ = ["check_determinism", "DeterminismReport"]

@dataclasses.dataclass
class DeterminismReport:
    """The outcome of :func:`check_determinism`.

    Attributes:
        identical: both runs gave bit-identical losses and parameters at every step.
        steps: steps compared.
        first_divergence: ``None``, or a dict: ``global_step``, ``epoch``, ``step``, ``what``
            (``"loss"`` or ``"parameters"``), ``loss_a``, ``loss_b``.
        accuracy_a, accuracy_b: the test-accuracy curves (percent per epoch) of the two runs.
        runs: the two :class:`RecipeRun`.
    """

    identical: bool
    steps: int
    first_divergence: dict | None
    accuracy_a: list
    accuracy_b: list
    runs: list

    def describe(self) -> str:
        """A sentence for the terminal."""
        if self.identical:
            return (f"deterministic: {self.steps} steps with bit-identical losses and parameters in both runs; "
                    f"test accuracy per epoch {_fmt_curve(self.accuracy_a)}")
        d = self.first_divergence
        if d is None:
            return (f"NOT deterministic: the runs differ in length or accuracy ({_fmt_curve(self.accuracy_a)} vs "
                    f"{_fmt_curve(self.accuracy_b)})")
        return (f"NOT deterministic: the runs diverge first at global step {d['global_step']} (epoch {d['epoch']}, "
                f"step {d['step']}; counted from 0) in the {d['what']}: loss {d['loss_a']!r} vs {d['loss_b']!r}; "
                f"test accuracy per epoch {_fmt_curve(self.accuracy_a)} vs {_fmt_curve(self.accuracy_b)}")

    def to_dict(self) -> dict:
        """A JSON-ready dict (without the runs)."""
        return {"identical": self.identical, "steps": self.steps, "first_divergence": self.first_divergence,
                "accuracy_a": self.accuracy_a, "accuracy_b": self.accuracy_b}


def _fmt_curve(curve) -> str:
    return "[" + ", ".join("-" if v is None else f"{v:.2f}" for v in curve) + "]"


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    a, b = float(a), float(b)
    return a == b or (math.isnan(a) and math.isnan(b))


def check_determinism(recipe, seed: int | None = None, *, progress: str | None = None,
                      out: str | os.PathLike | None = None) -> DeterminismReport:
    """Run a recipe twice with the same seed and find the first step where the runs differ.

    Both runs happen in this process, one after the other, each with freshly built components.
    After every step the loss and a SHA-256 of all parameters are compared bit for bit.

    Args:
        recipe: a :class:`ResolvedRecipe` or :class:`Recipe`.
        seed: the run seed.
        progress: as for :func:`train_recipe`.
        out: a folder: the first run's results go to ``out/results.json`` with the report under
            ``"determinism"``; the second run's to ``out/second-run/results.json``.
    """
    if isinstance(recipe, Recipe):
        recipe = recipe.resolve()
    digests = [_ParameterDigest(), _ParameterDigest()]
    runs = []
    for i, digest in enumerate(digests):
        sub = None if out is None else (out if i == 0 else os.path.join(os.fspath(out), "second-run"))
        runs.append(train_recipe(recipe, seed, progress=progress, out=sub, _digest=digest,
                                 environment=i == 0))
    steps_a, steps_b = runs[0].stats.steps, runs[1].stats.steps
    first = None
    for i, (sa, sb) in enumerate(zip(steps_a, steps_b)):
        what = None
        if not _same(sa["loss"], sb["loss"]):
            what = "loss"
        elif digests[0].digests[i] != digests[1].digests[i]:
            what = "parameters"
        if what:
            first = {"global_step": sa["global_step"], "epoch": sa["epoch"], "step": sa["step"], "what": what,
                     "loss_a": sa["loss"], "loss_b": sb["loss"]}
            break
    acc_a = [e.get("test_accuracy") for e in runs[0].stats.epochs]
    acc_b = [e.get("test_accuracy") for e in runs[1].stats.epochs]
    identical = first is None and len(steps_a) == len(steps_b) and all(_same(a, b) for a, b in zip(acc_a, acc_b)) \
        and len(acc_a) == len(acc_b)
    report = DeterminismReport(identical, min(len(steps_a), len(steps_b)), first, acc_a, acc_b, runs)
    if out is not None:
        runs[0].results["determinism"] = report.to_dict()
        res.write_results(runs[0].results_path, runs[0].results)
    return report
