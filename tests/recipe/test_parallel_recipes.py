"""Recipes whose ``distributed`` key selects spatial, pipeline or tensor parallelism: real ``run -n`` jobs.

Each job's per-step losses (on every rank) must equal those of a single-process run of the same
recipe with ``distributed=None`` (the plain trainer and the reference momentum optimizer) within
float32 round-off: rtol 1e-4, atol 1e-5 (the schemes sum partial products in another order).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from support import REPO, requires_mpi

from deep500lite.perfmodel.scaling_parallel import predict_tensor
from deep500lite.lv3.allreduce import AlphaBeta
from deep500lite.recipe import load_recipe, train_recipe
from deep500lite.recipe.parallelism import check_distributed, scheme_of

RTOL, ATOL = 1e-4, 1e-5


def _recipe(scheme: str) -> str:
    return os.path.join(REPO, "recipes", f"parallel_{scheme}.py")


def _cli(*argv: str, timeout: float = 180):
    proc = subprocess.run([sys.executable, "-m", "deep500lite", *argv], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout, start_new_session=True)
    return proc.returncode, proc.stdout + proc.stderr


def _single_process_losses(scheme: str, sets: dict) -> list[float]:
    resolved = load_recipe(_recipe(scheme)).resolve({**sets, "distributed": None, "distributed_kwargs": {},
                                                     "communicator": None})
    run = train_recipe(resolved, 0, environment=False)
    return [s["loss"] for s in run.stats.steps]


def _job(tmp_path, scheme: str, ranks: int, *sets: str):
    out = tmp_path / f"{scheme}{ranks}"
    args = [a for s in sets for a in ("--set", s)]
    rc, text = _cli("run", _recipe(scheme), "-n", str(ranks), *args, "--out", str(out), "--progress", "none",
                    "--no-baseline")
    assert rc == 0, text
    ranks_files = [json.load(open(out / f"rank{r}" / "results.json")) for r in range(ranks)]
    return json.load(open(out / "results.json")), ranks_files, text


def _check_job(agg, per_rank, expected, ranks):
    for r, res in enumerate(per_rank):
        losses = [s["loss"] for s in res["samples"]["steps"]]
        np.testing.assert_allclose(losses, expected, rtol=RTOL, atol=ATOL, err_msg=f"rank {r}")
        split = res["distributed"]["time_split"]
        assert split["step"] > 0 and split["compute"] > 0 and split["communication"] > 0, split
        assert split["compute"] + split["communication"] + split["idle"] <= split["step"] * 1.0001 + 1e-6
        # the shares of the batch sum to the batch
    assert sum(res["samples"]["steps"][0]["samples"] for res in per_rank) == 32
    d = agg["distributed"]
    assert [row["rank"] for row in d["per_rank"]] == list(range(ranks))
    assert d["aggregate"]["global_batch_size"] == 32


@pytest.mark.mpi
@requires_mpi
def test_pipeline_recipe_on_three_ranks_equals_single_process(tmp_path):
    sets = {"epochs": 1, "distributed_kwargs": {"micro_batches": 4, "schedule": "gpipe"}}
    expected = _single_process_losses("pipeline", {"epochs": 1})
    for ranks in (3,):  # (2 ranks: the spatial job; the pipeline itself: tests/lv3/test_pipeline_parallel.py)
        agg, per_rank, text = _job(tmp_path, "pipeline", ranks, "epochs=1",
                                   f"distributed_kwargs={sets['distributed_kwargs']!r}")
        _check_job(agg, per_rank, expected, ranks)
        for res in per_rank:
            d = res["distributed"]
            assert d["scheme"] == "pipeline" and d["micro_batches"] == 4 and d["schedule"] == "gpipe"
            assert d["bubble_model"] == pytest.approx((ranks - 1) / (4 + ranks - 1))
            assert d["bubble"] == pytest.approx(d["time_split"]["idle"] / d["time_split"]["step"])
        assert "bubble" in text and f"model (P-1)/(M+P-1) = {(ranks - 1) / (ranks + 3):.3f}" in text, text


@pytest.mark.mpi
@requires_mpi
def test_tensor_recipe_over_torch_distributed_equals_single_process(tmp_path):
    expected = _single_process_losses("tensor", {"epochs": 1})
    agg, per_rank, _ = _job(tmp_path, "tensor", 3, "epochs=1", "communicator='torch'")
    _check_job(agg, per_rank, expected, 3)
    assert "TorchDistributed" in agg["distributed"]["communicator"]
    assert all(res["distributed"]["time_split"]["allreduce"] > 0 for res in per_rank)
    # the scaling model's bytes: the (144 -> 32 -> 32) pair's output and input-gradient allreduces
    predicted = predict_tensor(1.0, 0.0, 3, 32, [(144, 32)], AlphaBeta(0.0, 0.0)).bytes_per_rank
    assert {s["bytes_sent"] for res in per_rank for s in res["samples"]["steps"]} == {predicted}
    # the same replicated evaluation on every rank
    assert len({res["summaries"]["final_test_accuracy"] for res in per_rank}) == 1


@pytest.mark.mpi
@requires_mpi
def test_spatial_recipe_on_two_ranks_equals_single_process(tmp_path):
    expected = _single_process_losses("spatial", {"epochs": 1})
    agg, per_rank, _ = _job(tmp_path, "spatial", 2, "epochs=1")
    _check_job(agg, per_rank, expected, 2)
    assert all(res["distributed"]["time_split"]["halo"] > 0 for res in per_rank)


@pytest.mark.mpi
@requires_mpi
def test_hybrid_recipe_two_groups_of_two_ranks_equals_single_process(tmp_path):
    expected = _single_process_losses("spatial", {"epochs": 1})
    agg, per_rank, _ = _job(tmp_path, "spatial", 4, "epochs=1", "distributed='hybrid'",
                            "distributed_kwargs={'spatial_ranks': 2}")
    _check_job(agg, per_rank, expected, 4)
    assert [res["distributed"]["group"] for res in per_rank] == [0, 0, 1, 1]
    assert all(res["distributed"]["time_split"]["halo"] > 0 for res in per_rank)


def test_microbatches_key_equals_the_whole_batch_and_is_refused_with_a_model_parallel_scheme():
    one = _single_process_losses("tensor", {"epochs": 1, "microbatches": 1})
    resolved = load_recipe(_recipe("tensor")).resolve({"epochs": 1, "microbatches": 4, "distributed": None,
                                                      "distributed_kwargs": {}, "communicator": None})
    run = train_recipe(resolved, 0, environment=False)
    assert run.results["components"]["optimizer"].endswith("MicrobatchOptimizer")
    np.testing.assert_allclose([s["loss"] for s in run.stats.steps], one, rtol=RTOL, atol=ATOL)
    with pytest.raises(ValueError, match="'microbatches' applies to single-process and data-parallel runs; the "
                                         "'tensor' scheme"):
        check_distributed({"microbatches": 2, "distributed": "tensor", "distributed_kwargs": {}})
    with pytest.raises(ValueError, match="'microbatches' must be an integer >= 1"):
        load_recipe(_recipe("tensor")).resolve({"microbatches": 0})


@pytest.mark.mpi
@requires_mpi
def test_microbatches_key_under_data_parallelism_equals_the_plain_job(tmp_path):
    """run -n 2 with distributed=data: microbatches=4 accumulates, then one allreduce per step."""
    jobs = {}
    for n in (1, 4):
        out = tmp_path / f"data{n}"
        rc, text = _cli("run", _recipe("tensor"), "-n", "2", "--set", "distributed='data'", "--set",
                        f"microbatches={n}", "--set", "epochs=1", "--out", str(out), "--progress", "none",
                        "--no-baseline")
        assert rc == 0, text
        jobs[n] = [json.load(open(out / f"rank{r}" / "results.json")) for r in range(2)]
    for r in range(2):
        plain, micro = jobs[1][r], jobs[4][r]
        np.testing.assert_allclose([s["loss"] for s in micro["samples"]["steps"]],
                                   [s["loss"] for s in plain["samples"]["steps"]], rtol=1e-5, atol=1e-6)
        sent = [s["bytes_sent"] for s in micro["samples"]["steps"]]
        assert sent == [s["bytes_sent"] for s in plain["samples"]["steps"]] and min(sent) > 0
        assert micro["summaries"]["final_test_accuracy"] == plain["summaries"]["final_test_accuracy"]
        assert micro["components"]["global_batch_size"] == 64


def test_bad_distributed_value_is_one_line_naming_the_schemes():
    rc, text = _cli("run", _recipe("pipeline"), "-n", "2", "--set", "distributed='sptial'")
    lines = [line for line in text.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1, text
    assert "'data', 'spatial', 'pipeline', 'tensor', 'hybrid'" in lines[0] and "Received: 'sptial'" in lines[0]


def test_scheme_options_and_hybrid_are_checked():
    assert scheme_of({"distributed": "pipeline"}) == "pipeline"
    assert scheme_of({"distributed": "data"}) is None and scheme_of({"distributed": None}) is None
    with pytest.raises(ValueError, match="take 'micro_batches', 'schedule', 'cuts', 'balance'. Received: 'grid'"):
        check_distributed({"distributed": "pipeline", "distributed_kwargs": {"grid": (2, 1)}})
    with pytest.raises(ValueError, match="'hybrid' scheme needs distributed_kwargs.spatial_ranks"):
        check_distributed({"distributed": "hybrid"})
    with pytest.raises(ValueError, match="runs with communicator='mpi'"):
        check_distributed({"distributed": "hybrid", "distributed_kwargs": {"spatial_ranks": 2},
                           "communicator": "torch"})
