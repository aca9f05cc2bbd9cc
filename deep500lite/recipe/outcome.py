"""What a recipe run produced: :class:`RecipeRun` (its own module, so the single-process and the
model-parallel training both return one without importing each other)."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["RecipeRun"]


@dataclasses.dataclass
class RecipeRun:
    """What :func:`train_recipe` produced.

    Attributes:
        passed: every judged acceptable metric held (and training ended without error).
        verdicts: one :class:`Verdict` per acceptable metric, in order.
        values: the measured value of each acceptable metric, in order.
        stats: the :class:`~deep500lite.lv2.trainer.TrainingStats`.
        results: the results-file dict (:mod:`deep500lite.results`).
        error: the message of an error that stopped training (a non-finite loss), or None.
        results_path: where the results file was written, or None.
    """

    passed: bool
    verdicts: list
    values: list
    stats: Any
    results: dict
    error: str | None = None
    results_path: str | None = None

    def lines(self) -> list[str]:
        """One line per acceptable metric (measured, required, direction, verdict)."""
        out = [v.line() for v in self.verdicts]
        if self.error:
            out.append(f"training stopped: {self.error}")
        return out
