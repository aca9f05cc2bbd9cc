"""Deep500's sample ``samples/mnist_bias.py`` on deep500lite: class histograms of sampled MNIST batches.

Written as the sample calls the API (``d5ds.load_mnist``, ``d5.ShuffleSampler``, ``d5.test_sampler``
with ``d5.DatasetBias``). Changed: the imports, and the data: MNIST files written from
scikit-learn's digits (``DEEP500LITE_DATA``), so nothing is downloaded.
"""

import numpy as np
import pytest
from support import write_digits_as_mnist

import deep500lite as d5
from deep500lite import datasets as d5ds
from deep500lite.datasets import read_idx

BATCH_SIZE = 10


@pytest.fixture
def mnist_files(tmp_path, monkeypatch):
    # 1000 training and 400 test images: DatasetBias's 1000 batches of 10 are exactly 10 and 25 epochs
    write_digits_as_mnist(tmp_path / "mnist", n_train=1000, n_test=400)
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    return tmp_path / "mnist"


def test_mnist_bias_sample(mnist_files, capsys):
    train_set, test_set = d5ds.load_mnist('input', 'label')
    tsampler = d5.ShuffleSampler(train_set, BATCH_SIZE)
    vsampler = d5.ShuffleSampler(test_set, BATCH_SIZE)

    [thist] = d5.test_sampler(tsampler, metrics=[d5.DatasetBias(10, 'label')])
    print('Observed training set size:', sum(thist))
    [vhist] = d5.test_sampler(vsampler, metrics=[d5.DatasetBias(10, 'label')])
    print('Observed test set size:', sum(vhist))

    # Independent count: a shuffling sampler visits every sample once per epoch, so whole epochs
    # give each class its count in the label file times the number of epochs.
    train_labels = read_idx(str(mnist_files / "train-labels-idx1-ubyte"))
    test_labels = read_idx(str(mnist_files / "t10k-labels-idx1-ubyte"))
    assert thist == (10 * np.bincount(train_labels, minlength=10)).tolist()
    assert vhist == (25 * np.bincount(test_labels, minlength=10)).tolist()
    out = capsys.readouterr().out
    assert "Observed training set size: 10000" in out and "Observed test set size: 10000" in out


def test_mnist_bias_over_a_partial_epoch(tmp_path, monkeypatch):
    # 1200 images: 1000 batches are 8 epochs and 40 batches (400 images) of a ninth
    write_digits_as_mnist(tmp_path / "mnist", n_train=1200, n_test=400)
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    train_set, test_set = d5ds.load_mnist('input', 'label')
    tsampler = d5.ShuffleSampler(train_set, BATCH_SIZE)
    [thist] = d5.test_sampler(tsampler, metrics=[d5.DatasetBias(10, 'label')])
    counts = np.bincount(read_idx(str(tmp_path / "mnist" / "train-labels-idx1-ubyte")), minlength=10)
    extra = np.array(thist) - 8 * counts
    assert sum(thist) == 10000 and extra.sum() == 400
    assert np.all(extra >= 0) and np.all(extra <= counts)
