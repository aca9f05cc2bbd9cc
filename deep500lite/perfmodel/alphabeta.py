"""The alpha-beta (Hockney) cost model of the allreduce algorithms in :mod:`deep500lite.lv3.allreduce`.

Cost model (Hockney's alpha-beta model; ``alpha`` = latency of one message in seconds,
``beta`` = seconds per byte on the wire, ``gamma`` = seconds per byte to apply the reduction,
``n`` = bytes of the array, ``p`` = ranks, ``L = ceil(log2 p)``):

===================== ============================================ ==========================
algorithm             time                                         optimized for
===================== ============================================ ==========================
``ring``              ``2(p-1) alpha + 2 (p-1)/p n beta``          bandwidth (large messages)
                      ``+ (p-1)/p n gamma``
``recursive_doubling`` ``L (alpha + n beta + n gamma)``             latency (small messages)
``rabenseifner``      ``2 L alpha + 2 (p-1)/p n beta``             both: few messages and
                      ``+ (p-1)/p n gamma``                        bandwidth-optimal volume
``tree``              ``2 L (alpha + n beta) + L n gamma``          latency, simple (binomial
                                                                   reduce, then broadcast)
===================== ============================================ ==========================

When ``p`` is not a power of two, recursive doubling and Rabenseifner first fold the
``r = p - 2^floor(log2 p)`` extra ranks into a power-of-two core (one message of ``n`` bytes
and one reduction) and send the result back at the end (one more message): ``+ 2 (alpha + n
beta) + n gamma``, and ``L`` becomes ``floor(log2 p)``.

The facts the model and the implementations share (:data:`P2P_ALGORITHMS`, :data:`SCRATCH_LIMIT`,
:func:`core_ranks`) are defined here, below level 3, so that the algorithms import their model and
never the other way round.
"""

from __future__ import annotations

import dataclasses
import math

from deep500lite.errors import UserError, format_choices

__all__ = [
    "P2P_ALGORITHMS",
    "SCRATCH_LIMIT",
    "AlphaBeta",
    "allreduce_bytes",
    "allreduce_cost",
    "choose_algorithm",
    "core_ranks",
]

#: Allreduce algorithms written on point-to-point messages (:mod:`deep500lite.lv3.allreduce`).
P2P_ALGORITHMS = ("ring", "recursive_doubling", "rabenseifner", "tree")
#: Receive buffers up to this size are kept between calls (per thread) instead of allocated anew.
SCRATCH_LIMIT = 64 << 20


def core_ranks(p: int):
    """Power-of-two core for ``p`` ranks: ``(p2, rem)`` with ``p = p2 + rem``, ``rem < p2``."""
    p2 = 1 << (p.bit_length() - 1)
    return p2, p - p2


def allreduce_bytes(nbytes: int, size: int) -> int:
    """Bytes one rank sends (and receives) in a sum-allreduce of ``nbytes``: ``2 (P - 1) / P * nbytes``.

    The least any allreduce algorithm moves per rank, and what the communicators count for their
    native allreduce.
    """
    return 2 * (size - 1) * nbytes // size if size > 1 else 0


@dataclasses.dataclass(frozen=True)
class AlphaBeta:
    """Parameters of the alpha-beta (Hockney) cost model.

    Attributes:
        alpha: seconds of latency per message.
        beta: seconds per byte sent (the inverse of the bandwidth).
        gamma: seconds per byte to apply the reduction locally.
    """

    alpha: float
    beta: float
    gamma: float = 0.0


def allreduce_cost(algorithm: str, nbytes: int, p: int, model: AlphaBeta) -> float:
    """Predicted seconds for one allreduce of ``nbytes`` bytes on ``p`` ranks.

    Args:
        algorithm: one of :data:`P2P_ALGORITHMS`.
        nbytes: the size of the array in bytes.
        p: the number of ranks.
        model: the machine's :class:`AlphaBeta` parameters, or any object with a method
            ``cost(algorithm, nbytes, p)`` such as a fitted
            :class:`~deep500lite.perfmodel.allreduce.CalibratedModel` (which is then asked).

    Returns:
        The time from the formulas in this module's docstring (0 for ``p == 1``).
    """
    if algorithm not in P2P_ALGORITHMS:
        raise UserError(f"No cost model for this algorithm. Allowed values are "
                        f"{format_choices(P2P_ALGORITHMS)}. Received: algorithm={algorithm!r}")
    if not isinstance(model, AlphaBeta):  # a fitted model (deep500lite.perfmodel.allreduce.CalibratedModel)
        return model.cost(algorithm, nbytes, p)
    if p <= 1:
        return 0.0
    a, b, g, n = model.alpha, model.beta, model.gamma, float(nbytes)
    if algorithm == "ring":
        return 2 * (p - 1) * a + 2 * (p - 1) / p * n * b + (p - 1) / p * n * g
    if algorithm == "tree":
        levels = math.ceil(math.log2(p))
        return 2 * levels * (a + n * b) + levels * n * g
    p2, rem = core_ranks(p)
    levels = p2.bit_length() - 1
    fold = (2 * (a + n * b) + n * g) if rem else 0.0
    if algorithm == "recursive_doubling":
        return levels * (a + n * b + n * g) + fold
    return 2 * levels * a + 2 * (p2 - 1) / p2 * n * b + (p2 - 1) / p2 * n * g + fold


def choose_algorithm(nbytes: int, p: int, model: AlphaBeta) -> str:
    """The algorithm of :data:`P2P_ALGORITHMS` with the smallest :func:`allreduce_cost`.

    Ties go to the earlier algorithm in the order recursive_doubling, rabenseifner, ring, tree,
    so that every rank with the same ``model`` chooses the same one.
    """
    order = ("recursive_doubling", "rabenseifner", "ring", "tree")
    return min(order, key=lambda a: (allreduce_cost(a, nbytes, p, model), order.index(a)))
