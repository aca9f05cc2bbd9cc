"""Run by tests/lv3/test_mpi.py in a fresh interpreter (one rank, no mpiexec): the communicator
on a single process, and its errors for bad input. Prints OK when every check passed."""

import numpy as np
import pytest

from deep500lite.errors import UserError
from deep500lite.lv3 import ALGORITHMS, MPICommunicator

comm = MPICommunicator()
assert (comm.rank, comm.size) == (0, 1)
x = np.arange(6.0).reshape(2, 3)
for algorithm in ALGORITHMS:
    got = comm.allreduce(x, algorithm=algorithm)
    assert np.array_equal(got, x) and got is not x, algorithm
assert np.array_equal(comm.reduce_scatter(x), x.reshape(-1))
assert np.array_equal(comm.reduce_from_neighbors(x), x)
assert all(np.array_equal(a, x) for a in comm.neighbor_exchange(x))
assert np.array_equal(comm.broadcast(x), x) and np.array_equal(comm.gather(x)[0], x)
with pytest.raises(UserError, match=r"Allowed values are 'native', 'ring'.*Received: algorithm='bogus'"):
    comm.allreduce(x, algorithm="bogus")
with pytest.raises(UserError, match=r"Received: op='avg'"):
    comm.allreduce(x, op="avg")
with pytest.raises(UserError, match="op='mean' needs a floating-point"):
    comm.allreduce(np.arange(3), op="mean")
with pytest.raises(UserError, match=r"root must be a rank from 0 to 0. Received: root=1"):
    comm.broadcast(x, root=1)
with pytest.raises(UserError, match=r"Received: algorithm='tree'"):
    comm.reduce_scatter(x, algorithm="tree")
with pytest.raises(UserError, match="timeout must be a positive number"):
    MPICommunicator(timeout=0)
print("OK")
