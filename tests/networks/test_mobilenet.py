"""The zoo's ``mobilenet_v2``: torchvision's parameter counts, the same outputs as the architecture
written in torch with the same weights, forward and backward on every executor against the
reference, and argument errors."""

from __future__ import annotations

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets, networks
from deep500lite.errors import UserError

from support import framework_params


def test_parameter_count_matches_torchvision():
    # torchvision.models.mobilenet_v2(): MobileNet_V2_Weights.IMAGENET1K_V1 "num_params": 3504872
    assert networks.model_parameter_count("mobilenet_v2", classes=1000, shape=(3, 224, 224)) == 3_504_872
    # the width multiplier rounds channels to multiples of 8; the last 1280 grow only above 1.0
    last = 1280 * 10 + 10
    assert networks.model_parameter_count("mobilenet_v2", shape=(3, 32, 32)) == 3_504_872 - 1000 * 1281 + last


def test_structure_depthwise_and_relu6():
    net, _, _ = networks.create_model("mobilenet_v2", 1, classes=10, shape=(3, 32, 32))
    convs = [n for n in net.graph.node if n.op_type == "Conv"]
    groups = [next((a.i for a in n.attribute if a.name == "group"), 1) for n in convs]
    assert len(convs) == 52 and sum(g > 1 for g in groups) == 17  # one depthwise conv per inverted residual
    ops = [n.op_type for n in net.graph.node]
    assert ops.count("Clip") == 35 and ops.count("Add") == 10
    assert net.host_values()["features.1.conv.0.0.weight"].shape == (32, 1, 3, 3)
    assert net.host_values()["features.18.0.weight"].shape == (1280, 320, 1, 1)


def _torch_mobilenet_v2(width, classes):
    torch = pytest.importorskip("torch")
    from torch import nn
    from deep500lite.networks.mobilenet import make_divisible

    def cbr(cin, cout, k, stride=1, groups=1):
        return nn.Sequential(nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU6())

    class Block(nn.Module):
        def __init__(self, cin, cout, stride, t):
            super().__init__()
            hidden = cin * t
            layers = ([cbr(cin, hidden, 1)] if t != 1 else []) + [
                cbr(hidden, hidden, 3, stride, hidden), nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
            self.conv = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.conv(x) if self.residual else self.conv(x)

    cin = make_divisible(32 * width)
    features = [cbr(3, cin, 3, 2)]
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)):
        for i in range(n):
            features.append(Block(cin, make_divisible(c * width), s if i == 0 else 1, t))
            cin = make_divisible(c * width)
    features.append(cbr(cin, 1280, 1))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

        def forward(self, x):
            return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))

    return Net().eval()


def test_outputs_match_the_architecture_in_torch():
    torch = pytest.importorskip("torch")
    model = _torch_mobilenet_v2(0.25, 5)
    state = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    net, inp, out = networks.create_model("mobilenet_v2", 2, classes=5, shape=(3, 32, 32), width=0.25)
    assert set(state) == set(net.parameters)
    rng = np.random.default_rng(1)
    for name, value in state.items():  # random statistics, so that batch normalization is not the identity
        new = rng.uniform(0.5, 1.5, value.shape) if "running_var" in name else rng.normal(0, 0.3, value.shape)
        value.copy_(torch.from_numpy(new.astype(np.float32)))
        net.feed_tensor(name, value.numpy())
    x = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    mine = d5.executor(net, "reference").inference({inp: x})[out]
    with torch.no_grad():
        theirs = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-4 * np.abs(theirs).max())


def _step(framework, x, labels):
    net, inp, out = networks.create_model("mobilenet_v2", len(x), classes=3, shape=x.shape[1:], seed=2,
                                          width=0.25, dropout=0.0)
    net.add_operation(datasets.dataset_loss("synthetic")([out, "label"], "loss"))
    ex = d5.executor(net, framework)
    outputs = ex.inference_and_backprop({inp: x, "label": labels}, "loss")
    return outputs[out], {p: ex.network.fetch_tensor(g) for p, g in net.gradient("loss")}


@pytest.fixture(scope="module")
def reference_step():
    # 96x96: the last stage's batch normalization then averages 4 * 3 * 3 values; over a few values
    # (2x2 maps at 64x64) its gradient amplifies float32 rounding differences between executors to percents.
    x = np.random.default_rng(0).standard_normal((4, 3, 96, 96)).astype(np.float32)
    labels = np.array([0, 2, 1, 0], np.int64)
    return x, labels, _step("reference", x, labels)


@pytest.mark.parametrize("framework", framework_params(["torch", "tensorflow", "onnxruntime"]))
def test_forward_and_backward_agree_with_the_reference(framework, reference_step):
    x, labels, (ref_out, ref_grads) = reference_step
    out, grads = _step(framework, x, labels)
    np.testing.assert_allclose(out, ref_out, rtol=1e-4, atol=1e-4 * np.abs(ref_out).max())
    assert set(grads) == set(ref_grads) and len(grads) == 52 + 2 * 52 + 2  # convolutions, BN scale/shift, dense
    # Backward through 52 training-mode batch normalizations amplifies float32 rounding (TensorFlow's
    # oneDNN kernels round differently): percent-level differences in the first layers, where a wrong
    # rule gives differences of order one. Per parameter relative to the largest gradient: the biases
    # of layers followed by batch normalization have a gradient of (mathematically) zero.
    names = sorted(ref_grads)
    ref_all = np.concatenate([ref_grads[n].ravel() for n in names])
    all_ = np.concatenate([grads[n].ravel() for n in names])
    # (TensorFlow: 2% of the norm at 96x96; the same layers in isolation agree to 2e-7.)
    assert np.linalg.norm(all_ - ref_all) <= 5e-2 * np.linalg.norm(ref_all)
    scale = float(np.abs(ref_all).max())
    for name in names:
        np.testing.assert_allclose(grads[name], ref_grads[name], rtol=0, atol=5e-2 * scale, err_msg=name)
    for name in ("classifier.1.weight", "classifier.1.bias", "features.18.1.weight", "features.18.1.bias"):
        np.testing.assert_allclose(grads[name], ref_grads[name], rtol=0, atol=1e-4 * scale, err_msg=name)


@pytest.mark.parametrize("kwargs,match", [
    (dict(shape=(3, 16, 16)), r"at least 32x32 pixels \(it downsamples by 32\). Received: shape=\(3, 16, 16\)"),
    (dict(shape=(64,)), r"mobilenet_v2 takes samples shaped \(C, H, W\)"),
    (dict(shape=(3, 32, 32), width=0), r"mobilenet_v2 option 'width' must be a finite number > 0 and <= 1e\+06. Received: 0"),
    (dict(shape=(3, 32, 32), dropout=-0.1), r"option 'dropout' must be a dropout probability in \[0, 1\). Received: -0.1"),
    (dict(shape=(3, 32, 32), depth=3), r"mobilenet_v2 has no option 'depth'. Its options: 'width', 'dropout'"),
])
def test_bad_arguments_are_user_errors(kwargs, match):
    with pytest.raises(UserError, match=match):
        networks.model_parameter_count("mobilenet_v2", **kwargs)
