"""Level 0: :func:`test_op_determinism`, reruns of an operator compared bit for bit, with a variance heatmap."""

from __future__ import annotations

import io
import math
import os

import numpy as np

from deep500lite.errors import UserError
from deep500lite.lv0.validation.common import ForwardCounter, check_operator, prepare_inputs, tensor_names
from deep500lite.lv0.validation.results import DeterminismResult

__all__ = ["test_op_determinism"]


def _bits(a: np.ndarray) -> np.ndarray:
    """The elements of ``a`` as unsigned integers (or opaque bytes) of the same shape."""
    flat = np.ascontiguousarray(a).reshape(-1)
    if a.dtype.itemsize in (1, 2, 4, 8) and a.dtype.kind != "O":
        return flat.view(f"u{a.dtype.itemsize}").reshape(a.shape)
    return flat.view(np.dtype((np.void, a.dtype.itemsize))).reshape(a.shape)


def _as_2d(a: np.ndarray) -> np.ndarray:
    """A 2-D view for a heatmap: leading axes become rows; very long or flat shapes fold to a square."""
    a = np.asarray(a, np.float64)
    if a.ndim == 0:
        return a.reshape(1, 1)
    grid = a.reshape(1, -1) if a.ndim == 1 else a.reshape(-1, a.shape[-1])
    rows, cols = grid.shape
    if grid.size > 16 and max(rows, cols) > 16 * min(rows, cols):
        width = int(math.ceil(math.sqrt(a.size)))
        padded = np.full(width * int(math.ceil(a.size / width)), np.nan)
        padded[:a.size] = a.ravel()
        grid = padded.reshape(-1, width)
    return grid


def _write_heatmap(path, variances: dict, reruns: int) -> str:
    from matplotlib.figure import Figure  # lazy: plotting is optional

    from deep500lite.utils import atomic_write_bytes

    names = list(variances)
    fig = Figure(figsize=(5.5 * len(names), 4.5))
    for k, name in enumerate(names):
        ax = fig.add_subplot(1, len(names), k + 1)
        grid = np.ma.masked_invalid(_as_2d(variances[name]))
        image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis")
        fig.colorbar(image, ax=ax, label="variance")
        ax.set_title(f"'{name}' {list(np.shape(variances[name]))}: variance over {reruns} runs", fontsize=9)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    atomic_write_bytes(path, buffer.getvalue())
    return os.fspath(path)


def test_op_determinism(op, inputs, reruns: int = 10, heatmap=None) -> DeterminismResult:
    """Run ``op.forward`` ``reruns`` times on the same inputs and check the outputs are bit-identical.

    Outputs are compared by their bytes, so NaN equals NaN with the same bits and ``-0.0`` differs
    from ``0.0``. The inputs are copied before the first run; an operator that modifies its inputs
    is reported in the reason.

    Args:
        op: the :class:`~deep500lite.Operator` under test.
        inputs: one numpy array per operator input.
        reruns: total number of runs (at least 2).
        heatmap: a path; when the outputs are not identical, a PNG heatmap of the per-element
            variance of each differing output is written there (matplotlib, Agg).

    Returns:
        A :class:`DeterminismResult` with the verdict, the number of differing elements, the
        largest deviation and the per-element variance.

    Raises:
        UserError: ``reruns`` < 2, inputs that do not match the operator, or a forward whose reruns
            return outputs of another number, shape or dtype.
    """
    check_operator(op, "test_op_determinism")
    if not isinstance(reruns, (int, np.integer)) or reruns < 2:
        raise UserError(f"test_op_determinism: reruns must be an integer >= 2. Received: {reruns!r}")
    xs = prepare_inputs(op, inputs, "test_op_determinism")
    originals = [x.copy() for x in xs]
    counter = ForwardCounter(op)
    first = counter.run(xs)
    first_bits = [_bits(o) for o in first]
    names = tensor_names(op, "output_names", "output", len(first))
    differs = [np.zeros(o.shape, bool) for o in first]
    deviation = [np.zeros(o.shape) for o in first]
    numeric = [o.dtype.kind in "fciub" for o in first]
    total = [o.astype(np.float64) if ok else None for o, ok in zip(first, numeric)]
    total_sq = [t * t if t is not None else None for t in total]
    for _ in range(reruns - 1):
        outs = counter.run(xs)
        if len(outs) != len(first) or any(o.shape != f.shape or o.dtype != f.dtype for o, f in zip(outs, first)):
            raise UserError("test_op_determinism: reruns of forward returned outputs of different number, shape "
                            "or dtype than the first run; the operator's forward must return the same number of "
                            "outputs, with the same shapes and dtypes, on every call. First run: "
                            f"{[f'{o.dtype.name}{list(o.shape)}' for o in first]}. "
                            f"Received: {[f'{o.dtype.name}{list(o.shape)}' for o in outs]}")
        for k, (o, f) in enumerate(zip(outs, first)):
            differs[k] |= _bits(o) != first_bits[k]
            if numeric[k]:
                o64, f64 = o.astype(np.float64), f.astype(np.float64)
                with np.errstate(invalid="ignore", over="ignore"):
                    dev = np.abs(o64 - f64)
                    same_special = (np.isnan(o64) & np.isnan(f64)) | (np.isinf(o64) & (o64 == f64))
                    dev = np.where(same_special, 0.0, np.where(np.isnan(dev), np.inf, dev))
                    deviation[k] = np.maximum(deviation[k], dev)
                    total[k] = total[k] + o64
                    total_sq[k] = total_sq[k] + o64 * o64
    variance, outputs = {}, {}
    for k, name in enumerate(names):
        if numeric[k]:
            with np.errstate(invalid="ignore", over="ignore"):
                mean = total[k] / reruns
                var = np.maximum(total_sq[k] / reruns - mean * mean, 0.0)
            var = np.where(differs[k], var, 0.0)  # identical bits have exactly zero variance
        else:
            var = np.where(differs[k], np.nan, 0.0)
        variance[name] = var
        outputs[name] = {"elements": int(first[k].size), "differing_elements": int(differs[k].sum()),
                         "max_deviation": float(deviation[k].max()) if deviation[k].size else 0.0}
    n_diff = sum(v["differing_elements"] for v in outputs.values())
    max_dev = max((v["max_deviation"] for v in outputs.values()), default=0.0)
    deterministic = n_diff == 0
    modified = [i for i, (x, o) in enumerate(zip(xs, originals)) if not np.array_equal(_bits(x), _bits(o))]
    if deterministic:
        reason = f"all {reruns} runs returned bit-identical outputs"
    else:
        worst = max(outputs, key=lambda n: outputs[n]["differing_elements"])
        reason = (f"{n_diff} output element(s) differ between runs (most in '{worst}': "
                  f"{outputs[worst]['differing_elements']} of {outputs[worst]['elements']}); "
                  f"max deviation {max_dev:.3g}")
    if modified:
        reason += f"; the operator modified its input(s) {modified} in place"
    written = None
    if heatmap is not None and not deterministic:
        written = _write_heatmap(heatmap, {n: variance[n] for n in names if outputs[n]["differing_elements"]},
                                 reruns)
    return DeterminismResult(deterministic=deterministic, reruns=reruns, differing_elements=n_diff,
                             max_deviation=max_dev, variance=variance, outputs=outputs, heatmap=written,
                             reason=reason)


test_op_determinism.__test__ = False  # a library function, not a pytest test
