"""Level 3: the communicator interface.

A communicator moves numpy buffers between ranks. Implementations (MPI through mpi4py, and
torch.distributed) live beside this module and are imported only when used. Every operation
adds the bytes it sends and receives to :attr:`CommunicationNetwork.bytes_sent` and
:attr:`CommunicationNetwork.bytes_received`.
"""

from __future__ import annotations

import abc

import numpy as np

__all__ = ["CommunicationNetwork", "ALLREDUCE_OPS"]

ALLREDUCE_OPS = ("sum", "mean", "max", "min", "prod")


class CommunicationNetwork(abc.ABC):
    """A group of ranks exchanging numpy arrays (Deep500's name for a communicator).

    Attributes:
        rank: this process's rank, from 0 to ``size - 1``.
        size: the number of ranks.
        bytes_sent: bytes this rank has sent since the last :meth:`reset_counters`.
        bytes_received: bytes this rank has received since then.
    """

    rank: int = 0
    size: int = 1

    def __init__(self):
        self.bytes_sent = 0
        self.bytes_received = 0

    def reset_counters(self) -> None:
        """Set the byte counters back to zero."""
        self.bytes_sent = 0
        self.bytes_received = 0

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
