"""The recipe key ``bucket_mb``: the gradient bucket size of a data-parallel run, and its errors.

The data-parallel optimizer is built in this process (one rank, over torch.distributed without a
process group), as ``deep500lite run -n N`` builds it on every rank; ``run -n 2`` itself runs with
the key at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from deep500lite.errors import UserError
from deep500lite.lv3 import ConsistentDecentralized
from deep500lite.recipe import load_recipe
from deep500lite.recipe.components import _build
from support import REPO, requires_mpi

RECIPE = os.path.join(REPO, "recipes", "digits_mlp_distributed.py")
#: The recipe with the torch executor and communicator (one process: size 1) and no bucket_bytes of its own.
BASE = {"executor": "torch", "communicator": "torch", "distributed_kwargs": {"algorithm": "native"}}


def _optimizer(**sets):
    pytest.importorskip("torch")
    return _build(load_recipe(RECIPE).resolve({**BASE, **sets}), 0).optimizer


def test_bucket_mb_sets_the_data_parallel_optimizers_bucket_bytes():
    opt = _optimizer(bucket_mb=0.5)
    assert isinstance(opt, ConsistentDecentralized) and opt.bucket_bytes == 1 << 19
    assert _optimizer(bucket_mb=0).bucket_bytes == 0
    assert _optimizer().bucket_bytes == 25 << 20  # the recipe leaves it None: the optimizer's default, as DDP's


def test_bucket_mb_errors_name_what_was_wrong():
    with pytest.raises(UserError, match=r"'bucket_mb' must be a number of MiB from 0 to 1,048,576.*Received: -1"):
        _optimizer(bucket_mb=-1)
    with pytest.raises(UserError, match=r"must be a number of MiB.*Received: '4'"):
        _optimizer(bucket_mb="4")
    with pytest.raises(UserError, match=r"set twice.*Received: bucket_mb=4, bucket_bytes=1024"):
        _optimizer(bucket_mb=4, distributed_kwargs={"bucket_bytes": 1024})
    with pytest.raises(UserError, match=r"sets no 'distributed' optimizer. Received: bucket_mb=4, distributed=None"):
        _optimizer(bucket_mb=4, distributed=None, communicator=None, distributed_kwargs={})
    with pytest.raises(UserError, match=r"takes none. Received: bucket_mb=4"):
        _optimizer(bucket_mb=4, distributed="ConsistentParameterServer", distributed_kwargs={})


def test_model_parallel_schemes_refuse_bucket_mb():
    from deep500lite.recipe.parallelism import check_distributed

    with pytest.raises(UserError, match=r"the 'pipeline' scheme has none. Received: bucket_mb=4"):
        check_distributed({"bucket_mb": 4, "distributed": "pipeline", "distributed_kwargs": {}})


@pytest.mark.mpi
@requires_mpi
def test_run_on_two_ranks_with_one_bucket_per_gradient_trains_the_same_replicas(tmp_path):
    """On 2 ranks each averaged element is (a + b) / 2 whatever the buckets: the same training, bit for bit."""
    pytest.importorskip("torch")
    accuracies = {}
    for mb in (0, 25):
        out = tmp_path / f"mb{mb}"
        proc = subprocess.run([sys.executable, "-m", "deep500lite", "run", RECIPE, "-n", "2", "--set", "epochs=1",
                               "--set", "executor=torch", "--set", "distributed_kwargs={'algorithm': 'native'}",
                               "--set", f"bucket_mb={mb}", "--no-baseline", "--out", str(out), "--progress", "none"],
                              capture_output=True, text=True, cwd=REPO, timeout=300, start_new_session=True)
        assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-3000:]
        agg = json.load(open(out / "results.json"))
        accuracies[mb] = [row["final_test_accuracy"] for row in agg["distributed"]["per_rank"]]
    assert accuracies[0] == accuracies[25] and len(set(accuracies[0])) == 1
