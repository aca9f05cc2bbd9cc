"""Level 2 of Deep500's EuroMPI'19 notebook ``2_manual``: training without a recipe, then with augmentation.

The calls the notebook makes, with a network and data of our own (ResNet-20 on a small digits
stand-in for CIFAR-10): ``MomentumOptimizer(executor, learning_rate=, momentum=, loss=)``;
``test_training(executor, sampler, validation Dataset, optimizer, epochs, batch_size, output,
metrics=[WallclockTime(reruns=0, avg_over=1)])`` returning ``[[seconds]]`` and printing it; and a
``ShuffleSampler`` with ``Crop((32, 32), random_crop=True, padding=(4, 4))``, ``RandomFlip()`` and
``Cutout(1, 16)``. ``Cutout(holes, length)`` cuts Deep500's ``2 * (length // 2)`` square, so an odd
length loses a row and a column.
"""

import re

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets as d5ds
from deep500lite import networks as d5nt
from deep500lite.frameworks import reference as d5ref
from support import write_digits_as_cifar10

BATCH = 32


@pytest.fixture
def small_cifar(tmp_path, monkeypatch):
    write_digits_as_cifar10(tmp_path / "cifar10", n_train=128, n_test=64)
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))


def _resnet_and_sets():
    classes = d5ds.dataset_shape("cifar10")[0]
    net, x_name, y_name = d5nt.create_model("resnet", depth=20, classes=classes, batch_size=BATCH)
    net.add_operation(d5ds.dataset_loss("cifar10")([y_name, "cls"], "loss"))
    learn, check = d5ds.load_dataset("cifar10", x_name, "cls")
    return net, y_name, learn, check


@pytest.mark.parametrize("augment", [False, True], ids=["plain", "augmented"])
def test_training_by_hand_returns_the_seconds_it_took(small_cifar, capsys, augment):
    torch_fw = pytest.importorskip("deep500lite.frameworks.pytorch")
    net, y_name, learn, check = _resnet_and_sets()
    steps = [] if not augment else [d5ref.Crop((32, 32), random_crop=True, padding=(4, 4)), d5ref.RandomFlip(),
                                    d5ref.Cutout(1, 16)]
    sampler = d5.ShuffleSampler(learn, BATCH, transformations=steps)
    ex = torch_fw.from_model(net, device=d5.CPUDevice())
    opt = torch_fw.MomentumOptimizer(ex, learning_rate=0.1, momentum=0.9, loss="loss")
    timer = d5.WallclockTime(reruns=0, avg_over=1)
    results = d5.test_training(ex, sampler, check, opt, 2, BATCH, y_name, metrics=[timer])

    [[seconds]] = results
    assert 0 < seconds and results[0] == timer.samples
    printed = capsys.readouterr()
    assert re.search(r"^WallclockTime: [0-9.]+ (s|ms)$", printed.out, re.M), printed.out
    # the validation set is tested once before training, then after each epoch (Deep500's order)
    stats = results.stats
    assert stats.initial_test["test_samples"] == 64 and len(stats.epochs) == 2
    assert "before training: 64 test samples" in printed.err
    losses = [s["loss"] for s in stats.steps]
    assert len(losses) == 8 and np.isfinite(losses).all()
    if not augment:  # the random crops, flips and holes make two short epochs' losses noise
        first, second = (e["train_loss"] for e in stats.epochs)
        assert second < first  # 2.3 (chance) and falling


def _holes(transform, size=20, n=400):
    ones = np.ones((n, 2, size, size), np.float32)
    cut = transform({"input": ones, "label": np.zeros(n, np.int64)})["input"]
    assert np.array_equal(cut[:, 0], cut[:, 1])  # every channel of a pixel is cut together
    return cut[:, 0] == 0


@pytest.mark.parametrize("length,side", [(16, 16), (5, 4), (6, 6), (1, 0)])
def test_cutout_cuts_deep500s_square(length, side):
    holes = _holes(d5ref.Cutout(1, length, seed=3))
    rows, cols = holes.any(axis=2).sum(axis=1), holes.any(axis=1).sum(axis=1)
    assert rows.max() == side and cols.max() == side  # whole squares where the centre is far from the border
    assert (holes.sum(axis=(1, 2)) == rows * cols).all()  # each cut is one rectangle (a square clipped)


def test_cutout_keyword_form_cuts_exactly_size():
    holes = _holes(d5ref.Cutout(size=5, count=1, seed=3))
    assert holes.sum(axis=(1, 2)).max() == 25


def test_the_augmentations_keep_batches_whole(small_cifar):
    _, _, learn, _ = _resnet_and_sets()
    sampler = d5.ShuffleSampler(learn, BATCH, transformations=[
        d5ref.Crop((32, 32), random_crop=True, padding=(4, 4)), d5ref.RandomFlip(), d5ref.Cutout(1, 16)])
    batch = next(iter(sampler))
    images = batch[learn.input_node]
    assert images.shape == (BATCH, 3, 32, 32) and batch["cls"].shape == (BATCH,)
    plain = next(iter(d5.ShuffleSampler(learn, BATCH)))[learn.input_node]
    assert (images == 0).mean() > (plain == 0).mean()  # padding and cut squares add zeros
