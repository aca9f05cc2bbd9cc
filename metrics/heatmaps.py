"""Deep500's element-wise metrics: ``NormDifference``, ``DiffHeatmap`` and ``VarHeatmap``.

``measure`` gives numbers (norms, relative differences, variances); ``measure_summary`` of the
heatmap metrics draws them with matplotlib (imported only then) and returns the file written.
Outputs may be one array or a list/tuple of arrays, as in Deep500.
"""

from __future__ import annotations

import os

import numpy as np

from deep500lite.errors import UserError
from deep500lite.metrics.base import TestMetric

__all__ = ["NormDifference", "DiffHeatmap", "VarHeatmap"]


def _is_many(outputs) -> bool:
    return isinstance(outputs, (list, tuple))


def _as_2d(a) -> np.ndarray:
    """Leading axes as rows, the last axis as columns (a vector is one column, a scalar 1x1)."""
    a = np.squeeze(np.asarray(a, np.float64))
    if a.ndim == 0:
        return a.reshape(1, 1)
    return a.reshape(-1, 1) if a.ndim == 1 else a.reshape(-1, a.shape[-1])


def _draw(path: str, arrays: list, label: str, symmetric: bool) -> str:
    from matplotlib.figure import Figure  # lazy: plotting is optional

    fig = Figure(figsize=(5 * len(arrays), 4))
    for i, data in enumerate(arrays):
        ax = fig.add_subplot(1, len(arrays), i + 1)
        grid = _as_2d(data)
        if symmetric:
            image = ax.imshow(grid, cmap="PuOr", vmin=-2.0, vmax=2.0, aspect="auto", interpolation="nearest")
        else:
            top = max(1.0, float(np.nanmax(grid) - np.nanmin(grid))) if grid.size else 1.0
            image = ax.imshow(grid, cmap="YlOrBr", vmin=0.0, vmax=top, aspect="auto", interpolation="nearest")
        fig.colorbar(image, ax=ax, label=label)
    fig.tight_layout()
    fig.savefig(path)
    return path


class NormDifference(TestMetric):
    """The norm of ``reference - output``, flattened (one norm per output for a list of outputs).

    Args:
        ord: the norm's order, as for ``numpy.linalg.norm`` (1, 2, ``numpy.inf``, ...).
    """

    higher_is_better = False
    name = "NormDifference"

    def __init__(self, ord):  # noqa: A002 - Deep500's (and numpy's) name
        super().__init__(reruns=0)
        self.ord = ord

    def measure(self, inputs, outputs, reference_outputs):
        """The norm (a float), or a list of norms for a list/tuple of outputs."""
        def norm(o, r):
            return float(np.linalg.norm((np.asarray(r) - np.asarray(o)).ravel(), ord=self.ord))
        if _is_many(outputs):
            if len(outputs) != len(reference_outputs):
                raise UserError(f"NormDifference compares each output with its reference: {len(outputs)} outputs, "
                                f"{len(reference_outputs)} references. Received: {len(outputs)} outputs")
            return [norm(o, r) for o, r in zip(outputs, reference_outputs)]
        return norm(outputs, reference_outputs)


class DiffHeatmap(TestMetric):
    """Element-wise relative difference ``2 (o - r) / (|o| + |r| + 1e-12)`` (from -2 to 2), drawn as a heatmap.

    Args:
        filename: the image ``measure_summary`` writes.
    """

    higher_is_better = False
    name = "DiffHeatmap"

    def __init__(self, filename: str = "heatmap.png"):
        super().__init__(reruns=0)
        self.filename = os.fspath(filename)

    def measure(self, inputs, outputs, reference_outputs):
        """The relative differences: an array, or a list of them for a list/tuple of outputs."""
        def diff(o, r):
            o, r = np.asarray(o, np.float64), np.asarray(r, np.float64)
            return 2 * (o - r) / (np.abs(o) + np.abs(r) + 1e-12)
        if _is_many(outputs):
            return [diff(o, r) for o, r in zip(outputs, reference_outputs)]
        return diff(outputs, reference_outputs)

    def measure_summary(self, inputs, outputs, reference_outputs):
        """Draw the differences (one panel per output) to ``filename``; return its path."""
        result = self.measure(inputs, outputs, reference_outputs)
        return _draw(self.filename, result if _is_many(result) else [result], "relative difference", True)


class VarHeatmap(TestMetric):
    """The per-element variance of the outputs over ``reruns`` runs, to find nondeterminism.

    Every ``end(outputs)`` keeps a copy of the outputs. :meth:`measure` gives one variance array
    per output (a list, also for a single output) and sets :attr:`identical` (whether every run
    gave bit-identical values, per output). :meth:`measure_summary` writes each variance as text
    (``{filename}_000.out``, ... comma-separated, leading axes as rows) and the heatmaps to
    ``{filename}.png``, and returns ``filename``. (Deep500's version documented this but
    dropped all but the first run, so its variance was always zero, and failed for a single
    output.)

    Args:
        filename: the prefix of the files ``measure_summary`` writes.
        reruns: runs to compare (at least 2 for a meaningful variance).

    Attributes:
        identical: per output, whether all runs agreed bit for bit (set by :meth:`measure`).
    """

    higher_is_better = False
    name = "VarHeatmap"

    def __init__(self, filename: str = "heatmap", reruns: int = 10):
        super().__init__(reruns)
        self.filename = os.fspath(filename)
        self._results: list = []
        self.identical: list[bool] = []

    def end(self, outputs):
        """Keep a copy of this run's outputs."""
        many = _is_many(outputs)
        self._results.append([np.array(o) for o in (outputs if many else [outputs])])
        return outputs

    def measure(self, inputs, outputs, reference_outputs):
        """One array of per-element variances per output, over the runs seen so far."""
        if not self._results:
            raise UserError("VarHeatmap has no runs to compare: end(outputs) must be called once per run first. "
                            "Received: 0 runs")
        variances, self.identical = [], []
        for k in range(len(self._results[0])):
            runs = [r[k] for r in self._results]
            if any(np.shape(x) != np.shape(runs[0]) for x in runs):
                raise UserError(f"VarHeatmap: output {k} changed shape between runs. Received: shapes "
                                f"{sorted({np.shape(x) for x in runs})}")
            stack = np.stack(runs)
            variances.append(np.var(stack.astype(np.float64), axis=0))
            self.identical.append(all(np.array_equal(runs[0], x, equal_nan=stack.dtype.kind in "fc") for x in runs))
        return variances

    def measure_summary(self, inputs, outputs, reference_outputs):
        """Write the variances as text files and a heatmap image; return ``filename``."""
        variances = self.measure(inputs, outputs, reference_outputs)
        for i, v in enumerate(variances):
            np.savetxt(f"{self.filename}_{i:03d}.out", _as_2d(v), delimiter=",")
        _draw(self.filename + ".png", variances, "variance", False)
        return self.filename
