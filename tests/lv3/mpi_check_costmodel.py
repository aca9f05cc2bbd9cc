"""Run on 2 ranks by test_costmodel.py: a short real calibration writes its file, and auto chooses by it."""

import os
import sys

import numpy as np

from deep500lite.perfmodel.allreduce import CalibratedModel, calibrate_allreduce
from deep500lite.lv3.mpi import MPICommunicator

path = sys.argv[1]
comm = MPICommunicator(timeout=60)
model = calibrate_allreduce(comm, sizes=(4 << 10, 64 << 10, 512 << 10), max_time=0.02, max_reps=5)
assert model.ranks == [comm.size], model.ranks
if comm.rank == 0:
    model.save(path)
comm.barrier()
loaded = CalibratedModel.load(path)
assert loaded.params(comm.size) == model.params(comm.size)
os.environ["DEEP500LITE_ALLREDUCE_MODEL"] = path
auto = MPICommunicator(timeout=60)
x = np.arange(1000, dtype=np.float32) + comm.rank
out = auto.allreduce(x, algorithm="auto")
assert isinstance(auto.cost_model, CalibratedModel), type(auto.cost_model)
assert np.array_equal(out, 2 * np.arange(1000, dtype=np.float32) + 1)
choices = {n: auto.choose_algorithm(n) for n in (64, 1 << 16, 1 << 24)}
expected = {n: min(("recursive_doubling", "rabenseifner", "ring", "tree"), key=lambda a: loaded.cost(a, n, 2))
            for n in choices}
assert choices == expected, (choices, expected)
print(f"OK rank {comm.rank} {choices}", flush=True)
