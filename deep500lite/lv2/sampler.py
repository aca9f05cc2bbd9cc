"""Level 2: samplers turn a dataset into minibatches of feeds."""

from __future__ import annotations

import abc

import numpy as np

from deep500lite.lv2.dataset import Dataset

__all__ = ["Sampler", "OrderedSampler", "ShuffleSampler"]


class Sampler(abc.ABC):
    """Iterates over a dataset in minibatches.

    Args:
        dataset: the :class:`Dataset`.
        batch_size: samples per batch.
        seed: seed of the sampler's random generator (order, transforms).
        drop_last_batch: skip a last batch smaller than ``batch_size``.
        transformations: callables ``batch -> batch`` applied to every batch in order.
    """

    def __init__(self, dataset: Dataset, batch_size: int, seed: int | None = None,
                 drop_last_batch: bool = True, transformations=None):
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1. Received: {batch_size!r}")
        if len(dataset) == 0:
            raise ValueError("The sampler's dataset is empty.")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.seed = seed
        self.drop_last_batch = drop_last_batch
        self.transformations = list(transformations or [])
        self.random = np.random.default_rng(seed)
        self._batch = 0
        self._indices = None

    @abc.abstractmethod
    def epoch_indices(self) -> np.ndarray:
        """Return the order in which this epoch visits the samples (an integer array)."""

    def __len__(self) -> int:
        n, b = len(self.dataset), self.batch_size
        return n // b if self.drop_last_batch else -(-n // b)

    def reset(self) -> None:
        """Start a new epoch."""
        self._batch = 0
        self._indices = None

    def __iter__(self):
        self.reset()
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self._indices is None:
            self._indices = np.asarray(self.epoch_indices())
        if self._batch >= len(self):
            raise StopIteration
        b = self.batch_size
        idx = self._indices[self._batch * b:(self._batch + 1) * b]
        self._batch += 1
        batch = self.dataset[idx]
        for t in self.transformations:
            batch = t(batch)
        return batch


class OrderedSampler(Sampler):
    """Visits the samples in dataset order."""

    def epoch_indices(self):
        return np.arange(len(self.dataset))


class ShuffleSampler(Sampler):
    """Visits the samples in a fresh random order every epoch (seeded, reproducible)."""

    def epoch_indices(self):
        return self.random.permutation(len(self.dataset))
