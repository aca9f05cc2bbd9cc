"""Level 3: checks and conventions shared by the communicators (MPI in :mod:`deep500lite.lv3.mpi`,
torch.distributed in :mod:`deep500lite.frameworks.torch.distributed`).

Argument checks with the project's error format, the timeout setting, the timeout message, the
byte-counting convention for collectives that run inside a library, and the ``auto`` algorithm
choice. Nothing here imports mpi4py or torch.
"""

from __future__ import annotations

import os

import numpy as np

from deep500lite.errors import UserError, format_choices
from deep500lite.lv3 import allreduce as _ar
from deep500lite.lv3.communication import ALLREDUCE_OPS, CommunicationTimeout

__all__ = ["TIMEOUT_ENV", "resolve_timeout", "check_op", "check_rank", "check_algorithm", "ring_neighbors",
           "native_volume", "timeout_error", "AlgorithmChoice", "reduce_scatter_start", "finish_mean",
           "neighbor_exchange_start", "iallreduce_start"]

#: Environment variable giving the default timeout (seconds) of every communicator.
TIMEOUT_ENV = "DEEP500LITE_COMM_TIMEOUT"


def resolve_timeout(timeout: float | None) -> float | None:
    """The timeout in seconds: ``timeout``, else :data:`TIMEOUT_ENV`, else None (wait forever)."""
    if timeout is None and os.environ.get(TIMEOUT_ENV):
        try:
            timeout = float(os.environ[TIMEOUT_ENV])
        except ValueError:
            raise UserError(f"{TIMEOUT_ENV} must be a number of seconds. "
                            f"Received: {os.environ[TIMEOUT_ENV]!r}") from None
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise UserError(f"timeout must be a positive number of seconds or None. Received: {timeout!r}")
    return None if timeout is None else float(timeout)


def check_op(op: str, x: np.ndarray) -> None:
    """Reject reduction ops other than :data:`ALLREDUCE_OPS`, and ``mean`` on integer arrays."""
    if op not in ALLREDUCE_OPS:
        raise UserError(f"Unknown reduction op. Allowed values are {format_choices(ALLREDUCE_OPS)}. "
                        f"Received: op={op!r}")
    if op == "mean" and not np.issubdtype(x.dtype, np.inexact):
        raise UserError("op='mean' needs a floating-point or complex array; use op='sum' and divide, or cast "
                        f"first. Received: dtype={x.dtype}")


def check_rank(rank, size: int, name: str) -> None:
    """Reject anything but an integer rank from 0 to ``size - 1``."""
    if not isinstance(rank, (int, np.integer)) or isinstance(rank, bool) or not 0 <= rank < size:
        raise UserError(f"{name} must be a rank from 0 to {size - 1}. Received: {name}={rank!r}")


def check_algorithm(algorithm: str, allowed, operation: str = "allreduce") -> None:
    """Reject an ``algorithm=`` value not in ``allowed``."""
    if algorithm not in allowed:
        raise UserError(f"Unknown {operation} algorithm. Allowed values are {format_choices(allowed)}. "
                        f"Received: algorithm={algorithm!r}")


def ring_neighbors(rank: int, size: int, left=None, right=None) -> tuple[int, int]:
    """``(left, right)``: the given neighbours, or the ring's ``rank - 1`` and ``rank + 1``; checked."""
    left = (rank - 1) % size if left is None else left
    right = (rank + 1) % size if right is None else right
    check_rank(left, size, "left")
    check_rank(right, size, "right")
    return left, right


def native_volume(operation: str, nbytes: int, size: int, rank: int, root: int = 0,
                  own_bytes: int = 0) -> tuple[int, int]:
    """``(sent, received)`` bytes counted for a collective run inside a library.

    Its internal messages cannot be seen, so it counts the data of the direct exchange this rank
    takes part in, the least any algorithm must move (``n`` = ``nbytes``, ``p`` = ``size``):
    ``allreduce`` ``2(p-1)/p n`` each way; ``broadcast`` ``(p-1) n`` sent at the root, ``n``
    received elsewhere; ``gather`` and ``reduce`` ``n`` sent, ``(p-1) n`` received at the root;
    ``allgather`` ``(p-1) n`` each way; ``reduce_scatter`` ``n - own`` sent, ``(p-1) own``
    received (``own`` = ``own_bytes``, this rank's block). Nothing with one rank.
    """
    p = size
    if p <= 1:
        return 0, 0
    if operation == "allreduce":
        volume = 2 * (p - 1) * nbytes // p
        return volume, volume
    if operation == "broadcast":
        return ((p - 1) * nbytes, 0) if rank == root else (0, nbytes)
    if operation in ("gather", "reduce"):
        return (0, (p - 1) * nbytes) if rank == root else (nbytes, 0)
    if operation == "allgather":
        return (p - 1) * nbytes, (p - 1) * nbytes
    if operation == "reduce_scatter":
        return nbytes - own_bytes, (p - 1) * own_bytes
    raise ValueError(f"no byte-count convention for {operation!r}")


