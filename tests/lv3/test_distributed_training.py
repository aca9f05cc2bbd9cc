"""Distributed samplers and optimizers; synchronous data-parallel SGD checked against one rank.

The MPI tests run ``mpi_check_training.py`` on P ranks with ``mpirun`` from test_mpi.py (own
process group, timeout); the single-rank reference is computed here, in the test process, with
the base optimizer alone (no deep500lite.lv3 code).
"""

from __future__ import annotations

import numpy as np
import pytest

from deep500lite import NumpyDataset
from deep500lite.errors import UserError
from deep500lite.lv3 import DistributedSampler, PartitionedDistributedSampler, compression
from deep500lite.lv3.optimizer import fuse_buckets
from test_mpi import mpirun, requires_mpi
from training_setup import GLOBAL_BATCH, global_batch, make_optimizer


# ------------------------------------------------------------------------------------ samplers
def _dataset(n):
    return NumpyDataset(np.arange(n, dtype=np.float32)[:, None], "x", np.arange(n), "y")


def _epoch(sampler):
    return [b["y"].tolist() for b in sampler]


def test_distributed_sampler_every_rank_sees_everything_in_its_own_order():
    ds = _dataset(20)
    epochs = {r: _epoch(DistributedSampler(ds, 5, rank=r, size=3, seed=4)) for r in range(3)}
    for r, batches in epochs.items():
        flat = sum(batches, [])
        assert sorted(flat) == list(range(20)) and len(batches) == 4
        assert flat == np.random.default_rng(4 + r).permutation(20).tolist()
    assert epochs[0] != epochs[1] != epochs[2]
    again = DistributedSampler(ds, 5, rank=1, size=3, seed=4)
    first, second = _epoch(again), _epoch(again)
    assert first == epochs[1] and second != first and sorted(sum(second, [])) == list(range(20))


