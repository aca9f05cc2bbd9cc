"""``HorovodDistributedOptimizer`` on two real Horovod ranks (gloo), for torch and TensorFlow.

Needs Horovod built with the framework's support (``HOROVOD_WITH_PYTORCH=1`` /
``HOROVOD_WITH_TENSORFLOW=1``), which ``scripts/setup.sh`` does not install: Horovod 0.28.1 is
built from source and needs C++17 for torch 2.x (docs/porting-from-deep500.md says how). Each
rank starts from other weights and trains on half of every global batch; afterwards both ranks
hold the same parameters, equal to one process training on the whole batches from rank 0's
weights (the averaged gradient of two equal halves is the whole batch's gradient).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _horovod_with(framework: str) -> bool:
    if importlib.util.find_spec("horovod") is None:
        return False
    probe = subprocess.run([sys.executable, "-c", f"import horovod.{framework}"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.parametrize("framework", [
    pytest.param("torch", marks=pytest.mark.requires("torch", "horovod")),
    pytest.param("tensorflow", marks=pytest.mark.requires("tensorflow", "horovod")),
])
def test_two_horovod_ranks_train_like_one_process(framework):
    if not _horovod_with(framework):
        pytest.skip(f"horovod is installed without {framework} support (HOROVOD_WITH_"
                    f"{'PYTORCH' if framework == 'torch' else 'TENSORFLOW'}=1)")
    runner = shutil.which("horovodrun", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    assert runner, "horovod is installed but horovodrun is not on PATH"
    proc = subprocess.run([runner, "-np", "2", "--gloo", "-H", "localhost:2", sys.executable,
                           os.path.join(HERE, "horovod_check_training.py"), framework],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = {}
    for line in proc.stdout.splitlines():
        if "RESULT " in line:
            _, rank, payload = line[line.index("RESULT "):].split(" ", 2)
            ranks[int(rank)] = {k: np.array(v) for k, v in json.loads(payload).items()}
    assert sorted(ranks) == [0, 1], proc.stdout[-3000:]

    sys.path.insert(0, HERE)
    try:
        import horovod_check_training as check
        import training_setup as ts
    finally:
        sys.path.remove(HERE)
    single = check.base_optimizer(framework)
    for k in range(check.STEPS):
        single.step(ts.global_batch(k))
    for name in check.PARAMS:
        np.testing.assert_array_equal(ranks[0][name], ranks[1][name])
        np.testing.assert_allclose(ranks[0][name], single.network.fetch_tensor(name), rtol=1e-5, atol=1e-6)
