"""Allreduce algorithms written on point-to-point messages (their cost model: :mod:`deep500lite.perfmodel.alphabeta`).

Every algorithm here works for any number of ranks ``p`` (powers of two or not) and any
length ``n`` (also ``n < p``, ``n == 0`` and ``n == 1``). They talk through a small transport
(:class:`PointToPoint`) that posts non-blocking sends and receives and waits for them, so the
same code runs over MPI or any other backend that can send and receive numpy buffers.

The alpha-beta cost model of these algorithms (:class:`AlphaBeta`, :func:`allreduce_cost`,
:func:`choose_algorithm`) is in :mod:`deep500lite.perfmodel.alphabeta`; they are re-exported here.

:func:`choose_algorithm` picks the algorithm with the smallest predicted time;
:func:`calibrate` measures ``alpha`` and ``beta`` with a short ping-pong between ranks 0 and 1
and ``gamma`` by timing the reduction itself, and shares the numbers with every rank so that all
ranks make the same choice.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Protocol

import numpy as np

from deep500lite.errors import UserError, format_choices
from deep500lite.perfmodel.alphabeta import (P2P_ALGORITHMS, SCRATCH_LIMIT, AlphaBeta, allreduce_cost,
                                             choose_algorithm)
from deep500lite.perfmodel.alphabeta import core_ranks as _core_ranks

__all__ = [
    "ALGORITHMS",
    "P2P_ALGORITHMS",
    "REDUCTIONS",
    "AlphaBeta",
    "PointToPoint",
    "allreduce_cost",
    "block_bounds",
    "calibrate",
    "choose_algorithm",
    "ring_allreduce",
    "ring_reduce_scatter",
    "recursive_doubling_allreduce",
    "rabenseifner_allreduce",
    "tree_allreduce",
    "run_allreduce",
]

#: Every value accepted by ``allreduce(algorithm=...)``.
ALGORITHMS = ("native",) + P2P_ALGORITHMS + ("auto",)
#: numpy ufuncs for the reductions (``mean`` is ``sum`` divided by the number of ranks).
REDUCTIONS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


class PointToPoint(Protocol):
    """What an algorithm needs from a communicator.

    ``exchange`` posts every send and receive at once (non-blocking), waits until all have
    completed, and counts their bytes; ``what`` names the operation for timeout errors.
    """

    rank: int
    size: int

    def exchange(self, sends, recvs, what: str) -> None:  # pragma: no cover - protocol
        """Send each ``(array, dest)`` in ``sends`` and receive into each ``(array, source)``."""


# ------------------------------------------------------------------ helpers
_SCRATCH = threading.local()


def _scratch(count: int, dtype) -> np.ndarray:
    """An uninitialized array of ``count`` elements for receiving, reused between calls.

    A fresh large numpy array is memory the kernel maps and zeroes page by page at first touch;
    allocating a receive buffer as large as the array on every call made recursive doubling and
    the tree 3-4x slower than the ring at 1 MiB on 2 ranks. Buffers up to :data:`SCRATCH_LIMIT`
    bytes are kept per thread (one per thread: the algorithms never nest).
    """
    dtype = np.dtype(dtype)
    nbytes = count * dtype.itemsize
    if nbytes > SCRATCH_LIMIT:
        return np.empty(count, dtype)
    raw = getattr(_SCRATCH, "buf", None)
    if raw is None or raw.nbytes < nbytes:
        raw = np.empty(max(nbytes, 1), np.uint8)
        _SCRATCH.buf = raw
    return raw[:nbytes].view(dtype)


def block_bounds(n: int, parts: int) -> list[int]:
    """Boundaries of ``parts`` contiguous blocks of ``n`` elements: block ``i`` is ``[b[i], b[i+1])``.

    Blocks differ in length by at most one element; some are empty when ``n < parts``.
    """
    return [i * n // parts for i in range(parts + 1)]


def _reduction(op: str):
    try:
        return REDUCTIONS[op]
    except KeyError:
        raise UserError(f"Unknown reduction op. Allowed values are {format_choices(REDUCTIONS)}. "
                        f"Received: op={op!r}") from None


def _fold(t: PointToPoint, buf: np.ndarray, ufunc, what: str):
    """Fold the extra ranks into the power-of-two core.

    Of the first ``2 * rem`` ranks, each even rank sends its data to the odd rank after it and
    sits out; the odd rank combines both. Returns this rank's index in the core (``None`` for
    a rank that sits out) and the core size.
    """
    p2, rem = _core_ranks(t.size)
    r = t.rank
    if r < 2 * rem:
        if r % 2 == 0:
            t.exchange([(buf, r + 1)], [], what + " (fold)")
            return None, p2
        tmp = _scratch(buf.size, buf.dtype)
        t.exchange([], [(tmp, r - 1)], what + " (fold)")
        ufunc(buf, tmp, out=buf)
        return r // 2, p2
    return r - rem, p2


def _core_to_rank(v: int, rem: int) -> int:
    return 2 * v + 1 if v < rem else v + rem


def _unfold(t: PointToPoint, buf: np.ndarray, what: str) -> None:
    """Send the result from each odd rank of the folded pairs back to its even partner."""
    _, rem = _core_ranks(t.size)
    r = t.rank
    if r < 2 * rem:
        if r % 2 == 0:
            t.exchange([], [(buf, r + 1)], what + " (unfold)")
        else:
            t.exchange([(buf, r - 1)], [], what + " (unfold)")


# --------------------------------------------------------------- algorithms
def ring_reduce_scatter(t: PointToPoint, buf: np.ndarray, ufunc, what: str = "reduce_scatter(ring)"):
    """Ring reduce-scatter in place on the flat ``buf``: afterwards block ``rank`` is reduced.

    ``p - 1`` steps; in each, every rank sends one block to its right neighbour and reduces the
    block coming from its left neighbour. Cost ``(p-1) alpha + (p-1)/p n (beta + gamma)``.

    Returns:
        The block boundaries (:func:`block_bounds` of ``buf.size`` into ``size`` blocks).
    """
    p, r = t.size, t.rank
    b = block_bounds(buf.size, p)
    right, left = (r + 1) % p, (r - 1) % p
    tmp = _scratch(b[1] - b[0] + (1 if buf.size % p else 0), buf.dtype)
    for s in range(p - 1):
        si, ri = (r - s - 1) % p, (r - s - 2) % p
        recv = tmp[:b[ri + 1] - b[ri]]
        t.exchange([(buf[b[si]:b[si + 1]], right)], [(recv, left)], what)
        ufunc(buf[b[ri]:b[ri + 1]], recv, out=buf[b[ri]:b[ri + 1]])
    return b


def ring_allreduce(t: PointToPoint, buf: np.ndarray, ufunc) -> None:
    """Ring allreduce in place: ring reduce-scatter, then ring allgather.

    Cost ``2(p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma``: bandwidth-optimal, but the
    number of messages grows linearly with ``p``. Works for every ``p`` without folding.
    """
    p, r = t.size, t.rank
    what = "allreduce(ring)"
    b = ring_reduce_scatter(t, buf, ufunc, what)
    right, left = (r + 1) % p, (r - 1) % p
    for s in range(p - 1):
        si, ri = (r - s) % p, (r - s - 1) % p
        t.exchange([(buf[b[si]:b[si + 1]], right)], [(buf[b[ri]:b[ri + 1]], left)], what)


def recursive_doubling_allreduce(t: PointToPoint, buf: np.ndarray, ufunc) -> None:
    """Recursive doubling allreduce in place.

    In step ``k`` each rank exchanges its whole array with the rank whose index differs in bit
    ``k`` and combines: ``log2(p) (alpha + n beta + n gamma)``. Latency-optimal; every step
    sends the full array. Other ranks than powers of two are folded into a power-of-two core
    first (``+ 2 (alpha + n beta) + n gamma``).
    """
    what = "allreduce(recursive_doubling)"
    v, p2 = _fold(t, buf, ufunc, what)
    if v is not None:
        _, rem = _core_ranks(t.size)
        tmp = _scratch(buf.size, buf.dtype)
        mask = 1
        while mask < p2:
            peer = _core_to_rank(v ^ mask, rem)
            t.exchange([(buf, peer)], [(tmp, peer)], what)
            ufunc(buf, tmp, out=buf)
            mask <<= 1
    _unfold(t, buf, what)


def rabenseifner_allreduce(t: PointToPoint, buf: np.ndarray, ufunc) -> None:
    """Rabenseifner's allreduce in place: recursive-halving reduce-scatter, then recursive-doubling allgather.

    ``2 log2(p) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma``: as few messages as recursive
    doubling (twice) and the bandwidth term of the ring. Other ranks than powers of two are
    folded into a power-of-two core first (``+ 2 (alpha + n beta) + n gamma``).
    """
    what = "allreduce(rabenseifner)"
    v, p2 = _fold(t, buf, ufunc, what)
    if v is not None and p2 > 1:
        _, rem = _core_ranks(t.size)
        b = block_bounds(buf.size, p2)
        tmp = _scratch(b[p2 // 2] - b[0] + 1, buf.dtype)

        def span(index, width):
            lo = (index // width) * width
            return b[lo], b[lo + width]

        mask = p2 // 2
        while mask >= 1:  # recursive halving: keep the half of the current range holding block v
            pv = v ^ mask
            peer = _core_to_rank(pv, rem)
            klo, khi = span(v, mask)
            slo, shi = span(pv, mask)
            recv = tmp[:khi - klo]
            t.exchange([(buf[slo:shi], peer)], [(recv, peer)], what)
            ufunc(buf[klo:khi], recv, out=buf[klo:khi])
            mask //= 2
        mask = 1
        while mask < p2:  # recursive doubling: swap the reduced ranges
            pv = v ^ mask
            peer = _core_to_rank(pv, rem)
            klo, khi = span(v, mask)
            plo, phi = span(pv, mask)
            t.exchange([(buf[klo:khi], peer)], [(buf[plo:phi], peer)], what)
            mask <<= 1
    _unfold(t, buf, what)


def tree_allreduce(t: PointToPoint, buf: np.ndarray, ufunc) -> None:
    """Binomial-tree reduce to rank 0, then binomial-tree broadcast, in place.

    ``2 ceil(log2 p) (alpha + n beta) + ceil(log2 p) n gamma``. Works for every ``p`` without
    folding; sends the whole array at every level.
    """
    p, r = t.size, t.rank
    what = "allreduce(tree)"
    tmp = None
    mask = 1
    while mask < p:  # reduce: a rank with bit k set sends to the rank without it, then stops
        if r & mask:
            t.exchange([(buf, r - mask)], [], what + " (reduce)")
            break
        if r + mask < p:
            if tmp is None:
                tmp = _scratch(buf.size, buf.dtype)
            t.exchange([], [(tmp, r + mask)], what + " (reduce)")
            ufunc(buf, tmp, out=buf)
        mask <<= 1
    mask = 1
    while mask < p:  # broadcast: receive from the parent the reduction came from
        if r & mask:
            t.exchange([], [(buf, r - mask)], what + " (broadcast)")
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if r + mask < p:
            t.exchange([(buf, r + mask)], [], what + " (broadcast)")
        mask >>= 1


_IMPLEMENTATIONS = {
    "ring": ring_allreduce,
    "recursive_doubling": recursive_doubling_allreduce,
    "rabenseifner": rabenseifner_allreduce,
    "tree": tree_allreduce,
}


def run_allreduce(t: PointToPoint, x: np.ndarray, op: str, algorithm: str) -> np.ndarray:
    """Allreduce ``x`` with one of :data:`P2P_ALGORITHMS`; returns a new array shaped like ``x``.

    ``op`` is a key of :data:`REDUCTIONS` (``mean`` is handled by the caller).
    """
    ufunc = _reduction(op)
    try:
        impl = _IMPLEMENTATIONS[algorithm]
    except KeyError:
        raise UserError(f"Unknown point-to-point allreduce algorithm. Allowed values are "
                        f"{format_choices(P2P_ALGORITHMS)}. Received: algorithm={algorithm!r}") from None
    x = np.asarray(x)
    buf = np.array(x, copy=True, order="C").reshape(-1)
    if t.size > 1:
        impl(t, buf, ufunc)
    return buf.reshape(x.shape)


def _best_time(fn, reps: int) -> float:
    """The fastest of ``reps`` calls: what the machine can do, not what a busy moment allowed."""
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def calibrate(t: PointToPoint, small: int = 8, large: int = 1 << 20, reps: int = 20,
              share=None, model_file=None, use_file: bool = True):
    """Measure :class:`AlphaBeta` on this communicator (collective: every rank must call it).

    When a calibration file is given (``model_file``) or found (the environment variable
    ``DEEP500LITE_ALLREDUCE_MODEL``, see :mod:`deep500lite.perfmodel.allreduce`) and ``use_file`` is
    true, nothing is measured: every rank loads that file's
    :class:`~deep500lite.perfmodel.allreduce.CalibratedModel` (fitted to the real algorithms; the file
    must be the same on every host) and returns it, so ``auto`` chooses by it.

    Ranks 0 and 1 ping-pong a ``small``-byte and a ``large``-byte message ``reps`` times each;
    half the fastest round trip is ``alpha + n beta`` for each size, which gives ``alpha`` and
    ``beta``. ``gamma`` is the fastest time of ``numpy.add`` on ``large`` bytes, per byte. The
    fastest, not the median, so that a rank descheduled for a moment on a shared machine does not
    distort the model.

    Args:
        t: the transport.
        small: bytes of the latency message.
        large: bytes of the bandwidth message.
        reps: round trips per size.
        share: a function ``share(values: np.ndarray) -> np.ndarray`` that returns rank 0's
            values on every rank (a broadcast), so that all ranks use the same model.
        model_file: a calibration file written by ``deep500lite bench allreduce --save-model``.
        use_file: look for a calibration file at all (False: always the ping-pong).

    Returns:
        The measured model (``alpha = beta = 0`` when there is only one rank), or the loaded
        calibrated model (a :class:`UserError` if it lacks this rank count).
    """
    if use_file:
        from deep500lite.perfmodel.allreduce import CalibratedModel, model_file_from_env

        path = model_file or model_file_from_env()
        if path:
            model = CalibratedModel.load(path)
            owner = type(getattr(t, "owner", None)).__name__
            if hasattr(t, "owner") and model.communicator != owner:
                raise UserError(f"The allreduce calibration file {path!r} was measured on another communicator; "
                                f"calibrate this one with 'deep500lite bench allreduce --save-model'. Allowed values "
                                f"are {model.communicator!r}. Received: {owner!r}")
            if t.size > 1:
                model.params(t.size)
            return model
    values = np.zeros(3, np.float64)
    if t.rank == 0:
        a = np.ones(large // 8, np.float64)
        values[2] = _best_time(lambda: np.add(a, a, out=a), reps) / large
    if t.size > 1 and t.rank < 2:
        half = []
        for nbytes in (small, large):
            msg = np.zeros(nbytes, np.uint8)
            peer = 1 - t.rank

            def round_trip():
                if t.rank == 0:
                    t.exchange([(msg, peer)], [], "calibrate")
                    t.exchange([], [(msg, peer)], "calibrate")
                else:
                    t.exchange([], [(msg, peer)], "calibrate")
                    t.exchange([(msg, peer)], [], "calibrate")

            round_trip()  # warm-up
            half.append(_best_time(round_trip, reps) / 2)
        beta = max(half[1] - half[0], 0.0) / (large - small)
        values[0], values[1] = max(half[0] - small * beta, 0.0), beta
    if share is not None:
        values = share(values)
    return AlphaBeta(float(values[0]), float(values[1]), float(values[2]))
