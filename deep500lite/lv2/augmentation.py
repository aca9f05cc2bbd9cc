"""Data augmentation applied per batch, in numpy: random crop with padding, horizontal flip,
cutout and per-channel normalization, and Deep500's ``Crop``, ``RandomFlip`` and ``Cutout``.

A transform is a callable ``batch -> batch`` on the dict of feeds a sampler yields; it changes
the ``input_node`` entry, an ``NCHW`` floating-point array, and returns a new dict (the input
arrays are never modified in place). A transform created without ``input_node`` takes the
input node of the dataset of the sampler it is given to (Deep500's ``set_dataset_nodes``), else
``"input"``. Pass transforms to a sampler's ``transformations``:

>>> import numpy as np, deep500lite as d5
>>> from deep500lite.lv2 import augmentation as T
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

import functools
import warnings

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from deep500lite.errors import UserError, UserTypeError

__all__ = ["BatchTransform", "RandomTransform", "RandomCrop", "RandomHorizontalFlip", "Cutout", "Normalize", "Crop",
           "RandomFlip"]

_DEFAULT_INPUT = "input"


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _pair(name: str, value, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints, each ``>= minimum``, as ``(h, w)``."""
    pair = (value, value) if _is_int(value) else tuple(value) if isinstance(value, (tuple, list)) else None
    if pair is None or len(pair) != 2 or not all(_is_int(v) and v >= minimum for v in pair):
        raise UserError(f"{name} must be an integer >= {minimum} or a pair (height, width) of them. "
                        f"Received: {name}={value!r}")
    return int(pair[0]), int(pair[1])


def _probability(p) -> float:
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, float, np.integer, np.floating)) or not 0 <= p <= 1:
        raise UserError(f"p must be a probability in [0, 1]. Received: p={p!r}")
    return float(p)


def _one_of(name, value, alias, alias_value, default):
    """The value given under Deep500's ``name`` or deep500lite's ``alias`` (not both), else ``default``."""
    if value is not None and alias_value is not None:
        raise UserError(f"Give {name} or {alias}, not both (they are one argument: {alias} is deep500lite's name). "
                        f"Received: {name}={value!r}, {alias}={alias_value!r}")
    return value if value is not None else alias_value if alias_value is not None else default


