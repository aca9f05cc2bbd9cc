"""Distributed samplers and optimizers; synchronous data-parallel SGD checked against one rank,
the asynchronous optimizers against their sequential order and their bounds.

The MPI tests share three jobs (2, 3 and 4 ranks): each runs ``mpi_check_training.py`` with
every kind of its list in turn, with ``mpirun`` from tests/support.py (own process group, timeout).
The single-rank references are computed here, in the test process, with the base optimizer
alone (no deep500lite.lv3 code).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from deep500lite import NumpyDataset
from deep500lite.errors import UserError
from deep500lite.lv3 import DistributedSampler, PartitionedDistributedSampler, compression
from deep500lite.lv3.optimizer import fuse_buckets
from support import mpirun, requires_mpi
from training_setup import BUCKET_BYTES, GLOBAL_BATCH, base_kind, global_batch, make_optimizer, one_rank_parameters

HERE = os.path.dirname(os.path.abspath(__file__))


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
    return one_rank_parameters(kind, STEPS)


def run_jobs(tmp_path, kinds, p, steps=STEPS) -> dict[str, list[dict]]:
    """One mpiexec job running each of ``kinds`` in turn; per kind, every rank's saved arrays."""
    rc, out, _ = mpirun(p, os.path.join(HERE, "mpi_check_training.py"), ",".join(kinds), str(tmp_path), str(steps),
                        timeout=150)
    assert rc == 0, out[-5000:]
    names = [kind.split(":")[0] for kind in kinds]
    return {kind: [dict(np.load(tmp_path / f"{kind}-rank{r}.npz")) for r in range(p)] for kind in names}


# Three jobs (2, 3 and 4 ranks) run every kind in turn (starting a job costs more than the
# training); "elastic:1" takes one step.
JOBS = {2: ["decentralized", "parameter_server", "compressed_topk_all", "async_ps", "async_ps_serving",
            "async_ps_topk_all", "ssp0",
            "ps_topk_all", "ps_sign", "bucketed_topk_all", "bucketed_sign", "decentralized_torch",
            "bucketed_topk_all_torch", "bad_input"],
        3: ["decentralized", "decentralized_ring", "parameter_server", "model_average", "compressed_sign",
            "elastic:1", "async_ps_sgd", "ssp0", "ssp2", "ps_topk_all"],
        4: ["decentralized", "parameter_server", "neighbors"]}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """``jobs(p)[kind]``: every rank's saved arrays (each job runs once per test session)."""
    cache = {}

    def get(p):
        if p not in cache:
            cache[p] = run_jobs(tmp_path_factory.mktemp(f"p{p}"), JOBS[p], p)
        return cache[p]
    return get


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("kind,p,base", [
    ("decentralized", 2, "sgd"), ("decentralized", 3, "sgd"), ("decentralized", 4, "sgd"),
    ("decentralized_ring", 3, "momentum"),
    ("parameter_server", 2, "momentum"), ("parameter_server", 3, "momentum"), ("parameter_server", 4, "momentum"),
    ("model_average", 3, "sgd"), ("compressed_topk_all", 2, "sgd"),
    # torch's own momentum optimizer (not a ThreeStepOptimizer): the exchange runs in its gradient_modifier
    ("decentralized_torch", 2, "torch_momentum"), ("bucketed_topk_all_torch", 2, "torch_momentum"),
])
def test_data_parallel_sgd_on_p_ranks_equals_one_rank_with_the_whole_batch(jobs, kind, p, base):
    ranks = jobs(p)[kind]
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
def test_ring_neighbors_average_with_neighbours_only(jobs):
    ranks = jobs(4)["neighbors"]
    expected = reference_parameters("sgd")
    name = next(iter(expected))
    # Ranks see different neighbour sets, so replicas differ from one another and from the big batch.
    assert not np.allclose(ranks[0][name], ranks[1][name])
    assert all(np.all(np.isfinite(r[name])) for r in ranks)


