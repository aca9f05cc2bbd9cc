"""Level 3: the communicator interface.

A communicator moves numpy buffers between ranks. Implementations (MPI through mpi4py in
:mod:`deep500lite.lv3.mpi`) live beside this module and import their library only when used.
Every operation adds the bytes it sends and receives to :attr:`CommunicationNetwork.bytes_sent`
and :attr:`CommunicationNetwork.bytes_received`, and per operation to
:attr:`CommunicationNetwork.stats`.
"""

from __future__ import annotations

import abc

import numpy as np

from deep500lite.errors import Deep500Error, UserError, format_choices
from deep500lite.lv3.allreduce import REDUCTIONS

__all__ = ["CommunicationNetwork", "CommunicationTimeout", "ALLREDUCE_OPS"]

ALLREDUCE_OPS = ("sum", "mean", "max", "min", "prod")


class CommunicationTimeout(Deep500Error, TimeoutError):
    """A communication that waited longer than the communicator's timeout.

    The message names the rank that waited, the operation and the peer (or peers) it waited for.
    """


class CommunicationNetwork(abc.ABC):
    """A group of ranks exchanging numpy arrays (Deep500's name for a communicator).

    Attributes:
        rank: this process's rank, from 0 to ``size - 1``.
        size: the number of ranks.
        bytes_sent: bytes this rank has sent since the last :meth:`reset_counters`.
        bytes_received: bytes this rank has received since then.
        stats: per operation name (``"allreduce"``, ``"broadcast"``, ...), a dict with
            ``calls``, ``bytes_sent`` and ``bytes_received`` since the last reset.
    """

    rank: int = 0
    size: int = 1

    def __init__(self):
        self.bytes_sent = 0
        self.bytes_received = 0
        self.stats: dict[str, dict[str, int]] = {}

    def reset_counters(self) -> None:
        """Set the byte counters and :attr:`stats` back to zero."""
        self.bytes_sent = 0
        self.bytes_received = 0
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
