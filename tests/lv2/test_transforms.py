"""Batch transforms against straightforward per-sample implementations written here."""

from __future__ import annotations

import numpy as np
import pytest

import deep500lite as d5
from deep500lite.errors import UserError
from deep500lite.frameworks.reference.transforms import (Crop, Cutout, Normalize, RandomCrop, RandomFlip,
                                                       RandomHorizontalFlip)


def _images(n=6, c=3, h=9, w=7, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 1.5, size=(n, c, h, w)).astype(dtype)


def _batch(x):
    return {"input": x, "label": np.arange(len(x), dtype=np.int64)}


# ------------------------------------------------------------------- per-sample reference versions
def crop_reference(x, size, padding, seed):
    (h, w), (ph, pw) = size, padding
    rng = np.random.default_rng(seed)
    n, _, height, width = x.shape
    top = rng.integers(0, height + 2 * ph - h + 1, size=n)
    left = rng.integers(0, width + 2 * pw - w + 1, size=n)
    out = []
    for i in range(n):
        padded = np.zeros((x.shape[1], height + 2 * ph, width + 2 * pw), x.dtype)
        padded[:, ph:ph + height, pw:pw + width] = x[i]
        out.append(padded[:, top[i]:top[i] + h, left[i]:left[i] + w])
    return np.stack(out)


def flip_reference(x, p, seed):
    flip = np.random.default_rng(seed).random(len(x)) < p
    return np.stack([np.flip(x[i], axis=-1) if flip[i] else x[i] for i in range(len(x))])


def cutout_reference(x, size, count, seed):
    rng = np.random.default_rng(seed)
    n, _, height, width = x.shape
    cy = rng.integers(0, height, size=(n, count))
    cx = rng.integers(0, width, size=(n, count))
    out = x.copy()
    for i in range(n):
        for j in range(count):
            y0, x0 = cy[i, j] - size // 2, cx[i, j] - size // 2
            out[i, :, max(0, y0):max(0, y0 + size), max(0, x0):max(0, x0 + size)] = 0
    return out


def normalize_reference(x, mean, std):
    out = np.empty_like(x)
    for i in range(len(x)):
        for c in range(x.shape[1]):
            m = mean[c] if len(mean) > 1 else mean[0]
            s = std[c] if len(std) > 1 else std[0]
            out[i, c] = (x[i, c] - x.dtype.type(m)) / x.dtype.type(s)
    return out


# -------------------------------------------------------------------------------------- behaviour
@pytest.mark.parametrize("size,padding", [((9, 7), 0), (5, 0), ((9, 7), 2), (4, 3), ((10, 6), (1, 2))])
def test_random_crop_matches_reference(size, padding):
    x = _images()
    t = RandomCrop(size, padding, seed=11)
    got = t(_batch(x))["input"]
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    want = crop_reference(x, pair(size), pair(padding), 11)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == x.dtype and got.flags.c_contiguous


def test_random_crop_output_is_a_window_of_the_zero_padded_image():
    x = _images(n=4, h=6, w=6)
    got = RandomCrop(6, 2, seed=0)(_batch(x))["input"]
    padded = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)))
    for i in range(4):  # independent of the draw order: search every offset
        assert any(np.array_equal(got[i], padded[i, :, a:a + 6, b:b + 6]) for a in range(5) for b in range(5))
    assert RandomCrop(6, 0, seed=0)(_batch(x))["input"].tolist() == x.tolist()  # nothing to choose


@pytest.mark.parametrize("p", [0.0, 0.3, 0.5, 1.0])
def test_flip_matches_reference(p):
    x = _images(n=16)
    got = RandomHorizontalFlip(p, seed=3)(_batch(x))["input"]
    np.testing.assert_array_equal(got, flip_reference(x, p, 3))
    if p == 0.0:
        np.testing.assert_array_equal(got, x)
    if p == 1.0:
        np.testing.assert_array_equal(got, x[..., ::-1])


@pytest.mark.parametrize("size,count", [(3, 1), (4, 2), (1, 3), (20, 1)])
def test_cutout_matches_reference(size, count):
    x = _images(n=8)
    got = Cutout(size=size, count=count, seed=5)(_batch(x))["input"]
    np.testing.assert_array_equal(got, cutout_reference(x, size, count, 5))
    zeros = (got == 0).all(axis=1).sum(axis=(1, 2))  # images hold no zeros before
    assert np.all(zeros >= 1) and np.all(zeros <= min(count * size * size, 9 * 7))
    if size == 20:
        assert np.all(got == 0)  # a 20x20 square covers a 9x7 image wherever its centre is