@pytest.mark.mpi
@requires_mpi
def test_sign_compressed_sgd_keeps_replicas_identical_and_sends_one_bit_per_entry(jobs):
    p = 3
    ranks = jobs(p)["compressed_sign"]
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
def test_elastic_averaging_pulls_replicas_toward_the_center(jobs):
    p, alpha = 3, 0.2
    ranks = jobs(p)["elastic"]
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


# ------------------------------------ asynchronous optimizers, compressed parameter server, buckets
def _names(saved):
    return [k for k in saved if ":" not in k and k not in ("bytes", "total", "staleness", "served_ranks",
                                                           "observed_staleness", "updates", "errors")]


def _nfloats(saved):
    return sum(saved[k].size for k in _names(saved))


def _initial():
    start = make_optimizer("sgd")
    names = [n for n, _ in start.network.gradient(start.loss)]
    return dict(zip(names, start.network.fetch_tensors(names)))


def _assert_moved(saved):
    for name, value in _initial().items():
        assert not np.allclose(saved[name], value), f"{name} did not move: the check would be vacuous"


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("p,kind", [(2, "ssp0"), (3, "ssp0"), (2, "ps_topk_all"), (3, "ps_topk_all"),
                                    (2, "bucketed_topk_all")])
def test_ssp0_compressed_ps_and_bucketed_topk_all_equal_one_rank(jobs, p, kind):
    """Stale-synchronous with staleness 0 is synchronous SGD; top-k keeping everything is no compression."""
    ranks = jobs(p)[kind]
    expected = reference_parameters(base_kind(kind))
    _assert_moved(ranks[0])
    for name, value in expected.items():
        for r, got in enumerate(ranks):
            np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=2e-6, err_msg=f"rank {r} {name}")
    n = 4 * _nfloats(ranks[0])
    if kind == "ssp0":  # every rank isends its gradient to every other rank each step
        assert [int(g["total"]) for g in ranks] == [STEPS * (p - 1) * n] * p
        assert all(g["observed_staleness"].tolist() == [0] * (STEPS * (p - 1)) for g in ranks)
        for got in ranks[1:]:  # the same sums in the same (rank) order: bitwise equal replicas
            for name in expected:
                np.testing.assert_array_equal(got[name], ranks[0][name])
    if kind == "ps_topk_all":  # workers: int32 indices + float32 values of all n entries; root p-1: broadcast
        assert [int(g["bytes"][-1]) for g in ranks] == [2 * n] * (p - 1) + [(p - 1) * n]


def _one_rank_momentum():
    """The momentum optimizer the checks use, on one rank: its parameter names, their initial
    values, ``gradient_at(params, batch)`` and ``update(params, grads)`` (one base update)."""
    opt = make_optimizer("momentum")
    net, ex = opt.network, opt.executor
    names = [n for n, _ in net.gradient(opt.loss)]
    grads = [g for _, g in net.gradient(opt.loss)]

    def gradient_at(params, batch):
        for name, value in zip(names, params):
            net.feed_tensor(name, value)
        ex.inference_and_backprop(batch, opt.loss)
        return net.fetch_tensors(grads)

    def update(params, g):
        return [np.asarray(opt.update_rule(gi, xi, name), dtype=xi.dtype) for gi, xi, name in zip(g, params, names)]

    return names, net.fetch_tensors(names), gradient_at, update


