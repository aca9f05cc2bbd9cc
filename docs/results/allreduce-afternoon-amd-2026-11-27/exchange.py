"""Pairwise exchange and one-way times on all ranks at once: ranks (2i, 2i+1) are partners."""
import json, sys, time, numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD; r = c.Get_rank(); p = c.Get_size(); o = r ^ 1
assert p % 2 == 0
def t(f, reps):
    for _ in range(2): f()
    ts = []
    for _ in range(reps):
        c.Barrier(); t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    a = np.array(ts); b = np.empty_like(a); c.Allreduce(a, b, op=MPI.MAX); return float(np.median(b))
out = {}
m = 4096
while m <= (64 << 20):
    s = np.ones(m // 4, np.float32); d = np.empty_like(s)
    def both(): MPI.Request.Waitall([c.Irecv(d, o), c.Isend(s, o)])
    def oneway():
        if r % 2 == 0: c.Send(s, o)
        else: c.Recv(d, o)
    reps = int(max(10, min(300, 0.15 / max(1e-6, m * 0.3e-9))))
    out[m] = (t(both, reps), t(oneway, reps))
    m *= 2
if r == 0:
    json.dump(out, open(sys.argv[1], "w"))
    for m, (x, y) in out.items(): print(f"{m>>10:6d}K exch {x*1e6:9.1f} one {y*1e6:9.1f}")
