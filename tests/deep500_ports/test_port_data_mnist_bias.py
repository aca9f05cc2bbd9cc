"""Deep500's ``samples/mnist_bias.py``: class histograms of a shuffling sampler's batches.

The sample's path: ``datasets.load_mnist(input, label)``, ``ShuffleSampler(dataset, batch)`` and
``d5.test_sampler(sampler, metrics=[d5.DatasetBias(classes, label)])`` returning ``[histogram]``.
``DatasetBias`` keeps Deep500's default of 1000 batches; the histograms are checked against an
independent count of the label files written here.
"""

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets as d5ds
from support import write_digits_as_mnist


@pytest.mark.parametrize("n_train,batch", [(500, 5), (640, 8)])
def test_histograms_of_1000_batches(tmp_path, monkeypatch, capsys, n_train, batch):
    write_digits_as_mnist(tmp_path / "mnist", n_train=n_train, n_test=200)
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    learn, check = d5ds.load_mnist("image", "digit")
    bias = d5.DatasetBias(10, "digit")
    assert bias.reruns == 1000
    [train_hist] = d5.test_sampler(d5.ShuffleSampler(learn, batch), metrics=[bias])
    [test_hist] = d5.test_sampler(d5.ShuffleSampler(check, batch), metrics=[d5.DatasetBias(10, "digit")])

    train_counts = np.bincount(d5ds.read_idx(str(tmp_path / "mnist" / "train-labels-idx1-ubyte")), minlength=10)
    test_counts = np.bincount(d5ds.read_idx(str(tmp_path / "mnist" / "t10k-labels-idx1-ubyte")), minlength=10)
    drawn = 1000 * batch
    assert sum(train_hist) == sum(test_hist) == drawn
    # each epoch visits every sample once, in a new order (the batch sizes divide the set sizes)
    whole, rest = divmod(drawn, n_train)
    extra = np.array(train_hist) - whole * train_counts
    assert extra.sum() == rest and (extra >= 0).all() and (extra <= train_counts).all()
    assert drawn % 200 == 0 and test_hist == (drawn // 200 * test_counts).tolist()
    assert capsys.readouterr().out.count("DatasetBias: [") == 2
