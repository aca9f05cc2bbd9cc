"""``deep500lite bench distributed``: the ddp row runs a real 2-rank job (deep500lite's data-parallel step and
torch DistributedDataParallel over gloo), checks their first-step gradients and prints its table and JSON.

No timing assertions: the ratio's verdict is whatever the machine gives; what must hold is the
structure (both sides timed pair by pair), the gradient check, and that the buckets started during
the backward pass.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from deep500lite.bench.distributed import ROWS, DistributedResult, DistributedRow, register_row
from deep500lite.errors import UserError
from deep500lite.metrics.timing import Measurement, PairedMeasurement
from support import requires_mpi, run_cli

#: LeNet's parameters (frameworks/torch/models.py): two convolutions and three linear layers, weight and bias each.
LENET_PARAMETERS = 10


def _run(tmp_path, *extra):
    out = tmp_path / "distributed.json"
    proc = run_cli("bench", "distributed", "--max-time", "1", "--min-pairs", "4", "--warmup", "1",
                   "--batch-size", "16", "--json", out, *extra, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    data = json.loads(out.read_text())
    (result,) = data["results"]
    return proc, result


@pytest.mark.mpi
@requires_mpi
def test_ddp_row_over_mpi_with_default_buckets(tmp_path):
    proc, r = _run(tmp_path)
    header = next(line for line in proc.stdout.splitlines() if line.startswith("row"))
    for col in ("deep500lite [95% CI]", "native [95% CI]", "ratio [95% CI]", "target", "verdict"):
        assert col in header
    assert r["row"] == "ddp" and r["ranks"] == 2 and r["target"] == 1.10
    assert r["checked"] is True and "gradients equal on every rank" in r["check"], r["check"]
    assert r["verdict"] in ("meets", "likely", "misses")
    pairs = len(r["ratios"])
    assert pairs >= 4 and len(r["deep500lite"]["raw"]) == len(r["native"]["raw"]) == pairs
    assert all(t > 0 for t in r["deep500lite"]["raw"] + r["native"]["raw"])
    extra = r["extra"]
    # LeNet's 0.25 MB of gradients fit one 25 MiB bucket, started from the torch executor's gradient hook.
    assert extra["buckets"] == 1 and extra["overlapped_buckets"] == 1
    assert extra["config"]["communicator"] == "mpi" and extra["config"]["batch_size"] == 16
    d5_loss, native_loss = extra["losses"]
    assert abs(d5_loss - native_loss) < 1e-4 and np.isfinite(d5_loss)
    assert "ddp: first-step averaged gradients equal" in proc.stdout


@pytest.mark.mpi
@requires_mpi
def test_ddp_row_over_torch_distributed_with_one_bucket_per_gradient(tmp_path):
    _, r = _run(tmp_path, "--communicator", "torch", "--bucket-mb", "0")
    assert r["checked"] is True, r["check"]
    extra = r["extra"]
    assert extra["buckets"] == LENET_PARAMETERS and extra["overlapped_buckets"] == LENET_PARAMETERS
    assert extra["config"]["communicator"] == "torch" and extra["config"]["bucket_mb"] == 0


def test_bad_options_are_refused_before_any_job_starts():
    for args, expected in ((["--rows", "pipeline"], "has the rows 'ddp'. Received: 'pipeline'"),
                           (["-n", "1"], "at least 2 ranks (-n). Received: 1"),
                           (["--model", "vgg"], "trains lenet, resnet20. Received: --model 'vgg'"),
                           (["--bucket-mb", "-1"], "--bucket-mb: must be a finite number >= 0"),
                           (["--warmup", "-2"], "--warmup: must be an integer from 0")):
        proc = run_cli("bench", "distributed", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert expected in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, (args, proc.stderr)


def test_the_gradient_comparison_flags_a_changed_gradient():
    from deep500lite.bench.distributed_ddp import ATOL, RTOL, _compare

    rng = np.random.default_rng(0)
    native = {"w": rng.standard_normal((4, 3)).astype(np.float32), "b": np.zeros(3, np.float32)}
    same = {k: v.copy() for k, v in native.items()}
    assert _compare(same, native) == (True, 0.0, 0.0)
    changed = {k: v.copy() for k, v in native.items()}
    changed["w"][1, 2] += 50 * RTOL * abs(changed["w"][1, 2]) + 10 * ATOL
    ok, worst, rel = _compare(changed, native)
    assert not ok and worst > 0 and 0 < rel < 1


def _result(target, ratios, checked=True):
    b = tuple(1.0 for _ in ratios)
    paired = PairedMeasurement(Measurement("deep500lite", tuple(ratios)), Measurement("native", b))
    return DistributedResult(DistributedRow("x", "x", target, "m"), 2, paired, checked, "", "", {})


def test_verdicts_follow_the_ratio_ci_and_the_check():
    ratios = [1.0 + 0.01 * k for k in range(20)]  # median 1.095; the CI's ends are order statistics of these
    low_end, high_end = sorted(ratios)[5], sorted(ratios)[14]
    assert _result(high_end, ratios).verdict == "meets"
    assert _result(high_end - 0.001, ratios).verdict == "likely"
    assert _result(low_end, ratios).verdict == "misses"
    assert _result(2.0, ratios, checked=False).verdict == "wrong"
    failed = DistributedResult(ROWS["ddp"], 2, None, False, "", "", {}, failed="exit status 1")
    assert failed.verdict == "failed" and failed.to_dict()["failed"] == "exit status 1"


def test_rows_register_by_name():
    row = DistributedRow("ddp-copy", "a copy", 1.2, ROWS["ddp"].worker)
    try:
        assert register_row(row) is row and ROWS["ddp-copy"] is row
    finally:
        ROWS.pop("ddp-copy", None)
    with pytest.raises(UserError, match="DistributedRow. Received: dict"):
        register_row({"name": "x"})
