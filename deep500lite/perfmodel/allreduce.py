"""A calibrated allreduce cost model: alpha, beta, gamma and a memory-copy cost fitted to the real algorithms.

The ping-pong alpha-beta model of :mod:`deep500lite.lv3.allreduce` sees one message between two
ranks; the algorithms also copy the input, allocate and fault in temporary buffers, reduce, and
(with several ranks per host) contend for memory bandwidth and cores. This module times the real
algorithms (:data:`~deep500lite.lv3.allreduce.P2P_ALGORITHMS`) at a few sizes on a communicator and
fits, per rank count ``p``, by non-negative least squares on the relative error::

    t(algorithm, n, p) = overhead + alpha * messages
                         + (1 - phi) * (beta * wire_bytes + gamma * reduced_bytes + delta * copied_bytes)
                         + phi * (beta_mem * wire_bytes + gamma_mem * reduced_bytes + delta_mem * copied_bytes)

with ``phi = n^k / (n^k + cache_bytes^k)`` the share of a buffer's traffic that misses the caches
(``cache_bytes`` is chosen from :data:`CACHE_CANDIDATES` by the fit; 0 = one regime; the
sharpness ``k`` is 1 unless three regimes are fitted), and
where the counts are those along one rank's critical path (:func:`cost_terms`); ``messages``
counts every send and every receive a rank posts (a ring step posts one of each), since on one
host the per-message software cost, not the wire, is the latency:

===================== ================= ==================== ================== ==============
algorithm             messages          wire bytes           reduced bytes      copied bytes
===================== ================= ==================== ================== ==============
``ring``              ``4(p-1)``        ``2 (p-1)/p n``      ``(p-1)/p n``      ``n (+ n/p)``
``recursive_doubling`` ``2 L``           ``L n``              ``L n``            ``n (+ n)``
``rabenseifner``      ``4 L``           ``2 (q-1)/q n``      ``(q-1)/q n``      ``n (+ n/2)``
``tree``              ``2 ceil(log2 p)`` ``2 ceil(log2 p) n`` ``ceil(log2 p) n`` ``n (+ n)``
===================== ================= ==================== ================== ==============

(``q = 2^L`` the power-of-two core, ``L = floor(log2 p)``; for ``p`` not a power of two,
recursive doubling and Rabenseifner add the fold: 2 messages, ``2 n`` on the wire, ``n`` reduced.)
The copied bytes are the input copy every algorithm makes (fresh memory that the operating system
faults in page by page at first touch), plus, in parentheses, the receive buffer when it is larger
than :data:`~deep500lite.lv3.allreduce.SCRATCH_LIMIT` (smaller ones are reused between calls);
``overhead`` is the fixed cost of one call (argument checks, allocation).

Averaged work. Each regime also has costs for the bytes sent and reduced averaged over the ranks
(``beta_avg``, ``gamma_avg``; ``*_avg_mem``, ``*_avg_mid``): all the ranks' bytes divided by
``p``, the last two :func:`cost_terms`. Ranks that share cores or memory bandwidth pay for one
another's bytes, not only for those on their own critical path. The two counts differ only where
the work is uneven: the tree averages ``2 (p-1)/p n`` sent and ``(p-1)/p n`` reduced against ``2 L n``
and ``L n`` along its root's path, and a fold adds ``2 rem n / p`` and ``rem n / p``
(``rem = p - q``). On the 2-core AMD VM with 4 ranks the tree took less time than recursive
doubling in 55 of 64 cases (16 runs, 64 KiB to 4 MiB; 0.88 times as long, median); by the
critical path alone it can take no less, and the fit had put recursive doubling 10-25% low and the
tree up to 20% high (docs/scaling.md, "Freed memory stays in the ranks").

Three regimes. When the calibration has at least :data:`THREE_REGIME_MIN_SIZES` sizes (as with
``bench allreduce --calibration-factor 2``), the fit also tries a middle regime between two
crossovers, ``cache_bytes < memory_bytes``, with sharpness ``k`` in :data:`SHARPNESS_CANDIDATES`,
and keeps whichever fits the calibration best::

    phi1 = frac(n, cache_bytes), phi2 = frac(n, memory_bytes),   frac(n, c) = n^k / (n^k + c^k)
    byte costs = (1 - phi1) * cache costs + phi1 * (1 - phi2) * *_mid costs + phi1 * phi2 * *_mem costs

On the 2-core AMD VM (1 MiB of L2 per core, a shared L3), copying into a buffer and sending it
took 1.6-1.8 times as long as the same copy followed by sending a buffer the core had not
written, up to 256 KiB, and about as long from 2 MiB: the partner had to fetch a small message
out of the sender's own L2, while a larger one had already been pushed out to the shared L3 by
the sender's writes. Per byte, the ring was cheapest at 1-2 MiB and cost more than twice as much
past the L3 (docs/scaling.md, "Three regimes"). One crossover cannot follow that dip, two can.
With fewer calibration sizes two crossovers are not pinned down, and the fit keeps one.

A :class:`CalibratedModel` holds the fitted parameters per rank count, the raw medians it was
fitted to, and the environment; :meth:`CalibratedModel.save` writes it as JSON (merging rank
counts into an existing file of the same communicator), and ``algorithm="auto"`` uses it when a
communicator is built with ``cost_model=CalibratedModel.load(path)`` or when
``DEEP500LITE_ALLREDUCE_MODEL`` names such a file (see
:func:`deep500lite.lv3.allreduce.calibrate`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

import numpy as np

from deep500lite.errors import UserError, format_choices
from deep500lite.perfmodel.alphabeta import P2P_ALGORITHMS, SCRATCH_LIMIT
from deep500lite.perfmodel.alphabeta import core_ranks as _core_ranks

__all__ = ["AVERAGED_GAIN", "CACHE_CANDIDATES", "CALIBRATION_SIZES", "MODEL_ENV", "SHARPNESS_CANDIDATES",
           "THREE_REGIME_MIN_SIZES", "CostParameters", "CalibratedModel", "cost_terms",
           "fit_cold", "fit_parameters", "memory_fraction",
           "calibrate_allreduce", "calibration_rows", "model_from_rows", "pooled_rows", "model_file_from_env"]

#: Message sizes (bytes) of the default calibration run.
CALIBRATION_SIZES = (16 << 10, 128 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20)
#: Environment variable naming a calibration file that ``auto`` uses.
MODEL_ENV = "DEEP500LITE_ALLREDUCE_MODEL"
_FORMAT = "deep500lite-allreduce-model/1"
_NTERMS = 7
#: The fitted coefficients, in the order of :func:`_design`'s columns.
_COEFFICIENTS = ("overhead", "alpha", "beta", "gamma", "delta", "beta_mem", "gamma_mem", "delta_mem", "beta_mid",
                 "gamma_mid", "delta_mid", "beta_avg", "gamma_avg", "beta_avg_mem", "gamma_avg_mem", "beta_avg_mid",
                 "gamma_avg_mid")
#: Candidate sizes of the cache crossover tried by :func:`fit_parameters` (0: one regime only).
CACHE_CANDIDATES = (0,) + tuple(1 << k for k in range(15, 28))
#: Calibration sizes (distinct) from which :func:`fit_parameters` also tries three regimes.
THREE_REGIME_MIN_SIZES = 9
#: Sharpness exponents of the crossovers tried with three regimes.
SHARPNESS_CANDIDATES = (1.0, 2.0, 4.0)
#: The averaged byte costs are kept only when they bring the fit's squared error below this share.
AVERAGED_GAIN = 0.9


def cost_terms(algorithm: str, nbytes: float, p: int) -> np.ndarray:
    """The counts of one allreduce that the model's costs multiply.

    ``[calls, messages, wire_bytes, reduced_bytes, copied_bytes, avg_wire_bytes, avg_reduced_bytes]``.

    The first five are counted along one rank's critical path; the last two are the bytes every
    rank sends and reduces, summed over the ranks and divided by ``p`` (what ranks that share
    cores and memory pay between them). They differ from the critical path's only where the work is
    uneven: the tree (its root receives and sends every level) and the fold of a rank count that
    is not a power of two.

    Args:
        algorithm: one of :data:`~deep500lite.lv3.allreduce.P2P_ALGORITHMS`.
        nbytes: bytes of the array.
        p: ranks (all zeros for ``p <= 1``).
    """
    if algorithm not in P2P_ALGORITHMS:
        raise UserError(f"No cost model for this algorithm. Allowed values are {format_choices(P2P_ALGORITHMS)}. "
                        f"Received: algorithm={algorithm!r}")
    n = float(nbytes)
    if p <= 1:
        return np.zeros(_NTERMS)

    def copied(tmp):  # the input copy, and the receive buffer when it is too large to be kept
        return n + (tmp if tmp > SCRATCH_LIMIT else 0.0)

    if algorithm == "ring":
        wire, reduced = 2 * (p - 1) / p * n, (p - 1) / p * n
        return np.array([1, 4 * (p - 1), wire, reduced, copied(n / p), wire, reduced])
    if algorithm == "tree":  # p - 1 messages of n up (each reduced), p - 1 down
        levels = math.ceil(math.log2(p))
        spread = np.array([2 * (p - 1) / p * n, (p - 1) / p * n])
        return np.concatenate([[1, 2 * levels, 2 * levels * n, levels * n, copied(n)], spread])
    q, rem = _core_ranks(p)
    levels = q.bit_length() - 1
    # the fold: each of the rem extra ranks sends its array to a partner, which reduces it and sends the result back
    fold = np.array([0, 2, 2 * n, n, 0.0, 2 * rem * n / p, rem * n / p]) if rem else np.zeros(_NTERMS)
    if algorithm == "recursive_doubling":
        spread = q * levels * n / p
        return np.array([1, 2 * levels, levels * n, levels * n, copied(n), spread, spread]) + fold
    wire, reduced = 2 * (q - 1) / q * n, (q - 1) / q * n
    return np.array([1, 4 * levels, wire, reduced, copied(n / 2), q * wire / p, q * reduced / p]) + fold


def _fraction(nbytes, crossover: float, sharpness: float):
    """:func:`memory_fraction` of a size or of an array of sizes."""
    if np.ndim(nbytes) == 0:  # one size: plain floats (a prediction is called often)
        n = float(nbytes)
        return np.float64(0.0 if crossover <= 0 or n <= 0 else 1.0 / (1.0 + (crossover / n) ** sharpness))
    n = np.asarray(nbytes, dtype=float)
    if crossover <= 0:
        return np.zeros_like(n)
    with np.errstate(divide="ignore"):
        return np.where(n > 0, 1.0 / (1.0 + (crossover / np.where(n > 0, n, 1.0)) ** sharpness), 0.0)


def memory_fraction(nbytes: float, cache_bytes: float, sharpness: float = 1.0) -> float:
    """``phi(n) = n^k / (n^k + cache_bytes^k)`` (``k`` the sharpness): how much of a buffer's traffic goes
    past a cache of about ``cache_bytes`` (0 when ``cache_bytes`` is 0: one regime)."""
    return float(_fraction(nbytes, cache_bytes, sharpness))


def _design(terms: np.ndarray, nbytes, cache_bytes: float, memory_bytes: float = 0.0,
            sharpness: float = 1.0) -> np.ndarray:
    """The 17 columns for :class:`CostParameters` (:data:`_COEFFICIENTS`): calls, messages, the
    critical path's byte terms in cache, in memory and in the middle regime (all zero unless
    ``memory_bytes`` is set), then the averaged byte terms in the same three regimes.

    ``terms`` is one :func:`cost_terms` row and ``nbytes`` its size, or an ``(N, 7)`` array of them
    and an array of ``N`` sizes (then the result is ``(N, 17)``).
    """
    terms = np.asarray(terms, dtype=float)
    phi = _fraction(nbytes, cache_bytes, sharpness)[..., None]
    if memory_bytes > 0:
        phi2 = _fraction(nbytes, memory_bytes, sharpness)[..., None]
        mid, mem = phi * (1 - phi2), phi * phi2
    else:
        mid, mem = np.zeros_like(phi), phi
    path, avg = terms[..., 2:5], terms[..., 5:7]
    return np.concatenate([terms[..., :2], (1 - phi) * path, mem * path, mid * path, (1 - phi) * avg, mem * avg,
                           mid * avg], axis=-1)


@dataclasses.dataclass(frozen=True)
class CostParameters:
    """Fitted parameters for one rank count.

    Per-byte costs come in two regimes: a buffer of ``n`` bytes sends a fraction
    ``phi(n) = n / (n + cache_bytes)`` of its traffic at the memory costs (``*_mem``) and the rest at
    the cache costs (:func:`memory_fraction`); ``cache_bytes = 0`` is a single regime. With
    ``memory_bytes > 0`` there are three: the traffic past ``cache_bytes`` goes at the middle costs
    (``*_mid``) until ``memory_bytes``, and at the memory costs past it, each crossover with the
    exponent ``sharpness`` (see the module docstring).

    Attributes:
        overhead: seconds per call.
        alpha: seconds per message posted (latency, including the software's per-message cost).
        beta: seconds per byte on the wire.
        gamma: seconds per byte reduced.
        delta: seconds per byte copied (the input copy and the temporary buffer).
        beta_mem, gamma_mem, delta_mem: the same for traffic that misses the caches.
        cache_bytes: the buffer size at which half the traffic goes to memory (or, with three
            regimes, past the first cache).
        beta_mid, gamma_mid, delta_mid: the same for the middle regime (three regimes only).
        memory_bytes: the second crossover (0: two regimes at most).
        sharpness: the exponent ``k`` of the crossovers (1 with two regimes).
        beta_avg, gamma_avg: seconds per byte sent and reduced on average over the ranks
            (:func:`cost_terms`' last two terms), in cache; ``*_avg_mem`` and ``*_avg_mid`` the same
            in memory and in the middle regime. Ranks that share cores and memory pay for each
            other's bytes, not only for those on their critical path (0 in files of older versions).
        cold_overhead, cold_per_byte: what a cold call adds, in seconds per call and per byte: a call
            made after each rank has read a buffer the size of its last-level cache, as the first
            allreduce after a training step's compute is (:func:`fit_cold`; 0 when not measured).
    """

    overhead: float
    alpha: float
    beta: float
    gamma: float
    delta: float
    beta_mem: float = 0.0
    gamma_mem: float = 0.0
    delta_mem: float = 0.0
    cache_bytes: float = 0.0
    beta_mid: float = 0.0
    gamma_mid: float = 0.0
    delta_mid: float = 0.0
    memory_bytes: float = 0.0
    sharpness: float = 1.0
    beta_avg: float = 0.0
    gamma_avg: float = 0.0
    beta_avg_mem: float = 0.0
    gamma_avg_mem: float = 0.0
    beta_avg_mid: float = 0.0
    gamma_avg_mid: float = 0.0
    cold_overhead: float = 0.0
    cold_per_byte: float = 0.0

    def vector(self) -> np.ndarray:
        """The seventeen coefficients that multiply :func:`_design`'s columns."""
        return np.array([getattr(self, name) for name in _COEFFICIENTS])

    def seconds(self, algorithm: str, nbytes: float, p: int, cold: bool = False) -> float:
        """Predicted seconds of one allreduce of ``nbytes`` on ``p`` ranks (``cold``: right after compute)."""
        terms = cost_terms(algorithm, nbytes, p)
        warm = float(_design(terms, nbytes, self.cache_bytes, self.memory_bytes, self.sharpness) @ self.vector())
        return warm + (self.cold_overhead + self.cold_per_byte * nbytes if cold else 0.0)


_FIELDS = dataclasses.fields(CostParameters)
#: The file's parameter names: the first five are required, the others have defaults.
_PARAMS = tuple(f.name for f in _FIELDS)
_DEFAULTS = {f.name: f.default for f in _FIELDS if f.default is not dataclasses.MISSING}


def _nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares: ``scipy.optimize.nnls`` when scipy is installed, else an active-set
    loop around ``numpy.linalg.lstsq`` (a coefficient that comes out negative is fixed at zero)."""
    try:
        from scipy.optimize import nnls
    except ImportError:  # pragma: no cover - scipy is optional
        nnls = None
    if nnls is not None:
        return nnls(a, y)[0]
    active = [j for j in range(a.shape[1]) if np.any(a[:, j] != 0)]
    coef = np.zeros(a.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(a[:, active], y, rcond=None)
        if np.all(sol >= 0):
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    return coef


def _fit_design(x: np.ndarray, t: np.ndarray) -> tuple[float, np.ndarray]:
    """``(sum of squared relative errors, coefficients)`` of the non-negative fit of ``x @ coef`` to ``t``
    (columns that are zero in every row get 0)."""
    used = np.any(x != 0, axis=0)
    coef = np.zeros(x.shape[1])
    coef[used] = _nnls((x / t[:, None])[:, used], np.ones(len(t)))
    return float(np.sum((x @ coef / t - 1) ** 2)), coef


def _measured_times(rows: list, what: str) -> np.ndarray:
    """The seconds of ``(algorithm, nbytes, p, seconds)`` rows, checked: one rank count, every time positive."""
    ps = {int(r[2]) for r in rows}
    if len(ps) != 1 or not rows:
        raise UserError(f"{what} needs rows of one rank count. Received: rank counts {sorted(ps)}")
    t = np.array([float(r[3]) for r in rows])
    if np.any(t <= 0):
        raise UserError(f"Measured times must be positive. Received: {t.min()}")
    return t


def fit_parameters(rows) -> CostParameters:
    """Least-squares fit of :class:`CostParameters` to measured times of one rank count.

    Minimizes the sum of squared *relative* errors (each row divided by its time, so a 16 KiB and
    a 32 MiB row count alike) with every parameter kept non-negative (:func:`_nnls`), for each
    ``cache_bytes`` of :data:`CACHE_CANDIDATES`, and keeps the best (a single regime unless two
    regimes lower the error by more than 10%). When the rows hold at least
    :data:`THREE_REGIME_MIN_SIZES` distinct sizes, it also tries three regimes: every pair of
    crossovers ``cache_bytes < memory_bytes`` of :data:`CACHE_CANDIDATES` with each sharpness of
    :data:`SHARPNESS_CANDIDATES` (and one crossover with each sharpness), and keeps whichever of
    all these fits best.

    Args:
        rows: ``(algorithm, nbytes, p, seconds)`` tuples, all with the same ``p``.

    Returns:
        The fitted parameters.
    """
    rows = list(rows)
    t = _measured_times(rows, "fit_parameters")
    terms = np.array([cost_terms(a, n, p) for a, n, p, _ in rows])
    sizes = np.array([float(r[1]) for r in rows])

    def search(averaged):
        with_avg = terms if averaged else np.concatenate([terms[:, :5], np.zeros_like(terms[:, 5:])], axis=1)

        def fit(cache, memory=0.0, sharpness=1.0):
            sse, coef = _fit_design(_design(with_avg, sizes, cache, memory, sharpness), t)
            return sse, coef, (cache, memory, sharpness)

        best = None
        for cache in CACHE_CANDIDATES:
            cand = fit(cache)
            if best is None or cand[0] < (0.9 * best[0] - 1e-9 if best[2][0] == 0 else best[0]):
                best = cand
        if len(np.unique(sizes)) >= THREE_REGIME_MIN_SIZES:
            crossovers = [c for c in CACHE_CANDIDATES if c > 0]
            for k in SHARPNESS_CANDIDATES:
                for i, cache in enumerate(crossovers):
                    for memory in [0.0] + crossovers[i + 1:]:
                        if k == 1.0 and memory == 0.0:
                            continue  # tried above
                        cand = fit(cache, memory, k)
                        if cand[0] < best[0]:
                            best = cand
        return best

    best = search(averaged=False)
    averaged = search(averaged=True)
    if averaged[0] < AVERAGED_GAIN * best[0] - 1e-9:
        best = averaged
    _, coef, (cache, memory, sharpness) = best
    return CostParameters(**{name: float(v) for name, v in zip(_COEFFICIENTS, coef)}, cache_bytes=float(cache),
                          memory_bytes=float(memory), sharpness=float(sharpness))


def fit_cold(params: CostParameters, rows) -> CostParameters:
    """``params`` with the cost of cold calls fitted to their measured times.

    A cold call is timed right after every rank has read a buffer the size of its last-level cache
    (``bench allreduce --evict``), as the first allreduce after a step's forward and backward pass
    finds the caches filled with the network's data and code instead of the communication's. The
    extra time over the warm prediction is fitted as ``cold_overhead + cold_per_byte * n`` by
    non-negative least squares on the relative error, like :func:`fit_parameters`.

    Args:
        params: the warm parameters of the same rank count.
        rows: ``(algorithm, nbytes, p, cold seconds)`` tuples (medians), all with the same ``p``.

    Returns:
        A copy of ``params`` with ``cold_overhead`` and ``cold_per_byte`` set.
    """
    rows = list(rows)
    t = _measured_times(rows, "fit_cold")
    warm = np.array([params.seconds(a, n, int(p)) for a, n, p, _ in rows])
    nbytes = np.array([float(r[1]) for r in rows])
    scale = 1e-6  # seconds per microsecond and per MiB, so that both columns are of similar size
    design = np.stack([np.full_like(t, scale), nbytes / (1 << 20) * scale], axis=1) / t[:, None]
    coef = _nnls(design, (t - warm) / t)
    return dataclasses.replace(params, cold_overhead=float(coef[0] * scale),
                               cold_per_byte=float(coef[1] * scale / (1 << 20)))


@dataclasses.dataclass(frozen=True)
class CalibratedModel:
    """Allreduce cost model fitted per rank count on one communicator (hashable: usable as ``cost_model``).

    Attributes:
        communicator: the communicator class it was measured on (e.g. ``MPICommunicator``).
        parameters: ``((p, CostParameters), ...)`` sorted by ``p``.
        measurements: per ``p`` (as a string key), the ``[algorithm, bytes, median seconds]`` fitted to.
        environment: :func:`deep500lite.environment.collect_environment` of the machine (or ``{}``).
        cold: per ``p`` (as a string key), ``{"evict_bytes": bytes each rank read before a cold call,
            "measurements": [[algorithm, bytes, median seconds], ...]}`` that the cold costs were
            fitted to (:meth:`with_cold`; empty when they were not measured).
    """

    communicator: str
    parameters: tuple
    measurements: dict = dataclasses.field(default_factory=dict, compare=False, hash=False)
    environment: dict = dataclasses.field(default_factory=dict, compare=False, hash=False)
    cold: dict = dataclasses.field(default_factory=dict, compare=False, hash=False)

    @property
    def ranks(self) -> list[int]:
        """The rank counts this model was calibrated for."""
        return [p for p, _ in self.parameters]

    def params(self, p: int) -> CostParameters:
        """The parameters for ``p`` ranks (a :class:`UserError` if ``p`` was not calibrated)."""
        for q, par in self.parameters:
            if q == p:
                return par
        raise UserError(f"The allreduce model was not calibrated for this rank count; calibrate it with "
                        f"'deep500lite bench allreduce -n {p} --save-model FILE'. Allowed values are "
                        f"{format_choices(self.ranks)}. Received: p={p}")

    def cost(self, algorithm: str, nbytes: int, p: int, cold: bool = False) -> float:
        """Predicted seconds of one allreduce of ``nbytes`` bytes on ``p`` ranks (0 for ``p <= 1``).

        ``cold``: the call comes right after compute (the first of a step), with its extra cost
        (:func:`fit_cold`; none in a file that did not measure it).
        """
        if p <= 1:
            cost_terms(algorithm, nbytes, p)
            return 0.0
        return self.params(p).seconds(algorithm, nbytes, p, cold)

    def with_cold(self, p: int, rows, evict_bytes: int) -> "CalibratedModel":
        """This model with the cold costs of ``p`` ranks fitted to ``rows`` (see :func:`fit_cold`).

        Args:
            p: the rank count (already calibrated).
            rows: ``(algorithm, nbytes, p, median seconds)`` of calls timed cold.
            evict_bytes: the bytes each rank read before each cold call.
        """
        params = dict(self.parameters)
        params[p] = fit_cold(self.params(p), rows)
        cold = dict(self.cold)
        cold[str(p)] = {"evict_bytes": int(evict_bytes), "measurements": [[a, n, s] for a, n, _, s in rows]}
        return dataclasses.replace(self, parameters=tuple(sorted(params.items())), cold=cold)

    def errors(self, p: int) -> list[tuple[str, int, float]]:
        """``(algorithm, bytes, relative error)`` of the prediction on each calibration measurement of ``p``."""
        out = []
        for algorithm, nbytes, seconds in self.measurements.get(str(p), []):
            out.append((algorithm, int(nbytes), self.cost(algorithm, nbytes, p) / seconds - 1.0))
        return out

    def merged(self, other: "CalibratedModel") -> "CalibratedModel":
        """This model with ``other``'s rank counts added (``other`` wins where both have one)."""
        if other.communicator != self.communicator:
            raise UserError(f"Cannot merge allreduce models of different communicators. Allowed values are "
                            f"{self.communicator!r}. Received: {other.communicator!r}")
        params = dict(self.parameters)
        params.update(dict(other.parameters))
        meas = dict(self.measurements)
        meas.update(other.measurements)
        cold = {p: v for p, v in self.cold.items() if p not in other.measurements}
        cold.update(other.cold)
        return CalibratedModel(self.communicator, tuple(sorted(params.items())), meas,
                               other.environment or self.environment, cold)

    def to_dict(self) -> dict:
        """JSON-ready form (:meth:`from_dict` reads it back)."""
        return {"format": _FORMAT, "communicator": self.communicator,
                "model": "t = overhead + alpha*messages + (1-phi)*(beta*wire + gamma*reduced + delta*copied) + "
                         "phi*(1-phi2)*(beta_mid*wire + gamma_mid*reduced + delta_mid*copied) + "
                         "phi*phi2*(beta_mem*wire + gamma_mem*reduced + delta_mem*copied), "
                         "phi = f(cache_bytes), phi2 = f(memory_bytes) (1 when memory_bytes is 0), "
                         "f(c) = n^sharpness/(n^sharpness + c^sharpness); a cold call (the first after compute) "
                         "adds cold_overhead + cold_per_byte*n",
                "parameters": {str(p): dataclasses.asdict(par) for p, par in self.parameters},
                "measurements": self.measurements, "cold": self.cold, "environment": self.environment}

    @classmethod
    def from_dict(cls, data) -> "CalibratedModel":
        """Rebuild a model from :meth:`to_dict`'s output."""
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            got = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise UserError(f"Not an allreduce calibration file: the 'format' must be {_FORMAT!r} (written by "
                            f"'deep500lite bench allreduce --save-model'). Received: {got!r}")
        try:
            params = tuple(sorted((int(p), CostParameters(**{k: float(v[k]) for k in _PARAMS[:5]},
                                                          **{k: float(v.get(k, _DEFAULTS[k]))
                                                             for k in _PARAMS[5:]}))
                                  for p, v in data["parameters"].items()))
            return cls(str(data["communicator"]), params, dict(data.get("measurements", {})),
                       dict(data.get("environment") or {}), dict(data.get("cold") or {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"A broken allreduce calibration file: each parameters entry needs the numbers "
                            f"{', '.join(_PARAMS[:5])} and may have {', '.join(_PARAMS[5:])}. "
                            f"Received: {exc!r}") from None

    def save(self, path, merge: bool = True) -> "CalibratedModel":
        """Write the model as JSON to ``path``; with ``merge``, keep the other rank counts of an existing file.

        Returns:
            The model written (merged or not).
        """
        from deep500lite.utils import atomic_write_text, finite_json

        model = self
        if merge and os.path.exists(path):
            model = CalibratedModel.load(path).merged(self)
        atomic_write_text(path, finite_json(model.to_dict(), indent=1, default=str))
        return model

    @classmethod
    def load(cls, path) -> "CalibratedModel":
        """Read a model written by :meth:`save`."""
        from deep500lite.input_files import input_path, read_input_json

        if not os.path.lexists(input_path(path, "The allreduce calibration file")):
            raise UserError(f"The allreduce calibration file does not exist; write one with 'deep500lite bench "
                            f"allreduce -n P --save-model FILE'. Received: {os.fspath(path)!r}")
        data = read_input_json(path, "The allreduce calibration file (readable JSON)")
        return cls.from_dict(data)


def model_file_from_env() -> str | None:
    """The calibration file named by ``DEEP500LITE_ALLREDUCE_MODEL`` (None when unset or empty)."""
    return os.environ.get(MODEL_ENV) or None


def _time_algorithm(comm, x, algorithm: str, max_time: float, min_reps: int, max_reps: int) -> float:
    """Median over calls of the slowest rank's time of ``comm.allreduce(x, algorithm=...)`` (collective)."""
    comm.allreduce(x, algorithm=algorithm)  # warm-up
    comm.barrier()
    t0 = time.perf_counter()
    comm.allreduce(x, algorithm=algorithm)
    pilot = time.perf_counter() - t0
    reps = np.array([max(min_reps, min(max_reps, int(max_time / max(pilot, 1e-7))))], np.int64)
    reps = comm.broadcast(reps, root=0)
    samples = np.empty(int(reps[0]), np.float64)
    for i in range(samples.size):
        comm.barrier()
        t0 = time.perf_counter()
        comm.allreduce(x, algorithm=algorithm)
        samples[i] = time.perf_counter() - t0
    slowest = comm.allreduce(samples, op="max", algorithm="native")
    return float(np.median(slowest))


def calibration_rows(comm, sizes=CALIBRATION_SIZES, algorithms=P2P_ALGORITHMS, max_time: float = 0.1,
                     min_reps: int = 5, max_reps: int = 200) -> list:
    """One calibration pass (collective): ``[(algorithm, bytes, ranks, median seconds)]`` per size and algorithm.

    For each size and algorithm: one warm-up call, a pilot call that sets the repetitions (rank 0's,
    broadcast), then that many calls between barriers; a call's time is the slowest rank's.
    Arguments as in :func:`calibrate_allreduce`.
    """
    if comm.size < 2:
        raise UserError(f"Calibrating an allreduce model needs at least 2 ranks. Received: size={comm.size}")
    bad = [a for a in algorithms if a not in P2P_ALGORITHMS]
    if bad or not algorithms:
        raise UserError(f"Unknown allreduce algorithm(s) to calibrate. Allowed values are "
                        f"{format_choices(P2P_ALGORITHMS)}. Received: {list(algorithms)!r}")
    sizes = [int(s) for s in sizes]
    if not sizes or any(s < 4 or s % 4 for s in sizes):
        raise UserError(f"Calibration sizes must be positive multiples of 4 bytes. Received: {sizes}")
    rows = []
    for nbytes in sizes:
        x = np.ones(nbytes // 4, np.float32)
        for algorithm in algorithms:
            rows.append((algorithm, nbytes, comm.size,
                         _time_algorithm(comm, x, algorithm, max_time, min_reps, max_reps)))
    return rows


def pooled_rows(passes) -> list:
    """Rows of several calibration passes pooled: per (algorithm, bytes, ranks), the median over passes."""
    times: dict = {}
    for rows in passes:
        for a, n, p, seconds in rows:
            times.setdefault((a, n, p), []).append(seconds)
    return [(a, n, p, float(np.median(t))) for (a, n, p), t in times.items()]


def model_from_rows(comm, passes, environment: bool = True) -> CalibratedModel:
    """Fit a :class:`CalibratedModel` for ``comm.size`` ranks to the rows of one or more calibration passes.

    Every rank must pass the same rows (they are the slowest rank's times, shared); rank 0's
    environment is recorded when ``environment``.
    """
    rows = pooled_rows(passes)
    params = fit_parameters(rows)
    env = {}
    if environment:
        from deep500lite.environment import collect_environment

        env = collect_environment(include_mpi=False) if comm.rank == 0 else {}
        mpi = getattr(comm, "_MPI", None)
        if env and mpi is not None:
            env["mpi_library"] = " ".join(mpi.Get_library_version().splitlines()[0].split())
    return CalibratedModel(type(comm).__name__, ((comm.size, params),),
                           {str(comm.size): [[a, n, s] for a, n, _, s in rows]}, env)


def calibrate_allreduce(comm, sizes=CALIBRATION_SIZES, algorithms=P2P_ALGORITHMS, max_time: float = 0.1,
                        min_reps: int = 5, max_reps: int = 200, environment: bool = True,
                        passes: int = 1) -> CalibratedModel:
    """Time the real allreduce algorithms on ``comm`` and fit a :class:`CalibratedModel` (collective).

    For each size and algorithm: one warm-up call, a pilot call that sets the repetitions (rank 0's,
    broadcast), then that many calls between barriers; a call's time is the slowest rank's and the
    median over calls is fitted (with ``passes > 1``, the median of the passes' medians). Every
    rank returns the same model (the fit is on shared numbers).

    Args:
        comm: a :class:`~deep500lite.lv3.communication.CommunicationNetwork` with ``size >= 2``.
        sizes: message sizes in bytes (multiples of 4; float32 arrays).
        algorithms: which of :data:`~deep500lite.lv3.allreduce.P2P_ALGORITHMS` to time (at least
            two with different term ratios make the parameters identifiable; all four by default).
        max_time: seconds of timed calls per size and algorithm, roughly.
        min_reps, max_reps: bounds on the calls per size and algorithm.
        environment: record :func:`deep500lite.environment.collect_environment` (rank 0's).
        passes: how many times to time every size and algorithm, one pass after the other; on a
            machine whose speed drifts over seconds the median of the passes is steadier than one.

    Returns:
        The model for ``comm.size`` ranks.
    """
    if not isinstance(passes, int) or isinstance(passes, bool) or passes < 1:
        raise UserError(f"passes must be a whole number >= 1. Received: {passes!r}")
    runs = [calibration_rows(comm, sizes, algorithms, max_time, min_reps, max_reps) for _ in range(passes)]
    return model_from_rows(comm, runs, environment)