def reduce_scatter_start(comm, x, op: str, algorithm: str, single: bool):
    """What every communicator's ``reduce_scatter`` does before its native collective.

    Checks ``op`` and ``algorithm``, counts the call, finds this rank's block, and computes the
    result itself where no native collective is needed: one rank (``single``) or ``algorithm="ring"``
    (over ``comm``'s point-to-point transport).

    Returns:
        ``(x as an array, block bounds, lo, hi, out)``; ``out`` is None when the native collective
        must run (``mean`` is not divided yet: :func:`finish_mean`).
    """
    x = np.asarray(x)
    check_op(op, x)
    check_algorithm(algorithm, ("native", "ring"), "reduce_scatter")
    comm._count("reduce_scatter", call=True)
    b = _ar.block_bounds(x.size, comm.size)
    lo, hi = b[comm.rank], b[comm.rank + 1]
    out = None
    if single:
        out = np.array(x, copy=True, order="C").reshape(-1)
    elif algorithm == "ring":
        buf = np.array(x, copy=True, order="C").reshape(-1)
        _ar.ring_reduce_scatter(Transport(comm, "reduce_scatter"), buf, _ar.REDUCTIONS["sum" if op == "mean" else op])
        out = buf[lo:hi].copy()
    return x, b, lo, hi, out


def iallreduce_start(comm, x, op: str, out) -> tuple[np.ndarray, np.ndarray]:
    """What every communicator's ``iallreduce`` does before starting its collective.

    Checks ``op``, ``x`` (C-contiguous) and ``out`` (``x`` itself, or an array of ``x``'s shape
    and dtype, C-contiguous and writable) and counts the call under ``allreduce``.

    Returns:
        ``(x, out)``; ``out`` is a new array when None was given.
    """
    x = np.asarray(x)
    check_op(op, x)
    if not x.flags.c_contiguous:
        raise UserError(f"iallreduce needs a C-contiguous array (the collective reads it while the caller goes on); "
                        f"use np.ascontiguousarray first. Received: an array with strides {x.strides}")
    if out is None:
        out = np.empty_like(x)
    elif out is not x and (not isinstance(out, np.ndarray) or out.shape != x.shape or out.dtype != x.dtype
                           or not out.flags.c_contiguous or not out.flags.writeable):
        what = (f"{out.dtype}{list(out.shape)}, C-contiguous {out.flags.c_contiguous}, writable {out.flags.writeable}"
                if isinstance(out, np.ndarray) else type(out).__name__)
        raise UserError(f"iallreduce's out= must be x itself or a writable C-contiguous array of x's shape and dtype "
                        f"({x.dtype}{list(x.shape)}). Received: {what}")
    comm._count("allreduce", call=True)
    return x, out


def finish_mean(out: np.ndarray, op: str, size: int) -> np.ndarray:
    """``out / size`` in place for ``op="mean"`` (the collectives reduce with ``sum``)."""
    if op == "mean":
        out /= size
    return out


def neighbor_exchange_start(comm, x, left, right):
    """What every communicator's ``neighbor_exchange`` does before its messages: the neighbours, the
    send and receive buffers, the count, and the result on one rank.

    Returns:
        ``(left, right, send, from_left, from_right, done)``; ``done`` when there is one rank (both
        results are copies of ``x``).
    """
    left, right = ring_neighbors(comm.rank, comm.size, left, right)
    send = comm._array(x)
    from_left, from_right = np.empty_like(send), np.empty_like(send)
    comm._count("neighbor_exchange", call=True)
    done = comm.size == 1
    if done:
        from_left[...] = send
        from_right[...] = send
    return left, right, send, from_left, from_right, done


def timeout_error(rank: int, size: int, what: str, timeout: float, pending) -> CommunicationTimeout:
    """The :class:`CommunicationTimeout` for ``what`` on ``rank`` that waited ``timeout`` s for ``pending``."""
    return CommunicationTimeout(
        f"rank {rank} of {size}: {what} timed out after {timeout:g} s waiting for "
        f"{', '.join(pending) or 'the other ranks'}. A rank that skipped the operation, raised or "
        f"is much slower stalls the others; raise the timeout ({TIMEOUT_ENV}) if it is just slow.")


#: Tag of the allreduce algorithms' messages (on the communicator's private group, so they never
#: match the user's own sends).
ALGO_TAG = 0


class Transport:
    """The point-to-point transport a communicator hands to the allreduce algorithms.

    ``exchange`` goes to ``owner._exchange(owner._p2p, sends, recvs, ALGO_TAG, op, what)``, which
    posts every message, waits (with the owner's timeout) and counts the bytes under ``op``.
    """

    def __init__(self, owner, op: str):
        self.owner, self.op = owner, op
        self.rank, self.size = owner.rank, owner.size

    def exchange(self, sends, recvs, what: str) -> None:
        self.owner._exchange(self.owner._p2p, sends, recvs, ALGO_TAG, self.op, what)


class AlgorithmChoice:
    """``choose_algorithm`` and ``predict`` for a communicator with ``size``, ``cost_model``,
    ``_auto_choices`` (a dict) and a collective ``calibrate()``."""

    def choose_algorithm(self, nbytes: int) -> str:
        """The allreduce algorithm ``auto`` uses for ``nbytes`` bytes (calibrates first if needed; collective then)."""
        if self.size == 1:
            return "native"
        if self.cost_model is None:
            self.calibrate()
        key = (nbytes, self.cost_model)
        if key not in self._auto_choices:
            self._auto_choices[key] = _ar.choose_algorithm(nbytes, self.size, self.cost_model)
        return self._auto_choices[key]

    def predict(self, algorithm: str, nbytes: int) -> float:
        """Predicted seconds of one allreduce of ``nbytes`` bytes with :attr:`cost_model`."""
        if self.cost_model is None:
            raise UserError("No cost model yet: call calibrate() on every rank first, or pass cost_model=. "
                            "Received: cost_model=None")
        return _ar.allreduce_cost(algorithm, nbytes, self.size, self.cost_model)
