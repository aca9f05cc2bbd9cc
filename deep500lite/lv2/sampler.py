"""Level 2: samplers turn a dataset into minibatches of feeds.

A sampler is an iterator over one epoch of batches (dicts of feeds); ``iter(sampler)`` (or
:meth:`Sampler.reset`) starts a new epoch. ``len(sampler)`` is the number of batches an epoch
yields, always equal to what iterating yields.

Randomness comes from one generator per sampler, ``numpy.random.default_rng(seed)``: the same
seed gives the same sequence of epochs in every run, and each epoch draws a new order from that
generator (epoch 2 differs from epoch 1). Transformations have their own seeds.

>>> import numpy as np, deep500lite as d5
>>> ds = d5.NumpyDataset(np.arange(10.0)[:, None], "x", np.arange(10), "y")
>>> [b["y"].tolist() for b in d5.OrderedSampler(ds, 4, drop_last_batch=False)]
[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
"""

from __future__ import annotations

import abc
from typing import Sequence

import numpy as np

from deep500lite.errors import UserError, UserTypeError

__all__ = ["Sampler", "OrderedSampler", "ShuffleSampler", "BucketSampler"]


def _check_dataset(dataset) -> int:
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise UserTypeError(f"A sampler needs a dataset with __len__ and __getitem__ (a d5.Dataset). "
                            f"Received: {type(dataset).__name__}")
    n = len(dataset)
    if n == 0:
        raise UserError("The sampler's dataset is empty: it needs at least one sample. Received: a dataset of "
                        "0 samples")
    return n


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _split(indices: np.ndarray, batch_size: int, drop_last: bool) -> list[np.ndarray]:
    """Consecutive batches of ``indices``; the trailing partial one only when ``drop_last`` is off."""
    stop = len(indices) - len(indices) % batch_size if drop_last else len(indices)
    return [indices[i:i + batch_size] for i in range(0, stop, batch_size)]


def _batch_count(n: int, batch_size: int, drop_last: bool) -> int:
    return n // batch_size if drop_last else -(-n // batch_size)