@pytest.mark.mpi
@requires_mpi
def test_async_parameter_server_on_two_ranks_follows_the_sequential_order(jobs):
    """Root (rank 1) applies its own gradient, then the worker's, taken one update earlier."""
    ranks = jobs(2)["async_ps"]
    names, x, gradient_at, update = _one_rank_momentum()
    local = GLOBAL_BATCH // 2
    worker = x
    for k in range(STEPS):
        batch = global_batch(k)
        x = update(x, gradient_at(x, {n: v[local:] for n, v in batch.items()}))          # root's own
        x = update(x, gradient_at(worker, {n: v[:local] for n, v in batch.items()}))     # the worker's
        worker = x
    root = ranks[1]
    assert root["staleness"].tolist() == [1] * STEPS and int(root["updates"]) == 2 * STEPS
    _assert_moved(root)
    for name, value in zip(names, x):
        np.testing.assert_allclose(root[f"before:{name}"], value, rtol=1e-4, atol=2e-6, err_msg=name)
        np.testing.assert_array_equal(ranks[0][name], root[name])  # after finalize
    n = 4 * _nfloats(root)  # per step: the worker sends its gradient, the root the parameters
    assert [g["bytes"].tolist() for g in ranks] == [[n] * STEPS] * 2
    # The worker's gradient compressed with top-k keeping everything: the same steps; it sends
    # int32 indices and float32 values.
    topk = jobs(2)["async_ps_topk_all"]
    for name, value in zip(names, x):
        np.testing.assert_allclose(topk[1][name], value, rtol=1e-4, atol=2e-6, err_msg=name)
    assert [g["bytes"].tolist() for g in topk] == [[2 * n] * STEPS, [n] * STEPS]


@pytest.mark.mpi
@requires_mpi
def test_deep500s_async_parameter_server_root_only_serves(jobs):
    """d5ref's default (Deep500's scheme): root (rank 1) applies only the worker's gradients, which on
    two ranks are never stale, so the run is sequential training on the worker's half-batches."""
    ranks = jobs(2)["async_ps_serving"]
    names, x, gradient_at, update = _one_rank_momentum()
    local = GLOBAL_BATCH // 2
    for k in range(STEPS):
        x = update(x, gradient_at(x, {n: v[:local] for n, v in global_batch(k).items()}))
    root = ranks[1]
    assert root["staleness"].tolist() == [0] * STEPS and int(root["updates"]) == STEPS
    _assert_moved(root)
    for name, value in zip(names, x):
        np.testing.assert_allclose(root[name], value, rtol=1e-4, atol=2e-6, err_msg=name)
        np.testing.assert_array_equal(ranks[0][name], root[name])  # after finalize


def test_root_trains_takes_a_boolean():
    import deep500lite.frameworks.reference as d5ref

    base = make_optimizer("sgd")
    with pytest.raises(UserError, match="root_trains must be True or False. Received: root_trains='no'"):
        d5ref.InconsistentParameterServer(base, None, root_trains="no")


@pytest.mark.mpi
@requires_mpi
def test_async_parameter_server_on_three_ranks(jobs):
    ranks = jobs(3)["async_ps_sgd"]  # plain SGD: momentum 0.9 with stale gradients overshoots here
    root, p = ranks[2], 3
    assert int(root["updates"]) == p * STEPS  # its own + every worker gradient, each once
    staleness = root["staleness"].tolist()
    # 0 when a worker is served twice in one root step; a first request waits for root's own update.
    assert len(staleness) == (p - 1) * STEPS and all(0 <= s < p * STEPS for s in staleness), staleness
    served = root["served_ranks"].tolist()
    assert sorted(served) == [0] * STEPS + [1] * STEPS, served
    assert all(staleness[served.index(w)] >= 1 for w in (0, 1)), (served, staleness)
    assert all(g["staleness"].size == 0 for g in ranks[:2])
    _assert_moved(root)
    for name in _names(root):
        np.testing.assert_array_equal(root[name], root[f"before:{name}"])
        for got in ranks[:2]:
            np.testing.assert_array_equal(got[name], root[name])
    # The loss on the batches seen went down.
    opt = make_optimizer("sgd")

    def loss(params):
        for name, value in params.items():
            opt.network.feed_tensor(name, value)
        return sum(float(opt.executor.inference(global_batch(k))["loss"]) for k in range(STEPS))

    before = loss(_initial())
    after = loss({name: root[name] for name in _names(root)})
    assert after < before, (before, after)