@pytest.mark.parametrize("n,size,batch", [(20, 3, 2), (24, 4, 6), (7, 2, 1), (10, 3, 3)])
def test_partitioned_sampler_shards_are_disjoint_equal_and_cover(n, size, batch):
    ds = _dataset(n)
    for epoch in range(2):
        samplers = [PartitionedDistributedSampler(ds, batch, rank=r, size=size, seed=9) for r in range(size)]
        shards = []
        for s in samplers:
            for _ in range(epoch + 1):
                batches = _epoch(s)
            assert len(batches) == len(s) == (n // size) // batch
            assert all(len(b) == batch for b in batches)
            shards.append(sum(batches, []))
        seen = sum(shards, [])
        assert len(seen) == len(set(seen))  # disjoint
        # With batch dividing the shard, the shards cover everything but the n mod size left over.
        if (n // size) % batch == 0:
            assert len(seen) == n - n % size
    ordered = [sum(_epoch(PartitionedDistributedSampler(ds, 1, rank=r, size=size, shuffle=False)), [])
               for r in range(size)]
    assert ordered[0][:2] == [0, size]
    assert sorted(sum(ordered, [])) == list(range(n - n % size))


def test_partitioned_sampler_keeps_partial_batches_equal_across_ranks():
    ds = _dataset(22)  # 7 per shard for 3 ranks
    lens = [_epoch(PartitionedDistributedSampler(ds, 3, rank=r, size=3, drop_last_batch=False)) for r in range(3)]
    assert [[len(b) for b in x] for x in lens] == [[3, 3, 1]] * 3


def test_samplers_reject_bad_input():
    ds = _dataset(5)
    with pytest.raises(UserError, match="rank must be an integer from 0 to size - 1 = 1. Received: rank=2"):
        DistributedSampler(ds, 1, rank=2, size=2)
    with pytest.raises(UserError, match="needs comm=, or rank= and size="):
        DistributedSampler(ds, 1)
    with pytest.raises(UserError, match="fewer than the 6 ranks"):
        PartitionedDistributedSampler(ds, 1, rank=0, size=6)
    with pytest.raises(UserError, match="Received: seed=None"):
        PartitionedDistributedSampler(ds, 1, rank=0, size=2, seed=None)
    with pytest.raises(UserError, match="each of the 2 shards has 2 samples, fewer than batch_size=3"):
        PartitionedDistributedSampler(ds, 3, rank=0, size=2)


def test_fuse_buckets_packs_consecutive_small_arrays():
    arrays = [np.zeros(n, np.float32) for n in (10, 10, 30, 100, 5, 5)] + [np.zeros(2, np.float64)]
    assert fuse_buckets(arrays, 80) == [[0, 1], [2], [3], [4, 5], [6]]
    assert fuse_buckets(arrays, 0) == [[i] for i in range(7)]
    assert fuse_buckets(arrays, 1 << 20) == [[0, 1, 2, 3, 4, 5], [6]]


# ------------------------------------------------------------------------ training equivalence
STEPS = 3


def reference_parameters(kind: str) -> dict[str, np.ndarray]:
    """One rank, batch GLOBAL_BATCH, the base optimizer's own step."""
    opt = make_optimizer(kind)
    for k in range(STEPS):
        opt.step(global_batch(k))
    names = [p for p, _ in opt.network.gradient(opt.loss)]
    return dict(zip(names, opt.network.fetch_tensors(names)))


def run_training(tmp_path, kind, p, steps=STEPS):
    rc, out, seconds = mpirun(p, "mpi_check_training.py", kind, str(tmp_path), str(steps), timeout=120)
    assert rc == 0, out[-5000:]
    return [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(p)], seconds


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("kind,p,base", [
    ("decentralized", 2, "sgd"), ("decentralized", 3, "sgd"), ("decentralized", 4, "sgd"),
    ("decentralized_ring", 3, "momentum"),
    ("parameter_server", 2, "momentum"), ("parameter_server", 3, "momentum"), ("parameter_server", 4, "momentum"),
    ("model_average", 3, "sgd"), ("compressed_topk_all", 2, "sgd"),
])
def test_data_parallel_sgd_on_p_ranks_equals_one_rank_with_the_whole_batch(tmp_path, kind, p, base):
    ranks, _ = run_training(tmp_path, kind, p)
    expected = reference_parameters(base)
    start = make_optimizer(base)
    for name, value in expected.items():
        initial = start.network.fetch_tensor(name)
        assert not np.allclose(initial, value), f"{name} did not move: the check would be vacuous"
        for r, got in enumerate(ranks):
            np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=2e-6, err_msg=f"rank {r} {name}")
    nparams = sum(v.size for v in expected.values())
    sent = [int(got["bytes"][-1]) for got in ranks]
    if kind == "decentralized":  # one fused bucket; the native allreduce counts 2(p-1)/p of it
        assert sent == [2 * (p - 1) * nparams * 4 // p] * p, sent
    if kind == "parameter_server":  # root p-1: broadcast (p-1) n; others: gather n
        n = nparams * 4
        assert sent[:-1] == [n] * (p - 1) and sent[-1] == (p - 1) * n, sent


@pytest.mark.mpi
@requires_mpi
def test_ring_neighbors_average_with_neighbours_only(tmp_path):
    ranks, _ = run_training(tmp_path, "neighbors", 4)
    expected = reference_parameters("sgd")
    name = next(iter(expected))
    # Ranks see different neighbour sets, so replicas differ from one another and from the big batch.
    assert not np.allclose(ranks[0][name], ranks[1][name])
    assert all(np.all(np.isfinite(r[name])) for r in ranks)


@pytest.mark.mpi
@requires_mpi
def test_sign_compressed_sgd_keeps_replicas_identical_and_sends_one_bit_per_entry(tmp_path):
    p = 3
    ranks, _ = run_training(tmp_path, "compressed_sign", p)
    start = make_optimizer("sgd")
    names = [k for k in ranks[0] if k not in ("bytes", "total")]
    n = sum(ranks[0][k].size for k in names)
    for name in names:
        assert not np.allclose(ranks[0][name], start.network.fetch_tensor(name))
        for got in ranks[1:]:
            np.testing.assert_array_equal(got[name], ranks[0][name])
    # allgather of an 8-byte scale and n/8 bytes of signs: (p-1) copies of each.
    assert [int(g["bytes"][-1]) for g in ranks] == [(p - 1) * (8 + -(-n // 8))] * p


@pytest.mark.mpi
@requires_mpi
def test_elastic_averaging_pulls_replicas_toward_the_center(tmp_path):
    p, alpha = 3, 0.2
    ranks, _ = run_training(tmp_path, "elastic", p, steps=1)
    local = GLOBAL_BATCH // p
    start = make_optimizer("sgd")
    names = [n for n, _ in start.network.gradient(start.loss)]
    c0 = dict(zip(names, start.network.fetch_tensors(names)))
    stepped = []  # each rank's plain local SGD step, computed here
    for r in range(p):
        opt = make_optimizer("sgd")
        opt.step({k: v[r * local:(r + 1) * local] for k, v in global_batch(0).items()})
        stepped.append(dict(zip(names, opt.network.fetch_tensors(names))))
    for name in names:
        diffs = [x[name].astype(np.float64) - c0[name] for x in stepped]
        center = c0[name] + alpha * sum(diffs)
        for r, got in enumerate(ranks):
            np.testing.assert_allclose(got[name], stepped[r][name] - alpha * diffs[r], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got[f"center:{name}"], center, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------- compressors
RNG = np.random.default_rng(5)
V = RNG.normal(size=1003).astype(np.float32)


def test_topk_keeps_exactly_the_largest_entries():
    c = compression.TopK(0.05)
    out = c.roundtrip(V)
    k = round(0.05 * V.size)
    kept = np.flatnonzero(out)
    assert len(kept) == k and set(kept) == set(np.argsort(-np.abs(V))[:k])
    np.testing.assert_array_equal(out[kept], V[kept])
    np.testing.assert_array_equal(compression.TopK(1.0).roundtrip(V), V)


def test_sign_scales_by_the_mean_magnitude():
    out = compression.SignSGD().roundtrip(V)
    np.testing.assert_allclose(out, np.where(V >= 0, 1, -1) * np.abs(V).mean(), rtol=1e-6)
    assert sum(p.nbytes for p in compression.SignSGD().encode(V)) == 8 + 126


@pytest.mark.parametrize("compressor", [compression.QSGD(4, seed=1), compression.Ternary(seed=1)])
def test_stochastic_quantizers_are_unbiased(compressor):
    v = V[:50].astype(np.float64)
    mean = np.mean([compressor.roundtrip(v) for _ in range(4000)], axis=0)
    # The per-entry standard error is below 0.05 here; 5 standard errors.
    assert np.max(np.abs(mean - v)) < 0.25, np.max(np.abs(mean - v))
    one = compressor.roundtrip(v)
    if isinstance(compressor, compression.Ternary):
        assert set(np.unique(np.abs(one))) <= {0.0, float(np.max(np.abs(v)))}
    else:
        levels = np.abs(one) / np.linalg.norm(v) * 4
        np.testing.assert_allclose(levels, np.round(levels), atol=1e-9)


@pytest.mark.parametrize("compressor", [compression.TopK(0.01), compression.SignSGD(), compression.QSGD(2),
                                        compression.Ternary()])
def test_error_feedback_loses_nothing_only_delays(compressor):
    # Sum of what was sent + the residual left = sum of all inputs (telescoping).
    fb = compression.ErrorFeedback(compressor)
    inputs = [RNG.normal(size=300) for _ in range(20)]
    sent = sum(compressor.decode(fb.encode("g", v), v.size, v.dtype) for v in inputs)
    np.testing.assert_allclose(sent + fb.residual["g"], sum(inputs), atol=1e-9)


def test_compressors_reject_bad_settings():
    with pytest.raises(UserError, match="TopK ratio must be a number in \\(0, 1\\]. Received: ratio=0"):
        compression.TopK(0)
    with pytest.raises(UserError, match="levels must be an integer from 1 to 127. Received: levels=300"):
        compression.QSGD(300)
