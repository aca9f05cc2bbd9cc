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


# ------------------------------------------------------------------ Deep500's forms
def test_ordered_sampler_takes_deep500s_argument_order():
    # Deep500: OrderedSampler(dataset, batch_size, drop_last_batch, events, transformations)
    assert _epoch(OrderedSampler(_dataset(7), 3, False)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert _epoch(OrderedSampler(_dataset(7), 3, True)) == [[0, 1, 2], [3, 4, 5]]
    seen = []

    class Event:
        def after_sampling(self, sampler, samples):
            seen.append(samples)

    s = OrderedSampler(_dataset(4), 2, True, [Event()], [lambda b: {**b, "x": b["x"] * 10}])
    assert [b["x"][:, 0].tolist() for b in s] == [[0, 10], [20, 30]] and seen == [2, 2]
    assert OrderedSampler(_dataset(4), 2, seed=5).seed == 5  # accepted as a keyword, changes nothing


def test_calling_a_sampler_draws_the_next_batch_and_ends_with_stop_iteration():
    s = ShuffleSampler(_dataset(6), 2, seed=1)
    order = np.random.default_rng(1).permutation(6)
    assert [s()["y"].tolist() for _ in range(3)] == [order[:2].tolist(), order[2:4].tolist(), order[4:].tolist()]
    with pytest.raises(StopIteration):
        s()
    s.reset()
    assert len(s()["y"]) == 2


def test_dataset_subclass_may_call_init_without_arguments():
    class Squares(d5.Dataset):
        def __init__(self, input_node, label_node):
            super().__init__()
            assert (self.input_node, self.label_node) == (None, None)
            self.input_node, self.label_node = input_node, label_node

        def __getitem__(self, index):
            x = np.asarray(index, np.float32).reshape(-1, 1)
            return {self.input_node: x, self.label_node: x ** 2}

        def __len__(self):
            return 8

    batches = list(ShuffleSampler(Squares("in", "gt"), batch_size=4, seed=0))
    assert len(batches) == 2
    assert all(np.array_equal(b["gt"], b["in"] ** 2) for b in batches)
    assert sorted(np.concatenate([b["in"][:, 0] for b in batches]).tolist()) == list(range(8))


def test_file_list_dataset_loads_each_item():
    loaded = []

    def loader(name):
        loaded.append(name)
        return np.full((2,), len(name), np.float32)

    ds = d5.FileListDataset(["a", "bb", "ccc"], "x", loader, np.array([0, 1, 2]), "y")
    batch = ds[np.array([2, 0])]
    np.testing.assert_array_equal(batch["x"], [[3, 3], [1, 1]])
    np.testing.assert_array_equal(batch["y"], [2, 0])
    assert loaded == ["ccc", "a"] and len(ds) == 3
    np.testing.assert_array_equal(ds[1]["x"], [2, 2])
    with pytest.raises(TypeError, match="needs a callable loader"):
        d5.FileListDataset(["a"], "x", 5)


# ------------------------------------------------------------------------------------ test_sampler
def test_test_sampler_gives_each_rerun_metric_its_own_batches(capsys):
    ds = d5.NumpyDataset(np.zeros((10, 1)), "x", np.array([0, 1, 1, 2, 2, 2, 3, 3, 3, 3]), "y")
    sampler = OrderedSampler(ds, 2)
    # 7 batches of 2 from a 5-batch epoch: the whole epoch, then the next epoch's first two batches
    [hist] = d5.test_sampler(sampler, metrics=[d5.DatasetBias(4, "y", reruns=7)])
    labels = np.concatenate([ds.labels, ds.labels[:4]])
    assert hist == np.bincount(labels, minlength=4).tolist() and sum(hist) == 14
    assert sampler.events == []
    [hist] = d5.test_sampler(sampler, metrics=[d5.DatasetBias(4, "y", reruns=3)])  # the epoch goes on
    assert hist == np.bincount(ds.labels[4:10], minlength=4).tolist()
    assert "DatasetBias: [" in capsys.readouterr().out


def test_test_sampler_shares_one_batch_among_metrics_without_reruns():
    ds = _dataset(6)
    timer = d5.WallclockTime(reruns=0, avg_over=1)
    timed = d5.SamplerEventMetric(timer)
    bias = d5.DatasetBias(6, "y", reruns=0)
    extra = []

    class Reset:
        def on_sampler_reset(self, sampler):
            extra.append("reset")

    s = OrderedSampler(ds, 3, events=[])
    results = d5.test_sampler(s, metrics=[timed, bias], events=[Reset()], verbose=False)
    assert results[1] == [1, 1, 1, 0, 0, 0]  # the first batch, seen once
    assert len(results[0]) == 1 and results[0][0] > 0 and results[0] == timer.samples
    assert s.events == []
    with pytest.raises(TypeError, match="test_sampler needs a sampler"):
        d5.test_sampler(ds, metrics=[bias])
