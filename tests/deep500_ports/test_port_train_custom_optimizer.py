"""Deep500's ``tutorials/custom_optimizer.ipynb``: an ONNX file, samplers, and an update rule of one's own.

The tutorial's path, with a rule of our own: ``export_network('simple_cnn', batch, classes=,
channels=, height=, width=)`` writes an ONNX file, ``d5.parser.load_and_parse_model`` reads it
back, ``get_input_nodes()[0].name``/``get_output_nodes()[0].name`` name its ends,
``d5.ops.LabelCrossEntropy`` is added, the TensorFlow executor runs it, and a subclass of the
reference ``GradientDescent(executor, 'loss', lr)`` changes only ``update_rule`` (reading
``self.lr``). ``d5.test_training`` with two ``ShuffleSampler`` objects returns Deep500's default
metrics, training then test accuracy, and prints them; reloading the file gives a fresh network.
"""

import numpy as np
import pytest

import deep500lite as d5
from support import write_digits_as_mnist

pytest.importorskip("tensorflow")


@pytest.fixture
def onnx_file(tmp_path, monkeypatch):
    write_digits_as_mnist(tmp_path / "mnist", n_train=640, n_test=160)
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    from deep500lite import datasets as d5ds, networks as d5nt

    n_classes, c, h, w = d5ds.dataset_shape("mnist")
    return d5nt.export_network("simple_cnn", 32, classes=n_classes, channels=c, height=h, width=w)


class SignDescent:
    """Steps every weight by lr in the direction against its gradient's sign (signSGD)."""

    def update_rule(self, grad, old_param, param_name):
        return old_param - self.lr * np.sign(grad).astype(old_param.dtype)


def _setup(path):
    from deep500lite import datasets as d5ds
    from deep500lite.frameworks import tensorflow as d5tf

    net = d5.parser.load_and_parse_model(path)
    x_name, y_name = net.get_input_nodes()[0].name, net.get_output_nodes()[0].name
    learn, check = d5ds.load_dataset("mnist", x_name, "number")
    net.add_operation(d5.ops.LabelCrossEntropy([y_name, "number"], "loss"))
    return d5tf.from_model(net), y_name, d5.ShuffleSampler(learn, 32), d5.ShuffleSampler(check, 32)


def test_reference_descent_and_a_custom_rule_train_the_exported_file(onnx_file, capsys):
    from deep500lite.frameworks import reference as d5ref

    ex, y_name, learn, check = _setup(onnx_file)
    plain = d5ref.GradientDescent(ex, "loss", 0.1)
    train_acc, test_acc = d5.test_training(ex, learn, check, plain, 2, 32, y_name)
    assert test_acc > 60 and 0 <= train_acc <= 100
    printed = capsys.readouterr().out
    assert f"TrainingAccuracy: {train_acc}\nTestAccuracy: {test_acc}\n" in printed

    ex2, y_name, learn, check = _setup(onnx_file)  # read again: a network that has not trained
    start = ex2.network.fetch_tensors(ex2.network.get_params())
    signed = type("SignSGD", (SignDescent, d5ref.GradientDescent), {})(ex2, "loss", 0.002)
    results = d5.test_training(ex2, learn, check, signed, 1, 32, y_name, verbose=False)
    assert results.stats.initial_test["test_accuracy"] < 30  # tested before training: chance again
    assert results[1] > results.stats.initial_test["test_accuracy"]
    batch = next(iter(learn))
    grads_at = [p for p, _ in ex2.network.gradient("loss")]
    before = ex2.network.fetch_tensors(grads_at)
    ex2.inference_and_backprop(batch, "loss")
    grads = ex2.network.fetch_tensors([g for _, g in ex2.network.gradient("loss")])
    signed.step(batch)
    for w0, g, w1 in zip(before, grads, ex2.network.fetch_tensors(grads_at)):
        np.testing.assert_allclose(w1, w0 - 0.002 * np.sign(g), rtol=0, atol=1e-6)
    assert any(not np.array_equal(a, b) for a, b in zip(start, ex2.network.fetch_tensors(ex2.network.get_params())))
