"""Data augmentation applied per batch, in numpy: random crop with padding, horizontal flip,
cutout and per-channel normalization.

A transform is a callable ``batch -> batch`` on the dict of feeds a sampler yields; it changes
the ``input_node`` entry, an ``NCHW`` floating-point array, and returns a new dict (the input
arrays are never modified in place). Pass transforms to a sampler's ``transformations``:

>>> import numpy as np, deep500lite as d5
>>> from deep500lite.frameworks.reference import transforms as T
>>> ds = d5.NumpyDataset(np.zeros((8, 3, 32, 32), np.float32), "input", np.zeros(8, np.int64), "label")
>>> augment = [T.RandomCrop(32, padding=4, seed=1), T.RandomHorizontalFlip(seed=2),
...            T.Normalize([0.49, 0.48, 0.45], [0.25, 0.24, 0.26])]
>>> next(iter(d5.ShuffleSampler(ds, 4, seed=0, transformations=augment)))["input"].shape
(4, 3, 32, 32)

Random transforms draw from their own generator, ``numpy.random.default_rng(seed)`` or the
``generator`` given: the same seed gives the same augmentation in every run. Give each
transform its own seed (two transforms with one seed would make correlated choices). Each
class documents the exact draws it makes per batch, in order.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from deep500lite.errors import UserError, UserTypeError

__all__ = ["BatchTransform", "RandomTransform", "RandomCrop", "RandomHorizontalFlip", "Cutout", "Normalize"]


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _pair(name: str, value, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints, each ``>= minimum``, as ``(h, w)``."""
    pair = (value, value) if _is_int(value) else tuple(value) if isinstance(value, (tuple, list)) else None
    if pair is None or len(pair) != 2 or not all(_is_int(v) and v >= minimum for v in pair):
        raise UserError(f"{name} must be an integer >= {minimum} or a pair (height, width) of them. "
                        f"Received: {name}={value!r}")
    return int(pair[0]), int(pair[1])


class BatchTransform:
    """Base of the transforms: finds and checks the input array, applies :meth:`apply`.

    Args:
        input_node: the feed holding the images, ``[N, C, H, W]`` floating point.
    """

    def __init__(self, input_node: str = "input"):
        if not isinstance(input_node, str) or not input_node:
            raise UserError(f"input_node must be a non-empty string. Received: {input_node!r}")
        self.input_node = input_node

    def __call__(self, batch: dict) -> dict:
        """Return a copy of ``batch`` with the input array transformed.

        Raises:
            UserError: the batch has no ``input_node`` entry, or it is not 4-D.
            TypeError: the batch is not a dict, or the input array is not floating point.
        """
        if not isinstance(batch, dict):
            raise UserTypeError(f"{type(self).__name__} takes a batch dict of feeds (feed name to array). "
                                f"Received: {type(batch).__name__}")
        if self.input_node not in batch:
            raise UserError(f"{type(self).__name__}: the batch has no feed {self.input_node!r}. "
                            f"Feeds: {sorted(batch)}; set input_node to one of them. "
                            f"Received: input_node={self.input_node!r}")
        x = np.asarray(batch[self.input_node])
        if x.ndim != 4:
            raise UserError(f"{type(self).__name__} works on NCHW images (4-D). Received: feed "
                            f"{self.input_node!r} shaped {list(x.shape)}")
        if x.dtype.kind != "f":
            raise UserTypeError(f"{type(self).__name__} works on floating-point images. Received: feed "
                                f"{self.input_node!r} of dtype {x.dtype}; convert it to float32 first.")
        out = dict(batch)
        out[self.input_node] = self.apply(x)
        return out

    def apply(self, x: np.ndarray) -> np.ndarray:
        """Transform ``x`` (``[N, C, H, W]`` floating point) into a new array of the same dtype."""
        raise NotImplementedError(f"{type(self).__name__} does not implement apply")

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._args().items())
        return f"{type(self).__name__}({args})"

    def _args(self) -> dict:
        return {"input_node": self.input_node}


