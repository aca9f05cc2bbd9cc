"""Tensor (model) parallel fully connected layers (deep500lite.lv3.tensor_parallel): outputs and
every gradient equal the unsplit layer on 2, 3 and 4 real ranks (tensor_check.py), with the bytes
each pass communicates equal to the allreduce formula."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from support import mpirun, requires_mpi

from deep500lite.errors import UserError
from deep500lite.lv3.tensor_parallel import ParallelMLP, allreduce_bytes, shard_bounds

HERE = os.path.dirname(os.path.abspath(__file__))
B = 5  # the batch of tensor_check.py


def _run(p, comm, executor):
    rc, out, _ = mpirun(p, os.path.join(HERE, "tensor_check.py"), comm, executor, timeout=120)
    assert rc == 0, out[-6000:]
    line = [x for x in out.splitlines() if x.startswith("RESULT ")]
    assert len(line) == 1, out[-6000:]
    ranks = json.loads(line[0][len("RESULT "):])
    assert sorted(r["rank"] for r in ranks) == list(range(p))
    return ranks


def _check(ranks, p):
    for r in ranks:
        res = r["results"]
        for name in ("column", "row", "mlp_Tanh", "mlp_Relu"):
            assert res[name]["err"] <= 1.0, (name, r["rank"], res[name])
            # the bytes counted by the communicator are the formula's: 2 (P-1)/P * B * features * 4
            assert res[name]["bytes"] == res[name]["formula"], (name, r["rank"], res[name])
        assert res["column"]["bytes"]["backward"] == 2 * (p - 1) * B * 5 * 4 // p
        assert res["row"]["bytes"]["forward"] == 2 * (p - 1) * B * 6 * 4 // p
        assert res["row"]["bias_here"] == (r["rank"] == 0)
        # one allreduce per layer (column backward, row forward), two per Megatron MLP (forward, backward)
        assert (res["mlp_Tanh"]["allreduce_calls"], res["mlp_Relu"]["allreduce_calls"]) == (4, 6)
        assert res["mlp_Tanh"]["n_checked"] == (6 if r["rank"] == 0 else 5)
        # run_tensor_parallel on a 5-layer network: the 10 gradients (gathered) and 3 SGD losses
        assert res["network"]["err"] <= 1.0, (r["rank"], res["network"])
        assert res["network"]["n_checked"] == (11 if r["rank"] == 0 else 9), (r["rank"], res["network"])
    # the shards tile the features
    assert [tuple(r["results"]["mlp_Tanh"]["shard"]) for r in ranks] == shard_bounds(10, p)


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("p", [2, 3, 4])
def test_tensor_parallel_equals_unsplit_layer_mpi_torch(p):
    """Column, row and Megatron (Tanh and Relu) layers on the torch executor over MPI: outputs,
    input gradients and gathered weight/bias gradients equal numpy's float64 computation on the
    whole layer (|a - b| <= 1e-5 + 1e-4 |b|); uneven shards for P = 3, 4. run_tensor_parallel on
    a network equals the single-process network on the reference executor (gradients, 3 steps)."""
    _check(_run(p, "mpi", "torch"), p)


@pytest.mark.mpi
@requires_mpi
def test_tensor_parallel_torch_distributed_onnxruntime():
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    _check(_run(2, "torch", "onnxruntime"), 2)


def test_shard_bounds_and_formula():
    assert shard_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert shard_bounds(6, 3) == [(0, 2), (2, 4), (4, 6)]
    assert [b - a for a, b in shard_bounds(10, 3)] == [len(s) for s in np.array_split(np.arange(10), 3)]
    assert allreduce_bytes(400, 4) == 600 and allreduce_bytes(400, 1) == 0
    with pytest.raises(UserError, match=r"Cannot split 3 features over 4 ranks.*Received: 3 features, 4 ranks"):
        shard_bounds(3, 4)


class _OneRank:
    rank, size, bytes_sent = 0, 1, 0


def test_bad_layers_are_refused():
    w1, w2 = np.zeros((4, 3), np.float32), np.zeros((2, 5), np.float32)
    with pytest.raises(UserError, match=r"w2 must have as many input features as w1 has outputs.*Received: "):
        ParallelMLP(_OneRank(), w1, None, w2, None)
    with pytest.raises(UserError, match=r"Allowed values are 'Relu'.*Received: activation='Swish'"):
        ParallelMLP(_OneRank(), w1, None, np.zeros((2, 4), np.float32), None, activation="Swish")
    with pytest.raises(UserError, match=r"weight of shape \(out, in\).*Received: weight \(4, 3\), bias \(3,\)"):
        ParallelMLP(_OneRank(), w1, np.zeros(3), w2, None)
