"""Level 3: the communicator interface.

A communicator moves numpy buffers between ranks. Implementations import their library only
when used: MPI through mpi4py in :mod:`deep500lite.lv3.mpi`, beside this module, and
``torch.distributed`` in :mod:`deep500lite.frameworks.torch.distributed` (reached as
``deep500lite.lv3.TorchDistributedCommunicator``).
Every operation adds the bytes it sends and receives to :attr:`CommunicationNetwork.bytes_sent`
and :attr:`CommunicationNetwork.bytes_received`, and per operation to
:attr:`CommunicationNetwork.stats`.
"""

from __future__ import annotations

import abc
import functools
import time
import weakref

import numpy as np

from deep500lite.errors import CommunicationTimeout  # noqa: F401 - defined in errors, re-exported here
from deep500lite.errors import UserError, format_choices
from deep500lite.lv3.allreduce import REDUCTIONS

__all__ = ["CommunicationNetwork", "CommunicationTimeout", "Request", "CompletedRequest", "ALLREDUCE_OPS",
           "TIMED_OPERATIONS", "live_communicators"]

ALLREDUCE_OPS = ("sum", "mean", "max", "min", "prod")

#: Methods whose wall time is added to :attr:`CommunicationNetwork.seconds` (in every subclass
#: that defines them; a call made inside another timed call is not counted twice).
TIMED_OPERATIONS = ("allreduce", "iallreduce", "broadcast", "gather", "allgather", "reduce_scatter", "send", "recv",
                    "recv_any", "neighbor_exchange", "barrier", "isend", "irecv", "sync_all_at_root",
                    "calibrate")


def _timed(method):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if self._timing_depth:
            return method(self, *args, **kwargs)
        self._timing_depth += 1
        start = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start
            self._timing_depth -= 1

    wrapper._deep500lite_timed = True
    return wrapper


class Request(abc.ABC):
    """A non-blocking operation in flight: a send or receive (from :meth:`CommunicationNetwork.isend`
    or :meth:`CommunicationNetwork.irecv`) or an allreduce (:meth:`CommunicationNetwork.iallreduce`).

    Its bytes are counted (under ``isend`` / ``irecv``, or ``allreduce``, in the communicator's
    ``stats``) when it completes, and the time spent in :meth:`wait` is added to the communicator's
    :attr:`~CommunicationNetwork.seconds`. Implementations provide ``_poll`` and ``_block``, and
    ``_record`` where completing means more than counting a message.

    Attributes:
        buffer: the array being sent (a private copy), the array being received into, or the
            allreduce's result (valid once complete).
        peer: the rank on the other end.
        done: True once complete.
    """

    def __init__(self, owner: "CommunicationNetwork", buffer: np.ndarray, peer: int, sending: bool):
        self.owner, self.buffer, self.peer, self.sending = owner, buffer, peer, sending
        self.done = False

    @abc.abstractmethod
    def _poll(self) -> bool:
        """Whether the transfer has completed (never blocks)."""

    @abc.abstractmethod
    def _block(self) -> None:
        """Wait for the transfer (raising CommunicationTimeout past the communicator's timeout)."""

    def _finish(self) -> None:
        self.done = True
        self._record()

    def _record(self) -> None:
        """Count the completed operation (a message: its bytes under ``isend`` or ``irecv``)."""
        n = self.buffer.nbytes
        if self.sending:
            self.owner._count("isend", sent=n)
        else:
            self.owner._count("irecv", received=n)

    def test(self) -> bool:
        """True once the operation has completed (never blocks)."""
        if not self.done and self._poll():
            self._finish()
        return self.done

    def wait(self) -> np.ndarray:
        """Block until the operation completes (or the communicator's timeout passes, raising
        :class:`CommunicationTimeout`); return :attr:`buffer`."""
        if not self.done:
            owner = self.owner
            outer = owner._timing_depth == 0
            owner._timing_depth += 1
            start = time.perf_counter()
            try:
                self._block()
            finally:
                owner._timing_depth -= 1
                if outer:
                    owner.seconds += time.perf_counter() - start
            self._finish()
        return self.buffer


class CompletedRequest(Request):
    """A request that completed before it was returned (the operation ran blocking, and is counted already)."""

    def __init__(self, owner: "CommunicationNetwork", buffer: np.ndarray):
        super().__init__(owner, buffer, -1, False)
        self.done = True

    def _poll(self) -> bool:
        return True

    def _block(self) -> None:
        pass

    def _record(self) -> None:
        pass


#: Every communicator created in this process and still referenced, in creation order (read by
#: :class:`~deep500lite.lv3.metrics.CommunicationVolume`).
_LIVE: "weakref.WeakValueDictionary[int, CommunicationNetwork]" = weakref.WeakValueDictionary()
_CREATED = [0]


def live_communicators() -> list[tuple[int, "CommunicationNetwork"]]:
    """``(serial, communicator)`` for every communicator of this process still referenced, oldest first."""
    return sorted(_LIVE.items(), key=lambda item: item[0])


