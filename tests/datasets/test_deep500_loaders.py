"""Deep500's per-dataset functions (load_mnist, load_cifar10, ..._shape, ..._loss) on files written here."""

from __future__ import annotations

import numpy as np
import pytest
from support import write_digits_as_cifar10, write_digits_as_mnist

from deep500lite import datasets
from deep500lite.datasets import MissingDatasetError, read_idx
from deep500lite.errors import UserError


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_digits_as_mnist(root / "mnist", n_train=120, n_test=40)
    write_digits_as_cifar10(root / "cifar10", n_train=100, n_test=30)
    return root


def test_load_mnist_returns_deep500s_pair(data_root, monkeypatch):
    monkeypatch.setenv("DEEP500LITE_DATA", str(data_root))
    train, test = datasets.load_mnist("input", "label")
    raw = read_idx(str(data_root / "mnist" / "train-images-idx3-ubyte"))
    labels = read_idx(str(data_root / "mnist" / "train-labels-idx1-ubyte"))
    assert (len(train), len(test)) == (120, 40)
    batch = train[np.arange(5)]
    low, high = float(raw.min()), float(raw.max())
    np.testing.assert_allclose(batch["input"], ((raw[:5, None] - low) / (high - low)).astype(np.float32), rtol=1e-6)
    np.testing.assert_array_equal(batch["label"], labels[:5].astype(np.int64))
    assert batch["input"].shape == (5, 1, 28, 28) and batch["label"].dtype == np.int64
    # normalize=False: the raw bytes, as Deep500
    raw_train, _ = datasets.load_mnist("input", "label", normalize=False, batch_size=64)
    np.testing.assert_array_equal(raw_train[np.arange(3)]["input"], raw[:3, None])
    assert raw_train[np.arange(3)]["input"].dtype == np.uint8


def test_load_mnist_missing_file_stays_a_clear_error(tmp_path):
    with pytest.raises(MissingDatasetError, match="train-images-idx3-ubyte"):
        datasets.load_mnist("input", "label", root=tmp_path)
    with pytest.raises(MissingDatasetError, match="fashion"):
        datasets.load_fashion_mnist("input", "label", root=tmp_path / "fashion")
    with pytest.raises(UserError, match=r"has no option\(s\) \['colour'\]"):
        datasets.load_mnist("input", "label", root=tmp_path, colour=True)


def test_load_cifar10_normalizes_per_channel_as_deep500(data_root):
    train, test = datasets.load_cifar10("in", "y", folder=str(data_root / "cifar10"))
    plain, _ = datasets.load_cifar10("in", "y", normalize=False, root=data_root / "cifar10")
    x = plain[np.arange(4)]["in"]
    mean = np.array(datasets.cifar_mean["cifar10"], np.float32)[:, None, None]
    std = np.array(datasets.cifar_std["cifar10"], np.float32)[:, None, None]
    np.testing.assert_allclose(train[np.arange(4)]["in"], (x - mean) / std, rtol=1e-6)
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert (len(train), len(test)) == (100, 30)
    with pytest.raises(UserError, match="root or folder"):
        datasets.load_cifar10("in", "y", folder="a", root="b")


def test_shapes_losses_and_load_dataset_accept_deep500s_calls(data_root):
    assert datasets.mnist_shape() == datasets.dataset_shape("mnist") == (10, 1, 28, 28)
    assert datasets.fashion_mnist_shape() == (10, 1, 28, 28)
    assert datasets.cifar10_shape() == datasets.dataset_shape("cifar10") == (10, 3, 32, 32)
    assert datasets.cifar100_shape() == (100, 3, 32, 32)
    op = datasets.cifar10_loss()(["logits", "label"], "loss")
    assert [n.op_type for n in op.nodes] == ["SoftmaxCrossEntropyLoss"]
    train, _ = datasets.load_dataset(" MNIST ", "in", "label", root=data_root / "mnist", batch_size=128)
    assert len(train) == 120
