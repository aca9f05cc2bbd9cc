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

Both also take Deep500's form, ``DistributedSampler(sampler, comm=None)`` and
``PartitionedDistributedSampler(sampler, comm=None)``: they wrap an existing sampler (such as
``d5.ShuffleSampler(train_set, batch_size)``), which keeps its own order and seed, and behave as
Deep500's (see :class:`WrappedDistributedSampler` and :class:`WrappedPartitionedSampler`).
``comm=None`` there means one rank.
"""

from __future__ import annotations

import inspect

import numpy as np

from deep500lite.errors import UserError, UserTypeError
from deep500lite.lv2.sampler import Sampler, _batch_count, _check_dataset, _is_int

__all__ = ["DistributedSampler", "PartitionedDistributedSampler", "WrappedDistributedSampler",
           "WrappedPartitionedSampler", "PartitionedDataset"]


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


def _deep500_form(args, kwargs) -> bool:
    """Whether a sampler constructor was called in Deep500's form, ``(sampler, comm=None)``."""
    return "sampler" in kwargs or bool(args) and isinstance(args[0], Sampler)


class DistributedSampler(Sampler):
    """Every rank visits the whole dataset each epoch, in a rank-seeded random order.

    ``DistributedSampler(sampler, comm=None)`` (Deep500's form, the first argument a sampler)
    creates a :class:`WrappedDistributedSampler` instead.

    Args:
        dataset: the :class:`Dataset`.
        batch_size: samples per batch on this rank.
        comm: a communicator (its ``rank`` and ``size`` are used); or give ``rank`` and ``size``.
        seed: base seed; rank ``r`` uses ``seed + r`` (``None``: a fresh seed, not reproducible).
        rank, size: this rank and the number of ranks, when no ``comm`` is given.
        drop_last_batch, events, transformations: as for :class:`~deep500lite.lv2.sampler.Sampler`.
    """

    def __new__(cls, *args, **kwargs):
        if cls is DistributedSampler and _deep500_form(args, kwargs):
            cls = WrappedDistributedSampler
        return super().__new__(cls)

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

    ``PartitionedDistributedSampler(sampler, comm=None)`` (Deep500's form, the first argument a
    sampler) creates a :class:`WrappedPartitionedSampler` instead.

    Raises:
        UserError: fewer samples than ranks, ``seed=None``, or bad rank/size.
    """

    def __new__(cls, *args, **kwargs):
        if cls is PartitionedDistributedSampler and _deep500_form(args, kwargs):
            cls = WrappedPartitionedSampler
        return super().__new__(cls)

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


# ------------------------------------------------------------------ Deep500's wrapping form
class PartitionedDataset:
    """Samples ``offset`` to ``offset + length - 1`` of a dataset, seen as a dataset of ``length``
    (Deep500's helper of the partitioned sampler).

    Index ``i`` (an int, an integer array, a list or tuple of ints, or a slice) reads sample
    ``i mod length + offset`` of the underlying dataset. Other attributes (``input_node``,
    ``label_node``, ...) are the underlying dataset's.
    """

    def __init__(self, dataset, length: int, offset: int):
        self.dataset, self.len, self.off = dataset, int(length), int(offset)

    def __len__(self) -> int:
        return self.len

    def modify(self, index):
        """The underlying dataset's index of ``index``."""
        return np.asarray(index) % self.len + self.off if isinstance(index, np.ndarray) else index % self.len + self.off

    def __getitem__(self, index):
        if isinstance(index, slice):
            index = np.arange(self.len)[index]
        elif isinstance(index, (list, tuple)):
            index = np.asarray(index)
        return self.dataset[self.modify(index)]

    def __getattr__(self, name):
        if name in ("dataset", "len", "off"):
            raise AttributeError(name)
        return getattr(self.dataset, name)


def _through(name: str) -> property:
    return property(lambda self: getattr(self.sampler, name), lambda self, value: setattr(self.sampler, name, value),
                    doc=f"The wrapped sampler's ``{name}``.")


class _Wrapping:
    """What both wrapping samplers share: the wrapped sampler's settings, read and set through."""

    def _wrap(self, sampler, comm) -> None:
        if not isinstance(sampler, Sampler):
            raise UserTypeError(f"{type(self).__name__} wraps a sampler (such as d5.ShuffleSampler(dataset, "
                                f"batch_size)). Received: {type(sampler).__name__}")
        self.sampler = sampler
        self.comm_size = comm.size if comm is not None else 1
        self.comm_rank = comm.rank if comm is not None else 0
        self.rank, self.size = self.comm_rank, self.comm_size
        self._taken = 0

    dataset = _through("dataset")
    batch_size = _through("batch_size")
    seed = _through("seed")
    drop_last_batch = _through("drop_last_batch")
    events = _through("events")
    transformations = _through("transformations")
    random = _through("random")

    def reset(self) -> None:
        """Start a new epoch of the wrapped sampler."""
        self._taken = 0
        self.sampler.reset()

    def __iter__(self):
        self.reset()
        return self

    def __next__(self):
        if self._taken >= len(self):
            raise StopIteration
        batch = next(self.sampler)
        self._taken += 1
        return batch

    def __call__(self):
        """The next batch (Deep500's ``sampler()``)."""
        return next(self)

    def epoch_indices(self):
        return self.sampler.epoch_indices()

    def epoch_batches(self):
        return self.sampler.epoch_batches()[:len(self)]

    def __getattr__(self, name):
        if name == "sampler":
            raise AttributeError(name)
        return getattr(self.sampler, name)


class WrappedDistributedSampler(_Wrapping, DistributedSampler):
    """Deep500's ``DistributedSampler(sampler, comm=None)``: every rank draws from its own ``sampler``
    over the whole dataset.

    An epoch is ``len(sampler) // comm.size`` batches of the wrapped sampler (Deep500's length), so
    that all ranks together take one epoch's worth of batches. The ranks' orders are those of their
    samplers: give each rank a different seed (or ``seed=None``), else they draw the same batches.

    Args:
        sampler: the sampler to wrap.
        comm: the communicator (its ``rank`` and ``size``); None means one rank.
    """

    def __init__(self, sampler: Sampler, comm=None):
        self._wrap(sampler, comm)
        if len(self) == 0:
            raise UserError(f"DistributedSampler would yield no batch: the wrapped sampler has {len(sampler)} "
                            f"batches per epoch, fewer than the {self.comm_size} ranks. Use a smaller batch size or "
                            f"fewer ranks. Received: {len(sampler)} batches, {self.comm_size} ranks")

    def __len__(self) -> int:
        return len(self.sampler) // self.comm_size


class WrappedPartitionedSampler(_Wrapping, PartitionedDistributedSampler):
    """Deep500's ``PartitionedDistributedSampler(sampler, comm=None)``: the wrapped sampler draws from
    this rank's contiguous part of its dataset.

    With ``n`` samples and ``p`` ranks, rank ``r`` gets samples ``r * (n // p)`` to
    ``(r + 1) * (n // p) - 1`` (the last ``n mod p`` samples are never visited): the wrapped
    sampler's ``dataset`` is replaced by that part (a :class:`PartitionedDataset`), and it keeps
    its own order and seed within it. An epoch is one epoch of the wrapped sampler.

    Args:
        sampler: the sampler to wrap (its ``dataset`` is replaced).
        comm: the communicator (its ``rank`` and ``size``); None means one rank.

    Raises:
        UserError: the dataset has fewer samples than ranks, or a part has fewer than one batch.
    """

    def __init__(self, sampler: Sampler, comm=None):
        self._wrap(sampler, comm)
        n = _check_dataset(sampler.dataset)
        part = n // self.comm_size
        if part == 0:
            raise UserError(f"The dataset has {n} samples, fewer than the {self.comm_size} ranks: some part would "
                            f"be empty. Use fewer ranks or a larger dataset. Received: {n} samples, "
                            f"{self.comm_size} ranks")
        sampler.reset()
        sampler.dataset = PartitionedDataset(sampler.dataset, part, part * self.comm_rank)
        if len(self) == 0:
            raise UserError(f"PartitionedDistributedSampler would yield no batch: each of the {self.comm_size} parts "
                            f"has {part} samples, fewer than batch_size={sampler.batch_size}, and drop_last_batch="
                            f"True. Use a smaller batch size or fewer ranks. Received: {part} samples per part")

    def __len__(self) -> int:
        return len(self.sampler)

    @property
    def shard_size(self) -> int:
        """Samples in this rank's part."""
        return len(self.sampler.dataset)


# ``__new__`` above would make inspect.signature (which recipes use to fill ``comm=``) report
# ``(*args, **kwargs)``; each class states its constructor's own signature.
for _cls in (DistributedSampler, PartitionedDistributedSampler, WrappedDistributedSampler, WrappedPartitionedSampler):
    _init = inspect.signature(_cls.__init__)
    _cls.__signature__ = _init.replace(parameters=list(_init.parameters.values())[1:])
del _cls, _init
