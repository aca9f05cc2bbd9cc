import time, numpy as np
from mpi4py import MPI
from deep500lite.lv3.mpi import MPICommunicator
comm = MPICommunicator(); c = MPI.COMM_WORLD
x = np.ones((64 << 20) // 4, np.float32); y = np.ones((1 << 20) // 4, np.float32); z = np.ones((16 << 20) // 4, np.float32)
def run(label, between):
    comm.allreduce(x, algorithm="rabenseifner")
    ts = []
    for i in range(16):
        between()
        c.Barrier(); t0 = time.perf_counter(); comm.allreduce(x, algorithm="rabenseifner"); ts.append(time.perf_counter() - t0)
        c.Barrier(); t0 = time.perf_counter(); comm.allreduce(x, algorithm="rabenseifner"); ts.append(time.perf_counter() - t0)
    a = np.array(ts); b = np.empty_like(a); c.Allreduce(a, b, op=MPI.MAX)
    if c.rank == 0:
        b = (b * 1e3).round(0).astype(int)
        print(label, "first:", b[0::2].tolist(), " second:", b[1::2].tolist(), flush=True)
run("nothing between", lambda: None)
run("20x 1MiB ring between", lambda: [comm.allreduce(y, algorithm="ring") for _ in range(20)])
run("2x 16MiB tree between", lambda: [comm.allreduce(z, algorithm="tree") for _ in range(2)])
run("sleep 50ms between", lambda: time.sleep(0.05))
