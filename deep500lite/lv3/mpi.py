"""Level 3: the MPI communicator, through mpi4py (imported when a communicator is created).

Run a script on 4 ranks with ``mpiexec -n 4 python -m mpi4py script.py``; ``-m mpi4py`` ends the
whole job when one rank raises. Every operation works on numpy buffers through mpi4py's
upper-case (buffer) methods, so array data is never pickled.
"""

from __future__ import annotations

import math
import os
import sys
import time
import traceback

import numpy as np

from deep500lite.errors import FrameworkNotAvailableError
from deep500lite.lv3 import _common
from deep500lite.lv3 import allreduce as _ar
from deep500lite.lv3._common import TIMEOUT_ENV
from deep500lite.lv3.communication import CommunicationNetwork, CompletedRequest, Request

__all__ = ["MPICommunicator", "TIMEOUT_ENV", "install_abort_on_exception", "import_mpi"]

_TAG_RIGHT = 1
_TAG_LEFT = 2
_SPIN_SECONDS = 0.05
_yield = getattr(os, "sched_yield", lambda: time.sleep(0))


def import_mpi():
    """Import and return ``mpi4py.MPI`` (which initializes MPI on first import).

    Used by :class:`MPICommunicator` and by the torch.distributed communicator's ``mpiexec``
    rendezvous.

    Raises:
        FrameworkNotAvailableError: mpi4py is not installed (an ``ImportError``).
    """
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise FrameworkNotAvailableError("MPICommunicator needs mpi4py and an MPI library: "
                                         "pip install 'deep500lite[mpi]' (mpi4py and the mpich wheel)") from exc
    return MPI


_HOOK_INSTALLED = False


_ABORT_GRACE_SECONDS = 0.5


def install_abort_on_exception() -> None:
    """Make an uncaught exception on any rank print the rank and end the whole MPI job.

    Installs a :data:`sys.excepthook` that prints ``deep500lite: rank R of P raised ...`` with
    the traceback to stderr and calls ``MPI_Abort`` on ``COMM_WORLD``, so the other ranks do not
    wait forever in their next communication. Called by :class:`MPICommunicator` unless it is
    created with ``abort_on_exception=False``. Calling it twice has no further effect.
    """
    global _HOOK_INSTALLED
    if _HOOK_INSTALLED:
        return
    MPI = import_mpi()
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        if issubclass(exc_type, KeyboardInterrupt) or not MPI.Is_initialized() or MPI.Is_finalized():
            previous(exc_type, exc, tb)
            return
        world = MPI.COMM_WORLD
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        sys.stderr.write(f"deep500lite: rank {world.Get_rank()} of {world.Get_size()} raised "
                         f"{exc_type.__name__}: {exc}\n{text}")
        sys.stderr.flush()
        # MPI_Abort kills every rank at once, and mpiexec's I/O forwarding can die with them before
        # it has passed this message on (seen with MPICH's hydra: the job ended with no output at
        # all). A short pause lets the message reach the user first; the job ends anyway.
        time.sleep(_ABORT_GRACE_SECONDS)
        world.Abort(1)

    sys.excepthook = hook
    _HOOK_INSTALLED = True


class _MPIRequest(Request):
    def __init__(self, owner: MPICommunicator, req, buffer, peer: int, sending: bool, what: str):
        super().__init__(owner, buffer, peer, sending)
        self._req, self._what = req, what

    def _poll(self) -> bool:
        return self._req.Test()

    def _block(self) -> None:
        desc = (f"rank {self.peer} to receive {self.buffer.nbytes} bytes" if self.sending
                else f"a message from rank {self.peer} ({self.buffer.nbytes} bytes)")
        self.owner._wait([self._req], [desc], self._what)