@pytest.mark.parametrize("mean,std", [([0.5, 1.0, -1.0], [0.25, 2.0, 1.0]), ([0.5], [2.0]), (1.0, 0.5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_normalize_matches_reference(mean, std, dtype):
    x = _images(dtype=dtype)
    got = Normalize(mean, std)(_batch(x))["input"]
    want = normalize_reference(x, np.atleast_1d(mean), np.atleast_1d(std))
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_allclose(got, want, rtol=1e-3 if dtype == np.float16 else 1e-6)


@pytest.mark.parametrize("make", [lambda **k: RandomCrop(5, 2, **k), lambda **k: RandomHorizontalFlip(**k),
                                  lambda **k: Cutout(size=3, count=2, **k)], ids=["crop", "flip", "cutout"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_random_transforms_are_reproducible_and_keep_dtypes(make, dtype):
    x = _images(n=32, dtype=dtype)
    original = x.copy()
    a, b = make(seed=9), make(seed=9)
    first_a, first_b = a(_batch(x)), b(_batch(x))
    np.testing.assert_array_equal(first_a["input"], first_b["input"])
    second = a(_batch(x))["input"]
    assert not np.array_equal(second, first_a["input"])  # a new draw per batch
    np.testing.assert_array_equal(make(generator=np.random.default_rng(9))(_batch(x))["input"], first_a["input"])
    assert not np.array_equal(make(seed=10)(_batch(x))["input"], first_a["input"])
    out = first_a["input"]
    assert out.dtype == dtype and out.shape[:2] == x.shape[:2]
    np.testing.assert_array_equal(x, original)  # never modified in place
    assert first_a["label"] is not None and np.array_equal(first_a["label"], np.arange(32))


def test_transforms_in_a_sampler_are_reproducible():
    x = _images(n=12, h=8, w=8)
    ds = d5.NumpyDataset(x, "input", np.arange(12), "label")

    def run():
        augment = [RandomCrop(8, 2, seed=1), RandomHorizontalFlip(seed=2), Cutout(size=2, seed=3),
                   Normalize([1.0, 1.0, 1.0], [0.5, 0.5, 0.5])]
        return [b["input"] for b in d5.ShuffleSampler(ds, 4, seed=0, transformations=augment)]

    a, b = run(), run()
    assert len(a) == 3 and all(np.array_equal(u, v) for u, v in zip(a, b))
    assert all(u.shape == (4, 3, 8, 8) and u.dtype == np.float32 for u in a)


def test_transform_works_on_any_input_node():
    x = _images(n=2)
    out = RandomHorizontalFlip(1.0, input_node="image")({"image": x})
    np.testing.assert_array_equal(out["image"], x[..., ::-1])


# ---------------------------------------------------------------------------------- bad arguments
@pytest.mark.parametrize("make,match", [
    (lambda: RandomCrop(0), r"size must be an integer >= 1 or a pair \(height, width\) of them. Received: size=0"),
    (lambda: RandomCrop((3, 3, 3)), r"Received: size=\(3, 3, 3\)"),
    (lambda: RandomCrop(3, -1), r"padding must be an integer >= 0"),
    (lambda: RandomCrop(3, 1.5), r"Received: padding=1.5"),
    (lambda: RandomHorizontalFlip(1.5), r"p must be a probability in \[0, 1\]. Received: p=1.5"),
    (lambda: RandomHorizontalFlip(True), r"p must be a probability"),
    (lambda: Cutout(size=0), r"Cutout size \(the side of a hole\) must be an integer >= 1. Received: size=0"),
    (lambda: Cutout(size=2, count=0), r"Cutout count \(holes per image\) must be an integer >= 1. Received: count=0"),
    (lambda: Normalize([0.5], [0.0]), r"std must be positive"),
    (lambda: Normalize([0.5, 0.5], [1.0, 1.0, 1.0]), r"2 means and 3 standard deviations"),
    (lambda: Normalize("a", 1.0), r"mean must be a finite number or a list"),
    (lambda: Normalize([np.nan], 1.0), r"mean must be a finite number"),
    (lambda: Cutout(size=2, seed=1, generator=np.random.default_rng()), r"seed or generator, not both"),
    (lambda: Cutout(size=2, seed=-3), r"seed must be None or an integer >= 0. Received: seed=-3"),
    (lambda: Cutout(size=2, input_node=""), r"input_node must be a non-empty string"),
])
def test_bad_transform_arguments(make, match):
    with pytest.raises(UserError, match=match):
        make()


def test_bad_batches():
    with pytest.raises(UserError, match=r"the batch has no feed 'input'. Feeds: \['image'\]"):
        Cutout(size=2, seed=0)({"image": _images()})
    with pytest.raises(UserError, match=r"NCHW images \(4-D\). Received: feed 'input' shaped \[3, 9, 7\]"):
        Cutout(size=2, seed=0)({"input": _images()[0]})
    with pytest.raises(TypeError, match=r"floating-point images. Received: feed 'input' of dtype uint8"):
        RandomHorizontalFlip(seed=0)({"input": np.zeros((1, 1, 2, 2), np.uint8)})
    with pytest.raises(TypeError, match="takes a batch dict"):
        Normalize(0.0, 1.0)(_images())
    with pytest.raises(UserError, match=r"size 12x12 is larger than the padded images 11x9"):
        RandomCrop(12, 1, seed=0)(_batch(_images()))
    with pytest.raises(UserError, match=r"Normalize has 2 mean values but the images have 3 channels"):
        Normalize([0.0, 0.0], 1.0)(_batch(_images()))
    with pytest.raises(TypeError, match="generator must be a numpy.random.Generator"):
        Cutout(size=2, generator=np.random.RandomState(0))


# ------------------------------------------------------------------ Deep500's forms
def test_deep500_cutout_positional_arguments_are_holes_then_length():
    x = np.ones((12, 3, 40, 40), np.float32)
    got = Cutout(1, 16, seed=7)(_batch(x))["input"]
    np.testing.assert_array_equal(got, cutout_reference(x, 16, 1, 7))
    np.testing.assert_array_equal(got, Cutout(size=16, count=1, seed=7)(_batch(x))["input"])
    rng = np.random.default_rng(7)
    cy, cx = rng.integers(0, 40, size=(12, 1)), rng.integers(0, 40, size=(12, 1))
    for i in range(12):
        zero = (got[i] == 0).all(axis=0)
        rows, cols = np.flatnonzero(zero.any(axis=1)), np.flatnonzero(zero.any(axis=0))
        # one rectangle: the 16x16 window centred on the drawn pixel, clipped to the image
        assert zero.sum() == len(rows) * len(cols)
        assert (rows[0], rows[-1] + 1) == (max(cy[i, 0] - 8, 0), min(cy[i, 0] + 8, 40))
        assert (cols[0], cols[-1] + 1) == (max(cx[i, 0] - 8, 0), min(cx[i, 0] + 8, 40))
        assert (got[i] == 0).all(axis=0).sum() == zero.sum() and np.all(got[i][:, ~zero] == 1)


def test_deep500_cutout_defaults_and_several_holes():
    c = Cutout()
    assert (c.holes, c.length, c.random_fill) == (1, 16, False) and (c.count, c.size) == (1, 16)
    x = _images(n=8, h=20, w=20)
    np.testing.assert_array_equal(Cutout(3, 4, seed=1)(_batch(x))["input"], cutout_reference(x, 4, 3, 1))
    np.testing.assert_array_equal(Cutout(0, 4, seed=1)(_batch(x))["input"], x)  # no holes


def test_deep500_cutout_random_fill_fills_the_hole_with_uniform_noise():
    x = np.full((6, 3, 20, 20), 7.0, np.float32)
    got = Cutout(1, 6, True, seed=2)(_batch(x))["input"]
    holes = cutout_reference(x, 6, 1, 2) == 0
    assert np.all(got[~holes] == 7.0)
    assert np.all((got[holes] >= -0.5) & (got[holes] < 0.5)) and len(np.unique(got[holes])) > 10


def test_cutout_refuses_both_names_of_one_argument():
    with pytest.raises(UserError, match="Give holes or count, not both"):
        Cutout(1, count=1)
    with pytest.raises(UserError, match="Give length or size, not both"):
        Cutout(1, 16, size=16)
    with pytest.raises(UserError, match=r"Cutout length \(the side of a hole\) must be an integer >= 1"):
        Cutout(1, 0)


def crop_deep500_reference(x, crop, padding, fill, random_crop, seed):
    rng = np.random.default_rng(seed)
    n, c, height, width = x.shape
    (h, w), (ph, pw) = crop, padding
    hp, wp = height + 2 * ph, width + 2 * pw
    if random_crop:
        top, left = rng.integers(0, hp - h + 1, size=n), rng.integers(0, wp - w + 1, size=n)
    else:
        top, left = np.full(n, hp // 2 - h // 2), np.full(n, wp // 2 - w // 2)
    out = []
    for i in range(n):
        padded = np.full((c, hp, wp), fill, x.dtype)
        padded[:, ph:ph + height, pw:pw + width] = x[i]
        out.append(padded[:, top[i]:top[i] + h, left[i]:left[i] + w])
    return np.stack(out)


@pytest.mark.parametrize("crop,padding,fill,random_crop", [((9, 7), (2, 3), 0, True), ((5, 4), None, 0, False),
                                                          ((11, 9), (1, 1), -1.5, False), (6, 2, 0.25, True)])
def test_deep500_crop_matches_reference(crop, padding, fill, random_crop):
    x = _images(n=10)
    got = d5.frameworks.reference.Crop(crop, random_crop=random_crop, padding=padding, fill=fill, seed=4)(_batch(x))
    pair = (crop, crop) if isinstance(crop, int) else crop
    pads = (0, 0) if padding is None else (padding, padding) if isinstance(padding, int) else padding
    np.testing.assert_array_equal(got["input"], crop_deep500_reference(x, pair, pads, fill, random_crop, 4))


def test_deep500_crop_resize_scales_back_to_the_input_size():
    from deep500lite.frameworks.reference import Crop

    x = np.arange(2 * 1 * 8 * 8, dtype=np.float32).reshape(2, 1, 8, 8)
    got = Crop((4, 4), resize=True)(_batch(x))["input"]
    assert got.shape == x.shape
    centre = x[:, :, 2:6, 2:6]
    np.testing.assert_array_equal(got, centre.repeat(2, axis=2).repeat(2, axis=3))  # nearest neighbour, x2


@pytest.mark.parametrize("axis", [-1, -2, 0, 2])
@pytest.mark.parametrize("p", [0.0, 0.4, 1.0])
def test_deep500_random_flip_matches_reference(axis, p):
    from deep500lite.frameworks.reference import RandomFlip

    x = _images(n=16)
    got = RandomFlip(axis, p, seed=3)(_batch(x))["input"]
    flip = np.random.default_rng(3).random(16) < p
    want = np.stack([np.flip(x[i], axis=axis) if flip[i] else x[i] for i in range(16)])
    np.testing.assert_array_equal(got, want)
    with pytest.raises(UserError, match="axis must be an axis of an image sample"):
        RandomFlip(3)


def test_transforms_take_the_dataset_input_node_from_the_sampler():
    x = _images(n=4)
    ds = d5.NumpyDataset(x, "pixels", np.arange(4), "label")
    flip = RandomHorizontalFlip(1.0)
    kept = RandomHorizontalFlip(1.0, input_node="other")
    s = d5.OrderedSampler(ds, 4, transformations=[flip])
    np.testing.assert_array_equal(next(iter(s))["pixels"], x[..., ::-1])
    assert flip.input_node == "pixels"
    s.add_transformation(kept)
    assert kept.input_node == "other" and len(s.transformations) == 2
    assert RandomHorizontalFlip().input_node == "input"  # no sampler: the default feed


def test_normalize_takes_deep500s_stddev_keyword():
    x = _images()
    by_keyword = Normalize(0.5, stddev=2.0)(_batch(x))["input"]
    np.testing.assert_array_equal(by_keyword, Normalize(0.5, 2.0)(_batch(x))["input"])


def test_deep500_older_form_names_the_nodes_first():
    x = np.arange(2 * 1 * 4 * 4, dtype=np.float32).reshape(2, 1, 4, 4)
    crop = Crop('images', 'label', (2, 2))  # centre crop of feed 'images'
    out = crop({'images': x, 'label': np.zeros(2, np.int64)})
    np.testing.assert_array_equal(out['images'], x[:, :, 1:3, 1:3])
    flip = RandomFlip('0', 'label', p=1.0, seed=0)
    ds = d5.NumpyDataset(x, 'input', np.zeros(2, np.int64), 'label')
    with pytest.warns(UserWarning, match="given the input node '0'"):
        batch = next(iter(d5.OrderedSampler(ds, 2, transformations=[flip])))
    np.testing.assert_array_equal(batch['input'], x[..., ::-1])
    hole = Cutout('input', 'label', 1, 2, seed=0)
    assert (hole.holes, hole.length, hole.input_node) == (1, 2, 'input')
    with pytest.raises(d5.UserError, match="input node twice"):
        Cutout('input', 'label', 1, 2, input_node='input')