class RandomTransform(BatchTransform):
    """A transform that draws random numbers.

    Args:
        input_node: the feed holding the images.
        seed: seed of this transform's generator (``None``: fresh entropy, not reproducible).
        generator: a ``numpy.random.Generator`` to draw from instead (shared with its owner).
    """

    def __init__(self, input_node: str = "input", seed: int | None = None,
                 generator: np.random.Generator | None = None):
        super().__init__(input_node)
        if seed is not None and generator is not None:
            raise UserError(f"Pass seed or generator, not both. Received: seed={seed!r} and a generator")
        if seed is not None and (not _is_int(seed) or seed < 0):
            raise UserError(f"seed must be None or an integer >= 0. Received: seed={seed!r}")
        if generator is not None and not isinstance(generator, np.random.Generator):
            raise UserTypeError(f"generator must be a numpy.random.Generator (or None). "
                                f"Received: {type(generator).__name__}")
        self.seed = seed
        self.random = generator if generator is not None else np.random.default_rng(seed)

    def _args(self) -> dict:
        return {**super()._args(), "seed": self.seed}


class RandomCrop(RandomTransform):
    """Pad every image with zeros, then crop it to ``size`` at a random offset per sample.

    Draws per batch of ``N`` images: ``top = random.integers(0, H + 2*pad_h - h + 1, size=N)``,
    then ``left = random.integers(0, W + 2*pad_w - w + 1, size=N)``; sample ``i`` becomes
    ``padded[i, :, top[i]:top[i]+h, left[i]:left[i]+w]``.

    Args:
        size: output ``h`` and ``w`` (an int for a square, or ``(h, w)``).
        padding: zeros added on each side (an int, or ``(pad_h, pad_w)``).
        input_node, seed, generator: as for :class:`RandomTransform`.
    """

    def __init__(self, size, padding=0, input_node: str = "input", seed: int | None = None,
                 generator: np.random.Generator | None = None):
        super().__init__(input_node, seed, generator)
        self.size = _pair("size", size, 1)
        self.padding = _pair("padding", padding, 0)

    def apply(self, x):
        n, _, height, width = x.shape
        (h, w), (ph, pw) = self.size, self.padding
        if h > height + 2 * ph or w > width + 2 * pw:
            raise UserError(f"RandomCrop size {h}x{w} is larger than the padded images "
                            f"{height + 2 * ph}x{width + 2 * pw}; the crop must fit in the images plus padding. "
                            f"Received: images {height}x{width}, padding {ph}x{pw}, size {h}x{w}")
        top = self.random.integers(0, height + 2 * ph - h + 1, size=n)
        left = self.random.integers(0, width + 2 * pw - w + 1, size=n)
        padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x
        windows = sliding_window_view(padded, (h, w), axis=(2, 3))  # [N, C, top, left, h, w], a view
        return np.ascontiguousarray(windows[np.arange(n), :, top, left])

    def _args(self):
        return {"size": self.size, "padding": self.padding, **super()._args()}


class RandomHorizontalFlip(RandomTransform):
    """Mirror each image left-right with probability ``p``.

    Draws per batch of ``N`` images: ``flip = random.random(N) < p``.

    Args:
        p: probability of flipping a sample, in ``[0, 1]``.
        input_node, seed, generator: as for :class:`RandomTransform`.
    """

    def __init__(self, p: float = 0.5, input_node: str = "input", seed: int | None = None,
                 generator: np.random.Generator | None = None):
        super().__init__(input_node, seed, generator)
        if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, float, np.integer, np.floating)) \
                or not 0 <= p <= 1:
            raise UserError(f"p must be a probability in [0, 1]. Received: p={p!r}")
        self.p = float(p)

    def apply(self, x):
        flip = self.random.random(x.shape[0]) < self.p
        return np.where(flip[:, None, None, None], x[..., ::-1], x)

    def _args(self):
        return {"p": self.p, **super()._args()}


