"""Deep500's ``samples/dataset_latency.py``: the time to load a batch, dataset by dataset.

The sample's path: ``load_dataset(name, input, label, batch_size=)`` (a pair of Datasets), a
``ShuffleSampler`` over the training one, ``d5.test_sampler`` with
``SamplerEventMetric(WallclockTime())``, and ``except ImportError`` around each dataset to skip
what cannot be loaded. Checked: ``WallclockTime()`` keeps Deep500's defaults here (100 batches,
timed in 10 groups of 10, the median printed); the four image datasets Deep500 downloaded load
from files put in place; ``imagenet``, which has no loader, is an ImportError the sample's own
handler skips.
"""

import os
import re

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets as d5ds
from support import write_digits_as_cifar10, write_digits_as_mnist


def _as_cifar100(folder, n_train, n_test):
    """Digits as CIFAR-100 records: coarse label, fine label, 3x32x32 pixels (label d: fine d, coarse d // 2)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    os.makedirs(folder, exist_ok=True)
    pixels = np.repeat(np.kron(digits.images, np.ones((4, 4))).reshape(-1, 1, 32 * 32), 3, axis=1)
    pixels = (pixels * 15.9).astype(np.uint8).reshape(len(pixels), -1)
    for name, rows in (("train.bin", slice(0, n_train)), ("test.bin", slice(n_train, n_train + n_test))):
        fine = digits.target[rows].astype(np.uint8)
        records = np.column_stack([fine // 2, fine, pixels[rows]])
        with open(os.path.join(folder, name), "wb") as f:
            f.write(records.astype(np.uint8).tobytes())


@pytest.fixture
def four_datasets(tmp_path, monkeypatch):
    write_digits_as_mnist(tmp_path / "mnist", n_train=700, n_test=100)
    write_digits_as_mnist(tmp_path / "fashion_mnist", n_train=500, n_test=100)
    write_digits_as_cifar10(tmp_path / "cifar10", n_train=600, n_test=100)
    _as_cifar100(tmp_path / "cifar100", 650, 100)
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))


def _batch_latency(name, size=64):
    learn, _ = d5ds.load_dataset(name, "pixels", "kind", batch_size=size)
    timer = d5.WallclockTime()
    return d5.test_sampler(d5.ShuffleSampler(learn, size), metrics=[d5.SamplerEventMetric(timer)]), timer


def test_each_dataset_timed_as_deep500_and_imagenet_skipped(four_datasets, capsys):
    measured, skipped = {}, []
    for name in ["mnist", "fashion_mnist", "cifar10", "cifar100", "imagenet"]:
        try:
            measured[name] = _batch_latency(name)
        except ImportError as err:  # the sample's handler
            skipped.append((name, str(err)))
    assert sorted(measured) == ["cifar10", "cifar100", "fashion_mnist", "mnist"]
    for name, ([averages], timer) in measured.items():
        assert (timer.reruns, timer.avg_over) == (100, 10)
        assert len(averages) == 10 and min(averages) > 0, name  # 100 loads, averaged 10 at a time
    [(name, why)] = skipped
    assert name == "imagenet" and "no loader for Deep500's dataset 'imagenet'" in why
    printed = capsys.readouterr().out
    medians = re.findall(r"^SamplerEventMetric: ([0-9.]+) (s|ms|us|ns)$", printed, re.M)
    assert len(medians) == 4


def test_a_dataset_without_files_is_not_an_import_error(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    with pytest.raises(d5.MissingDatasetError, match="fashion_mnist") as err:
        _batch_latency("fashion_mnist")
    assert not isinstance(err.value, ImportError)  # the sample lets it through: put the files in place
