"""Deep500's ``samples/accelegrad.py``: a new ``ThreeStepOptimizer`` trained by ``test_training`` over Datasets.

The sample's path, with an optimizer of our own: a ``d5.ThreeStepOptimizer`` subclass whose
``new_input``, ``prepare_param`` (which may move the parameters the gradient is taken at, through
``executor.network.fetch_tensors``/``feed_tensor``) and ``update_rule(grad, old_param,
param_name)`` hooks run in that order each step; ``create_model('simple_cnn', batch)`` with
``SoftmaxCrossEntropy``; and ``d5.test_training(executor, train Dataset, test Dataset, opt, epochs,
batch_size, output)`` with the default metrics (training and test accuracy), which wraps the
Datasets in samplers itself.
"""

import numpy as np
import pytest

import deep500lite as d5
from support import write_digits_as_mnist

pytest.importorskip("tensorflow")


class Lookahead(d5.ThreeStepOptimizer):
    """Takes the gradient at w + beta * (w - w_before) (a look-ahead point), then steps from w."""

    def __init__(self, executor, lr=0.05, beta=0.5):
        super().__init__(executor)
        self.lr, self.beta = lr, beta
        self.previous, self.anchor, self.calls = {}, {}, []

    def new_input(self):
        self.calls.append("new_input")

    def prepare_param(self, param_name):
        self.calls.append("prepare_param")
        now = self.executor.network.fetch_tensors([param_name])[0]
        before = self.previous.get(param_name, now)
        self.anchor[param_name] = now
        self.executor.network.feed_tensor(param_name, (now + self.beta * (now - before)).astype(now.dtype))

    def update_rule(self, grad, old_param, param_name):
        self.calls.append("update_rule")
        base = self.anchor[param_name]
        self.previous[param_name] = base
        return base - self.lr * grad


@pytest.fixture
def digits(tmp_path, monkeypatch):
    write_digits_as_mnist(tmp_path / "mnist", n_train=600, n_test=200)
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))


def test_three_step_optimizer_trains_through_test_training(digits, capsys):
    from deep500lite import datasets as d5ds, networks as d5net
    from deep500lite.frameworks import tensorflow as d5tf

    batch = 50
    net, x_name, y_name = d5net.create_model("simple_cnn", batch)
    learn, check = d5ds.load_dataset("mnist", x_name, "digit")
    net.add_operation(d5.ops.SoftmaxCrossEntropy([y_name, "digit"], "loss"))
    opt = Lookahead(d5tf.from_model(net))
    train_acc, test_acc = d5.test_training(opt.executor, learn, check, opt, 3, batch, y_name)

    n_params = len(net.gradient("loss"))
    assert opt.calls[:1 + n_params] == ["new_input"] + ["prepare_param"] * n_params
    assert opt.calls.count("new_input") == 3 * 600 // batch
    assert opt.calls.count("update_rule") == opt.calls.count("prepare_param") == 36 * n_params
    out = capsys.readouterr().out
    assert f"TrainingAccuracy: {train_acc}" in out and f"TestAccuracy: {test_acc}" in out
    assert test_acc > 40  # from 10% (chance) in 36 steps


def test_one_step_is_the_look_ahead_formula(digits):
    from deep500lite import datasets as d5ds, networks as d5net
    from deep500lite.frameworks import tensorflow as d5tf

    net, x_name, y_name = d5net.create_model("simple_cnn", 20, seed=2)
    net.add_operation(d5.ops.SoftmaxCrossEntropy([y_name, "digit"], "loss"))
    learn, _ = d5ds.load_dataset("mnist", x_name, "digit")
    ex, probe = d5tf.from_model(net), d5.executor(net.copy(), "reference")
    opt = Lookahead(ex, lr=0.1, beta=0.5)
    opt.step(learn[0:20])  # the first step: no previous point, so the gradient is taken at w
    names = [p for p, _ in net.gradient("loss")]
    w1 = {n: v.astype(np.float64) for n, v in zip(names, net.fetch_tensors(names))}
    w0 = {n: opt.previous[n].astype(np.float64) for n in names}
    opt.step(learn[20:40])
    w2 = net.fetch_tensors(names)
    for n in names:  # the gradient at the look-ahead point, taken by a second executor
        probe.network.feed_tensor(n, (w1[n] + 0.5 * (w1[n] - w0[n])).astype(np.float32))
    probe.inference_and_backprop(learn[20:40], "loss")
    for n, grad in zip(names, probe.network.fetch_tensors([g for _, g in net.gradient("loss")])):
        np.testing.assert_allclose(w2[names.index(n)], w1[n] - 0.1 * grad, rtol=1e-3, atol=1e-5, err_msg=n)
