"""``TorchExecutor.backprop(feeds, output_grads)``: backward from given output gradients, against torch autograd
on the ``torch.nn.Module`` the graph was exported from."""

import numpy as np
import pytest
import torch

import deep500lite as d5
from deep500lite.errors import FeedError, UserError
from deep500lite.frameworks.torch import models
from deep500lite.lv1.network import load_model


def _pair(module, shape, seed=0):
    torch.manual_seed(seed)
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    net = load_model(models.export_onnx(module, torch.from_numpy(x), training=True))
    return net, x


@pytest.mark.parametrize("make", [models.LeNet, models.ResNet20], ids=["lenet", "resnet20"])
def test_vjp_equals_torch_autograd_on_the_module(make):
    module = make()
    shape = (4, *module.input_shape)
    net, x = _pair(module, shape)
    ex = d5.executor(net, "torch")
    g = np.random.default_rng(1).standard_normal((4, 10)).astype(np.float32)

    grads = ex.backprop({"input": x}, {"output": g})

    module.train()
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    params = dict(module.named_parameters())
    expected = torch.autograd.grad(module(xt), [xt, *params.values()], torch.from_numpy(g))
    np.testing.assert_allclose(grads["input_grad"], expected[0].numpy(), rtol=1e-4, atol=1e-5)
    trained = {p for p, _ in net.gradient("output")}
    assert trained and trained <= set(params)
    for (name, value), want in zip(params.items(), expected[1:]):
        if name in trained:
            scale = float(np.abs(want.numpy()).max()) or 1.0
            np.testing.assert_allclose(grads[f"{name}_grad"], want.numpy(), rtol=1e-4, atol=1e-5 * scale,
                                       err_msg=name)
    # The parameter gradients stay on the device, fetchable as after inference_and_backprop.
    first = sorted(trained)[0]
    np.testing.assert_array_equal(net.fetch_tensors([f"{first}_grad"])[0], grads[f"{first}_grad"])


def test_vjp_of_a_sum_equals_backprop_from_the_scalar():
    module = models.LeNet()
    net, x = _pair(module, (3, 1, 28, 28))
    from deep500lite.bench.contract import with_loss

    net = with_loss(net)
    ex = d5.executor(net, "torch")
    labels = np.array([1, 2, 3], np.int64)
    ex.inference_and_backprop({"input": x, "label": labels}, "loss")
    from_loss = {g: net.fetch_tensors([g])[0] for _, g in net.gradient("loss")}
    # dloss/dloss = 1: the vector-Jacobian product from the loss output is the scalar's backward.
    grads = ex.backprop({"input": x, "label": labels}, {"loss": np.array(1.0, np.float32)})
    for name, value in from_loss.items():
        np.testing.assert_allclose(grads[name], value, rtol=1e-5, atol=1e-7)


def test_bad_output_gradients_are_refused():
    net, x = _pair(models.LeNet(), (2, 1, 28, 28))
    ex = d5.executor(net, "torch")
    with pytest.raises(FeedError, match=r"not graph outputs: \['logits'\].*Received: \['logits'\]"):
        ex.backprop({"input": x}, {"logits": np.zeros((2, 10), np.float32)})
    with pytest.raises(FeedError, match=r"must have the output's shape \[2, 10\]. Received: shape \[2, 9\]"):
        ex.backprop({"input": x}, {"output": np.zeros((2, 9), np.float32)})
    with pytest.raises(FeedError, match="non-empty dict"):
        ex.backprop({"input": x}, {})


def test_other_executors_say_they_cannot_yet():
    net, x = _pair(models.LeNet(), (2, 1, 28, 28))
    ex = d5.executor(net, "reference")
    with pytest.raises(UserError, match=r"does not backpropagate from given output gradients yet.*Received: "
                                        r"output_grads for \['output'\]"):
        ex.backprop({"input": x}, {"output": np.zeros((2, 10), np.float32)})
