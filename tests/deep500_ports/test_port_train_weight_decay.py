"""A ``gradient_modifier`` gets Deep500's ``(name, param, grad)`` on every framework's momentum optimizer.

A modifier adding ``c * param`` (L2 decay, as EuroMPI'19's ``1_mnist`` notebook adds) must change
one step by exactly ``-lr * c * param``: momentum's first step uses the gradient as it is. Checked
for the numpy reference, torch and TensorFlow optimizers against a twin without the modifier.
"""

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets, networks
from support import framework_params

C = 2e-4


def shrink(tensor_name: str, current, gradient):
    assert isinstance(tensor_name, str) and np.shape(current) == np.shape(gradient)
    return gradient + C * current


def _twin(fw):
    net, _, out = networks.create_model("simple_cnn", 12, seed=8)
    net.add_operation(datasets.dataset_loss("mnist")([out, "label"], "loss"))
    return d5.executor(net, fw)


@pytest.mark.parametrize("fw", framework_params(["reference", "torch", "tensorflow"]))
def test_modifier_shifts_one_step_by_lr_c_param(fw):
    module = __import__(f"deep500lite.frameworks.{fw}", fromlist=["MomentumOptimizer"])
    rng = np.random.default_rng(1)
    feeds = {"input": rng.random((12, 1, 28, 28), dtype=np.float32), "label": rng.integers(0, 10, 12)}
    without, with_decay = _twin(fw), _twin(fw)
    names = [p for p, _ in without.network.gradient("loss")]
    start = dict(zip(names, (w.astype(np.float64) for w in without.network.fetch_tensors(names))))
    module.MomentumOptimizer(without, "loss", 0.25, 0.8).step(feeds)
    module.MomentumOptimizer(with_decay, "loss", 0.25, 0.8, gradient_modifier=shrink).step(feeds)
    biggest = 0.0
    for name in names:
        shift = with_decay.network.fetch_tensor(name).astype(np.float64) - without.network.fetch_tensor(name)
        np.testing.assert_allclose(shift, -0.25 * C * start[name], rtol=2e-2, atol=2e-7, err_msg=name)
        biggest = max(biggest, float(np.abs(start[name]).max()))
    assert biggest * 0.25 * C > 1e-5  # the expected shift is well above the tolerance
