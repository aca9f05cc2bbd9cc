"""Deep500's ``samples/train_mnist.py``: an optimizer stepped by hand over slices of a Dataset.

The sample's path: ``export_network('simple_cnn', batch)`` (Deep500's default shape, MNIST's),
``load_and_parse_model``, ``datasets.load_mnist(input, label)``, ``SoftmaxCrossEntropy``, the
TensorFlow executor with its native ``GradientDescent(executor, 'loss')`` (Deep500's default
learning rate), ``optimizer.step(dataset[a:b])`` over one epoch, and accuracy counted from
``executor.inference(dataset[a:b])`` before and after.
"""

import numpy as np
import pytest

import deep500lite as d5
from support import write_digits_as_mnist

pytest.importorskip("tensorflow")


def _share_right(ex, data, out_name, label, size):
    hits = 0
    for start in range(0, len(data) - size + 1, size):
        rows = data[start:start + size]
        hits += int(np.count_nonzero(np.argmax(ex.inference(rows)[out_name], axis=1) == rows[label]))
    return hits / (len(data) // size * size)


def test_one_epoch_of_hand_driven_steps_learns(tmp_path, monkeypatch):
    write_digits_as_mnist(tmp_path / "mnist", n_train=960, n_test=320)
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # export_network writes its file here
    from deep500lite import datasets as d5ds, networks as d5net
    from deep500lite.frameworks import tensorflow as d5tf

    size = 32
    path = d5net.export_network("simple_cnn", size)
    net = d5.parser.load_and_parse_model(path)
    x_name, y_name = net.get_input_nodes()[0].name, net.get_output_nodes()[0].name
    learn, check = d5ds.load_mnist(x_name, "truth")
    net.add_operation(d5.ops.SoftmaxCrossEntropy([y_name, "truth"], "loss"))
    ex = d5tf.from_model(net)
    sgd = d5tf.GradientDescent(ex, "loss")
    assert sgd.learning_rate == 0.1  # Deep500's default

    before = _share_right(ex, check, y_name, "truth", size)
    losses = [float(sgd.step(learn[k:k + size])["loss"]) for k in range(0, len(learn), size)]
    after = _share_right(ex, check, y_name, "truth", size)
    assert len(losses) == 30 and np.mean(losses[-5:]) < np.mean(losses[:5])
    assert before < 0.3 and after > before + 0.3
