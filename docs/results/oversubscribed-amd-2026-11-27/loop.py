"""A bare loop on every rank: work, then deep500lite's native allreduce of 18.8 KiB (the recipe's gradient).

python loop.py spin US: spin for US microseconds of the thread's CPU time; python loop.py torch N: N
forward+backward passes of a 64-64-10 MLP on a batch of 32. Prints each rank's median work, allreduce
and cycle time over 250 steps (after 50 warm-up steps).
"""
import sys
import time

import numpy as np
from mpi4py import MPI

from deep500lite.lv3.mpi import MPICommunicator

comm = MPICommunicator()
mode, amount = sys.argv[1], float(sys.argv[2])
x = np.ones(4816, np.float32)
if mode == "torch":
    import torch
    torch.set_num_threads(1)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    xb, yb = torch.randn(32, 64), torch.randint(0, 10, (32,))


def work():
    if mode == "spin":
        end = time.thread_time() + amount * 1e-6
        while time.thread_time() < end:
            pass
    else:
        for _ in range(int(amount)):
            net.zero_grad()
            torch.nn.functional.cross_entropy(net(xb), yb).backward()


times = []
for _ in range(300):
    t0 = time.perf_counter(); work(); t1 = time.perf_counter()
    comm.allreduce(x, algorithm="native"); t2 = time.perf_counter()
    times.append((t1 - t0, t2 - t1, t2 - t0))
w, a, c = (np.median(np.array(times[50:]), axis=0) * 1e6)
line = f"rank {comm.rank} of {comm.size}: {mode} {sys.argv[2]}: work {w:.0f} us, allreduce {a:.0f} us, cycle {c:.0f} us"
lines = MPI.COMM_WORLD.gather(line, root=0)  # one writer, so the ranks' lines do not mix
if comm.rank == 0:
    print("\n".join(lines), flush=True)
