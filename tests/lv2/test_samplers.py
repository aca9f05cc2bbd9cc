"""Samplers: order, reproducibility, drop-last and len(), BucketSampler's buckets, argument checks."""

from __future__ import annotations

import numpy as np
import pytest

import deep500lite as d5
from deep500lite.errors import UserError, UserTypeError
from deep500lite.lv2.sampler import BucketSampler, OrderedSampler, ShuffleSampler


def _dataset(n=10):
    return d5.NumpyDataset(np.arange(n, dtype=np.float32)[:, None], "x", np.arange(n, dtype=np.int64), "y")


def _epoch(sampler):
    return [b["y"].tolist() for b in sampler]


# -------------------------------------------------------------------------------- ordered/shuffle
@pytest.mark.parametrize("n,b", [(10, 3), (12, 4), (5, 5), (7, 1), (3, 8)])
@pytest.mark.parametrize("drop", [True, False])
@pytest.mark.parametrize("cls", [OrderedSampler, ShuffleSampler])
def test_len_agrees_with_iteration_and_drop_last(cls, n, b, drop):
    if drop and n < b:
        with pytest.raises(UserError, match="would yield no batch"):
            cls(_dataset(n), b, seed=0, drop_last_batch=drop)
        return
    sampler = cls(_dataset(n), b, seed=0, drop_last_batch=drop)
    for _ in range(2):  # two epochs
        batches = _epoch(sampler)
        assert len(batches) == len(sampler)
        sizes = [len(x) for x in batches]
        if drop:
            assert sizes == [b] * (n // b)
        else:
            assert sizes == [b] * (n // b) + ([n % b] if n % b else [])
        seen = sorted(i for x in batches for i in x)
        assert len(seen) == len(set(seen)) == sum(sizes)
        if not drop:
            assert seen == list(range(n))


def test_ordered_sampler_follows_dataset_order():
    assert _epoch(OrderedSampler(_dataset(7), 3, drop_last_batch=False)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert _epoch(OrderedSampler(_dataset(7), 3)) == [[0, 1, 2], [3, 4, 5]]


def test_shuffle_sampler_is_reproducible_and_draws_a_new_order_each_epoch():
    a, b = ShuffleSampler(_dataset(20), 5, seed=7), ShuffleSampler(_dataset(20), 5, seed=7)
    epochs_a = [_epoch(a) for _ in range(3)]
    epochs_b = [_epoch(b) for _ in range(3)]
    assert epochs_a == epochs_b
    flat = [sum(e, []) for e in epochs_a]
    assert flat[0] != flat[1] != flat[2]
    # The documented contract: epoch k is the k-th permutation of default_rng(seed).
    rng = np.random.default_rng(7)
    assert flat == [rng.permutation(20).tolist() for _ in range(3)]
    assert sum(_epoch(ShuffleSampler(_dataset(20), 5, seed=8)), []) != flat[0]


def test_unseeded_shuffle_samplers_differ():
    orders = {tuple(sum(_epoch(ShuffleSampler(_dataset(50), 50)), [])) for _ in range(3)}
    assert len(orders) == 3


def test_reset_midway_starts_a_fresh_epoch():
    s = ShuffleSampler(_dataset(12), 4, seed=1)
    it = iter(s)
    first = next(it)["y"].tolist()
    s.reset()
    epoch = _epoch(s)  # iter() resets again: a full epoch
    assert len(epoch) == 3 and sorted(sum(epoch, [])) == list(range(12))
    rng = np.random.default_rng(1)
    assert first == rng.permutation(12)[:4].tolist()
    # reset() draws nothing: the next permutation belongs to the epoch that is actually iterated
    assert sum(epoch, []) == rng.permutation(12).tolist()


def test_transformations_run_in_order_and_events_fire():
    calls = []

    class Events:
        def on_sampler_reset(self, sampler):
            calls.append("reset")

        def before_sampling(self, sampler, batch_size):
            calls.append(("before", batch_size))

        def after_sampling(self, sampler, samples):
            calls.append(("after", samples))

    def add_one(batch):
        return {**batch, "x": batch["x"] + 1}

    def double(batch):
        return {**batch, "x": batch["x"] * 2}

    s = OrderedSampler(_dataset(5), 2, drop_last_batch=False, events=[Events()], transformations=[add_one, double])
    xs = [b["x"][:, 0].tolist() for b in s]
    assert xs == [[2, 4], [6, 8], [10]]  # (x + 1) * 2, not x * 2 + 1
    assert calls == ["reset", ("before", 2), ("after", 2), ("before", 2), ("after", 2), ("before", 2), ("after", 1)]
    single = OrderedSampler(_dataset(4), 2, transformations=double)  # one callable is accepted too
    assert [b["x"][:, 0].tolist() for b in single] == [[0, 2], [4, 6]]


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(batch_size=0), UserError, r"batch_size must be an integer >= 1. Received: batch_size=0"),
    (dict(batch_size=2.5), UserError, r"batch_size must be an integer >= 1"),
    (dict(batch_size=True), UserError, r"batch_size must be an integer >= 1"),
    (dict(seed=-1), UserError, r"seed must be None or an integer >= 0. Received: seed=-1"),
    (dict(seed="a"), UserError, r"seed must be None or an integer"),
    (dict(drop_last_batch="yes"), UserError, r"drop_last_batch must be True or False. Received: drop_last_batch='yes'"),
    (dict(transformations=[1]), UserTypeError, r"item 0 is a int"),
    (dict(events=5), UserTypeError, r"events must be a list"),
    (dict(batch_size=20), UserError, r"10 samples, fewer than batch_size=20"),
])
def test_bad_sampler_arguments(kwargs, exc, match):
    args = dict(batch_size=2) | kwargs
    with pytest.raises(exc, match=match):
        ShuffleSampler(_dataset(10), **args)


