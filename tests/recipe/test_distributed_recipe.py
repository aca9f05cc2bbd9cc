"""``deep500lite run RECIPE -n N``: real mpiexec jobs of a distributed recipe, aggregated results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from support import REPO, requires_mpi

RECIPE = os.path.join(REPO, "recipes", "digits_mlp_distributed.py")
HERE = os.path.dirname(os.path.abspath(__file__))


def cli(*argv: str, timeout: float = 240):
    """``deep500lite ARGV`` in a child process: (exit status, output, seconds)."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "deep500lite", *argv], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout, start_new_session=True)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start


def _rank_step_times(rank_files):
    """Every rank's results and its raw step times after the warm-up steps."""
    runs = [json.load(open(f)) for f in rank_files]
    warm = runs[0]["summaries"]["warmup_steps"]
    return runs, [[s["step_time"] for s in r["samples"]["steps"][warm:]] for r in runs]


@pytest.mark.mpi
@requires_mpi
def test_run_on_three_ranks_aggregates_per_rank_results_and_scaling(tmp_path):
    out = tmp_path / "job"
    rc, text, _ = cli("run", RECIPE, "-n", "3", "--set", "epochs=1", "--set", "executor=reference",
                      "--set", "optimizer_kwargs={'learning_rate': 0.1, 'momentum': 0.9}", "--out", str(out),
                      "--progress", "none")
    assert rc in (0, 1), text
    assert "scaling efficiency" in text and "communication" in text, text
    # more ranks than cores: the run says the step is not that of ranks with a core each
    cores = len(os.sched_getaffinity(0))
    assert (f"note: 3 ranks share {cores} core" in text) == (3 > cores), text
    agg = json.load(open(out / "results.json"))
    d = agg["distributed"]
    assert [row["rank"] for row in d["per_rank"]] == [0, 1, 2]
    files = [out / f"rank{r}" / "results.json" for r in range(3)]
    runs, times = _rank_step_times(files)
    # Every rank: 1347 training digits in 3 shards of 449 -> 14 batches of 32.
    assert all(r["summaries"]["steps_done"] == 14 for r in runs)
    # Consistent SGD: identical replicas, so identical test accuracy on every rank.
    accs = {row["final_test_accuracy"] for row in d["per_rank"]}
    assert len(accs) == 1, d["per_rank"]
    # Bytes: one fused native allreduce of every float32 gradient per step, counted 2(p-1)/p n per rank.
    n = runs[0]["components"]["parameters"] * 4
    for r in runs:
        assert {s["bytes_sent"] for s in r["samples"]["steps"]} == {2 * 2 * n // 3}
        for s in r["samples"]["steps"]:
            assert 0 <= s["communication_time"] <= s["step_time"]
            assert s["compute_time"] == pytest.approx(s["step_time"] - s["communication_time"])
    assert d["aggregate"]["bytes_per_step"]["median"] == 3 * (2 * 2 * n // 3)
    # The job's step: the slowest rank's median step (not the median of the per-step maxima,
    # kept beside it), from the raw samples of the rank files.
    medians = [float(np.median(t)) for t in times]
    assert d["aggregate"]["slowest_rank"] == int(np.argmax(medians))
    assert d["aggregate"]["step_time"]["median"] == pytest.approx(max(medians))
    per_step_max = [max(t[i] for t in times) for i in range(min(map(len, times)))]
    assert d["aggregate"]["step_time_per_step_max"]["median"] == pytest.approx(float(np.median(per_step_max)))
    assert d["aggregate"]["step_time_per_step_max"]["median"] >= d["aggregate"]["step_time"]["median"]
    assert f"slowest rank's step (rank {int(np.argmax(medians))})" in text, text
    assert d["aggregate"]["global_batch_size"] == 96
    # The baseline: 1 rank, the same 14 steps, batch 32.
    base = json.load(open(out / "baseline" / "results.json"))
    assert base["distributed"]["ranks"] == 1 and base["summaries"]["steps_done"] == 14
    b_med = base["summaries"]["step_time"]["median"]
    speedup = (96 / d["aggregate"]["step_time"]["median"]) / (32 / b_med)
    assert d["speedup"] == pytest.approx(speedup)
    assert d["scaling_efficiency"] == pytest.approx(speedup / 3)
    # The verdict covers every rank.
    assert agg["verdicts"][0]["per_rank"] == [row["final_test_accuracy"] for row in d["per_rank"]]
    assert agg["passed"] == all(row["passed"] for row in d["per_rank"]) == (rc == 0)


@pytest.mark.mpi
@requires_mpi
def test_a_failing_rank_ends_the_run_with_its_error(tmp_path):
    rc, text, seconds = cli("run", os.path.join(HERE, "recipe_failing_rank.py"), "-n", "2", "--out",
                            str(tmp_path / "f"), "--no-baseline", timeout=120)
    assert rc == 2, text
    last = text.strip().splitlines()[-1]
    assert "The 2-rank job failed: rank 1 of 2 failed after MPI initialisation: RuntimeError: rank 1 fails on " \
           "purpose, so the whole job was ended" in last, text
    assert text.count('raise RuntimeError("rank 1 fails on purpose")') == 1, text  # its traceback, once
    assert seconds < 60, seconds


def test_ranks_need_a_distributed_recipe():
    rc, text, _ = cli("run", "digits_lenet", "-n", "2", timeout=60)
    assert rc == 2 and text.count("\n") == 1, text
    assert "-n 2 needs a recipe with a 'distributed' component" in text and "digits_lenet has none" in text, text


def test_ranks_refuse_options_of_single_runs():
    rc, text, _ = cli("run", RECIPE, "-n", "2", "--check-determinism", timeout=60)
    assert rc == 2 and "--check-determinism is not available with -n" in text, text
    rc, text, _ = cli("run", RECIPE, "-n", "0", timeout=60)
    assert rc == 2 and "-n/--ranks: must be a positive integer" in text and "Received: '0'" in text, text


def test_unknown_distributed_optimizer_and_communicator_are_named():
    rc, text, _ = cli("run", RECIPE, "--set", "distributed=Gossip", timeout=60)
    assert rc == 2 and "Unknown distributed optimizer 'Gossip'" in text and "ConsistentDecentralized" in text, text
    rc, text, _ = cli("run", RECIPE, "--set", "communicator=nccl2", timeout=60)
    assert rc == 2 and "Unknown communicator 'nccl2'" in text and "'mpi'" in text, text


@requires_mpi
def test_a_distributed_recipe_runs_in_process_on_one_rank(tmp_path):
    rc, text, _ = cli("run", RECIPE, "--set", "epochs=1", "--set", "executor=reference", "--out",
                      str(tmp_path / "one"), "--progress", "none", timeout=120)
    res = json.load(open(tmp_path / "one" / "results.json"))
    assert res["distributed"]["ranks"] == 1 and res["distributed"]["bytes_sent"] == 0
    assert res["summaries"]["steps_done"] == 1347 // 32
    assert rc in (0, 1), text


@pytest.mark.mpi
@requires_mpi
def test_run_with_the_torch_communicator_matches_the_mpi_one(tmp_path):
    pytest.importorskip("torch")
    accs, sent = {}, {}
    for comm in ("mpi", "torch"):
        out = tmp_path / comm
        rc, text, _ = cli("run", RECIPE, "-n", "2", "--set", "epochs=1", "--set", "executor=reference",
                          "--set", f"communicator={comm}", "--no-baseline", "--out", str(out), "--progress", "none")
        assert rc in (0, 1), text
        agg = json.load(open(out / "results.json"))
        assert agg["distributed"]["communicator"].endswith({"mpi": "MPICommunicator",
                                                            "torch": "TorchDistributedCommunicator"}[comm])
        assert agg["distributed"]["baseline"] is None and agg["distributed"]["scaling_efficiency"] is None
        accs[comm] = [row["final_test_accuracy"] for row in agg["distributed"]["per_rank"]]
        sent[comm] = agg["distributed"]["aggregate"]["bytes_sent"]
    # Same data, same seed, same mean gradients: the same replicas whichever library moves the bytes.
    assert accs["mpi"] == accs["torch"] and len(set(accs["mpi"])) == 1
    assert sent["mpi"] == sent["torch"]


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("optimizer", ["InconsistentParameterServer", "StaleSynchronous"])
def test_asynchronous_optimizers_run_as_recipes_and_record_staleness(tmp_path, optimizer):
    out = tmp_path / optimizer
    rc, text, _ = cli("run", RECIPE, "-n", "2", "--set", "epochs=1", "--set", "executor=reference",
                      "--set", f"distributed={optimizer}", "--set", "distributed_kwargs={}", "--no-baseline",
                      "--out", str(out), "--progress", "none")
    assert rc in (0, 1), text
    ranks = [json.load(open(out / f"rank{r}" / "results.json"))["distributed"] for r in range(2)]
    assert all(d["optimizer"].endswith(optimizer) for d in ranks)
    if optimizer == "InconsistentParameterServer":
        # Root (rank 0) serves one request per step; with 2 ranks each is one update old.
        assert ranks[0]["staleness"] == [1] * 21 and ranks[1]["staleness"] == []
    else:
        bound = ranks[0]["staleness_bound"]
        assert bound == 1 and all(0 <= s <= bound for d in ranks for s in d["staleness"])
        # Peer gradients applied during the 21 steps (those still in flight at the end are applied
        # by finalize() and not recorded): with bound 1, at least those of steps 0..19.
        assert all(21 - bound <= len(d["staleness"]) <= 21 for d in ranks), [len(d["staleness"]) for d in ranks]


def _aggregated(scheme):
    """A minimal aggregated results dict of a 2-rank job with a 1-rank baseline (what describe reads)."""
    summary = {"median": 0.01, "ci_low": 0.009, "ci_high": 0.011}
    row = {"step_time": 0.01, "compute_time": 0.008, "communication_time": 0.002, "bytes_per_step": 100.0,
           "final_test_accuracy": 90.0, "passed": True}
    d = {"per_rank": [dict(row, rank=0), dict(row, rank=1)], "optimizer": "x.ConsistentDecentralized",
         "communicator": "x.MPICommunicator",
         "aggregate": {"step_time": summary, "communication_fraction": 0.2, "bytes_per_step": {"median": 200.0},
                       "global_batch_size": 32, "samples_per_second": 3200.0},
         "baseline": {"step_time": summary, "batch_size": 32, "samples_per_second": 3200.0},
         "speedup": 1.0, "scaling_efficiency": 0.5, "rank_files": None}
    if scheme is not None:
        d["scheme"] = scheme
    return {"distributed": d, "verdicts": [], "error": None, "samples": {"steps": []}}


@pytest.mark.parametrize("scheme,label", [
    (None, "(weak scaling: batch per rank fixed)"),
    ("data", "(weak scaling: batch per rank fixed)"),
    ("pipeline", "(strong scaling: the pipeline ranks split one global batch)"),
    ("spatial", "(strong scaling: the spatial ranks split one global batch)"),
    ("tensor", "(strong scaling: the tensor ranks split one global batch)"),
    ("hybrid", "(strong scaling: the hybrid ranks split one global batch)"),
])
def test_the_baseline_line_names_the_scaling_of_the_recorded_scheme(scheme, label):
    from deep500lite.recipe.distributed import describe
    from deep500lite.recipe.parallelism import describe_lines

    results = _aggregated(scheme)
    lines = [line for line in describe(results) if line.startswith("1-rank baseline:")]
    assert len(lines) == 1 and lines[0].endswith(label), lines
    assert ("weak" in lines[0]) != ("strong" in lines[0])
    # the model-parallel lines no longer add a second, corrective scaling line
    assert not any("scaling" in line for line in describe_lines(results, "results.json"))
