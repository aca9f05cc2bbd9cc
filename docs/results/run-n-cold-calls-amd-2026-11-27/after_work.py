"""On every rank: some work, a barrier, then two allreduces in a row. How much slower is the first, cold one?

python after_work.py ALGORITHM (under mpiexec): for 4 KiB, 18.8 KiB (the digits MLP's gradient), 256 KiB and
1 MiB and each kind of work before the barrier (none; numpy sums over 1, 8 and 32 MiB; a 3000-entry dict;
three forward and backward passes of the 64-64-10 MLP on a batch of 32 through torch), prints the median
over 120 steps (after 30) of the first and the second call, in microseconds, rank 0's times.
"""
import sys
import time

import numpy as np
import torch
from mpi4py import MPI

from deep500lite.lv3.mpi import MPICommunicator

comm, world = MPICommunicator(), MPI.COMM_WORLD
torch.set_num_threads(1)
net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
xb, yb = torch.randn(32, 64), torch.randint(0, 10, (32,))
sweeps = {mib: np.ones(mib << 18, np.float32) for mib in (1, 8, 32)}


def torch_passes():
    for _ in range(3):
        net.zero_grad()
        torch.nn.functional.cross_entropy(net(xb), yb).backward()


WORK = {"none": lambda: None, "mem1M": sweeps[1].sum, "mem8M": sweeps[8].sum, "mem32M": sweeps[32].sum,
        "py": lambda: len({i: str(i) for i in range(3000)}), "torch": torch_passes}
algorithm, lines = sys.argv[1], []
for nbytes in (4096, 19264, 262144, 1 << 20):
    x = np.ones(nbytes // 4, np.float32)
    for name, work in WORK.items():
        times = []
        for _ in range(150):
            work()
            world.Barrier()
            t0 = time.perf_counter()
            comm.allreduce(x, algorithm=algorithm)
            t1 = time.perf_counter()
            comm.allreduce(x, algorithm=algorithm)
            times.append((t1 - t0, time.perf_counter() - t1))
        first, second = np.median(np.array(times[30:]), axis=0) * 1e6
        lines.append(f"{nbytes:>8} {name:>6}: first {first:7.1f}  second {second:7.1f}  first-second "
                     f"{first - second:6.1f} us")
if comm.rank == 0:
    print(f"{algorithm} on {comm.size} ranks\n" + "\n".join(lines), flush=True)
