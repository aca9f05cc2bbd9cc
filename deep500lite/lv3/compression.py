"""Level 3: gradient compression with error feedback, and the optimizer that exchanges compressed gradients.

A :class:`Compressor` turns a flat float gradient into a few fixed-shape arrays (the same shapes
on every rank for a given length, so they can be all-gathered without pickling) and back:

- :class:`TopK`: the ``k`` largest magnitudes (``ratio`` of the entries): int32 indices and values.
- :class:`QSGD`: stochastic quantization to ``levels`` levels of ``|v| / ||v||_2`` (unbiased),
  int8 signed levels plus the norm (Alistarh et al.'s QSGD, without the Elias coding).
- :class:`SignSGD`: 1-bit signs packed 8 per byte, scaled by the mean magnitude ``||v||_1 / n``.
- :class:`Ternary`: values in ``{-s, 0, s}`` with ``s = max |v|``, kept with probability
  ``|v| / s`` (unbiased, TernGrad), packed 2 bits per entry.

With error feedback (the default), each rank adds to its gradient what compression dropped in
the previous step (``e <- v - decode(encode(v))`` with ``v = grad + e``), so no part of a
gradient is lost for good, only delayed.

Where compression happens: :class:`CompressedDecentralized` compresses the whole flat gradient,
or each fused bucket separately (``bucket_bytes=``, with one error-feedback residual per
bucket); :class:`~deep500lite.lv3.distributed_optimizers.ConsistentParameterServer` and
:class:`~deep500lite.lv3.distributed_optimizers.InconsistentParameterServer` take
``compressor=`` for the gradients the workers send to the server.
"""

from __future__ import annotations

import abc

import numpy as np

from deep500lite.errors import UserError, UserTypeError
from deep500lite.lv2.optimizer import Optimizer
from deep500lite.lv3.communication import CommunicationNetwork
from deep500lite.lv3.optimizer import DistributedOptimizer, check_bucket, flatten, fuse_buckets, unflatten

__all__ = ["Compressor", "TopK", "QSGD", "SignSGD", "Ternary", "ErrorFeedback", "CompressedDecentralized"]


class Compressor(abc.ABC):
    """Encodes a flat float array into fixed-shape arrays and decodes it back (lossy)."""

    @abc.abstractmethod
    def encode(self, v: np.ndarray) -> tuple[np.ndarray, ...]:
        """The compressed form of the 1-D array ``v``; shapes depend only on ``v.size``."""

    @abc.abstractmethod
    def decode(self, parts: tuple[np.ndarray, ...], n: int, dtype) -> np.ndarray:
        """The dense 1-D array of length ``n`` that ``parts`` stands for."""

    def roundtrip(self, v: np.ndarray) -> np.ndarray:
        """``decode(encode(v))``."""
        return self.decode(self.encode(v), v.size, v.dtype)


class TopK(Compressor):
    """Keep the ``max(1, round(ratio * n))`` entries of largest magnitude.

    Args:
        ratio: fraction of entries kept, in (0, 1].
    """

    def __init__(self, ratio: float = 0.01):
        if not isinstance(ratio, (int, float)) or isinstance(ratio, bool) or not 0 < ratio <= 1:
            raise UserError(f"TopK ratio must be a number in (0, 1]. Received: ratio={ratio!r}")
        self.ratio = float(ratio)

    def k(self, n: int) -> int:
        """Entries kept of ``n``."""
        return min(n, max(1, int(round(self.ratio * n))))

    def encode(self, v):
        k = self.k(v.size)
        idx = np.argpartition(np.abs(v), v.size - k)[v.size - k:] if k < v.size else np.arange(v.size)
        idx = np.sort(idx).astype(np.int32)
        return idx, v[idx].copy()

    def decode(self, parts, n, dtype):
        idx, values = parts
        out = np.zeros(n, dtype)
        out[idx] = values
        return out


class QSGD(Compressor):
    """Stochastic quantization: ``v_i ≈ ||v|| sign(v_i) l_i / levels``, ``l_i`` rounded up with
    probability equal to the fractional part (unbiased).

    Args:
        levels: quantization levels, 1 to 127 (int8).
        seed: seed of the rounding generator.
    """

    def __init__(self, levels: int = 16, seed: int = 0):
        if isinstance(levels, bool) or not isinstance(levels, (int, np.integer)) or not 1 <= levels <= 127:
            raise UserError(f"QSGD levels must be an integer from 1 to 127. Received: levels={levels!r}")
        self.levels = int(levels)
        self.random = np.random.default_rng(seed)

    def encode(self, v):
        norm = np.float64(np.linalg.norm(v))
        if norm == 0:
            return np.zeros(1, np.float64), np.zeros(v.size, np.int8)
        scaled = np.abs(v.astype(np.float64)) / norm * self.levels
        low = np.floor(scaled)
        q = low + (self.random.random(v.size) < scaled - low)
        return np.array([norm]), (np.sign(v) * q).astype(np.int8)

    def decode(self, parts, n, dtype):
        norm, q = parts
        return (q.astype(np.float64) * (norm[0] / self.levels)).astype(dtype)


