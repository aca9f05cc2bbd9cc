"""Gradient accumulation under data parallelism: ``d5.transforms.microbatch`` inside a Level 3
distributed optimizer, in real mpiexec jobs (MPI on 2, 3 and 4 ranks; torch.distributed on 2).

Each rank trains three steps on its 10 samples with and without 4 micro-batches (3, 3, 3, 1
samples). Done when: the per-step losses and final parameters of the two runs are equal within
float32 round-off (losses within 1e-5 absolute, about 5e-6 of their value; parameters within
1e-6 absolute, their values being up to 0.43), the micro-batched run equals one process trained
on the global batch (parameters within 1e-6), and every step sends the same bytes as without
micro-batching (one exchange per step, not one per micro-batch).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from support import mpirun, requires_mpi

from deep500lite import networks

SCRIPT = Path(__file__).with_name("microbatch_dp_check.py")
LOSS_ATOL, PARAM_ATOL = 1e-5, 1e-6


def _run(p: int, comm: str, executor: str) -> dict:
    rc, out, _ = mpirun(p, SCRIPT, comm, executor, timeout=120)
    assert rc == 0, out[-4000:]
    line = next(line for line in out.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def _gradient_bytes() -> int:
    net, _, _ = networks.create_model("mlp", None, classes=10, shape=(1, 8, 8), seed=3, hidden=(16,))
    values = net.host_values()
    return int(sum(np.asarray(values[name]).nbytes for name in net.parameters))


def _check(result: dict, p: int, configs: set) -> None:
    assert result["ranks"] == p and set(result["configs"]) == configs
    for name, row in result["configs"].items():
        assert row["sizes"] == [3, 3, 3, 1], name
        assert len(row["per_rank"]) == p
        for rank, (loss_abs, param_abs) in enumerate(row["per_rank"]):
            assert loss_abs <= LOSS_ATOL and param_abs <= PARAM_ATOL, (name, rank, row)
        assert row["single_abs"] <= PARAM_ATOL and row["single_plain_abs"] <= PARAM_ATOL, (name, row)
        # one exchange per step: the micro-batched steps send exactly what the plain ones send
        assert row["bytes_micro"] == row["bytes_plain"] and min(row["bytes_plain"]) > 0, (name, row)
        if p == 2:  # each rank sends its whole float32 gradient once (allreduce or gather to the root)
            assert set(row["bytes_micro"]) == {_gradient_bytes()}, (name, row)


BASE = {"decentralized/momentum", "decentralized/sgd", "parameter_server/momentum"}


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("p,executor", [(2, "torch"), (3, "reference"), (4, "onnxruntime")])
def test_microbatched_data_parallel_equals_plain_mpi(p, executor):
    """MPI; reference optimizers on the given executor (and torch's native momentum on torch)."""
    configs = BASE | ({"decentralized/torch_momentum"} if executor == "torch" else set())
    _check(_run(p, "mpi", executor), p, configs)


@pytest.mark.mpi
@requires_mpi
def test_microbatched_data_parallel_equals_plain_torch_distributed():
    pytest.importorskip("torch")
    _check(_run(2, "torch", "reference"), 2, BASE)
