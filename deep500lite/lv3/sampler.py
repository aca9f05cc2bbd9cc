"""Level 3: distributed samplers (which samples each rank trains on).

Both samplers are ordinary :class:`~deep500lite.lv2.sampler.Sampler` objects; they only need the
rank and the number of ranks, taken from a communicator or given directly, so they can be built
and tested without MPI.

- :class:`DistributedSampler`: every rank visits the whole dataset, each in its own order
  (rank ``r`` draws from ``seed + r``), as Deep500's ``DistributedSampler``.
- :class:`PartitionedDistributedSampler`: each epoch one permutation, the same on every rank
  (drawn from ``seed``), is cut into ``size`` disjoint shards; rank ``r`` visits shard ``r``.
  Every rank yields the same number of batches, so synchronous optimizers never wait for a rank
  that has run out of data.
"""

from __future__ import annotations

import numpy as np

from deep500lite.errors import UserError
from deep500lite.lv2.sampler import Sampler, _batch_count, _check_dataset, _is_int

__all__ = ["DistributedSampler", "PartitionedDistributedSampler"]


def _rank_and_size(comm, rank, size) -> tuple[int, int]:
    if comm is not None:
        if rank is not None or size is not None:
            raise UserError(f"Give comm or rank and size, not both. Received: comm={type(comm).__name__}, "
                            f"rank={rank!r}, size={size!r}")
        rank, size = comm.rank, comm.size
    if rank is None or size is None:
        raise UserError("A distributed sampler needs comm=, or rank= and size=. "
                        f"Received: rank={rank!r}, size={size!r}")
    if not _is_int(size) or size < 1:
        raise UserError(f"size must be an integer >= 1. Received: size={size!r}")
    if not _is_int(rank) or not 0 <= rank < size:
        raise UserError(f"rank must be an integer from 0 to size - 1 = {size - 1}. Received: rank={rank!r}")
    return int(rank), int(size)


class DistributedSampler(Sampler):
    """Every rank visits the whole dataset each epoch, in a rank-seeded random order.

    Args:
        dataset: the :class:`Dataset`.
        batch_size: samples per batch on this rank.
        comm: a communicator (its ``rank`` and ``size`` are used); or give ``rank`` and ``size``.
        seed: base seed; rank ``r`` uses ``seed + r`` (``None``: a fresh seed, not reproducible).
        rank, size: this rank and the number of ranks, when no ``comm`` is given.
        drop_last_batch, events, transformations: as for :class:`~deep500lite.lv2.sampler.Sampler`.
    """

    def __init__(self, dataset, batch_size: int, comm=None, seed: int | None = 0, rank: int | None = None,
                 size: int | None = None, drop_last_batch: bool = True, events=None, transformations=None):
        self.rank, self.size = _rank_and_size(comm, rank, size)
        if seed is not None and (not _is_int(seed) or seed < 0):
            raise UserError(f"seed must be None or an integer >= 0. Received: seed={seed!r}")
        self.base_seed = seed
        super().__init__(dataset, batch_size, None if seed is None else seed + self.rank, drop_last_batch,
                         events, transformations)

    def epoch_indices(self):
        return self.random.permutation(len(self.dataset))


class PartitionedDistributedSampler(Sampler):
    """Each rank visits its own shard of the dataset; the shards are disjoint and cover it.

    Every epoch all ranks draw the same permutation (from ``seed``, or the dataset order with
    ``shuffle=False``) and keep its first ``size * (n // size)`` entries, so every shard has
    ``n // size`` samples (the ``n mod size`` left over are skipped that epoch; with shuffling,
    different ones each epoch). Rank ``r`` takes positions ``r, r + size, r + 2 size, ...``. All
    ranks therefore yield the same number of batches.

    Args:
        dataset: the :class:`Dataset`.
        batch_size: samples per batch on this rank (the global batch is ``size * batch_size``).
        comm: a communicator (its ``rank`` and ``size`` are used); or give ``rank`` and ``size``.
        seed: the seed shared by all ranks (must be equal on every rank; ``None`` is refused,
            since ranks drawing different permutations would overlap).
        shuffle: draw a new permutation each epoch (``False``: dataset order).
        rank, size: this rank and the number of ranks, when no ``comm`` is given.
        drop_last_batch, events, transformations: as for :class:`~deep500lite.lv2.sampler.Sampler`.

    Raises:
        UserError: fewer samples than ranks, ``seed=None``, or bad rank/size.
    """

    def __init__(self, dataset, batch_size: int, comm=None, seed: int = 0, shuffle: bool = True,
                 rank: int | None = None, size: int | None = None, drop_last_batch: bool = True,
                 events=None, transformations=None):
        self.rank, self.size = _rank_and_size(comm, rank, size)
        n = _check_dataset(dataset)
        if seed is None:
            raise UserError("PartitionedDistributedSampler needs the same integer seed on every rank "
                            "(ranks with different permutations would get overlapping shards). Received: seed=None")
        if not isinstance(shuffle, (bool, np.bool_)):
            raise UserError(f"shuffle must be True or False. Received: shuffle={shuffle!r}")
        if n < self.size:
            raise UserError(f"The dataset has {n} samples, fewer than the {self.size} ranks: some shard would be "
                            f"empty. Use fewer ranks or a larger dataset. Received: {n} samples, {self.size} ranks")
        self.shuffle = bool(shuffle)
        super().__init__(dataset, batch_size, seed, drop_last_batch, events, transformations)

    @property
    def shard_size(self) -> int:
        """Samples in every rank's shard per epoch."""
        return len(self.dataset) // self.size

    def _why_empty(self, n: int) -> str:
        return f"each of the {self.size} shards has {n // self.size} samples, fewer than batch_size={self.batch_size},"

    def __len__(self) -> int:
        return _batch_count(self.shard_size, self.batch_size, self.drop_last_batch)

    def epoch_indices(self):
        n = len(self.dataset)
        order = self.random.permutation(n) if self.shuffle else np.arange(n)
        return order[:self.size * self.shard_size][self.rank::self.size]