class CommunicationNetwork(abc.ABC):
    """A group of ranks exchanging numpy arrays (Deep500's name for a communicator).

    The abstract base of the communicators. Deep500's ``CommunicationNetwork`` was its MPI
    communicator over ``COMM_WORLD``: ``d5.CommunicationNetwork`` (top level) is therefore
    :class:`~deep500lite.lv3.mpi.MPICommunicator`, so ``d5.CommunicationNetwork()`` works as in
    Deep500.

    Attributes:
        rank: this process's rank, from 0 to ``size - 1``.
        size: the number of ranks.
        bytes_sent: bytes this rank has sent since the last :meth:`reset_counters`.
        bytes_received: bytes this rank has received since then.
        stats: per operation name (``"allreduce"``, ``"broadcast"``, ...), a dict with
            ``calls``, ``bytes_sent`` and ``bytes_received`` since the last reset.
        seconds: wall time spent inside communication calls since the last reset (the
            operations in :data:`TIMED_OPERATIONS` and :meth:`Request.wait`); it includes
            waiting for slower ranks.
        serial: the communicator's number in this process (1 for the first created), which
            names it in :class:`~deep500lite.lv3.metrics.CommunicationVolume`.
    """

    rank: int = 0
    size: int = 1

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in TIMED_OPERATIONS:
            method = cls.__dict__.get(name)
            if callable(method) and not getattr(method, "_deep500lite_timed", False) \
                    and not getattr(method, "__isabstractmethod__", False):
                setattr(cls, name, _timed(method))

    def __init__(self):
        _CREATED[0] += 1
        self.serial = _CREATED[0]
        _LIVE[self.serial] = self
        self.bytes_sent = 0
        self.bytes_received = 0
        self.seconds = 0.0
        self._timing_depth = 0
        self.stats: dict[str, dict[str, int]] = {}

    def reset_counters(self) -> None:
        """Set the byte counters, :attr:`seconds` and :attr:`stats` back to zero."""
        self.bytes_sent = 0
        self.bytes_received = 0
        self.seconds = 0.0
        self.stats = {}

    def _count(self, op: str, sent: int = 0, received: int = 0, call: bool = False) -> None:
        """Add bytes (and optionally one call) to the totals and to ``stats[op]``."""
        entry = self.stats.setdefault(op, {"calls": 0, "bytes_sent": 0, "bytes_received": 0})
        entry["calls"] += int(call)
        entry["bytes_sent"] += int(sent)
        entry["bytes_received"] += int(received)
        self.bytes_sent += int(sent)
        self.bytes_received += int(received)

    # ------------------------------------------------------------ primitives
    @abc.abstractmethod
    def allreduce(self, x: np.ndarray, op: str = "sum", algorithm: str = "native") -> np.ndarray:
        """Combine ``x`` element-wise over all ranks; every rank gets the result.

        Args:
            x: a contiguous numpy array with the same shape and dtype on every rank.
            op: one of :data:`ALLREDUCE_OPS`.
            algorithm: ``native``, ``ring``, ``recursive_doubling``, ``rabenseifner``, ``tree``
                or ``auto``.

        Returns:
            A new array with the combined values.
        """

    def iallreduce(self, x: np.ndarray, op: str = "sum", out: np.ndarray | None = None) -> Request:
        """Start the library's own (``native``) allreduce of ``x`` and return at once.

        Communication then proceeds while the caller computes (MPI advances it whenever the
        rank enters the MPI library, e.g. in :meth:`Request.test`; torch.distributed in its own
        threads). Every rank must start the same allreduces in the same order.

        Args:
            x: a C-contiguous array with the same shape and dtype on every rank; it must not
                change until the request completes.
            op: one of :data:`ALLREDUCE_OPS`.
            out: the array the result goes to (``x`` itself reduces in place); a new one when None.

        Returns:
            A :class:`Request`; ``request.wait()`` returns the result (``out``). Its bytes are
            counted under ``allreduce`` when it completes. This base implementation runs the
            blocking :meth:`allreduce` and returns a completed request; the MPI and
            torch.distributed communicators start a real non-blocking collective.
        """
        result = self.allreduce(x, op)
        if out is None:
            return CompletedRequest(self, result)
        out[...] = result
        return CompletedRequest(self, out)

    @abc.abstractmethod
    def broadcast(self, x: np.ndarray, root: int = 0) -> np.ndarray:
        """Return ``root``'s ``x`` on every rank (``x`` gives the shape and dtype elsewhere)."""

    @abc.abstractmethod
    def gather(self, x: np.ndarray, root: int = 0) -> list[np.ndarray] | None:
        """Collect every rank's ``x`` at ``root`` (a list in rank order there, None elsewhere)."""

    @abc.abstractmethod
    def allgather(self, x: np.ndarray) -> list[np.ndarray]:
        """Collect every rank's ``x`` on every rank, in rank order."""

    @abc.abstractmethod
    def reduce_scatter(self, x: np.ndarray, op: str = "sum") -> np.ndarray:
        """Reduce ``x`` over ranks and return this rank's contiguous block of the flat result.

        Block ``r`` holds elements ``[r * n // size, (r + 1) * n // size)`` of the flattened
        result, ``n = x.size``.
        """

    @abc.abstractmethod
    def send(self, x: np.ndarray, dest: int, tag: int = 0) -> None:
        """Send ``x`` to rank ``dest`` (returns once the buffer may be reused)."""

    @abc.abstractmethod
    def recv(self, like: np.ndarray, source: int, tag: int = 0) -> np.ndarray:
        """Receive an array shaped and typed like ``like`` from rank ``source``."""

    @abc.abstractmethod
    def recv_any(self, like: np.ndarray, tag: int = 0) -> tuple[np.ndarray, int]:
        """Receive an array shaped and typed like ``like`` from whichever rank sends first.

        Returns:
            ``(array, source_rank)``.
        """

    @abc.abstractmethod
    def isend(self, x: np.ndarray, dest: int, tag: int = 0) -> Request:
        """Start sending ``x`` to rank ``dest`` and return at once.

        ``x`` is copied first, so the caller may change it right away. Messages between two
        ranks with the same tag arrive in the order they were sent.
        """

    @abc.abstractmethod
    def irecv(self, like: np.ndarray, source: int, tag: int = 0) -> Request:
        """Start receiving an array shaped and typed like ``like`` from rank ``source``.

        Returns:
            A :class:`Request`; ``request.wait()`` returns the received array.
        """

    @abc.abstractmethod
    def neighbor_exchange(self, x: np.ndarray, left: int | None = None,
                          right: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Send ``x`` to the left and right neighbours and receive theirs (collective).

        Neighbours default to the ring ``(rank - 1) % size`` and ``(rank + 1) % size``. Every
        rank's left neighbour must name it as its right neighbour and vice versa.

        Returns:
            ``(from_left, from_right)``: the arrays the two neighbours sent.
        """

    @abc.abstractmethod
    def barrier(self) -> None:
        """Wait until every rank has reached this call."""

    # ---------------------------------------------- Deep500 names on top of them
    def sync_all(self, x: np.ndarray) -> np.ndarray:
        """Sum ``x`` over all ranks (Deep500's name for a sum-allreduce)."""
        return self.allreduce(x, "sum")

    def sync_all_at_root(self, x: np.ndarray, root: int = 0) -> np.ndarray | None:
        """Sum ``x`` over all ranks at ``root`` only (None elsewhere)."""
        parts = self.gather(x, root)
        return None if parts is None else np.sum(parts, axis=0, dtype=x.dtype)

    def gather_at_root(self, x: np.ndarray, root: int = 0):
        """Deep500 name for :meth:`gather`."""
        return self.gather(x, root)

    def sync_all_with_root(self, x: np.ndarray, root: int = 0) -> np.ndarray:
        """Deep500 name for :meth:`broadcast` from ``root``."""
        return self.broadcast(x, root)

    def send_to_root(self, x: np.ndarray, root: int = 0, tag: int = 0) -> None:
        """Send ``x`` to ``root``."""
        self.send(x, root, tag)

    def send_to_rank(self, x: np.ndarray, rank: int, tag: int = 0) -> None:
        """Send ``x`` to ``rank``."""
        self.send(x, rank, tag)

    def wait_for_root(self, like: np.ndarray, root: int = 0, tag: int = 0) -> np.ndarray:
        """Receive an array from ``root``."""
        return self.recv(like, root, tag)

    def wait_for_any_rank(self, like: np.ndarray, tag: int = 0) -> tuple[np.ndarray, int]:
        """Receive from whichever rank sends first (a parameter server's loop); see :meth:`recv_any`."""
        return self.recv_any(like, tag)

    def reduce_from_neighbors(self, x: np.ndarray, op: str = "sum") -> np.ndarray:
        """Combine ``x`` with the arrays of the ring neighbours (collective).

        Each distinct neighbour counts once: with two ranks the result combines two arrays,
        with one rank it is a copy of ``x``. ``op`` is ``sum``, ``mean``, ``max``, ``min`` or
        ``prod``; ``mean`` divides the sum by the number of arrays combined.
        """
        if op not in ALLREDUCE_OPS:
            raise UserError(f"Unknown reduction op. Allowed values are {format_choices(ALLREDUCE_OPS)}. "
                            f"Received: op={op!r}")
        from_left, from_right = self.neighbor_exchange(x)
        parts = [np.asarray(x)]
        if self.size > 1:
            parts.append(from_left)
        if self.size > 2:
            parts.append(from_right)
        ufunc = REDUCTIONS["sum" if op == "mean" else op]
        out = np.array(parts[0], copy=True)
        for part in parts[1:]:
            ufunc(out, part, out=out)
        if op == "mean":
            out = out / len(parts)
        return out