def test_bad_datasets():
    with pytest.raises(UserTypeError, match=r"needs a dataset with __len__ and __getitem__ \(a d5.Dataset\). "
                                            r"Received: int"):
        OrderedSampler(3, 2)
    with pytest.raises(UserError, match="empty"):
        OrderedSampler(d5.NumpyDataset(np.zeros((0, 1)), "x"), 2)


# --------------------------------------------------------------------------------------- buckets
class Sequences(d5.Dataset):
    """Variable-length sequences: a batch stacks only if all its sequences have one length."""

    def __init__(self, lengths):
        super().__init__("x", "y")
        self.seqs = [np.full(n, i, np.float32) for i, n in enumerate(lengths)]

    def __getitem__(self, index):
        return {"x": np.stack([self.seqs[i] for i in index]), "y": np.asarray(index)}

    def __len__(self):
        return len(self.seqs)


LENGTHS = np.random.default_rng(3).integers(1, 6, size=40)


@pytest.mark.parametrize("drop", [True, False])
def test_bucket_per_length_stacks_equal_lengths(drop):
    ds = Sequences(LENGTHS)
    with pytest.raises(ValueError):  # without buckets, unequal lengths cannot be stacked
        list(ShuffleSampler(ds, 4, seed=0))
    s = BucketSampler(ds, 4, keys=LENGTHS, seed=0, drop_last_batch=drop)
    batches = list(s)
    assert len(batches) == len(s)
    counts = np.bincount(LENGTHS)
    expected = sum((c // 4 if drop else -(-c // 4)) for c in counts)
    assert len(s) == expected
    for b in batches:
        assert len(set(LENGTHS[b["y"]])) == 1 and b["x"].shape[1] == LENGTHS[b["y"][0]]
        assert len(b["y"]) == 4 if drop else 1 <= len(b["y"]) <= 4
    seen = np.concatenate([b["y"] for b in batches])
    assert len(np.unique(seen)) == len(seen)
    if not drop:
        assert sorted(seen) == list(range(len(LENGTHS)))
    else:
        assert len(seen) == sum(c - c % 4 for c in counts)


def test_bucket_boundaries_group_by_interval():
    keys = np.random.default_rng(0).uniform(0, 100, size=60)
    edges = [10, 50, 75]
    s = BucketSampler(_dataset(60), 5, keys=keys, boundaries=edges, seed=1, drop_last_batch=False)
    interval = np.digitize(keys, edges)  # computed by numpy, independently of the sampler
    batches = _epoch(s)
    assert len(batches) == len(s) == sum(-(-c // 5) for c in np.bincount(interval))
    for b in batches:
        assert len(set(interval[b])) == 1
    assert sorted(sum(batches, [])) == list(range(60))
    # batches from different buckets are interleaved, not visited bucket after bucket
    order = [interval[b[0]] for b in batches]
    assert order != sorted(order)


def test_bucket_quantiles_have_near_equal_sizes_and_disjoint_ranges():
    keys = np.random.default_rng(5).normal(size=103)
    s = BucketSampler(_dataset(103), 4, keys=keys, num_buckets=5, seed=0)
    sizes = [len(b) for b in s.buckets]
    assert sum(sizes) == 103 and max(sizes) - min(sizes) <= 1 and len(sizes) == 5
    ranges = [(keys[b].min(), keys[b].max()) for b in s.buckets]
    assert all(ranges[i][1] < ranges[i + 1][0] for i in range(4))
    bucket_of = {int(i): k for k, b in enumerate(s.buckets) for i in b}
    for batch in _epoch(s):
        assert len({bucket_of[i] for i in batch}) == 1 and len(batch) == 4
    assert len(s) == sum(n // 4 for n in sizes)


def test_bucket_sampler_is_reproducible_and_callable_keys_match_arrays():
    keys = LENGTHS
    a = BucketSampler(_dataset(40), 3, keys=keys, seed=4)
    b = BucketSampler(_dataset(40), 3, keys=lambda i: int(keys[i]), seed=4)
    ea, eb = [_epoch(a) for _ in range(2)], [_epoch(b) for _ in range(2)]
    assert ea == eb and ea[0] != ea[1]
    assert _epoch(BucketSampler(_dataset(40), 3, keys=keys, seed=5)) != ea[0]


def test_bucket_sampler_without_shuffle_is_sorted_and_stable():
    keys = np.array([3, 1, 2, 1, 3, 2, 1])
    s = BucketSampler(_dataset(7), 2, keys=keys, shuffle=False, drop_last_batch=False)
    assert _epoch(s) == [[1, 3], [6], [2, 5], [0, 4]]
    assert _epoch(s) == [[1, 3], [6], [2, 5], [0, 4]]


@pytest.mark.parametrize("kwargs,match", [
    (dict(), r"needs keys"),
    (dict(keys=[1, 2]), r"one number per sample: shape \(10,\). Received: shape \(2,\)"),
    (dict(keys=["a"] * 10), r"keys must be numbers"),
    (dict(keys=[np.nan] + [1.0] * 9), r"non-finite keys at indices \[0\]"),
    (dict(keys=np.arange(10), boundaries=[3, 3]), r"strictly increasing"),
    (dict(keys=np.arange(10), boundaries=[]), r"non-empty"),
    (dict(keys=np.arange(10), boundaries=[3], num_buckets=2), r"boundaries or num_buckets, not both"),
    (dict(keys=np.arange(10), num_buckets=0), r"num_buckets must be an integer from 1 to the number of samples \(10\)"),
    (dict(keys=np.arange(10), num_buckets=11), r"Received: num_buckets=11"),
    (dict(keys=np.arange(10), shuffle="no"), r"shuffle must be True or False"),
    (dict(keys=np.arange(10)), r"every bucket is smaller than batch_size=2"),
])
def test_bad_bucket_arguments(kwargs, match):
    with pytest.raises(UserError, match=match):
        BucketSampler(_dataset(10), 2, **kwargs)
