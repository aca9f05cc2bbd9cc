"""Run under mpiexec by tests/frameworks/torch/test_torch_dist.py: checks TorchDistributedCommunicator on every rank.

``torch_check_collectives.py [DEVICE]`` checks every operation against numpy and against
MPICommunicator in the same job (MPI also carries the cross-rank comparison of results, so
torch is never checked with itself). DEVICE is ``cpu`` (gloo, the default) or ``cuda`` (NCCL).
Prints ``FAIL ...`` lines and ``OK <checks>`` on rank 0 when all ranks passed; exits 1 otherwise.

``torch_check_collectives.py stall``: the last rank skips two allreduces; the others have a 2 s
timeout, print the CommunicationTimeout of a native allreduce and then raise that of a ring one.

``torch_check_collectives.py env`` (under torchrun, no MPI): rendezvous through ``env://``, a few
operations against numpy; every rank prints ``OK rank R of P``.

``torch_check_collectives.py single DEVICE FILE`` (one process): a one-rank process group made
with ``init_method=file://FILE``; the collectives run through torch.distributed on DEVICE (on a
GPU: NCCL, device copies included). Prints ``OK single``.
"""

import os
import sys
import time

import numpy as np

from deep500lite.errors import UserError
from deep500lite.lv3 import ALGORITHMS, AlphaBeta, CommunicationTimeout, MPICommunicator
from deep500lite.frameworks.torch.distributed import TorchDistributedCommunicator

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lv3"))
from iallreduce_checks import check_iallreduce  # noqa: E402 - tests/lv3 on the path above

SEED = 4321


def inputs(shape, dtype, p, salt):
    """Every rank's array for one check (the same on all ranks)."""
    return [np.random.default_rng([SEED, salt, r]).standard_normal(shape).astype(dtype) for r in range(p)]


def stall():
    comm = TorchDistributedCommunicator(timeout=2.0)
    comm.barrier()
    if comm.rank == comm.size - 1:
        time.sleep(60)  # skips the collectives
    else:
        try:
            comm.allreduce(np.ones(10, np.float32), algorithm="native")
        except CommunicationTimeout as exc:
            print(f"caught CommunicationTimeout: {exc}", flush=True)
        # The algorithm messages travel in their own group, which the timed-out collective left intact.
        comm.allreduce(np.ones(10, np.float32), algorithm="ring")
    print(f"rank {comm.rank} finished without error", flush=True)


def env():
    import os

    comm = TorchDistributedCommunicator(timeout=60)
    p, rank = comm.size, comm.rank
    assert (rank, p) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])) and p > 1, (rank, p)
    xs = inputs((5,), np.float64, p, 1)
    for algorithm in ("native", "ring", "rabenseifner"):
        assert np.allclose(comm.allreduce(xs[rank], algorithm=algorithm), np.sum(xs, axis=0)), algorithm
    if rank == 0:
        for r in range(1, p):
            assert np.array_equal(comm.recv(xs[0], r), xs[r])
    else:
        comm.send(xs[rank], 0)
    comm.barrier()
    comm.close()
    print(f"OK rank {rank} of {p}", flush=True)


def single(device, path):
    comm = TorchDistributedCommunicator(device=device, init_method=f"file://{path}", rank=0, size=1, timeout=60)
    assert (comm.rank, comm.size) == (0, 1) and comm.group is not None, comm
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for algorithm in ALGORITHMS:
        for op in ("sum", "mean", "max"):
            got = comm.allreduce(x.T, op=op, algorithm=algorithm)
            assert np.array_equal(got, x.T) and got.dtype == x.dtype, (algorithm, op)
    assert np.array_equal(comm.broadcast(x), x) and np.array_equal(comm.gather(x)[0], x)
    assert np.array_equal(comm.allgather(x)[0], x) and np.array_equal(comm.sync_all_at_root(x), x)
    for algorithm in ("native", "ring"):
        assert np.array_equal(comm.reduce_scatter(x, algorithm=algorithm), x.reshape(-1)), algorithm
    assert all(np.array_equal(a, x) for a in comm.neighbor_exchange(x))
    comm.barrier()
    assert comm.stats["allreduce"]["calls"] == 3 * len(ALGORITHMS) and comm.bytes_sent == 0, comm.stats
    comm.close()
    print("OK single", comm, flush=True)


