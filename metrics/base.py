"""The metric interface (Deep500's ``TestMetric``)."""

from __future__ import annotations

import abc

from deep500lite.errors import UserError

__all__ = ["TestMetric"]


class TestMetric(abc.ABC):
    """A quantity measured around a test: time, accuracy, bytes, memory.

    A test calls ``begin`` before the measured work and ``end`` after it, ``reruns`` times, then
    ``measure`` to get the value and ``measure_summary`` for the aggregate.

    Args:
        reruns: how many times the measured work is repeated for this metric alone; 0 (Deep500's
            meaning) measures the test's own run, shared with the other such metrics (see
            :func:`deep500lite.lv2.sampler_validation.test_sampler`).

    Attributes:
        higher_is_better: the metric's direction, used when a recipe gives only a threshold:
            True (accuracy, throughput), False (time, memory, error), or None (the default: not
            stated, so a recipe that judges the metric must give the direction itself, as
            ``(metric, threshold, 'higher')``; a subclass should set it).
    """

    __test__ = False  # not a pytest test class despite the name
    higher_is_better: bool | None = None
    name: str = ""

    def __init__(self, reruns: int = 1):
        if not isinstance(reruns, int) or isinstance(reruns, bool) or reruns < 0:
            raise UserError(f"reruns must be an integer >= 0. Received: {reruns!r}")
        self.reruns = reruns

    def begin(self, inputs):
        """Called before the measured work; returns the (possibly changed) inputs."""
        return inputs

    def end(self, outputs):
        """Called after the measured work; returns the (possibly changed) outputs."""
        return outputs

    @abc.abstractmethod
    def measure(self, inputs, outputs, reference_outputs):
        """Return the metric's value for one run.

        Args:
            inputs: what the measured work consumed.
            outputs: what it produced.
            reference_outputs: expected outputs, or None.
        """

    def measure_summary(self, inputs, outputs, reference_outputs):
        """Return the value over all reruns (default: the last ``measure``)."""
        return self.measure(inputs, outputs, reference_outputs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
