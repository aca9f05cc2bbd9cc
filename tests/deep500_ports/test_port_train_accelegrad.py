"""Deep500's samples/accelegrad.py (a new ThreeStepOptimizer, trained with test_training over
Datasets) on deep500lite.

The optimizer class is the sample's, written again here in its shape (the same hooks, the same
arithmetic, including its ``init`` flag that is never set, so ``y``, ``z`` and the squares restart
at every step, as in Deep500). Changed: the imports and the data (MNIST files written from
scikit-learn's digits through ``DEEP500LITE_DATA``).
"""

import numpy as np
import pytest

import deep500lite as d5
from support import write_digits_as_mnist

pytest.importorskip("tensorflow")


class AcceleGradOptimizer(d5.ThreeStepOptimizer):
    """AcceleGrad (Levy, Yurtsever & Cevher, NeurIPS'18), as the Deep500 sample defines it."""

    def __init__(self, executor: d5.GraphExecutor, lr=0.999, G=0, D=1.0, eps=1e-6):
        super().__init__(executor)
        self.lr, self.eps, self.G, self.D = lr, eps, G, D
        self.squares, self.z, self.y = {}, {}, {}
        self.t = -1
        self.alpha_t = self.tau_t = 0
        self.init = False

    def new_input(self):
        self.t += 1
        self.alpha_t = 1 if 0 <= self.t <= 2 else (self.t + 1) / 4
        self.tau_t = 1 / self.alpha_t

    def prepare_param(self, param_name):
        current = self.executor.network.fetch_tensors([param_name])[0]
        if not self.init:
            self.y[param_name] = current
            self.z[param_name] = current
            self.squares[param_name] = 0
        moved = self.tau_t * self.z[param_name] + (1 - self.tau_t) * self.y[param_name]
        self.executor.network.feed_tensor(param_name, moved)

    def update_rule(self, grad, old_param, param_name):
        acc = self.squares[param_name] + self.alpha_t ** 2 * np.linalg.norm(grad) ** 2
        eta = 2 * self.D / np.sqrt(self.G ** 2 + acc + self.eps)
        self.z[param_name] = self.z[param_name] - self.alpha_t * eta * grad
        self.y[param_name] = old_param - eta * grad
        self.squares[param_name] = acc
        self.init = False
        return old_param - self.lr / (self.eps + np.sqrt(acc)) * grad


def test_accelegrad_sample_trains(tmp_path, monkeypatch):
    write_digits_as_mnist(tmp_path / "mnist")
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    from deep500lite import datasets as d5ds, networks as d5net
    from deep500lite.frameworks import tensorflow as d5tf
    batch_size = 1024

    net, innode, outnode = d5net.create_model('simple_cnn', batch_size)
    net.add_operation(d5.ops.SoftmaxCrossEntropy([outnode, 'label'], 'loss'))
    train, test = d5ds.load_dataset('mnist', innode, 'label')
    executor = d5tf.from_model(net)
    opt = AcceleGradOptimizer(executor)
    results = d5.test_training(executor, train, test, opt, 5, batch_size, outnode)

    # 1,200 training samples: one step of 1,024 per epoch, so five steps in all (too few to
    # judge accuracy by); every epoch evaluated the whole test set (400 samples, one padded batch).
    epochs = results.stats.epochs
    assert len(epochs) == 5 and opt.t == 4 and len(results) == 2  # DefaultTrainingMetrics: train, test accuracy
    assert all(e["test_samples"] == 400 and e["test_accuracy"] is not None for e in epochs)
    assert all(np.isfinite(e["train_loss"]) for e in epochs)

    # The sample's hooks drive the update: with y, z and the squares restarting every step, one more
    # step is w - lr / (eps + alpha * |g|) * g, alpha = (t + 1) / 4 at t = 5, per parameter.
    names = [p for p, _ in net.gradient('loss')]
    before = [w.astype(np.float64) for w in net.fetch_tensors(names)]
    opt.step(train[0:batch_size])
    after = net.fetch_tensors(names)
    grads = net.fetch_tensors([g for _, g in net.gradient('loss')])
    alpha = 1.5
    for name, w0, w1, g in zip(names, before, after, grads):
        g = g.astype(np.float64)
        expected = w0 - 0.999 / (1e-6 + alpha * np.linalg.norm(g)) * g
        np.testing.assert_allclose(w1, expected, rtol=1e-4, atol=1e-6, err_msg=name)
