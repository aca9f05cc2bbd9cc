"""Does sending a buffer this core has just written cost more than sending one it has not touched?
Same work in both: one copy of n bytes and one exchange of n bytes; only which buffer is sent differs."""
import time, numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD; r = c.rank; o = r ^ 1
def med(f, reps=300):
    for _ in range(5): f()
    ts = []
    for _ in range(reps):
        c.Barrier(); t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    a = np.array(ts); b = np.empty_like(a); c.Allreduce(a, b, op=MPI.MAX)
    return float(np.median(b)) * 1e6
print_rows = []
for n in [64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20]:
    x = np.ones(n // 4, np.float32); written = np.empty_like(x); other = np.empty_like(x)
    untouched = x.copy(); recv = np.empty_like(x)
    def exch(buf):
        MPI.Request.Waitall([c.Irecv(recv, o), c.Isend(buf, o)])
    def sent_written():
        np.copyto(written, x); exch(written)
    def sent_untouched():
        np.copyto(other, x); exch(untouched)
    res = [med(sent_written), med(sent_untouched), med(sent_written), med(sent_untouched)]
    w, u = min(res[0], res[2]), min(res[1], res[3])
    print_rows.append(f"{n >> 10:6d} KiB  written {w:8.1f} us  untouched {u:8.1f} us  ratio {w / u:.2f}")
if r == 0:
    print("\n".join(print_rows))