class Sampler(abc.ABC):
    """Iterates over a dataset in minibatches.

    The arguments follow Deep500's ``Sampler`` (same names, same order).

    Args:
        dataset: the :class:`Dataset` (anything with ``__len__`` and ``__getitem__`` taking an
            integer index array and returning a dict of feeds).
        batch_size: samples per batch.
        seed: seed of the sampler's random generator (the order of samples); ``None`` draws a
            fresh seed from the operating system (not reproducible).
        drop_last_batch: skip a last batch smaller than ``batch_size`` (Deep500's name and default).
        events: objects with any of Deep500's ``SamplerEvent`` methods
            ``on_sampler_reset(sampler)``, ``before_sampling(sampler, batch_size)`` and
            ``after_sampling(sampler, samples)`` (``samples``: the number of samples in the batch).
        transformations: a callable ``batch -> batch``, or a list of them, applied to every batch
            in order (for example the transforms of :mod:`deep500lite.lv2.augmentation`).

    Raises:
        UserTypeError: ``dataset``, ``events`` or ``transformations`` of the wrong kind (a ``TypeError``).
        UserError: a bad value, or settings that would yield no batch at all.
    """

    def __init__(self, dataset, batch_size: int, seed: int | None = None, drop_last_batch: bool = True,
                 events: Sequence | None = None, transformations=None):
        n = _check_dataset(dataset)
        if not _is_int(batch_size) or batch_size < 1:
            raise UserError(f"batch_size must be an integer >= 1. Received: batch_size={batch_size!r}")
        if seed is not None and (not _is_int(seed) or seed < 0):
            raise UserError(f"seed must be None or an integer >= 0. Received: seed={seed!r}")
        if not isinstance(drop_last_batch, (bool, np.bool_)):
            raise UserError(f"drop_last_batch must be True or False. Received: drop_last_batch={drop_last_batch!r}")
        if callable(transformations):
            transformations = [transformations]
        transformations = list(transformations or [])
        for i, t in enumerate(transformations):
            if not callable(t):
                raise UserTypeError(f"transformations must be callables batch -> batch; item {i} is a "
                                    f"{type(t).__name__}. Received: {t!r}")
        if events is not None and (isinstance(events, (str, bytes)) or not hasattr(events, "__iter__")):
            raise UserTypeError(f"events must be a list of sampler events. Received: {type(events).__name__}")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.seed = seed
        self.drop_last_batch = bool(drop_last_batch)
        self.events = list(events or [])
        self.transformations = []
        for t in transformations:
            self.add_transformation(t)
        self.random = np.random.default_rng(seed)
        self._batch = 0
        self._batches: list[np.ndarray] | None = None
        if len(self) == 0:
            raise UserError(
                f"{type(self).__name__} would yield no batch: {self._why_empty(n)} and drop_last_batch=True. "
                f"Use a smaller batch_size or drop_last_batch=False. Received: batch_size={self.batch_size}")

    def _why_empty(self, n: int) -> str:
        return f"the dataset has {n} samples, fewer than batch_size={self.batch_size},"

    def add_transformation(self, transform) -> None:
        """Apply ``transform`` (a callable ``batch -> batch``) to every batch, after those already given.

        A transform with Deep500's ``set_dataset_nodes(input_node, label_node)`` method is told the
        dataset's nodes first (the transforms of :mod:`deep500lite.lv2.augmentation`
        take the dataset's input node that way unless they were given one).

        Raises:
            UserTypeError: ``transform`` is not callable.
        """
        if not callable(transform):
            raise UserTypeError(f"A transformation must be a callable batch -> batch. Received: {transform!r}")
        if hasattr(transform, "set_dataset_nodes"):
            transform.set_dataset_nodes(getattr(self.dataset, "input_node", None),
                                        getattr(self.dataset, "label_node", None))
        self.transformations.append(transform)

    def __call__(self) -> dict[str, np.ndarray]:
        """The next batch, as ``next(sampler)`` (Deep500 samplers are called to sample)."""
        return self.__next__()

    @abc.abstractmethod
    def epoch_indices(self) -> np.ndarray:
        """Return the order in which this epoch visits the samples (an integer array).

        Called once at the start of every epoch; draw any randomness from ``self.random``.
        """

    def epoch_batches(self) -> list[np.ndarray]:
        """The index arrays of this epoch's batches, in order (by default :meth:`epoch_indices`
        cut into ``batch_size`` pieces, honouring ``drop_last_batch``)."""
        return _split(np.asarray(self.epoch_indices()), self.batch_size, self.drop_last_batch)

    def __len__(self) -> int:
        """Number of batches in one epoch."""
        return _batch_count(len(self.dataset), self.batch_size, self.drop_last_batch)

    def reset(self) -> None:
        """Start a new epoch (its order is drawn when the first batch is asked for)."""
        self._batch = 0
        self._batches = None
        for e in self.events:
            if hasattr(e, "on_sampler_reset"):
                e.on_sampler_reset(self)

    def __iter__(self):
        self.reset()
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self._batches is None:
            self._batches = self.epoch_batches()
        if self._batch >= len(self._batches):
            raise StopIteration
        for e in self.events:
            if hasattr(e, "before_sampling"):
                e.before_sampling(self, self.batch_size)
        idx = self._batches[self._batch]
        self._batch += 1
        batch = self.dataset[idx]
        for t in self.transformations:
            batch = t(batch)
        for e in self.events:
            if hasattr(e, "after_sampling"):
                e.after_sampling(self, len(idx))
        return batch


class OrderedSampler(Sampler):
    """Visits the samples in dataset order.

    The arguments are Deep500's ``OrderedSampler``'s, in its order (no seed: the order is fixed);
    ``seed`` is accepted as a keyword for uniformity with the other samplers and changes nothing.
    """

    def __init__(self, dataset, batch_size: int, drop_last_batch: bool = True, events: Sequence | None = None,
                 transformations=None, seed: int | None = None):
        super().__init__(dataset, batch_size, seed, drop_last_batch, events, transformations)

    def epoch_indices(self):
        return np.arange(len(self.dataset))


class ShuffleSampler(Sampler):
    """Visits the samples in a fresh random order every epoch (seeded, reproducible).

    Epoch ``k``'s order is the ``k``-th ``self.random.permutation(len(dataset))``.
    """

    def epoch_indices(self):
        return self.random.permutation(len(self.dataset))


