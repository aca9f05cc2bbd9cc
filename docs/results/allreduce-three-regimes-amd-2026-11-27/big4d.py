import time, numpy as np, os, sys
from mpi4py import MPI
from deep500lite.lv3.mpi import MPICommunicator
comm = MPICommunicator(); c = MPI.COMM_WORLD
mode = sys.argv[1]
if "pin" in mode:
    os.sched_setaffinity(0, {c.rank % 2})
x = np.ones((64 << 20) // 4, np.float32); y = np.ones((64 << 10) // 4, np.float32)
def busy(seconds):
    stop = np.zeros(1); t = time.perf_counter()
    while True:
        for _ in range(20): comm.allreduce(y, algorithm="ring")
        stop[0] = time.perf_counter() - t > seconds; c.Bcast(stop, 0)
        if stop[0]: return
comm.allreduce(x, algorithm="rabenseifner")
ts = []
for i in range(10):
    if "busy" in mode: busy(1.0)
    else: time.sleep(1.0)
    c.Barrier(); t0 = time.perf_counter(); comm.allreduce(x, algorithm="rabenseifner"); ts.append(time.perf_counter() - t0)
a = np.array(ts); b = np.empty_like(a); c.Allreduce(a, b, op=MPI.MAX)
if c.rank == 0: print(mode, (b * 1e3).round(0).astype(int).tolist(), flush=True)