class Cutout(RandomTransform):
    """Zero ``count`` random ``size x size`` squares in every image (DeVries & Taylor 2017).

    A square's centre may be any pixel, so near the border only part of it lies inside the image.
    Draws per batch of ``N`` images: ``cy = random.integers(0, H, size=(N, count))``, then
    ``cx = random.integers(0, W, size=(N, count))``; square ``j`` of sample ``i`` covers rows
    ``cy[i, j] - size//2`` up to ``cy[i, j] - size//2 + size`` (exclusive), clipped to the image,
    and the same for columns; all channels are zeroed there.

    Args:
        size: side of the square, in pixels.
        count: squares per image (they may overlap).
        input_node, seed, generator: as for :class:`RandomTransform`.
    """

    def __init__(self, size: int, count: int = 1, input_node: str = "input", seed: int | None = None,
                 generator: np.random.Generator | None = None):
        super().__init__(input_node, seed, generator)
        if not _is_int(size) or size < 1:
            raise UserError(f"Cutout size must be an integer >= 1. Received: size={size!r}")
        if not _is_int(count) or count < 1:
            raise UserError(f"Cutout count must be an integer >= 1. Received: count={count!r}")
        self.size, self.count = int(size), int(count)

    def apply(self, x):
        n, _, height, width = x.shape
        top = self.random.integers(0, height, size=(n, self.count)) - self.size // 2
        left = self.random.integers(0, width, size=(n, self.count)) - self.size // 2
        rows, cols = np.arange(height), np.arange(width)
        in_rows = (rows >= top[..., None]) & (rows < top[..., None] + self.size)      # [N, count, H]
        in_cols = (cols >= left[..., None]) & (cols < left[..., None] + self.size)    # [N, count, W]
        mask = (in_rows[..., :, None] & in_cols[..., None, :]).any(axis=1)           # [N, H, W]
        return np.where(mask[:, None], x.dtype.type(0), x)

    def _args(self):
        return {"size": self.size, "count": self.count, **super()._args()}


class Normalize(BatchTransform):
    """Per-channel normalization ``(x - mean[c]) / std[c]``, computed in the images' dtype.

    Args:
        mean: one number per channel (or one number for all channels).
        std: one positive number per channel (or one for all).
        input_node: the feed holding the images.
    """

    def __init__(self, mean, std, input_node: str = "input"):
        super().__init__(input_node)
        self.mean = self._vector("mean", mean)
        self.std = self._vector("std", std)
        if np.any(self.std <= 0):
            raise UserError(f"Normalize std must be positive. Received: std={std!r}")
        if self.mean.size != self.std.size and 1 not in (self.mean.size, self.std.size):
            raise UserError(f"Normalize mean and std must have one value per channel each. "
                            f"Received: {self.mean.size} means and {self.std.size} standard deviations")

    @staticmethod
    def _vector(name, value) -> np.ndarray:
        try:
            v = np.atleast_1d(np.asarray(value, dtype=np.float64))
        except (TypeError, ValueError):
            v = None
        if v is None or v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v)):
            raise UserError(f"Normalize {name} must be a finite number or a list of them (one per channel). "
                            f"Received: {name}={value!r}")
        return v

    def apply(self, x):
        channels = x.shape[1]
        for name, v in (("mean", self.mean), ("std", self.std)):
            if v.size not in (1, channels):
                raise UserError(f"Normalize has {v.size} {name} values but the images have {channels} channels; "
                                f"give one value, or one per channel. Received: images shaped {list(x.shape)}")
        mean = self.mean.astype(x.dtype)[:, None, None] if self.mean.size > 1 else x.dtype.type(self.mean[0])
        std = self.std.astype(x.dtype)[:, None, None] if self.std.size > 1 else x.dtype.type(self.std[0])
        return (x - mean) / std

    def _args(self):
        return {"mean": self.mean.tolist(), "std": self.std.tolist(), **super()._args()}