class BatchTransform:
    """Base of the transforms: finds and checks the input array, applies :meth:`apply`.

    Args:
        input_node: the feed holding the images, ``[N, C, H, W]`` floating point; ``None``: the
            input node of the sampler's dataset (see :meth:`set_dataset_nodes`), else ``"input"``.
    """

    def __init__(self, input_node: str | None = None):
        if input_node is not None and (not isinstance(input_node, str) or not input_node):
            raise UserError(f"input_node must be a non-empty string. Received: {input_node!r}")
        self._input_given = input_node is not None
        self.input_node = input_node if input_node is not None else _DEFAULT_INPUT

    def set_dataset_nodes(self, input_node: str | None, label_node: str | None = None) -> None:
        """Take the dataset's input node unless one was given at construction (Deep500's hook, which
        samplers call on every transform they are given).

        Args:
            input_node: the dataset's input node.
            label_node: the dataset's label node (unused: the transforms change inputs only).
        """
        if not isinstance(input_node, str) or not input_node:
            return
        old_form = getattr(self, "_deep500_node", None)
        if old_form is not None and old_form != input_node:
            warnings.warn(f"{type(self).__name__} was given the input node {old_form!r} in Deep500's "
                          f"(input_node, label_node, ...) form; this sampler's dataset feeds {input_node!r}, "
                          f"used instead (Deep500's ResNet named its input '0').", stacklevel=2)
            self.input_node = input_node
        elif not self._input_given:
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

    def __init__(self, input_node: str | None = None, seed: int | None = None,
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

    def __init__(self, size, padding=0, input_node: str | None = None, seed: int | None = None,
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

    def __init__(self, p: float = 0.5, input_node: str | None = None, seed: int | None = None,
                 generator: np.random.Generator | None = None):
        super().__init__(input_node, seed, generator)
        self.p = _probability(p)

    def apply(self, x):
        flip = self.random.random(x.shape[0]) < self.p
        return np.where(flip[:, None, None, None], x[..., ::-1], x)

    def _args(self):
        return {"p": self.p, **super()._args()}


def _node_names_first(cls):
    """Let ``cls`` also take Deep500's older form, ``cls(input_node, label_node, *args, **kwargs)``
    (two feed names first, as Deep500's ``recipes/cifar10_resnet44.py`` writes ``Crop('0', 'label',
    ...)``). The names are Deep500's: its ResNet's input was ``'0'``. A sampler that knows its
    dataset's input node replaces a name its batches do not have, with a warning."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        if len(args) >= 2 and all(isinstance(a, str) for a in args[:2]):
            if "input_node" in kwargs:
                raise UserError(f"{cls.__name__} got its input node twice: {args[0]!r} (Deep500's form, first "
                                f"argument) and input_node={kwargs['input_node']!r}. Give one. "
                                f"Received: input_node={args[0]!r} and input_node={kwargs['input_node']!r}")
            init(self, *args[2:], input_node=args[0], **kwargs)
            self._deep500_node = args[0]
        else:
            init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


@_node_names_first
class Cutout(RandomTransform):
    """Zero ``holes`` random ``length x length`` squares in every image (DeVries & Taylor 2017).

    The arguments are Deep500's, in Deep500's order: ``Cutout(1, 16)`` cuts one 16x16 hole.
    deep500lite's keyword form ``Cutout(size=16, count=1)`` means the same (``size`` is
    ``length``, ``count`` is ``holes``).

    A square's centre may be any pixel, so near the border only part of it lies inside the image.
    Draws per batch of ``N`` images: ``cy = random.integers(0, H, size=(N, holes))``, then
    ``cx = random.integers(0, W, size=(N, holes))``, then, with ``random_fill``,
    ``random.random((N, C, H, W))``. Square ``j`` of sample ``i`` covers rows
    ``cy[i, j] - length//2`` up to ``cy[i, j] + length//2`` (exclusive), clipped to the image, and
    the same for columns, as in Deep500: an odd ``length`` cuts ``length - 1`` pixels a side
    (``Cutout(1, 5)`` cuts 4x4). deep500lite's keyword form cuts exactly ``size`` pixels a side
    (rows ``cy - size//2`` up to ``cy - size//2 + size``). All channels there become 0, or with
    ``random_fill`` the drawn numbers minus 0.5 (uniform in ``[-0.5, 0.5)``).

    Args:
        holes: squares per image (they may overlap; 0 leaves the images as they are).
        length: side of each square, in pixels.
        random_fill: fill the squares with uniform noise in ``[-0.5, 0.5)`` instead of zeros.
        size: deep500lite's keyword for ``length`` (give one of the two).
        count: deep500lite's keyword for ``holes`` (give one of the two).
        input_node, seed, generator: as for :class:`RandomTransform`.

    Raises:
        UserError: a bad value, or both names of one argument.
    """

    def __init__(self, holes: int | None = None, length: int | None = None, random_fill: bool = False, *,
                 size: int | None = None, count: int | None = None, input_node: str | None = None,
                 seed: int | None = None, generator: np.random.Generator | None = None):
        super().__init__(input_node, seed, generator)
        holes = _one_of("holes", holes, "count", count, 1)
        length = _one_of("length", length, "size", size, 16)
        self._names = ("count", "size") if (count is not None or size is not None) else ("holes", "length")
        if not _is_int(length) or length < 1:
            raise UserError(f"Cutout {self._names[1]} (the side of a hole) must be an integer >= 1. "
                            f"Received: {self._names[1]}={length!r}")
        minimum = 1 if self._names[0] == "count" else 0
        if not _is_int(holes) or holes < minimum:
            raise UserError(f"Cutout {self._names[0]} (holes per image) must be an integer >= {minimum}. "
                            f"Received: {self._names[0]}={holes!r}")
        if not isinstance(random_fill, (bool, np.bool_)):
            raise UserError(f"random_fill must be True or False. Received: random_fill={random_fill!r}")
        self.holes, self.length, self.random_fill = int(holes), int(length), bool(random_fill)

    @property
    def size(self) -> int:
        """deep500lite's name of :attr:`length`."""
        return self.length

    @property
    def count(self) -> int:
        """deep500lite's name of :attr:`holes`."""
        return self.holes

    def apply(self, x):
        n, _, height, width = x.shape
        half = self.length // 2
        side = self.length if self._names[0] == "count" else 2 * half  # Deep500's form: 2 * (length // 2)
        top = self.random.integers(0, height, size=(n, self.holes)) - half
        left = self.random.integers(0, width, size=(n, self.holes)) - half
        rows, cols = np.arange(height), np.arange(width)
        in_rows = (rows >= top[..., None]) & (rows < top[..., None] + side)      # [N, holes, H]
        in_cols = (cols >= left[..., None]) & (cols < left[..., None] + side)    # [N, holes, W]
        mask = (in_rows[..., :, None] & in_cols[..., None, :]).any(axis=1)             # [N, H, W]
        if self.random_fill:
            fill = (self.random.random(x.shape) - 0.5).astype(x.dtype)
            return np.where(mask[:, None], fill, x)
        return np.where(mask[:, None], x.dtype.type(0), x)

    def _args(self):
        return {"holes": self.holes, "length": self.length, "random_fill": self.random_fill, **super()._args()}


@_node_names_first
class Crop(RandomTransform):
    """Deep500's crop: pad every image, then cut a ``crop_size`` window at its centre or at random.

    Works on the last two axes (height, width) of an ``NCHW`` batch. With ``random_crop`` the
    window's corner is drawn per sample: ``top = random.integers(0, Hp - h + 1, size=N)``, then
    ``left = random.integers(0, Wp - w + 1, size=N)`` (``Hp``, ``Wp``: the padded size); without
    it the window starts at ``Hp//2 - h//2``, ``Wp//2 - w//2`` (no draws). ``resize`` scales the
    window back to the images' original height and width by nearest-neighbour sampling (Deep500
    documented this but its ``resize=True`` raised a NameError).

    Args:
        crop_size: ``(h, w)`` of the window, or one int for a square.
        resize: scale each window back to the input's ``H x W``.
        random_crop: a random window per sample (``False``: the centre one).
        padding: ``(pad_h, pad_w)`` added on each side (or one int), or ``None``.
        fill: the value of the padding.
        input_node, seed, generator: as for :class:`RandomTransform`.
    """

    def __init__(self, crop_size, resize: bool = False, random_crop: bool = False, padding=None, fill=0, *,
                 input_node: str | None = None, seed: int | None = None,
                 generator: np.random.Generator | None = None):
        super().__init__(input_node, seed, generator)
        self.crop_size = _pair("crop_size", crop_size, 1)
        self.padding = _pair("padding", 0 if padding is None else padding, 0)
        for name, flag in (("resize", resize), ("random_crop", random_crop)):
            if not isinstance(flag, (bool, np.bool_)):
                raise UserError(f"{name} must be True or False. Received: {name}={flag!r}")
        if isinstance(fill, (bool, np.bool_)) or not isinstance(fill, (int, float, np.integer, np.floating)) \
                or not np.isfinite(fill):
            raise UserError(f"fill must be a finite number. Received: fill={fill!r}")
        self.resize, self.random_crop, self.fill = bool(resize), bool(random_crop), float(fill)

    def apply(self, x):
        n, _, height, width = x.shape
        (h, w), (ph, pw) = self.crop_size, self.padding
        hp, wp = height + 2 * ph, width + 2 * pw
        if h > hp or w > wp:
            raise UserError(f"Crop size {h}x{w} is larger than the padded images {hp}x{wp}; the crop must fit in "
                            f"the images plus padding. Received: images {height}x{width}, padding {ph}x{pw}, "
                            f"crop_size {h}x{w}")
        padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=self.fill) if ph or pw else x
        if self.random_crop:
            top = self.random.integers(0, hp - h + 1, size=n)
            left = self.random.integers(0, wp - w + 1, size=n)
            windows = sliding_window_view(padded, (h, w), axis=(2, 3))  # [N, C, top, left, h, w], a view
            out = windows[np.arange(n), :, top, left]
        else:
            t, left0 = hp // 2 - h // 2, wp // 2 - w // 2
            out = padded[:, :, t:t + h, left0:left0 + w]
        if self.resize and (h, w) != (height, width):
            out = out[:, :, (np.arange(height) * h) // height][:, :, :, (np.arange(width) * w) // width]
        return np.ascontiguousarray(out, dtype=x.dtype)

    def _args(self):
        return {"crop_size": self.crop_size, "resize": self.resize, "random_crop": self.random_crop,
                "padding": self.padding, "fill": self.fill, **super()._args()}


@_node_names_first
class RandomFlip(RandomTransform):
    """Deep500's flip: mirror each sample along ``axis`` with probability ``p``.

    ``axis`` counts the axes of one sample (``C, H, W``): ``-1`` (the default) is the width,
    a left-right flip. Draws per batch of ``N`` images: ``flip = random.random(N) < p``. (Deep500
    flipped when its draw exceeded ``p``, i.e. with probability ``1 - p``; the two agree at the
    default ``p = 0.5``. Here ``p`` is the probability of flipping, as documented.)

    Args:
        axis: the sample axis to flip, from ``-3`` to ``2``.
        p: probability of flipping a sample, in ``[0, 1]``.
        input_node, seed, generator: as for :class:`RandomTransform`.
    """

    def __init__(self, axis: int = -1, p: float = 0.5, *, input_node: str | None = None, seed: int | None = None,
                 generator: np.random.Generator | None = None):
        super().__init__(input_node, seed, generator)
        if not _is_int(axis) or not -3 <= axis <= 2:
            raise UserError(f"axis must be an axis of an image sample (C, H, W): an integer from -3 to 2. "
                            f"Received: axis={axis!r}")
        self.axis, self.p = int(axis), _probability(p)

    def apply(self, x):
        flip = self.random.random(x.shape[0]) < self.p
        batch_axis = self.axis if self.axis < 0 else self.axis + 1
        shape = [1] * x.ndim
        shape[0] = -1
        return np.where(flip.reshape(shape), np.flip(x, axis=batch_axis), x)

    def _args(self):
        return {"axis": self.axis, "p": self.p, **super()._args()}


class Normalize(BatchTransform):
    """Per-channel normalization ``(x - mean[c]) / std[c]``, computed in the images' dtype.

    Args:
        mean: one number per channel (or one number for all channels).
        std: one positive number per channel (or one for all).
        input_node: the feed holding the images.
        stddev: Deep500's keyword for ``std`` (replaces it when given).
    """

    def __init__(self, mean=0.0, std=1.0, input_node: str | None = None, *, stddev=None):
        super().__init__(input_node)
        if stddev is not None:
            std = stddev
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
