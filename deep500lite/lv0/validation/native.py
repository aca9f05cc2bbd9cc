"""Level 0: Deep500's metric protocol for ``test_nativeop_forward`` / ``test_nativeop_gradient``.

The framework packages (``deep500lite.frameworks.<fw>.op_validation``) run a framework's own
operator; this module holds what they share: the default metrics, the order in which metrics
are begun and ended around the runs, and Deep500's result list (for each output, the value of
each metric, in the order given).

Metric protocol (Deep500's ``TestMetric``): a metric whose ``reruns`` is 0 is begun and ended
around one run; a metric with ``reruns = k > 0`` around each of ``k`` further runs (timing
metrics such as ``WallclockTime(reruns, avg_over)``). Then ``measure(inputs, output, reference)``
is called for each output and its value collected, and ``measure_summary`` printed.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from deep500lite.errors import UserTypeError

__all__ = ["default_op_metrics", "run_with_metrics", "measure_outputs", "numerical_gradients"]


def default_op_metrics() -> list:
    """Deep500's ``DefaultOpMetrics()``: L2 error, max error and wall-clock time (no heat map here)."""
    from deep500lite.metrics import L2Error, MaxError, WallclockTime

    return [L2Error(), MaxError(), WallclockTime()]


def _reruns(metric) -> int:
    # A metric that does nothing on begin/end (an error metric) needs no reruns of its own,
    # whatever its reruns says (deep500lite's metrics default to reruns=1, Deep500's to 0).
    from deep500lite.metrics.base import TestMetric

    cls = type(metric)
    if isinstance(metric, TestMetric) and cls.begin is TestMetric.begin and cls.end is TestMetric.end:
        return 0
    value = getattr(metric, "reruns", 0)
    return int(value) if isinstance(value, (int, np.integer)) else 0


def run_with_metrics(run: Callable[[], object], metrics: Sequence, begin_arg, sync: Callable[[], None] | None = None):
    """Run ``run()`` once for the metrics without reruns and ``reruns`` times for each other metric.

    Args:
        run: the measured work; returns the outputs.
        metrics: the metrics.
        begin_arg: what ``metric.begin`` is given (the inputs).
        sync: called after each run and before ``metric.end`` (e.g. ``torch.cuda.synchronize``).

    Returns:
        The outputs of the last run.
    """
    if isinstance(metrics, (str, bytes)) or not isinstance(metrics, Sequence):
        raise UserTypeError(f"metrics must be a list of TestMetric objects. Received: {metrics!r}")
    once = [m for m in metrics if _reruns(m) <= 0]
    again = [m for m in metrics if _reruns(m) > 0]
    for m in once:
        m.begin(begin_arg)
    outputs = run()
    if sync is not None:
        sync()
    for m in once:
        m.end(outputs)
    for m in again:
        for _ in range(_reruns(m)):
            m.begin(begin_arg)
            outputs = run()
            if sync is not None:
                sync()
            m.end(outputs)
    return outputs


def measure_outputs(metrics: Sequence, inputs, outputs: Sequence, references: Sequence, what: str) -> list:
    """Deep500's result list: for each output, ``metric.measure(...)`` of each metric, in order.

    ``measure_summary`` of each is printed as ``"<Metric> on <what> for output <i>: <summary>"``.
    """
    if references is None:
        references = [None] * len(outputs)
    results = []
    for i, out in enumerate(outputs):
        ref = references[i] if i < len(references) else None
        for m in metrics:
            results.append(m.measure(inputs, out, ref))
            print(f"{type(m).__name__} on {what} for output {i}: {m.measure_summary(inputs, out, ref)}")
    return results


def numerical_gradients(forward: Callable[[list], list], inputs: list, grads: list, eps: float) -> list:
    """Central differences of ``sum_i <grads[i], forward(inputs)[i]>`` with respect to each input.

    Args:
        forward: numpy inputs -> list of numpy outputs.
        inputs: the numpy inputs (not modified).
        grads: one array per output, the weights of the outputs (the gradients flowing in).
        eps: the finite-difference step.

    Returns:
        One array per input, the input's shape.
    """
    result = []
    for j, x in enumerate(inputs):
        g = np.zeros(x.shape, dtype=np.float64)
        flat = g.reshape(-1)
        for k in range(x.size):
            values = []
            for sign in (1.0, -1.0):
                moved = np.array(x, copy=True)
                moved.reshape(-1)[k] += sign * eps
                outs = forward(inputs[:j] + [moved] + inputs[j + 1:])
                values.append(sum(float(np.sum(np.asarray(o, np.float64) * np.asarray(w, np.float64)))
                                  for o, w in zip(outs, grads)))
            flat[k] = (values[0] - values[1]) / (2 * eps)
        result.append(g.astype(x.dtype) if x.dtype.kind == "f" else g)
    return result