class BucketSampler(Sampler):
    """Batches of samples with similar keys (such as sequence lengths): every batch comes from one bucket.

    Samples are put into buckets by their key once, at construction:

    - ``boundaries=[b1, ..., bk]`` (strictly increasing): ``k + 1`` buckets, ``key < b1``,
      ``b1 <= key < b2``, ..., ``key >= bk``; empty buckets yield nothing;
    - ``num_buckets=m``: the samples sorted by key (ties in dataset order) are cut into ``m``
      consecutive buckets whose sizes differ by at most one;
    - neither: one bucket per distinct key value (every batch then holds equal keys, for example
      sequences of one length that stack without padding).

    Each epoch, with ``shuffle=True`` (the default), the sampler permutes each bucket's samples
    (buckets in increasing key order, one ``self.random.permutation`` each), cuts every bucket
    into batches of ``batch_size`` (a bucket's last, smaller batch is dropped when
    ``drop_last_batch``), then permutes the list of all batches (one more permutation). With
    ``shuffle=False`` the buckets are visited in increasing key order with their samples in
    dataset order. Batches therefore never mix buckets and may be smaller than ``batch_size``
    only when ``drop_last_batch=False`` (one per bucket at most).

    Args:
        dataset: the :class:`Dataset`.
        batch_size: samples per batch (at most).
        keys: one number per sample (array-like of ``len(dataset)``), or a callable
            ``key(index) -> number`` called once per sample.
        boundaries: bucket edges (see above); excludes ``num_buckets``.
        num_buckets: number of equal-size buckets (see above); excludes ``boundaries``.
        shuffle: draw a new order every epoch (``False``: the fixed order described above).
        seed, drop_last_batch, events, transformations: as for :class:`Sampler`.

    Attributes:
        buckets: the sample indices of each non-empty bucket, in increasing key order.
    """

    def __init__(self, dataset, batch_size: int, keys=None, boundaries: Sequence[float] | None = None,
                 num_buckets: int | None = None, shuffle: bool = True, seed: int | None = None,
                 drop_last_batch: bool = True, events=None, transformations=None):
        n = _check_dataset(dataset)
        keys = self._keys(keys, n)
        if not isinstance(shuffle, (bool, np.bool_)):
            raise UserError(f"shuffle must be True or False. Received: shuffle={shuffle!r}")
        if boundaries is not None and num_buckets is not None:
            raise UserError("BucketSampler takes boundaries or num_buckets, not both. "
                            f"Received: boundaries={boundaries!r}, num_buckets={num_buckets!r}")
        if boundaries is not None:
            edges = np.asarray(boundaries, dtype=np.float64) if not isinstance(boundaries, (str, bytes)) else None
            if edges is None or edges.ndim != 1 or edges.size == 0 or not np.all(np.isfinite(edges)) \
                    or np.any(np.diff(edges) <= 0):
                raise UserError("boundaries must be a non-empty, strictly increasing list of finite numbers. "
                                f"Received: boundaries={boundaries!r}")
            bucket_of = np.searchsorted(edges, keys, side="right")
            buckets = [np.flatnonzero(bucket_of == i) for i in range(edges.size + 1)]
        elif num_buckets is not None:
            if not _is_int(num_buckets) or not 1 <= num_buckets <= n:
                raise UserError(f"num_buckets must be an integer from 1 to the number of samples ({n}). "
                                f"Received: num_buckets={num_buckets!r}")
            buckets = [np.sort(part) for part in np.array_split(np.argsort(keys, kind="stable"), int(num_buckets))]
        else:
            _, bucket_of = np.unique(keys, return_inverse=True)
            buckets = [np.flatnonzero(bucket_of == i) for i in range(int(bucket_of.max()) + 1)]
        self.keys = keys
        self.buckets = [b.astype(np.int64) for b in buckets if b.size]
        self.shuffle = bool(shuffle)
        super().__init__(dataset, batch_size, seed, drop_last_batch, events, transformations)

    @staticmethod
    def _keys(keys, n: int) -> np.ndarray:
        if keys is None:
            raise UserError("BucketSampler needs keys: one number per sample, or a callable key(index). "
                            "Received: keys=None")
        if callable(keys):
            keys = [keys(i) for i in range(n)]
        if isinstance(keys, (str, bytes)):
            raise UserError(f"keys must be numbers (one per sample). Received: {keys!r}")
        try:
            arr = np.asarray(keys, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise UserError(f"keys must be numbers (one per sample). Received: {str(keys)[:80]}") from exc
        if arr.shape != (n,):
            raise UserError(f"keys must hold one number per sample: shape ({n},). Received: shape {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise UserError(f"keys must be finite numbers. Received: non-finite keys at indices "
                            f"{np.flatnonzero(~np.isfinite(arr))[:10].tolist()}")
        return arr

    def _why_empty(self, n: int) -> str:
        sizes = sorted(len(b) for b in self.buckets)
        return f"every bucket is smaller than batch_size={self.batch_size} (bucket sizes {sizes[:20]})"

    def __len__(self) -> int:
        return sum(_batch_count(len(b), self.batch_size, self.drop_last_batch) for b in self.buckets)

    def epoch_indices(self) -> np.ndarray:
        """All samples this epoch visits, in batch order."""
        batches = self.epoch_batches()
        return np.concatenate(batches) if batches else np.zeros(0, np.int64)

    def epoch_batches(self) -> list[np.ndarray]:
        batches = []
        for bucket in self.buckets:
            members = self.random.permutation(bucket) if self.shuffle else bucket
            batches.extend(_split(members, self.batch_size, self.drop_last_batch))
        if self.shuffle:
            batches = [batches[i] for i in self.random.permutation(len(batches))]
        return batches