class SignSGD(Compressor):
    """1-bit compression: the signs (packed 8 per byte) times the mean magnitude ``||v||_1 / n``."""

    def encode(self, v):
        return np.array([np.mean(np.abs(v), dtype=np.float64)]), np.packbits(v >= 0)

    def decode(self, parts, n, dtype):
        scale, bits = parts
        signs = np.unpackbits(bits, count=n).astype(np.float64) * 2 - 1
        return (signs * scale[0]).astype(dtype)


class Ternary(Compressor):
    """TernGrad: ``s * sign(v_i) * b_i`` with ``s = max |v|`` and ``b_i ~ Bernoulli(|v_i| / s)``
    (unbiased); two bits per entry.

    Args:
        seed: seed of the Bernoulli draws.
    """

    def __init__(self, seed: int = 0):
        self.random = np.random.default_rng(seed)

    def encode(self, v):
        s = np.float64(np.max(np.abs(v))) if v.size else np.float64(0)
        keep = self.random.random(v.size) * s < np.abs(v) if s > 0 else np.zeros(v.size, bool)
        return np.array([s]), np.packbits(np.stack([keep, v < 0], axis=1).ravel())

    def decode(self, parts, n, dtype):
        s, bits = parts
        pairs = np.unpackbits(bits, count=2 * n).reshape(n, 2).astype(np.float64)
        return (pairs[:, 0] * (1 - 2 * pairs[:, 1]) * s[0]).astype(dtype)


class ErrorFeedback:
    """Adds the residual of the last compression to the next input (per key).

    Args:
        compressor: the :class:`Compressor`.
    """

    def __init__(self, compressor: Compressor):
        self.compressor = compressor
        self.residual: dict[str, np.ndarray] = {}

    def encode(self, key: str, v: np.ndarray) -> tuple[np.ndarray, ...]:
        """Compress ``v`` plus the stored residual; store the new residual."""
        corrected = v + self.residual[key] if key in self.residual else np.array(v, copy=True)
        parts = self.compressor.encode(corrected)
        self.residual[key] = corrected - self.compressor.decode(parts, v.size, v.dtype)
        return parts


class CompressedDecentralized(DistributedOptimizer):
    """Data-parallel SGD on compressed gradients: each rank compresses its gradients (with error
    feedback), all ranks all-gather the compressed parts, and each decodes and averages them,
    then applies the base update. Every rank decodes the same parts, so replicas stay
    identical; bytes sent shrink by the compression ratio.

    Without ``bucket_bytes`` the whole flat gradient is compressed at once. With it, the
    gradients are fused into buckets of at most ``bucket_bytes`` (as
    :func:`~deep500lite.lv3.optimizer.fuse_buckets` groups them) and each bucket is compressed
    and exchanged on its own, with its own error-feedback residual: top-k then keeps the
    ``ratio`` largest entries of each bucket, and sign/QSGD/ternary scale each bucket by its own
    norm (one 8-byte scale per bucket on the wire).

    Args:
        optimizer: the base any base :class:`~deep500lite.lv2.optimizer.Optimizer` (as for
            :class:`~deep500lite.lv3.distributed_optimizers.ConsistentDecentralized`).
        comm: the communicator.
        compressor: a :class:`Compressor` (:class:`TopK`, :class:`QSGD`, :class:`SignSGD`,
            :class:`Ternary`).
        error_feedback: keep and re-add what compression dropped.
        bucket_bytes: None (compress the whole flat gradient), or tensor fusion: buckets of at
            most this many bytes, each compressed separately (0: each gradient on its own).
    """

    def __init__(self, optimizer: Optimizer, comm: CommunicationNetwork, compressor: Compressor,
                 error_feedback: bool = True, bucket_bytes: int | None = None):
        super().__init__(optimizer, comm)
        if not isinstance(compressor, Compressor):
            raise UserTypeError(f"compressor must be a deep500lite Compressor (TopK, QSGD, SignSGD, Ternary). "
                                f"Received: {type(compressor).__name__}")
        self.compressor = compressor
        self.feedback = ErrorFeedback(compressor) if error_feedback else None
        self.bucket_bytes = None if bucket_bytes is None else check_bucket(bucket_bytes)

    def buckets(self, grads: list[np.ndarray]) -> list[list[int]]:
        """The indices of the gradients compressed together, bucket by bucket."""
        if self.bucket_bytes is None:
            return [list(range(len(grads)))]
        return fuse_buckets(grads, self.bucket_bytes)

    def step(self, inputs):
        start = self._begin()
        outputs = self._exchange_step(inputs, self._exchange)
        self._end(start)
        return outputs

    def _exchange(self, names, params, grads) -> list[np.ndarray]:
        averaged: list[np.ndarray] = [None] * len(grads)
        for b, bucket in enumerate(self.buckets(grads)):
            members = [grads[i] for i in bucket]
            flat = flatten(members)
            key = "all" if self.bucket_bytes is None else f"bucket{b}"
            parts = self.feedback.encode(key, flat) if self.feedback else self.compressor.encode(flat)
            gathered = [self.communication.allgather(np.ascontiguousarray(part)) for part in parts]
            total = np.zeros(flat.size, np.float64)
            for r in range(self.communication.size):
                total += self.compressor.decode(tuple(g[r] for g in gathered), flat.size, np.float64)
            for i, value in zip(bucket, unflatten(total / self.communication.size, members)):
                averaged[i] = value
        return averaged
