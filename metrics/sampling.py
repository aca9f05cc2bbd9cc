"""Metrics of dataset sampling (Deep500's ``DatasetBias`` and ``SamplerEventMetric``).

Both are measured by :func:`deep500lite.lv2.sampler_validation.test_sampler` (``d5.test_sampler``):
``DatasetBias`` counts the classes of the labels the sampler yields, ``SamplerEventMetric`` runs
another metric around every batch the sampler draws (for example a
:class:`~deep500lite.metrics.timing.WallclockTime` to measure data-loading latency).
"""

from __future__ import annotations

import numpy as np

from deep500lite.errors import UserError, UserKeyError, UserTypeError
from deep500lite.metrics.base import TestMetric

__all__ = ["DatasetBias", "SamplerEventMetric"]


class DatasetBias(TestMetric):
    """A histogram of the classes a sampler yields, to look for sampling bias.

    Every ``end(batch)`` adds the labels of ``batch[label_node]`` to the histogram.

    Args:
        num_classes: the number of classes; labels must lie in ``0 .. num_classes - 1``.
        label_node: the feed holding the labels.
        reruns: batches to sample (Deep500's default, 1000).

    Attributes:
        hist: the count of each class so far (a list of ints).
    """

    higher_is_better = False
    name = "DatasetBias"

    def __init__(self, num_classes: int, label_node: str, reruns: int = 1000):
        super().__init__(reruns)
        if not isinstance(num_classes, (int, np.integer)) or isinstance(num_classes, bool) or num_classes < 1:
            raise UserError(f"num_classes must be an integer >= 1. Received: num_classes={num_classes!r}")
        if not isinstance(label_node, str) or not label_node:
            raise UserError(f"label_node must be the name of the label feed. Received: {label_node!r}")
        self.num_classes, self.label_node = int(num_classes), label_node
        self.hist = [0] * self.num_classes

    def end(self, outputs):
        """Count the labels of the batch ``outputs`` (a dict of feeds)."""
        if not isinstance(outputs, dict):
            raise UserTypeError(f"DatasetBias counts the labels of a batch dict of feeds. "
                                f"Received: {type(outputs).__name__}")
        if self.label_node not in outputs:
            raise UserKeyError(f"DatasetBias: the batch has no feed {self.label_node!r}; feeds: {sorted(outputs)}. "
                               f"Received: label_node={self.label_node!r}")
        labels = np.asarray(outputs[self.label_node]).ravel()
        if labels.size and (labels.dtype.kind not in "iu" or labels.min() < 0 or labels.max() >= self.num_classes):
            raise UserError(f"DatasetBias: labels must be integers from 0 to num_classes - 1 = "
                            f"{self.num_classes - 1}. Received: labels of dtype {labels.dtype} in "
                            f"[{labels.min()}, {labels.max()}]")
        counts = np.bincount(labels.astype(np.int64), minlength=self.num_classes)
        self.hist = [h + int(c) for h, c in zip(self.hist, counts)]
        return outputs

    def measure(self, *unused):
        """The histogram: ``hist[c]`` is how many sampled labels were class ``c``."""
        return list(self.hist)

    def measure_summary(self, *unused):
        """The histogram (as :meth:`measure`)."""
        return list(self.hist)

    def __repr__(self) -> str:
        return f"DatasetBias({self.num_classes}, {self.label_node!r}, reruns={self.reruns})"


class SamplerEventMetric(TestMetric):
    """Runs ``metric`` around every batch a sampler draws: a sampler event wrapping a metric.

    As an event of a sampler (``d5.test_sampler`` adds it, or ``Sampler(events=[...])``),
    ``before_sampling(sampler, batch_size)`` calls ``metric.begin(batch_size)`` and
    ``after_sampling(sampler, samples)`` calls ``metric.end(samples)``; so
    ``SamplerEventMetric(WallclockTime())`` times the loading (and transforming) of each batch.
    Its own ``begin``/``end`` do nothing; ``reruns``, ``measure`` and ``measure_summary`` are
    the wrapped metric's.

    Args:
        metric: the metric to run (a :class:`TestMetric`).
    """

    name = "SamplerEventMetric"

    def __init__(self, metric: TestMetric):  # the reruns are the wrapped metric's: no base __init__
        if not all(callable(getattr(metric, m, None)) for m in ("begin", "end", "measure")):
            raise UserTypeError(f"SamplerEventMetric wraps a metric (with begin, end and measure). "
                                f"Received: {type(metric).__name__}")
        self.metric = metric
        self.higher_is_better = getattr(metric, "higher_is_better", False)

    @property
    def reruns(self) -> int:
        """The wrapped metric's reruns."""
        return self.metric.reruns

    def on_sampler_reset(self, sampler) -> None:
        """Called when the sampler starts an epoch (nothing to do)."""

    def before_sampling(self, sampler, batch_size) -> None:
        """Start the wrapped metric."""
        self.metric.begin(batch_size)

    def after_sampling(self, sampler, samples) -> None:
        """Stop the wrapped metric."""
        self.metric.end(samples)

    def measure(self, *args):
        """The wrapped metric's :meth:`~TestMetric.measure`."""
        return self.metric.measure(*args)

    def measure_summary(self, *args):
        """The wrapped metric's :meth:`~TestMetric.measure_summary`."""
        return self.metric.measure_summary(*args)

    def __repr__(self) -> str:
        return f"SamplerEventMetric({self.metric!r})"
