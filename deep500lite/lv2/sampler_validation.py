"""Level 2: :func:`test_sampler`, Deep500's test of a dataset sampler with metrics.

>>> import numpy as np, deep500lite as d5
>>> ds = d5.NumpyDataset(np.zeros((6, 1)), "x", np.array([0, 1, 1, 2, 2, 2]), "y")
>>> d5.test_sampler(d5.OrderedSampler(ds, 3), metrics=[d5.DatasetBias(3, "y", reruns=2)], verbose=False)
[[1, 2, 3]]
"""

from __future__ import annotations

from typing import Any, Sequence

from deep500lite.errors import UserError, UserTypeError

__all__ = ["test_sampler"]

_SAMPLER_HOOKS = ("on_sampler_reset", "before_sampling", "after_sampling")


def _draw(sampler):
    """The next batch; at the end of an epoch, the first batch of the next one."""
    try:
        return sampler()
    except StopIteration:
        sampler.reset()
    try:
        return sampler()
    except StopIteration:
        raise UserError(f"test_sampler: {type(sampler).__name__} yields no batch even right after reset(); a "
                        f"sampler must yield at least one batch per epoch. Received: {sampler!r}") from None


def test_sampler(sampler, expected_output: Any = None, metrics: Sequence = (), events: Sequence = (),
                 verbose: bool = True) -> list:
    """Sample batches from ``sampler`` and measure them with ``metrics``: Deep500's ``test_sampler``.

    Metrics that are sampler events (with ``before_sampling``/``after_sampling``, such as
    :class:`~deep500lite.metrics.sampling.SamplerEventMetric`) and ``events`` are added to the
    sampler's events for the test and removed after it. Metrics with ``reruns == 0`` share one
    batch: their ``begin(sampler)`` is called, one batch is drawn, then their ``end(batch)``. Each
    metric with ``reruns > 0`` then gets that many batches of its own, with ``begin(sampler)``
    before and ``end(batch)`` after each. A batch asked for at the end of an epoch comes from the
    next epoch (the sampler is reset), so every rerun sees one batch. (Deep500 dropped such a
    rerun, and let the sampler events of that rerun go unpaired.)

    Args:
        sampler: the sampler to test (a :class:`~deep500lite.lv2.sampler.Sampler`, or any
            callable returning the next batch with ``reset()`` and an ``events`` list).
        expected_output: passed to every metric's ``measure`` as the reference outputs.
        metrics: the metrics to measure.
        events: more sampler events for the duration of the test.
        verbose: print ``Name: summary`` for every metric, as Deep500 did.

    Returns:
        One result per metric, in order: ``metric.measure(sampler, last_batch, expected_output)``.

    Raises:
        UserTypeError: ``sampler`` cannot be called for batches or has no ``events`` list.
        UserError: the sampler yields no batch at all.
    """
    if not callable(sampler) or not hasattr(sampler, "reset") or not isinstance(getattr(sampler, "events", None), list):
        raise UserTypeError(f"test_sampler needs a sampler: callable for the next batch, with reset() and an events "
                            f"list (a d5.Sampler). Received: {type(sampler).__name__}")
    metrics, added = list(metrics), list(events)
    added += [m for m in metrics if any(hasattr(m, h) for h in _SAMPLER_HOOKS[1:]) and m not in added]
    shared = [m for m in metrics if m.reruns == 0]
    own = [m for m in metrics if m.reruns > 0]
    outputs = None
    sampler.events.extend(added)
    try:
        if shared:
            for m in shared:
                m.begin(sampler)
            outputs = _draw(sampler)
            for m in shared:
                m.end(outputs)
        for m in own:
            for _ in range(m.reruns):
                m.begin(sampler)
                outputs = _draw(sampler)
                m.end(outputs)
    finally:
        for e in reversed(added):
            del sampler.events[max(i for i, x in enumerate(sampler.events) if x is e)]
    results = []
    for m in metrics:
        results.append(m.measure(sampler, outputs, expected_output))
        if verbose:
            print(f"{type(m).__name__}: {m.measure_summary(sampler, outputs, expected_output)}")
    return results


test_sampler.__test__ = False  # a library function, not a pytest test
