"""The tutorial's weight-decay ``gradient_modifier(name, param, grad)`` (Deep500's order) adds
exactly ``1e-4 * param`` to each gradient: the step with it differs from the step without it by
``-lr * 1e-4 * param`` (momentum's first step uses the gradient as is), for the numpy reference,
torch and TensorFlow momentum optimizers."""

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets, networks
from support import framework_params


def weight_decay(name: str, param, grad):
    grad += 1e-4 * param
    return grad


def _executor(fw):
    net, _, out = networks.create_model("simple_cnn", 16, seed=3)
    net.add_operation(datasets.dataset_loss("mnist")([out, "label"], "loss"))
    return d5.executor(net, fw)


@pytest.mark.parametrize("fw", framework_params(["reference", "torch", "tensorflow"]))
def test_weight_decay_changes_the_update_by_lr_times_1e4_param(fw):
    fwmod = __import__(f"deep500lite.frameworks.{fw}", fromlist=["MomentumOptimizer"])
    rng = np.random.default_rng(0)
    feeds = {"input": rng.random((16, 1, 28, 28), dtype=np.float32), "label": rng.integers(0, 10, 16)}
    plain, decayed = _executor(fw), _executor(fw)
    names = [p for p, _ in plain.network.gradient("loss")]
    start = {n: v.astype(np.float64) for n, v in zip(names, plain.network.fetch_tensors(names))}
    lr = 0.5
    fwmod.MomentumOptimizer(plain, "loss", lr, 0.9).step(feeds)
    fwmod.MomentumOptimizer(decayed, "loss", lr, 0.9, gradient_modifier=weight_decay).step(feeds)
    largest = 0.0
    for name in names:
        diff = decayed.network.fetch_tensor(name).astype(np.float64) - plain.network.fetch_tensor(name)
        expected = -lr * 1e-4 * start[name]
        np.testing.assert_allclose(diff, expected, rtol=2e-2, atol=2e-7, err_msg=name)
        largest = max(largest, float(np.abs(expected).max()))
    assert largest > 1e-5  # the weights are not all zero: the check is not vacuous
