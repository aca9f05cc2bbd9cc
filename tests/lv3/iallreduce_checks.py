"""The non-blocking allreduce checks every communicator runs under mpiexec.

Imported by ``mpi_check_collectives.py`` (MPICommunicator) and
``tests/frameworks/torch/torch_check_collectives.py`` (TorchDistributedCommunicator).
"""

import time

import numpy as np

from deep500lite.errors import UserError


def check_iallreduce(comm, check, inputs, label: str) -> None:
    """``iallreduce`` against the blocking native ``allreduce`` of the same communicator and numpy.

    Args:
        comm: the communicator under test.
        check: ``check(ok, what)`` records one check.
        inputs: ``inputs(shape, dtype, p, salt)`` gives every rank's array (the same on all ranks).
        label: prefixed to each failure (the rank).
    """
    p, rank = comm.size, comm.rank
    salt = 7000
    for dtype in (np.float32, np.float64):
        for op in ("sum", "mean", "max"):
            for n in (0, 1, p + 1, 4099):
                salt += 1
                xs = inputs((n,), dtype, p, salt)
                what = f"{label}: iallreduce {op} n={n} {np.dtype(dtype).name}"
                blocking = comm.allreduce(xs[rank], op=op)
                kept = xs[rank].copy()
                got = comm.iallreduce(xs[rank], op=op).wait()
                check(got.dtype == np.dtype(dtype) and got.shape == (n,) and np.array_equal(got, blocking),
                      what + " differs from allreduce")
                check(np.array_equal(xs[rank], kept), what + " changed its input")
                stack = np.stack(xs).astype(np.float64)
                ref = {"sum": stack.sum(0), "mean": stack.mean(0), "max": stack.max(0)}[op]
                check(np.allclose(got, ref, rtol=1e-5, atol=1e-5 * p), what + " differs from numpy")
                buf = xs[rank].copy()
                request = comm.iallreduce(buf, op=op, out=buf)
                check(request.wait() is buf and np.array_equal(buf, blocking), what + " in place")
    # Several in flight at once, completed by test() in any order, then waited in reverse.
    xs = [inputs((n,), np.float32, p, 8000 + n) for n in (3, 100, 20000)]
    outs = [np.zeros_like(x[rank]) for x in xs]
    requests = [comm.iallreduce(x[rank], "sum", out=out) for x, out in zip(xs, outs)]
    deadline = time.monotonic() + 30
    while not all(r.test() for r in requests) and time.monotonic() < deadline:
        time.sleep(0.001)
    check(all(r.done for r in requests), f"{label}: requests in flight never completed by test()")
    for x, request, out in reversed(list(zip(xs, requests, outs))):
        check(request.wait() is out and np.allclose(out, np.sum(x, axis=0), rtol=1e-5, atol=1e-4),
              f"{label}: request of {out.size} elements in flight")
    # The bytes and calls are counted as the blocking allreduce counts them.
    x = inputs((3 * p + 1,), np.float64, p, 9000)[rank]
    counts = []
    for call in (lambda: comm.allreduce(x), lambda: comm.iallreduce(x).wait()):
        comm.reset_counters()
        call()
        counts.append((comm.bytes_sent, comm.bytes_received, comm.stats))
    check(counts[0] == counts[1], f"{label}: iallreduce counts {counts[1]} vs allreduce {counts[0]}")
    # Bad input: one clear error before anything starts (so no rank is left waiting).
    for bad, expected in ((lambda: comm.iallreduce(np.ones((4, 4))[:, ::2]), "C-contiguous"),
                          (lambda: comm.iallreduce(np.ones(4), out=np.ones(5)), "out="),
                          (lambda: comm.iallreduce(np.ones(4), op="median"), "op=")):
        try:
            bad()
            check(False, f"{label}: iallreduce accepted bad input ({expected})")
        except UserError as exc:
            check(expected in str(exc) and "Received" in str(exc), f"{label}: iallreduce message {exc}")
