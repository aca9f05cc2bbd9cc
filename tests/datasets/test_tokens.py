"""The ``synthetic_tokens`` dataset: shapes and dtypes, seeded generation, learnable classes, errors."""

from __future__ import annotations

import numpy as np
import pytest

from deep500lite import datasets
from deep500lite.errors import UserError


def test_token_ids_labels_and_shape():
    train, test = datasets.load_dataset("synthetic_tokens", "input", "label", seq_len=12, classes=3, vocab_size=50,
                                        train_size=40, test_size=10, seed=1)
    assert (len(train), len(test)) == (40, 10)
    batch = train[np.arange(40)]
    x, y = batch["input"], batch["label"]
    assert x.shape == (40, 12) and x.dtype == np.int64 and y.dtype == np.int64
    assert x.min() >= 0 and x.max() < 50 and np.all(x[:, 0] == 0) and x[:, 1:].min() >= 1
    assert set(np.unique(y)) <= {0, 1, 2} and len(np.unique(y)) == 3
    assert datasets.dataset_shape("synthetic_tokens", seq_len=12, classes=3, vocab_size=50) == (3, 12)
    assert "synthetic_tokens" in datasets.list_datasets()


def test_same_seed_same_data_and_classes_are_learnable():
    opts = dict(seq_len=64, vocab_size=1000, train_size=200)
    a, _ = datasets.load_dataset("synthetic_tokens", "input", "label", seed=4, **opts)
    b, _ = datasets.load_dataset("synthetic_tokens", "input", "label", seed=4, **opts)
    c, _ = datasets.load_dataset("synthetic_tokens", "input", "label", seed=5, **opts)
    idx = np.arange(200)
    np.testing.assert_array_equal(a[idx]["input"], b[idx]["input"])
    assert not np.array_equal(a[idx]["input"], c[idx]["input"])
    # A bag-of-tokens nearest-centroid classifier separates the two classes: the keywords carry the label.
    x, y = a[idx]["input"], a[idx]["label"]
    counts = np.stack([np.bincount(row, minlength=1000) for row in x]).astype(float)
    centroids = np.stack([counts[y == k].mean(0) for k in (0, 1)])
    predicted = np.argmax(counts @ centroids.T - 0.5 * (centroids ** 2).sum(1), axis=1)
    assert (predicted == y).mean() > 0.95


def test_signal_zero_is_uniform_noise():
    train, _ = datasets.load_dataset("synthetic_tokens", "input", "label", seq_len=2000, vocab_size=5, train_size=2,
                                     signal=0.0)
    counts = np.bincount(train[np.arange(2)]["input"][:, 1:].ravel(), minlength=5)
    assert counts[0] == 0 and np.all(np.abs(counts[1:] / counts[1:].sum() - 0.25) < 0.03)


@pytest.mark.parametrize("kwargs,match", [
    (dict(seq_len=0), r"synthetic_tokens: seq_len must be an integer >= 1. Received: seq_len=0"),
    (dict(classes=1), r"classes must be an integer >= 2. Received: classes=1"),
    (dict(vocab_size=1.5), r"vocab_size must be an integer >= 2. Received: vocab_size=1.5"),
    (dict(signal=2), r"signal must be a number from 0 to 1. Received: signal=2"),
    (dict(root="/tmp"), r"reads no files: leave root unset. Received: root='/tmp'"),
    (dict(colour=1), r"has no option"),
])
def test_bad_options_are_user_errors(kwargs, match):
    with pytest.raises(UserError, match=match):
        datasets.load_dataset("synthetic_tokens", "input", "label", **kwargs)
