import time, sys, numpy as np
from mpi4py import MPI
from deep500lite.lv3.mpi import MPICommunicator
comm = MPICommunicator(); c = MPI.COMM_WORLD
n = int(sys.argv[1]); dur = float(sys.argv[2])
x = np.ones(n // 4, np.float32)
ts, ds = [], []
start = time.perf_counter()
stop = np.zeros(1)
i = 0
while True:
    c.Barrier(); t0 = time.perf_counter(); comm.allreduce(x, algorithm='ring'); t1 = time.perf_counter()
    ts.append(t0 - start); ds.append(t1 - t0); i += 1
    if i % 50 == 0:
        stop[0] = float(t1 - start > dur); c.Bcast(stop, 0)
        if stop[0]: break
d = np.array(ds); m = np.empty_like(d); c.Allreduce(d, m, op=MPI.MAX)
if c.rank == 0:
    np.save(sys.argv[3], np.stack([np.array(ts), m]))
