"""Trace-time layout propagation for the TensorFlow executor.

TensorFlow's CPU kernels for convolution and pooling exist only for channels-last data (NHWC),
while ONNX graphs are channels-first (NCHW). Instead of transposing around every spatial
operator, each value of the graph is kept as a :class:`Value`: a stored tensor and the
permutation that turns it into the ONNX (plain) layout. Spatial operators produce
channels-last values, layout-agnostic operators keep the permutation of their input, and an
operator that needs the plain layout asks for it, which costs one transpose (made once per
value and cached). A ``Transpose`` node only composes permutations. All of this happens while
``tf.function`` traces the graph; nothing here runs per call.
"""

from __future__ import annotations

import tensorflow as tf

__all__ = ["Value", "channels_last", "channels_last_filter", "inverse", "is_identity"]


def inverse(perm) -> tuple:
    """The inverse of a permutation."""
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def is_identity(perm) -> bool:
    """Whether ``perm`` is ``None`` or leaves every axis in place."""
    return perm is None or all(i == p for i, p in enumerate(perm))


def channels_last(rank: int) -> tuple:
    """The layout permutation of a channels-last stored tensor: ``plain = transpose(stored, P)``.

    For rank 4 this is ``(0, 3, 1, 2)``: an NHWC tensor seen as NCHW.
    """
    return (0, rank - 1) + tuple(range(1, rank - 1))


def channels_last_filter(rank: int) -> tuple:
    """The layout permutation of a convolution filter stored ``[k..., C_in, C_out]`` (HWIO for rank 4).

    ``plain = transpose(stored, P)`` gives ONNX's ``[C_out, C_in, k...]``; for rank 4 ``P`` is
    ``(3, 2, 0, 1)``. TensorFlow's convolutions take their filters in the stored layout.
    """
    return (rank - 1, rank - 2) + tuple(range(rank - 2))


class Value:
    """A graph value: a stored tensor and the permutation ``perm`` with ``plain = transpose(tensor, perm)``.

    ``perm`` is ``None`` for a tensor stored in the plain ONNX layout.
    """

    __slots__ = ("tensor", "perm", "_cache")

    def __init__(self, tensor, perm=None):
        self.tensor = tensor
        self.perm = None if perm is None or is_identity(perm) else tuple(perm)
        self._cache = {}

    @property
    def rank(self):
        """The static rank, or ``None`` when unknown."""
        return len(self.perm) if self.perm is not None else self.tensor.shape.rank

    @property
    def plain(self):
        """The tensor in the ONNX layout."""
        return self.as_layout(None)

    def as_layout(self, perm):
        """The tensor stored in layout ``perm`` (``None``: plain), transposing at most once."""
        if perm is not None and is_identity(perm):
            perm = None
        if perm == self.perm:
            return self.tensor
        key = perm
        hit = self._cache.get(key)
        if hit is None:
            rank = self.rank
            mine = self.perm if self.perm is not None else tuple(range(rank))
            target_inv = inverse(perm) if perm is not None else tuple(range(rank))
            # stored axis j of the target layout is plain axis inv(perm)[j], i.e. my stored axis mine[...]
            order = [mine[target_inv[j]] for j in range(rank)]
            hit = self.tensor if is_identity(order) else tf.transpose(self.tensor, order)
            self._cache[key] = hit
        return hit

    @property
    def channels_last(self):
        """The tensor stored channels-last (for rank >= 3)."""
        rank = self.rank
        return self.as_layout(channels_last(rank)) if rank is not None and rank >= 3 else self.plain
