"""Run under mpiexec by tests/lv3/test_mpi.py: checks every communicator operation against numpy.

Every rank builds every rank's input from a seed known to all, so each rank computes the
expected result with numpy alone. Prints ``FAIL ...`` lines for wrong results and ``OK <checks>``
on rank 0 when all ranks passed; exits 1 when any check failed.
"""

import sys

import numpy as np
from mpi4py import MPI

from deep500lite.lv3.mpi import MPICommunicator
from iallreduce_checks import check_iallreduce

SEED = 1234
ALGORITHMS = ("native", "ring", "recursive_doubling", "rabenseifner", "tree", "auto")


def inputs(shape, dtype, p, salt):
    """Every rank's array for one check (the same on all ranks)."""
    return [np.random.default_rng([SEED, salt, r]).standard_normal(shape).astype(dtype) for r in range(p)]


def main():
    comm = MPICommunicator(timeout=60)
    p, rank = comm.size, comm.rank
    failures, checks = [], 0

    def check(ok, what):
        nonlocal checks
        checks += 1
        if not ok:
            failures.append(what)

    rng = np.random.default_rng(SEED)
    lengths = sorted({0, 1, max(p - 1, 1), p, p + 1, 7, 13, 2 * p + 1, 1000, 4099,
                      int(rng.integers(20, 500)), int(rng.integers(10_000, 100_000))})
    salt = 0
    for dtype, rtol in ((np.float32, 1e-5), (np.float64, 1e-12)):
        for op in ("sum", "max"):
            for n in lengths:
                salt += 1
                xs = inputs((n,), dtype, p, salt)
                ref = np.sum(np.stack(xs).astype(np.float64), axis=0) if op == "sum" else np.max(np.stack(xs), axis=0)
                for algorithm in ALGORITHMS:
                    got = comm.allreduce(xs[rank], op=op, algorithm=algorithm)
                    what = f"rank {rank}: allreduce {algorithm} {op} n={n} {np.dtype(dtype).name}"
                    check(got.dtype == np.dtype(dtype) and got.shape == (n,),
                          what + f" dtype/shape {got.dtype} {got.shape}")
                    if op == "sum":
                        check(np.allclose(got, ref, rtol=rtol, atol=rtol * p), what + " differs from numpy")
                    else:
                        check(np.array_equal(got, ref), what + " differs from numpy")
                    # All ranks must hold bitwise the same result.
                    digests = comm.comm.allgather(got.tobytes())
                    check(all(d == digests[0] for d in digests), what + " differs between ranks")

    # A 2-D, non-contiguous input and op=mean / min / prod.
    xs = inputs((6, 5), np.float64, p, 999)
    for algorithm in ALGORITHMS:
        for op, fn in (("mean", np.mean), ("min", np.min), ("prod", np.prod)):
            got = comm.allreduce(xs[rank].T, op=op, algorithm=algorithm)
            check(got.shape == (5, 6) and np.allclose(got, fn(np.stack([x.T for x in xs]), axis=0)),
                  f"rank {rank}: allreduce {algorithm} {op} 2-D transposed")
    ints = [np.arange(11, dtype=np.int64) * (r + 1) for r in range(p)]
    for algorithm in ALGORITHMS:
        check(np.array_equal(comm.allreduce(ints[rank], algorithm=algorithm), np.sum(ints, axis=0)),
              f"rank {rank}: allreduce {algorithm} int64")

    check_iallreduce(comm, check, inputs, f"rank {rank}")

    # Ring allreduce bytes: 2 (p-1) blocks of n/p elements each way.
    k = 10
    comm.reset_counters()
    comm.allreduce(np.ones(p * k, np.float64), algorithm="ring")
    expected = 2 * (p - 1) * k * 8
    check((comm.bytes_sent, comm.bytes_received) == (expected, expected)
          and comm.stats["allreduce"] == {"calls": 1, "bytes_sent": expected, "bytes_received": expected},
          f"rank {rank}: ring bytes {comm.bytes_sent}/{comm.bytes_received}, stats {comm.stats}, expected {expected}")

    # Other collectives.
    xs = inputs((3, 4), np.float64, p, 2000)
    for root in range(p):
        got = comm.broadcast(xs[rank], root=root)
        check(np.array_equal(got, xs[root]), f"rank {rank}: broadcast root {root}")
        got = comm.sync_all_with_root(xs[rank], root)
        check(np.array_equal(got, xs[root]), f"rank {rank}: sync_all_with_root {root}")
        got = comm.gather(xs[rank], root=root)
        if rank == root:
            check(len(got) == p and all(np.array_equal(g, x) for g, x in zip(got, xs)), f"rank {rank}: gather")
        else:
            check(got is None, f"rank {rank}: gather returns None off root")
        got = comm.gather_at_root(xs[rank], root)
        check((got is None) == (rank != root), f"rank {rank}: gather_at_root")
        got = comm.sync_all_at_root(xs[rank], root)
        if rank == root:
            check(np.allclose(got, np.sum(xs, axis=0)), f"rank {rank}: sync_all_at_root")
        else:
            check(got is None, f"rank {rank}: sync_all_at_root off root")
    got = comm.allgather(xs[rank])
    check(len(got) == p and all(np.array_equal(g, x) for g, x in zip(got, xs)), f"rank {rank}: allgather")
    check(np.allclose(comm.sync_all(xs[rank]), np.sum(xs, axis=0)), f"rank {rank}: sync_all")
    for n in (0, 1, p - 1, 3 * p + 2):
        ys = inputs((n,), np.float64, p, 3000 + n)
        lo, hi = rank * n // p, (rank + 1) * n // p
        for algorithm in ("native", "ring"):
            got = comm.reduce_scatter(ys[rank], algorithm=algorithm)
            check(got.shape == (hi - lo,) and np.allclose(got, np.sum(ys, axis=0)[lo:hi]),
                  f"rank {rank}: reduce_scatter {algorithm} n={n}")
    from_left, from_right = comm.neighbor_exchange(xs[rank])
    check(np.array_equal(from_left, xs[(rank - 1) % p]) and np.array_equal(from_right, xs[(rank + 1) % p]),
          f"rank {rank}: neighbor_exchange")
    neighbours = sorted({(rank - 1) % p, rank, (rank + 1) % p})
    check(np.allclose(comm.reduce_from_neighbors(xs[rank]), np.sum([xs[i] for i in neighbours], axis=0)),
          f"rank {rank}: reduce_from_neighbors")

    # Point to point with a root, and a parameter-server style receive from any rank.
    if rank == 0:
        seen = set()
        for _ in range(p - 1):
            got, source = comm.wait_for_any_rank(xs[0], tag=7)
            seen.add(source)
            check(np.array_equal(got, xs[source]), f"rank 0: wait_for_any_rank data from {source}")
        check(seen == set(range(1, p)), f"rank 0: wait_for_any_rank sources {seen}")
        for r in range(1, p):
            comm.send_to_rank(xs[r] * 2, r, tag=8)
    else:
        comm.send_to_root(xs[rank], tag=7)
        got = comm.wait_for_root(xs[rank], tag=8)
        check(np.array_equal(got, xs[rank] * 2), f"rank {rank}: wait_for_root")
    comm.barrier()

    all_failures = comm.comm.gather(failures, root=0)
    total = comm.comm.allreduce(len(failures))
    if rank == 0:
        for fs in all_failures:
            for f in fs[:20]:
                print("FAIL", f)
        if total == 0:
            print(f"OK {checks} checks per rank on {p} ranks; auto model {comm.cost_model}")
    sys.stdout.flush()
    MPI.COMM_WORLD.Barrier()
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