class _MPIAllreduce(_MPIRequest):
    """A native ``MPI_Iallreduce`` in flight; counted under ``allreduce`` (and divided, for ``mean``) once done."""

    def __init__(self, owner: MPICommunicator, req, out: np.ndarray, op: str):
        super().__init__(owner, req, out, -1, False, "iallreduce(native)")
        self._op = op

    def _block(self) -> None:
        self.owner._collective(self._req, self._what)

    def _record(self) -> None:
        owner = self.owner
        owner._count("allreduce", *_common.native_volume("allreduce", self.buffer.nbytes, owner.size, owner.rank))
        _common.finish_mean(self.buffer, self._op, owner.size)


class MPICommunicator(_common.AlgorithmChoice, CommunicationNetwork):
    """A :class:`CommunicationNetwork` over an MPI communicator (mpi4py).

    Args:
        comm: an ``mpi4py.MPI.Comm``; ``MPI.COMM_WORLD`` when None.
        timeout: seconds any single wait may last before raising
            :class:`~deep500lite.lv3.communication.CommunicationTimeout`, which names this rank,
            the operation and the rank(s) it was waiting for; None (the default, unless the
            environment variable ``DEEP500LITE_COMM_TIMEOUT`` is set) waits forever. Waits poll
            ``MPI_Testall`` and yield the core between polls (then sleep, after 50 ms), so ranks
            that share a core do not starve each other. After a timeout the ranks disagree on
            where they are: end the job (an uncaught error does) rather than go on communicating.
        abort_on_exception: install :func:`install_abort_on_exception`.
        cost_model: an :class:`~deep500lite.lv3.allreduce.AlphaBeta` for ``algorithm="auto"``;
            when None it is measured by :meth:`calibrate` at the first ``auto`` allreduce.

    Attributes:
        comm: the mpi4py communicator for the user's own messages.
        rank, size: this rank and the number of ranks.
        timeout: as above.
        cost_model: the alpha-beta parameters used by ``auto`` (None until calibrated).

    Byte counting: the point-to-point operations and the allreduce algorithms written here count
    every message they send and receive. The ``native`` collectives run inside the MPI library,
    whose messages cannot be seen; they count the bytes of the direct exchange this rank takes
    part in, the least any algorithm must move: allreduce ``2 (p-1)/p n`` sent and received,
    broadcast ``(p-1) n`` sent at the root and ``n`` received elsewhere, gather ``n`` sent and
    ``(p-1) n`` received at the root, allgather ``(p-1) n`` each way, reduce-scatter
    ``n - n_own`` sent and ``(p-1) n_own`` received.
    """

    def __init__(self, comm=None, timeout: float | None = None, abort_on_exception: bool = True,
                 cost_model: _ar.AlphaBeta | None = None):
        super().__init__()
        MPI = import_mpi()
        self._MPI = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self._p2p = self.comm.Dup()  # algorithm messages never match the user's own sends
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.timeout = _common.resolve_timeout(timeout)
        self.cost_model = cost_model
        self._auto_choices: dict = {}
        self._ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD, "mean": MPI.SUM}
        if abort_on_exception:
            install_abort_on_exception()

    def __repr__(self):
        return f"MPICommunicator(rank={self.rank}, size={self.size}, timeout={self.timeout})"

    # ------------------------------------------------------------- waiting
    def _wait(self, reqs, peers, what: str, statuses=None) -> None:
        """Wait for ``reqs`` by polling ``MPI_Testall``; past the timeout, name the pending peers and raise."""
        MPI = self._MPI
        start = time.monotonic()
        deadline = math.inf if self.timeout is None else start + self.timeout
        pause = 0.0
        while True:
            done = MPI.Request.Testall(reqs) if statuses is None else MPI.Request.Testall(reqs, statuses)
            if done:
                return
            now = time.monotonic()
            if now > deadline:
                break
            # Poll and yield the core for a while (a sleep costs ~60 us of latency; yielding lets
            # a peer rank sharing this core run, which MPI's own busy wait does not), then back
            # off so that a long wait does not hold a core.
            if now - start <= _SPIN_SECONDS:
                _yield()
            else:
                time.sleep(pause)
                pause = min(max(pause * 2, 1e-5), 1e-3)
        pending = [peer for req, peer in zip(reqs, peers) if req != MPI.REQUEST_NULL and not req.Test()]
        raise _common.timeout_error(self.rank, self.size, what, self.timeout, pending)

    def _exchange(self, comm, sends, recvs, tag: int, op: str, what: str) -> None:
        """Post every receive and send at once, wait for all, count their bytes under ``op``."""
        reqs, peers = [], []
        for arr, source in recvs:
            reqs.append(comm.Irecv(arr, source, tag))
            peers.append(f"a message from rank {source} ({arr.nbytes} bytes)")
        for arr, dest in sends:
            reqs.append(comm.Isend(arr, dest, tag))
            peers.append(f"rank {dest} to receive {arr.nbytes} bytes")
        self._wait(reqs, peers, what)
        self._count(op, sent=sum(a.nbytes for a, _ in sends), received=sum(a.nbytes for a, _ in recvs))

    def _collective(self, req, what: str) -> None:
        self._wait([req], ["the other ranks (collective)"], what)

    # ------------------------------------------------------------ checking
    _check_op = staticmethod(_common.check_op)

    def _check_rank(self, rank, name: str) -> None:
        _common.check_rank(rank, self.size, name)

    @staticmethod
    def _array(x) -> np.ndarray:
        return np.ascontiguousarray(x)

    # ---------------------------------------------------------- allreduce
    def calibrate(self, **kwargs) -> _ar.AlphaBeta:
        """Measure the alpha-beta model on this communicator and keep it as :attr:`cost_model`.

        Collective: every rank must call it. Takes well under a second (a ping-pong between
        ranks 0 and 1); rank 0's numbers are broadcast so every rank chooses alike. Keyword
        arguments go to :func:`deep500lite.lv3.allreduce.calibrate`.
        """
        def share(values):
            req = self._p2p.Ibcast(values, root=0)
            self._collective(req, "calibrate (broadcast)")
            return values

        transport = _common.Transport(self, "calibrate")
        self.cost_model = _ar.calibrate(transport, share=share, **kwargs)
        return self.cost_model

    def allreduce(self, x: np.ndarray, op: str = "sum", algorithm: str = "native") -> np.ndarray:
        """Combine ``x`` element-wise over all ranks; every rank gets the result.

        Args:
            x: an array with the same shape and dtype on every rank (any layout; it is not
                modified).
            op: ``sum``, ``mean``, ``max``, ``min`` or ``prod``.
            algorithm: ``native`` (``MPI_Allreduce``), ``ring``, ``recursive_doubling``,
                ``rabenseifner``, ``tree`` (see :mod:`deep500lite.lv3.allreduce` for their
                alpha-beta costs) or ``auto`` (the one with the least predicted time for this
                size and rank count; the model is calibrated at the first call).

        Returns:
            A new array shaped like ``x``. All algorithms give every rank bitwise the same result.
        """
        x = np.asarray(x)
        self._check_op(op, x)
        _common.check_algorithm(algorithm, _ar.ALGORITHMS)
        self._count("allreduce", call=True)
        if algorithm == "auto":
            algorithm = self.choose_algorithm(x.nbytes)
        reduce_op = "sum" if op == "mean" else op
        if self.size == 1:
            out = np.array(x, copy=True, order="C")
        elif algorithm == "native":
            send = self._array(x)
            out = np.empty_like(send)
            self._collective(self.comm.Iallreduce(send, out, op=self._ops[op]), "allreduce(native)")
            self._count("allreduce", *_common.native_volume("allreduce", x.nbytes, self.size, self.rank))
        else:
            out = _ar.run_allreduce(_common.Transport(self, "allreduce"), x, reduce_op, algorithm)
        return _common.finish_mean(out, op, self.size)

    def iallreduce(self, x: np.ndarray, op: str = "sum", out: np.ndarray | None = None) -> Request:
        """Start ``MPI_Iallreduce`` of ``x`` (``out=x``: in place) and return at once; see
        :meth:`CommunicationNetwork.iallreduce`.

        MPI advances the collective whenever this rank enters the MPI library: calling
        ``request.test()`` now and then during other work makes it progress before ``wait()``.
        """
        x, out = _common.iallreduce_start(self, x, op, out)
        if self.size == 1:
            if out is not x:
                out[...] = x
            return CompletedRequest(self, out)
        send = self._MPI.IN_PLACE if out is x else x
        return _MPIAllreduce(self, self.comm.Iallreduce(send, out, op=self._ops[op]), out, op)

    # ------------------------------------------------- other collectives
    def broadcast(self, x: np.ndarray, root: int = 0) -> np.ndarray:
        """Return ``root``'s ``x`` on every rank (elsewhere ``x`` gives the shape and dtype)."""
        self._check_rank(root, "root")
        buf = np.array(x, copy=True, order="C")
        self._collective(self.comm.Ibcast(buf, root=root), f"broadcast(root={root})")
        self._count("broadcast", *_common.native_volume("broadcast", buf.nbytes, self.size, self.rank, root),
                    call=True)
        return buf

    def gather(self, x: np.ndarray, root: int = 0) -> list[np.ndarray] | None:
        """Collect every rank's ``x`` at ``root``: a list in rank order there, None elsewhere.

        ``x`` must have the same shape and dtype on every rank.
        """
        self._check_rank(root, "root")
        send = self._array(x)
        recv = np.empty((self.size,) + send.shape, send.dtype) if self.rank == root else None
        self._collective(self.comm.Igather(send, recv, root=root), f"gather(root={root})")
        self._count("gather", *_common.native_volume("gather", send.nbytes, self.size, self.rank, root), call=True)
        return None if recv is None else list(recv)

    def sync_all_at_root(self, x: np.ndarray, root: int = 0) -> np.ndarray | None:
        """Sum ``x`` over all ranks at ``root`` only (None elsewhere), with ``MPI_Reduce``."""
        self._check_rank(root, "root")
        send = self._array(x)
        recv = np.empty_like(send) if self.rank == root else None
        self._collective(self.comm.Ireduce(send, recv, op=self._MPI.SUM, root=root), f"reduce(root={root})")
        self._count("reduce", *_common.native_volume("reduce", send.nbytes, self.size, self.rank, root), call=True)
        return recv

    def allgather(self, x: np.ndarray) -> list[np.ndarray]:
        """Collect every rank's ``x`` (same shape and dtype everywhere) on every rank, in rank order."""
        send = self._array(x)
        recv = np.empty((self.size,) + send.shape, send.dtype)
        self._collective(self.comm.Iallgather(send, recv), "allgather")
        self._count("allgather", *_common.native_volume("allgather", send.nbytes, self.size, self.rank), call=True)
        return list(recv)

    def reduce_scatter(self, x: np.ndarray, op: str = "sum", algorithm: str = "native") -> np.ndarray:
        """Reduce ``x`` over ranks and return this rank's contiguous block of the flat result.

        Block ``r`` holds elements ``[r * n // size, (r + 1) * n // size)`` of the flattened
        result, ``n = x.size``.

        Args:
            x: the array (same shape and dtype on every rank).
            op: as for :meth:`allreduce`.
            algorithm: ``native`` (``MPI_Reduce_scatter``) or ``ring``.
        """
        x, b, lo, hi, out = _common.reduce_scatter_start(self, x, op, algorithm, single=self.size == 1)
        if out is None:
            send = self._array(x).reshape(-1)
            out = np.empty(hi - lo, x.dtype)
            counts = [b[i + 1] - b[i] for i in range(self.size)]
            self._collective(self.comm.Ireduce_scatter(send, out, counts, op=self._ops[op]),
                             "reduce_scatter(native)")
            self._count("reduce_scatter", *_common.native_volume("reduce_scatter", send.nbytes, self.size, self.rank,
                                                                 own_bytes=out.nbytes))
        return _common.finish_mean(out, op, self.size)

    def neighbor_exchange(self, x: np.ndarray, left: int | None = None,
                          right: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Send ``x`` to both neighbours and receive theirs (collective); see the base class.

        With one rank both results are copies of ``x``.
        """
        left, right, send, from_left, from_right, done = _common.neighbor_exchange_start(self, x, left, right)
        if done:
            return from_left, from_right
        # A message going right carries _TAG_RIGHT, so it cannot be confused with one going left
        # even when both neighbours are the same rank (two ranks).
        reqs = [self._p2p.Irecv(from_left, left, _TAG_RIGHT), self._p2p.Irecv(from_right, right, _TAG_LEFT),
                self._p2p.Isend(send, right, _TAG_RIGHT), self._p2p.Isend(send, left, _TAG_LEFT)]
        peers = [f"a message from rank {left} (left)", f"a message from rank {right} (right)",
                 f"rank {right} to receive", f"rank {left} to receive"]
        self._wait(reqs, peers, "neighbor_exchange")
        self._count("neighbor_exchange", sent=2 * send.nbytes, received=2 * send.nbytes)
        return from_left, from_right

    def barrier(self) -> None:
        """Wait until every rank has reached this call."""
        self._collective(self.comm.Ibarrier(), "barrier")

    # ------------------------------------------------------ point to point
    def send(self, x: np.ndarray, dest: int, tag: int = 0) -> None:
        """Send ``x`` to rank ``dest`` (returns once the buffer may be reused)."""
        self._check_rank(dest, "dest")
        send = self._array(x)
        self._exchange(self.comm, [(send, dest)], [], tag, "send", f"send(dest={dest}, tag={tag})")
        self._count("send", call=True)

    def recv(self, like: np.ndarray, source: int, tag: int = 0) -> np.ndarray:
        """Receive an array shaped and typed like ``like`` from rank ``source``."""
        self._check_rank(source, "source")
        out = np.empty_like(np.asarray(like), order="C")
        self._exchange(self.comm, [], [(out, source)], tag, "recv", f"recv(source={source}, tag={tag})")
        self._count("recv", call=True)
        return out

    def isend(self, x: np.ndarray, dest: int, tag: int = 0) -> Request:
        """Start sending a copy of ``x`` to rank ``dest``; see :meth:`CommunicationNetwork.isend`."""
        self._check_rank(dest, "dest")
        buf = np.array(x, copy=True, order="C")
        self._count("isend", call=True)
        return _MPIRequest(self, self.comm.Isend(buf, dest, tag), buf, dest, True,
                           f"isend(dest={dest}, tag={tag})")

    def irecv(self, like: np.ndarray, source: int, tag: int = 0) -> Request:
        """Start receiving an array like ``like`` from rank ``source``; see :meth:`CommunicationNetwork.irecv`."""
        self._check_rank(source, "source")
        buf = np.empty_like(np.asarray(like), order="C")
        self._count("irecv", call=True)
        return _MPIRequest(self, self.comm.Irecv(buf, source, tag), buf, source, False,
                           f"irecv(source={source}, tag={tag})")

    def recv_any(self, like: np.ndarray, tag: int = 0) -> tuple[np.ndarray, int]:
        """Receive an array shaped and typed like ``like`` from whichever rank sends first.

        Returns:
            ``(array, source_rank)``.
        """
        MPI = self._MPI
        out = np.empty_like(np.asarray(like), order="C")
        statuses = []
        req = self.comm.Irecv(out, MPI.ANY_SOURCE, tag)
        self._wait([req], ["a message from any rank"], f"recv_any(tag={tag})", statuses=statuses)
        self._count("recv", received=out.nbytes, call=True)
        return out, statuses[0].Get_source()