def main(device="cpu"):
    from mpi4py import MPI

    mpi = MPICommunicator(timeout=60)
    comm = TorchDistributedCommunicator(device=device, timeout=60)
    p, rank = comm.size, comm.rank
    failures, checks = [], 0

    def check(ok, what):
        nonlocal checks
        checks += 1
        if not ok:
            failures.append(f"rank {rank}: {what}")

    def same_on_all_ranks(arr):
        digests = mpi.comm.allgather(np.ascontiguousarray(arr).tobytes())
        return all(d == digests[0] for d in digests)

    check((comm.rank, comm.size) == (mpi.rank, mpi.size), f"rank/size {comm.rank}/{comm.size} vs MPI")
    check(comm.backend == ("gloo" if device == "cpu" else "nccl"), f"backend {comm.backend}")

    # Allreduce: every algorithm, sum / mean / max, lengths 0, 1, p-1, p+1, ~1000.
    salt = 0
    for n in sorted({0, 1, p - 1, p + 1, 1001}):
        for op in ("sum", "mean", "max"):
            salt += 1
            xs = inputs((n,), np.float32, p, salt)
            stack = np.stack(xs).astype(np.float64)
            ref = {"sum": stack.sum(0), "mean": stack.mean(0), "max": stack.max(0)}[op]
            for algorithm in ALGORITHMS:
                what = f"allreduce {algorithm} {op} n={n}"
                got = comm.allreduce(xs[rank], op=op, algorithm=algorithm)
                check(got.dtype == np.float32 and got.shape == (n,), what + f" dtype/shape {got.dtype} {got.shape}")
                check(np.allclose(got, ref, rtol=1e-5, atol=1e-5 * p), what + " differs from numpy")
                check(same_on_all_ranks(got), what + " differs between ranks")
                theirs = mpi.allreduce(xs[rank], op=op, algorithm=algorithm)
                if algorithm in ("native", "auto"):
                    check(np.allclose(got, theirs, rtol=1e-6, atol=1e-6), what + " differs from MPICommunicator")
                else:  # the same algorithm code on both: bitwise equal
                    check(np.array_equal(got, theirs), what + " not bitwise equal to MPICommunicator")
    check(comm.cost_model is not None and comm.cost_model.alpha > 0 and comm.cost_model.beta > 0,
          f"auto calibrated a model: {comm.cost_model}")

    # min / prod on a 2-D transposed float64 input, int64 sums, float16 native.
    xs = inputs((4, 5), np.float64, p, 999)
    for algorithm in ("native", "ring", "tree"):
        for op, fn in (("min", np.min), ("prod", np.prod)):
            got = comm.allreduce(xs[rank].T, op=op, algorithm=algorithm)
            check(got.shape == (5, 4) and np.allclose(got, fn(np.stack([x.T for x in xs]), axis=0)),
                  f"allreduce {algorithm} {op} 2-D transposed")
    ints = [np.arange(11, dtype=np.int64) * (r + 1) for r in range(p)]
    for algorithm in ("native", "recursive_doubling"):
        check(np.array_equal(comm.allreduce(ints[rank], algorithm=algorithm), np.sum(ints, axis=0)),
              f"allreduce {algorithm} int64")
    halves = [np.full(6, r + 1, np.float16) for r in range(p)]
    check(np.array_equal(comm.allreduce(halves[rank]), np.sum(halves, axis=0)), "allreduce native float16")
    # Unsigned wider than 8 bits: the library cannot reduce them, the p2p algorithms can.
    words = [np.arange(5, dtype=np.uint32) + r for r in range(p)]
    check(np.array_equal(comm.allreduce(words[rank], algorithm="ring"), np.sum(words, axis=0, dtype=np.uint32)),
          "allreduce ring uint32")
    try:
        comm.allreduce(words[rank], algorithm="native")
        check(False, "allreduce native uint32 did not raise")
    except UserError as exc:
        check("Received: dtype=uint32" in str(exc) and "algorithm='ring'" in str(exc), f"uint32 message: {exc}")

    check_iallreduce(comm, check, inputs, f"rank {rank}")
    got = comm.iallreduce(xs[rank], "mean").wait()
    check(np.allclose(got, mpi.iallreduce(xs[rank], "mean").wait(), rtol=1e-6, atol=1e-6),
          "iallreduce differs from MPICommunicator's")

    # Byte counters: ring = 2 (p-1)/p n each way; native collectives count like MPICommunicator.
    k = 10
    comm.reset_counters()
    comm.allreduce(np.ones(p * k, np.float64), algorithm="ring")
    expected = 2 * (p - 1) * k * 8
    check((comm.bytes_sent, comm.bytes_received) == (expected, expected)
          and comm.stats["allreduce"] == {"calls": 1, "bytes_sent": expected, "bytes_received": expected},
          f"ring bytes {comm.bytes_sent}/{comm.bytes_received}, stats {comm.stats}, expected {expected}")
    check(comm.seconds > 0, f"seconds {comm.seconds}")
    x = np.ones(3 * p + 1, np.float64)
    for name, call in (("allreduce", lambda c: c.allreduce(x)), ("broadcast", lambda c: c.broadcast(x, root=p - 1)),
                       ("gather", lambda c: c.gather(x, root=0)), ("allgather", lambda c: c.allgather(x)),
                       ("reduce_scatter", lambda c: c.reduce_scatter(x)),
                       ("reduce", lambda c: c.sync_all_at_root(x, root=0)),
                       ("neighbor_exchange", lambda c: c.neighbor_exchange(x))):
        counts = []
        for c in (comm, mpi):
            c.reset_counters()
            call(c)
            counts.append((c.bytes_sent, c.bytes_received, c.stats))
        check(counts[0] == counts[1] and (p == 1 or counts[0][0] + counts[0][1] > 0),
              f"{name} counts {counts[0]} vs MPICommunicator {counts[1]}")

    # Other collectives, and the Deep500 names.
    xs = inputs((3, 4), np.float64, p, 2000)
    for root in range(p):
        check(np.array_equal(comm.broadcast(xs[rank], root=root), xs[root]), f"broadcast root {root}")
        check(np.array_equal(comm.sync_all_with_root(xs[rank], root), xs[root]), f"sync_all_with_root {root}")
        for name, got in (("gather", comm.gather(xs[rank], root=root)),
                          ("gather_at_root", comm.gather_at_root(xs[rank], root))):
            if rank == root:
                check(len(got) == p and all(np.array_equal(g, x) for g, x in zip(got, xs)), f"{name} at {root}")
            else:
                check(got is None, f"{name} returns None off root {root}")
        got = comm.sync_all_at_root(xs[rank], root)
        check(np.allclose(got, np.sum(xs, axis=0)) if rank == root else got is None, f"sync_all_at_root {root}")
    odd = [np.arange(7, dtype=np.uint16) * (r + 2) for r in range(p)]  # any dtype moves as bytes
    check(np.array_equal(comm.broadcast(odd[rank], root=0), odd[0]), "broadcast uint16")
    got = comm.allgather(xs[rank][:, ::2])  # non-contiguous input
    check(len(got) == p and all(np.array_equal(g, x[:, ::2]) for g, x in zip(got, xs)), "allgather")
    check(np.allclose(comm.sync_all(xs[rank]), np.sum(xs, axis=0)), "sync_all")
    for n in (0, 1, p - 1, 3 * p + 2):
        ys = inputs((n,), np.float64, p, 3000 + n)
        lo, hi = rank * n // p, (rank + 1) * n // p
        for algorithm in ("native", "ring"):
            for op, ref in (("sum", np.sum(ys, axis=0)), ("mean", np.mean(ys, axis=0))):
                got = comm.reduce_scatter(ys[rank], op=op, algorithm=algorithm)
                check(got.shape == (hi - lo,) and np.allclose(got, ref[lo:hi]),
                      f"reduce_scatter {algorithm} {op} n={n}")
    from_left, from_right = comm.neighbor_exchange(xs[rank])
    check(np.array_equal(from_left, xs[(rank - 1) % p]) and np.array_equal(from_right, xs[(rank + 1) % p]),
          "neighbor_exchange")
    neighbours = sorted({(rank - 1) % p, rank, (rank + 1) % p})
    check(np.allclose(comm.reduce_from_neighbors(xs[rank]), np.sum([xs[i] for i in neighbours], axis=0)),
          "reduce_from_neighbors")
    check(np.array_equal(comm.reduce_from_neighbors(xs[rank]), mpi.reduce_from_neighbors(xs[rank])),
          "reduce_from_neighbors equals MPICommunicator's")

    # Point to point: send/recv with a root, recv_any (gloo), isend/irecv with test() and wait().
    if rank == 0:
        if comm.backend == "gloo":
            seen = set()
            for _ in range(p - 1):
                got, source = comm.wait_for_any_rank(xs[0], tag=7)
                seen.add(source)
                check(np.array_equal(got, xs[source]), f"wait_for_any_rank data from {source}")
            check(seen == set(range(1, p)), f"wait_for_any_rank sources {seen}")
        else:
            for r in range(1, p):
                check(np.array_equal(comm.recv(xs[0], r, tag=7), xs[r]), f"recv from {r}")
        for r in range(1, p):
            comm.send_to_rank(xs[r] * 2, r, tag=8)
    else:
        comm.send_to_root(xs[rank], tag=7)
        check(np.array_equal(comm.wait_for_root(xs[rank], tag=8), xs[rank] * 2), "wait_for_root")
    right, left = (rank + 1) % p, (rank - 1) % p
    comm.reset_counters()
    buf = xs[rank].copy()
    sreq = comm.isend(buf, right, tag=5)
    buf[...] = -1  # isend copied it
    rreq = comm.irecv(xs[rank], left, tag=5)
    deadline = time.monotonic() + 30
    while not rreq.test() and time.monotonic() < deadline:
        time.sleep(0.001)
    check(rreq.done and np.array_equal(rreq.wait(), xs[left]), "irecv with test()")
    check(np.array_equal(sreq.wait(), xs[rank]) and sreq.done, "isend wait")
    n = xs[rank].nbytes
    check(comm.stats.get("isend") == {"calls": 1, "bytes_sent": n, "bytes_received": 0}
          and comm.stats.get("irecv") == {"calls": 1, "bytes_sent": 0, "bytes_received": n},
          f"isend/irecv stats {comm.stats}")
    a, b = comm.irecv(xs[rank], left, tag=6), comm.isend(xs[rank], right, tag=6)
    check(np.array_equal(a.wait(), xs[left]) and b.wait() is not None, "irecv/isend wait only")

    # Explicit cost model: auto uses it without calibrating.
    model = AlphaBeta(1e-3, 1e-12)
    fixed = TorchDistributedCommunicator(device=device, cost_model=model)  # reuses the process group
    check(fixed.choose_algorithm(8) == "recursive_doubling" and fixed.cost_model is model, "cost_model=")
    check(np.allclose(fixed.allreduce(xs[rank], algorithm="auto"), np.sum(xs, axis=0)), "second communicator")
    comm.barrier()

    all_failures = mpi.comm.gather(failures, root=0)
    total = mpi.comm.allreduce(len(failures))
    if rank == 0:
        for fs in all_failures:
            for f in fs[:20]:
                print("FAIL", f)
        if total == 0:
            print(f"OK {checks} checks per rank on {p} ranks; {comm!r}; model {comm.cost_model}")
    sys.stdout.flush()
    comm.close()
    MPI.COMM_WORLD.Barrier()
    return 1 if total else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["stall"]:
        stall()
    elif sys.argv[1:2] == ["env"]:
        env()
    elif sys.argv[1:2] == ["single"]:
        single(*sys.argv[2:])
    else:
        sys.exit(main(*sys.argv[1:]))