@pytest.mark.mpi
@requires_mpi
def test_stale_synchronous_keeps_the_bound_and_finalize_makes_replicas_agree(jobs):
    ranks = jobs(3)["ssp2"]  # rank 0 sleeps 0.3 s per step: ranks 1 and 2 run up to 2 steps ahead
    p, s = 3, 2
    seen = [g["observed_staleness"].tolist() for g in ranks]
    assert all(0 <= x <= s for obs in seen for x in obs), seen
    assert max(max(obs) for obs in seen) == s, seen  # the fast ranks did run ahead, up to the bound
    _assert_moved(ranks[0])
    for name in _names(ranks[0]):  # every rank applied every gradient once (plain SGD)
        for got in ranks[1:]:
            np.testing.assert_allclose(got[name], ranks[0][name], rtol=1e-5, atol=1e-6)
    assert [int(g["total"]) for g in ranks] == [STEPS * (p - 1) * 4 * _nfloats(ranks[0])] * p


@pytest.mark.mpi
@requires_mpi
def test_compressed_ps_and_bucketed_sign_send_the_compressed_bytes(jobs):
    p = 2
    ps, bucketed = jobs(p)["ps_sign"], jobs(p)["bucketed_sign"]
    names = _names(ps[0])
    n = _nfloats(ps[0])
    for ranks in (ps, bucketed):
        _assert_moved(ranks[0])
        for name in names:
            np.testing.assert_array_equal(ranks[1][name], ranks[0][name])
    # Parameter server, root 0: the worker sends an 8-byte scale and n/8 bytes of signs.
    assert [int(g["bytes"][-1]) for g in ps] == [(p - 1) * 4 * n, 8 + -(-n // 8)]
    # Per bucket: its own scale and signs, all-gathered.
    shapes = [ps[0][k] for k in names]
    buckets = fuse_buckets(shapes, BUCKET_BYTES)
    assert buckets == [[0], [1, 2, 3]], buckets  # fc1.weight alone; fc1.bias, fc2.weight, fc2.bias fused
    sizes = [sum(shapes[i].size for i in b) for b in buckets]
    assert [int(g["bytes"][-1]) for g in bucketed] == [(p - 1) * sum(8 + -(-m // 8) for m in sizes)] * p


@pytest.mark.mpi
@requires_mpi
def test_new_optimizers_reject_bad_arguments(jobs):
    errors = str(jobs(2)["bad_input"][0]["errors"])
    for expected in ("staleness must be an integer >= 0 (0: synchronous). Received: staleness=-1",
                     "root must be a rank from 0 to 1. Received: root=2",
                     "tag must be an integer from 0 to 32766 (it uses tag and tag + 1). Received: tag=32767",
                     "compressor must be None or a deep500lite Compressor",
                     "bucket_bytes must be an integer >= 0 (0: no fusion). Received: bucket_bytes=-5"):
        assert expected in errors, errors


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


def test_a_base_optimizer_that_ignores_gradient_modifier_is_refused():
    """The decentralized optimizers exchange through the base's gradient_modifier when the base is
    not a ThreeStepOptimizer; a base that never calls it would skip the exchange silently."""
    pytest.importorskip("torch")
    from deep500lite.lv2.optimizer import Optimizer
    from deep500lite.lv3 import ConsistentDecentralized, TorchDistributedCommunicator

    class BackpropOnly(Optimizer):
        def step(self, inputs):
            return self.executor.inference_and_backprop(inputs, self.loss)

    comm = TorchDistributedCommunicator()  # one process: size 1, no process group
    opt = ConsistentDecentralized(BackpropOnly(make_optimizer("sgd").executor), comm)
    with pytest.raises(UserError, match="gradient_modifier, which BackpropOnly.step never called"):
        opt.step(global_batch(0))
