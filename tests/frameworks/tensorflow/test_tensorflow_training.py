"""Training on the TensorFlow executor: gradients against torch autograd, training-mode BatchNorm and
Dropout, and the native optimizers against their update rules computed in numpy."""

import io

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="needs tensorflow: pip install 'deep500lite[tensorflow]'")
torch = pytest.importorskip("torch", reason="needs torch: pip install 'deep500lite[torch]'")

import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from torch import nn  # noqa: E402

import deep500lite as d5  # noqa: E402
from deep500lite import networks  # noqa: E402
from deep500lite.datasets import dataset_loss  # noqa: E402
from deep500lite.errors import FeedError, ModelError  # noqa: E402
from deep500lite.frameworks import tensorflow as d5tf  # noqa: E402
from deep500lite.frameworks.torch.models import LeNet, ResNet20  # noqa: E402


def rel_l2(got, expected):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return np.linalg.norm(got - expected) / max(np.linalg.norm(expected), 1e-30)


def _with_loss(net, output="output"):
    net.add_operation(dataset_loss("digits")([output, "label"], "loss"))
    return net


def _torch_grads(module, params, x, label):
    """Gradients of the mean cross-entropy of ``module`` (train mode) at the numpy ``params``."""
    module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in params.items()}, strict=False)
    module.train()
    module.zero_grad()
    loss = nn.functional.cross_entropy(module(torch.from_numpy(x)), torch.from_numpy(label))
    loss.backward()
    return float(loss), {k: p.grad.numpy().copy() for k, p in module.named_parameters()}


def _check_gradients(net, module, x, label, tol=1e-4):
    """Run inference_and_backprop on the TF executor and compare every gradient with torch autograd."""
    ex = d5.executor(net, "tensorflow")
    params = dict(zip(net.parameters, net.fetch_tensors(net.parameters)))
    expected_loss, expected = _torch_grads(module, params, x, label)
    out = ex.inference_and_backprop({"input": x, "label": label}, "loss")
    np.testing.assert_allclose(out["loss"], expected_loss, rtol=1e-5)
    pairs = net.gradient("loss")
    assert {p for p, _ in pairs} == set(expected)
    grads = net.fetch_tensors([g for _, g in pairs])
    for (p, _), g in zip(pairs, grads):
        assert g.shape == params[p].shape and g.dtype == params[p].dtype
        assert rel_l2(g, expected[p]) <= tol, (p, rel_l2(g, expected[p]))
    return ex


class _ZooMLP(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.sizes = sizes
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            setattr(self, f"fc{i + 1}", nn.Linear(a, b))

    def forward(self, x):
        x = torch.flatten(x, 1)
        n = len(self.sizes) - 1
        for i in range(n):
            x = getattr(self, f"fc{i + 1}")(x)
            if i < n - 1:
                x = torch.relu(x)
        return x


def _digits_batch(n, seed=0, classes=10, shape=(1, 8, 8)):
    rng = np.random.default_rng(seed)
    return rng.random((n, *shape), dtype=np.float32), rng.integers(0, classes, n).astype(np.int64)


def _export_train_mode(module, example, **kwargs):
    """torch.onnx.export in training mode: BatchNormalization stays (not folded) and names are kept."""
    module.train()
    buf = io.BytesIO()
    torch.onnx.export(module, example, buf, dynamo=False, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, **kwargs)
    return onnx.load_from_string(buf.getvalue())


# ------------------------------------------------------------------ gradients vs torch
def test_mlp_gradients_match_torch():
    net, _, out = networks.create_model("mlp", None, shape=(1, 8, 8))
    x, label = _digits_batch(16)
    _check_gradients(_with_loss(net, out), _ZooMLP([64, 128, 64, 10]), x, label)


def test_lenet_gradients_match_torch():
    net, _, out = networks.create_model("lenet", None, shape=(1, 8, 8))
    x, label = _digits_batch(16, seed=1)
    _check_gradients(_with_loss(net, out), LeNet(size=8), x, label)


def test_resnet20_gradients_match_torch_train_mode():
    torch.manual_seed(0)
    module = ResNet20()
    x, label = _digits_batch(4, seed=2, shape=(3, 16, 16))
    model = _export_train_mode(module, (torch.from_numpy(x),), input_names=["input"], output_names=["output"],
                               dynamic_axes={"input": {0: "N"}})
    net = _with_loss(d5.load_model(model))
    ex = _check_gradients(net, ResNet20(), x, label)
    # Training mode used the batch statistics: inference (running statistics) gives another loss.
    assert ex._train_fns["loss"][0].experimental_get_tracing_count() == 1


class _SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1, bias=False)  # a bias before BN has zero gradient
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(torch.flatten(x, 1))


def test_torch_exported_model_with_cross_entropy_loss_matches_torch():
    torch.manual_seed(1)
    module = _SmallCNN()
    x, label = _digits_batch(8, seed=3)
    model = _export_train_mode(module, (torch.from_numpy(x),), input_names=["input"], output_names=["output"],
                               dynamic_axes={"input": {0: "N"}})
    _check_gradients(_with_loss(d5.load_model(model)), _SmallCNN(), x, label)


class _CNNWithLoss(_SmallCNN):
    def forward(self, x, label):
        return nn.functional.cross_entropy(super().forward(x), label)


def test_torch_exported_cross_entropy_node_matches_torch():
    """The exported graph itself ends in SoftmaxCrossEntropyLoss (torch's cross_entropy)."""
    torch.manual_seed(2)
    module = _CNNWithLoss()
    x, label = _digits_batch(8, seed=4)
    model = _export_train_mode(module, (torch.from_numpy(x), torch.from_numpy(label)),
                               input_names=["input", "label"], output_names=["loss"])
    assert model.graph.node[-1].op_type == "SoftmaxCrossEntropyLoss"
    net = d5.load_model(model)
    ex = d5.executor(net, "tensorflow")
    params = dict(zip(net.parameters, net.fetch_tensors(net.parameters)))
    ref = _CNNWithLoss()
    ref.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in params.items()})
    ref.train()
    loss = ref(torch.from_numpy(x), torch.from_numpy(label))
    loss.backward()
    out = ex.inference_and_backprop({"input": x, "label": label}, "loss")
    np.testing.assert_allclose(out["loss"], loss.item(), rtol=1e-5)
    for name, p in ref.named_parameters():
        assert rel_l2(net.fetch_tensor(f"{name}_grad"), p.grad.numpy()) <= 1e-4, name


# ------------------------------------------------------------- BatchNorm in training mode
def _conv_bn_model(momentum=0.8, batch=None):
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(a, n) for n, a in [
        ("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
        ("scale", rng.uniform(0.5, 1.5, 4).astype(np.float32)),
        ("bias", rng.standard_normal(4).astype(np.float32)),
        ("mean", rng.standard_normal(4).astype(np.float32)),
        ("var", rng.uniform(0.5, 2, 4).astype(np.float32)),
    ]]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"],
                         epsilon=1e-3, momentum=momentum),
        helper.make_node("Relu", ["y"], ["r"]),
        helper.make_node("ReduceMean", ["r"], ["loss"], keepdims=0),
    ]
    graph = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 5, 5])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("c", "y", "loss")],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_batchnorm_training_uses_batch_statistics_and_updates_running_statistics():
    net = d5.load_model(_conv_bn_model(), check=False)
    ex = d5.executor(net, "tensorflow")
    scale, bias, mean, var = net.fetch_tensors(["scale", "bias", "mean", "var"])
    rng = np.random.default_rng(1)
    for step in range(2):
        x = rng.standard_normal((6, 3, 5, 5)).astype(np.float32)
        out = ex.inference_and_backprop({"x": x}, "loss")
        c = out["c"].astype(np.float64)  # conv output, channels first (layout restored)
        bm, bv = c.mean(axis=(0, 2, 3)), c.var(axis=(0, 2, 3))  # biased variance, as ONNX's reference
        y = (c - bm[:, None, None]) / np.sqrt(bv[:, None, None] + 1e-3) * scale[:, None, None] + bias[:, None, None]
        np.testing.assert_allclose(out["y"], y, rtol=1e-4, atol=1e-4)
        mean, var = mean * 0.8 + bm * 0.2, var * 0.8 + bv * 0.2
        got_mean, got_var = net.fetch_tensors(["mean", "var"])
        np.testing.assert_allclose(got_mean, mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got_var, var, rtol=1e-5, atol=1e-6)
        # The running statistics are state, not parameters: no gradient for them.
        assert [p for p, _ in net.gradient("loss")] == ["w", "scale", "bias"]
        assert not ex.has_tensor("mean_grad")
    # Inference uses the (updated) running statistics and changes nothing.
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    out = ex.inference({"x": x})
    c = out["c"]
    expected = (c - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-3) * scale[:, None, None] + bias[:, None, None]
    np.testing.assert_allclose(out["y"], expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(net.fetch_tensor("mean"), mean, rtol=1e-5, atol=1e-6)


def test_batchnorm_on_features_matches_numpy_and_torch():
    """BatchNormalization of [N, C] features (BatchNorm1d): the composite (non-fused) path."""
    rng = np.random.default_rng(4)
    scale, bias = rng.uniform(0.5, 1.5, 5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    mean, var = rng.standard_normal(5).astype(np.float32), rng.uniform(0.5, 2, 5).astype(np.float32)
    inits = [onnx.numpy_helper.from_array(a, n) for n, a in
             [("scale", scale), ("bias", bias), ("mean", mean), ("var", var)]]
    nodes = [helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], momentum=0.7),
             helper.make_node("Mul", ["y", "y"], ["y2"]),
             helper.make_node("ReduceSum", ["y2"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "bn1d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 5])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "loss")],
                              initializer=inits)
    net = d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)]), check=False)
    ex = d5.executor(net, "tensorflow")
    x = rng.standard_normal((7, 5)).astype(np.float32) * 3 + 1
    out = ex.inference_and_backprop({"x": x}, "loss")
    bm, bv = x.astype(np.float64).mean(0), x.astype(np.float64).var(0)
    np.testing.assert_allclose(out["y"], (x - bm) / np.sqrt(bv + 1e-5) * scale + bias, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(net.fetch_tensor("mean"), mean * 0.7 + bm * 0.3, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(net.fetch_tensor("var"), var * 0.7 + bv * 0.3, rtol=1e-5, atol=1e-6)
    bn = nn.BatchNorm1d(5)
    bn.weight.data, bn.bias.data = torch.from_numpy(scale), torch.from_numpy(bias)
    bn.train()
    (bn(torch.from_numpy(x)) ** 2).sum().backward()
    assert rel_l2(net.fetch_tensor("scale_grad"), bn.weight.grad.numpy()) <= 1e-4
    assert rel_l2(net.fetch_tensor("bias_grad"), bn.bias.grad.numpy()) <= 1e-4


def test_batchnorm_gradients_match_finite_differences_float64():
    """A float64 Conv-BN graph: gradients of the training-mode loss against central differences."""
    model = _conv_bn_model()
    for init in model.graph.initializer:
        arr = onnx.numpy_helper.to_array(init).astype(np.float64)
        init.CopyFrom(onnx.numpy_helper.from_array(arr, init.name))
    for vi in list(model.graph.input) + list(model.graph.output):
        vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    # Sum of squares after BN so that the loss depends on every parameter smoothly.
    model.graph.node[2].op_type = "Mul"
    model.graph.node[2].input.append("y")
    net = d5.load_model(model, check=False)
    x = np.random.default_rng(5).standard_normal((4, 3, 5, 5))

    def loss_at(name, value):
        probe = d5.load_model(model, check=False)
        probe.feed_tensor(name, value)
        ex = d5.executor(probe, "tensorflow")
        return float(ex.inference_and_backprop({"x": x}, "loss")["loss"])

    ex = d5.executor(net, "tensorflow")
    ex.inference_and_backprop({"x": x}, "loss")
    for name in ("scale", "bias", "w"):
        p0 = d5.load_model(model, check=False).fetch_tensor(name)
        got = net.fetch_tensor(f"{name}_grad")
        idx = list(np.ndindex(p0.shape))[:6]
        for i in idx:
            e = np.zeros_like(p0)
            e[i] = 1e-6
            fd = (loss_at(name, p0 + e) - loss_at(name, p0 - e)) / 2e-6
            np.testing.assert_allclose(got[i], fd, rtol=1e-5, atol=1e-8)


# ------------------------------------------------------------------ Dropout in training mode
def _dropout_model(ratio=0.3):
    w = onnx.numpy_helper.from_array(np.linspace(0.5, 2.0, 8, dtype=np.float32), "w")
    r = onnx.numpy_helper.from_array(np.array(ratio, np.float32), "ratio")
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["h"]),
        helper.make_node("Dropout", ["h", "ratio"], ["y", "mask"]),
        helper.make_node("ReduceSum", ["y"], ["s"], keepdims=0),
        helper.make_node("Identity", ["s"], ["total"]),
    ]
    graph = helper.make_graph(nodes, "drop", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("mask", TensorProto.BOOL, None),
                               helper.make_tensor_value_info("total", TensorProto.FLOAT, None)],
                              initializer=[w, r])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_dropout_training_draws_seeded_masks_and_backprops_through_them():
    x = np.random.default_rng(0).uniform(1, 2, (200, 8)).astype(np.float32)
    net = d5.load_model(_dropout_model(), check=False)
    ex = d5.executor(net, "tensorflow")
    w = net.fetch_tensor("w")
    # Inference: the identity, and a mask of ones.
    out = ex.inference({"x": x})
    np.testing.assert_allclose(out["y"], x * w, rtol=1e-6)
    assert out["mask"].all()
    # Training: y = x * w * mask / (1 - ratio); y is "s", which is not a graph output.
    out = ex.inference_and_backprop({"x": x}, y="s")
    mask = out["mask"]
    assert mask.dtype == bool and 0.6 < mask.mean() < 0.8
    np.testing.assert_allclose(out["y"], x * w * mask / 0.7, rtol=1e-5)
    np.testing.assert_allclose(net.fetch_tensor("w_grad"), (x * mask).sum(0) / 0.7, rtol=1e-5)
    # A new mask each call; the same masks from an executor with the same seed.
    again = ex.inference_and_backprop({"x": x}, y="s")["mask"]
    assert (again != mask).any()
    other = d5.executor(d5.load_model(_dropout_model(), check=False), "tensorflow")
    np.testing.assert_array_equal(other.inference_and_backprop({"x": x}, y="s")["mask"], mask)
    seeded = d5tf.TensorFlowExecutor(d5.load_model(_dropout_model(), check=False), seed=7)
    assert (seeded.inference_and_backprop({"x": x}, y="s")["mask"] != mask).any()


def test_backprop_errors():
    net = d5.load_model(_dropout_model(), check=False)
    ex = d5.executor(net, "tensorflow")
    x = np.ones((2, 8), np.float32)
    with pytest.raises(ModelError, match="not a tensor of the network"):
        ex.inference_and_backprop({"x": x}, y="nope")
    with pytest.raises(FeedError, match="must be a scalar"):
        ex.inference_and_backprop({"x": x}, y="y")
    with pytest.raises(KeyError):
        net.fetch_tensors(["w_grad"])
    # A statically known non-scalar is refused while tracing, before anything runs.
    bn = d5.executor(d5.load_model(_conv_bn_model(batch=2), check=False), "tensorflow")
    mean = bn.fetch_tensor("mean")
    with pytest.raises(FeedError, match=r"y='c' must be a scalar.*\[2, 4, 5, 5\]"):
        bn.inference_and_backprop({"x": np.ones((2, 3, 5, 5), np.float32)}, y="c")
    np.testing.assert_array_equal(bn.fetch_tensor("mean"), mean)


def test_optimizer_follows_network_changes():
    net = _small_mlp()
    ex = d5.executor(net, "tensorflow")
    opt = d5tf.AdamOptimizer(ex, learning_rate=0.01)
    (x, label), (x2, label2) = _batches(2, seed=5)
    opt.step({"input": x, "label": label})
    hidden = next(n.output[0] for n in net.graph.node if n.op_type == "Relu")
    net.add_output(hidden)
    out = opt.step({"input": x2, "label": label2})
    assert hidden in out
    assert int(opt.keras_optimizer.iterations.numpy()) == 2  # the optimizer state was kept
    assert ex.inference({"input": x, "label": label})["loss"].shape == ()
    assert ex._fn.experimental_get_tracing_count() == 1


# ------------------------------------------------------------------------ optimizers
def _small_mlp(seed=0):
    net, _, out = networks.create_model("mlp", None, classes=3, shape=(6,), hidden=(10,), seed=seed)
    return _with_loss(net, out)


def _batches(n_steps, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((12, 6)).astype(np.float32), rng.integers(0, 3, 12).astype(np.int64))
            for _ in range(n_steps)]


def _numpy_run(rule, params, batches, state=None, hyper_at=None):
    """Apply ``rule(p, g, state, name, t)`` with torch-autograd gradients for each batch."""
    module = _ZooMLP([6, 10, 3])
    state = {} if state is None else state
    params = {k: v.astype(np.float64) for k, v in params.items()}
    for t, (x, label) in enumerate(batches, start=1):
        if hyper_at is not None:
            hyper_at(t)
        _, grads = _torch_grads(module, {k: v.astype(np.float32) for k, v in params.items()}, x, label)
        for k in params:
            params[k] = rule(params[k], grads[k].astype(np.float64), state, k, t)
    return params


def _sgd(lr):
    return lambda p, g, s, k, t: p - lr * g


def _momentum(lr, mu, nesterov=False):
    def rule(p, g, s, k, t):
        v = mu * s.get(k, 0.0) + lr * g  # the reference form; Keras keeps m = -v
        s[k] = v
        return p - (mu * v + lr * g if nesterov else v)
    return rule


def _adam(lr, b1, b2, eps):
    def rule(p, g, s, k, t):
        m, v = s.get((k, "m"), 0.0), s.get((k, "v"), 0.0)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        s[(k, "m")], s[(k, "v")] = m, v
        return p - lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m / (np.sqrt(v) + eps)
    return rule


def _adagrad(lr, eps, a0=0.0):
    def rule(p, g, s, k, t):
        a = s.get(k, a0) + g * g
        s[k] = a
        return p - lr * g / np.sqrt(a + eps)
    return rule


def _rmsprop(lr, rho, eps, mu=0.0):
    def rule(p, g, s, k, t):
        v = rho * s.get(k, 0.0) + (1 - rho) * g * g
        s[k] = v
        inc = lr * g / np.sqrt(v + eps)
        if mu:
            inc = mu * s.get((k, "m"), 0.0) + inc
            s[(k, "m")] = inc
        return p - inc
    return rule


OPTIMIZERS = {
    "sgd": (lambda ex: d5tf.GradientDescent(ex, learning_rate=0.1), _sgd(0.1)),
    "momentum": (lambda ex: d5tf.MomentumOptimizer(ex, learning_rate=0.1, momentum=0.9), _momentum(0.1, 0.9)),
    "nesterov": (lambda ex: d5tf.MomentumOptimizer(ex, learning_rate=0.1, momentum=0.8, nesterov=True),
                 _momentum(0.1, 0.8, nesterov=True)),
    "nesterov_class": (lambda ex: d5tf.NesterovOptimizer(ex, learning_rate=0.05, momentum=0.7),
                       _momentum(0.05, 0.7, nesterov=True)),
    "adam": (lambda ex: d5tf.AdamOptimizer(ex, learning_rate=0.01, beta1=0.8, beta2=0.99, epsilon=1e-6),
             _adam(0.01, 0.8, 0.99, 1e-6)),
    "adagrad": (lambda ex: d5tf.AdaGradOptimizer(ex, learning_rate=0.05, epsilon=1e-6), _adagrad(0.05, 1e-6)),
    "adagrad_initial": (lambda ex: d5tf.AdaGradOptimizer(ex, learning_rate=0.05, epsilon=1e-6,
                                                         initial_accumulator_value=0.1),
                        _adagrad(0.05, 1e-6, 0.1)),
    "rmsprop": (lambda ex: d5tf.RMSPropOptimizer(ex, learning_rate=0.01, beta=0.8, epsilon=1e-6),
                _rmsprop(0.01, 0.8, 1e-6)),
    "rmsprop_momentum": (lambda ex: d5tf.RMSPropOptimizer(ex, learning_rate=0.01, beta=0.8, momentum=0.5,
                                                          epsilon=1e-6), _rmsprop(0.01, 0.8, 1e-6, 0.5)),
}


def _assert_params(net, expected):
    for k, v in expected.items():
        got = net.fetch_tensor(k)
        assert rel_l2(got, v) <= 1e-5, (k, rel_l2(got, v))


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_native_optimizer_matches_numpy_update_rule(name):
    make, rule = OPTIMIZERS[name]
    net = _small_mlp()
    ex = d5.executor(net, "tensorflow")
    opt = make(ex)
    assert isinstance(opt, d5.Optimizer)
    params = dict(zip(net.parameters, net.fetch_tensors(net.parameters)))
    batches = _batches(3)
    for x, label in batches:
        out = opt.step({"input": x, "label": label})
        assert set(out) == {"output", "loss"}
    expected = _numpy_run(rule, params, batches)
    _assert_params(net, expected)
    assert opt._step_fn.experimental_get_tracing_count() == 1
    # The gradients of the last step stay readable.
    assert net.fetch_tensor("fc1.weight_grad").shape == params["fc1.weight"].shape


@pytest.mark.parametrize("name,kwargs,placement", [
    ("GradientDescent", dict(learning_rate=0.1), None),
    ("MomentumOptimizer", dict(learning_rate=0.1, momentum=0.9), None),
    ("NesterovOptimizer", dict(learning_rate=0.1, momentum=0.9), None),
    ("AdaGradOptimizer", dict(learning_rate=0.05, epsilon=1e-6), "inside"),
    ("RMSPropOptimizer", dict(learning_rate=0.01, beta=0.8, epsilon=1e-6), "inside"),
    ("AdamOptimizer", dict(learning_rate=0.01, beta1=0.8, beta2=0.99, epsilon=1e-6), "keras"),
])
def test_native_optimizer_agrees_with_reference_optimizer(name, kwargs, placement):
    """Keras's rule is the reference's in the form the module docs name (the reference's
    ``epsilon_placement``: "inside" for AdaGrad and RMSProp, "keras" for Adam)."""
    from deep500lite.frameworks import reference

    native_ex = d5.executor(_small_mlp(), "tensorflow")
    reference_ex = d5.executor(_small_mlp(), "tensorflow")
    native = getattr(d5tf, name)(native_ex, **kwargs)
    form = {} if placement is None else {"epsilon_placement": placement}
    ref = getattr(reference, name)(reference_ex, **kwargs, **form)
    for t, (x, label) in enumerate(_batches(3, seed=7)):
        if t == 2 and "learning_rate" in kwargs:
            native.set_parameter("learning_rate", kwargs["learning_rate"] / 2)
            ref.set_parameter("learning_rate", kwargs["learning_rate"] / 2)
        native.step({"input": x, "label": label})
        ref.step({"input": x, "label": label})
    for p in native_ex.network.parameters:
        assert rel_l2(native_ex.fetch_tensor(p), reference_ex.fetch_tensor(p)) <= 1e-5, p


def test_step_returns_outputs_before_the_update_and_updates_batchnorm_statistics():
    feeds = {"x": np.random.default_rng(3).standard_normal((6, 3, 5, 5)).astype(np.float32)}
    a = d5.executor(d5.load_model(_conv_bn_model(), check=False), "tensorflow")
    b = d5.executor(d5.load_model(_conv_bn_model(), check=False), "tensorflow")
    expected = a.inference_and_backprop(feeds, "loss")
    w, gw = a.network.fetch_tensors(["w", "w_grad"])
    out = d5tf.GradientDescent(b, learning_rate=0.5).step(feeds)
    np.testing.assert_allclose(out["loss"], expected["loss"], rtol=1e-6)
    for name in ("mean", "var"):
        np.testing.assert_allclose(b.fetch_tensor(name), a.fetch_tensor(name), rtol=1e-6)
    np.testing.assert_allclose(b.fetch_tensor("w"), w - 0.5 * gw, rtol=1e-5, atol=1e-6)


def test_set_parameter_changes_learning_rate_without_retracing():
    net = _small_mlp()
    ex = d5.executor(net, "tensorflow")
    opt = d5tf.MomentumOptimizer(ex, learning_rate=0.1, momentum=0.9)
    params = dict(zip(net.parameters, net.fetch_tensors(net.parameters)))
    batches = _batches(3, seed=1)
    lrs = {1: 0.1, 2: 0.02, 3: 0.3}
    for t, (x, label) in enumerate(batches, start=1):
        opt.set_parameter("learning_rate", lrs[t])
        opt.step({"input": x, "label": label})
    assert opt._step_fn.experimental_get_tracing_count() == 1

    def rule(p, g, s, k, t):
        return _momentum(lrs[t], 0.9)(p, g, s, k, t)

    _assert_params(net, _numpy_run(rule, params, batches))
    assert opt.learning_rate == 0.3
    with pytest.raises(AttributeError, match="no hyperparameter 'beta1'"):
        opt.set_parameter("beta1", 0.5)
    with pytest.raises(ValueError, match="learning_rate must be a finite number > 0. Received: -1"):
        opt.set_parameter("learning_rate", -1)
    with pytest.raises(TypeError, match="momentum must be a finite number >= 0 and < 1"):
        d5tf.MomentumOptimizer(ex, momentum="high")


def test_set_parameter_other_hyperparameter_retraces_once():
    net = _small_mlp()
    ex = d5.executor(net, "tensorflow")
    opt = d5tf.AdamOptimizer(ex, learning_rate=0.01, beta1=0.9, beta2=0.99, epsilon=1e-6)
    params = dict(zip(net.parameters, net.fetch_tensors(net.parameters)))
    batches = _batches(3, seed=2)
    opt.step({"input": batches[0][0], "label": batches[0][1]})
    opt.set_parameter("beta1", 0.5)
    for x, label in batches[1:]:
        opt.step({"input": x, "label": label})
    b1 = {1: 0.9, 2: 0.5, 3: 0.5}

    def rule(p, g, s, k, t):
        # Keras's bias correction uses the current beta1 for every power: beta1**t.
        return _adam(0.01, b1[t], 0.99, 1e-6)(p, g, s, k, t)

    _assert_params(net, _numpy_run(rule, params, batches))


def test_gradient_modifier_is_applied():
    net = _small_mlp()
    ex = d5.executor(net, "tensorflow")
    calls = []

    def weight_decay(name, param, grad):
        calls.append(name)
        return grad + 0.01 * param

    opt = d5tf.GradientDescent(ex, learning_rate=0.1, gradient_modifier=weight_decay)
    params = dict(zip(net.parameters, net.fetch_tensors(net.parameters)))
    batches = _batches(2, seed=3)
    for x, label in batches:
        opt.step({"input": x, "label": label})
    assert calls == net.parameters * 2
    expected = _numpy_run(lambda p, g, s, k, t: p - 0.1 * (g + 0.01 * p), params, batches)
    _assert_params(net, expected)


def test_optimizer_needs_a_tensorflow_executor():
    net = _small_mlp()
    with pytest.raises(TypeError, match="TensorFlowExecutor"):
        d5tf.GradientDescent(d5.executor(net, "reference"))


@pytest.mark.parametrize("name,lr", [("sgd", 0.1), ("momentum", 0.05), ("adam", 0.01), ("adagrad", 0.05),
                                     ("rmsprop", 0.005)])
def test_training_lowers_the_loss_on_a_separable_problem(name, lr):
    rng = np.random.default_rng(0)
    label = rng.integers(0, 2, 256).astype(np.int64)
    x = (rng.standard_normal((256, 8)) + np.where(label[:, None] == 1, 1.5, -1.5)).astype(np.float32)
    net, _, out = networks.create_model("mlp", None, classes=2, shape=(8,), hidden=(16,))
    ex = d5.executor(_with_loss(net, out), "tensorflow")
    cls = {"sgd": d5tf.GradientDescent, "momentum": d5tf.MomentumOptimizer, "adam": d5tf.AdamOptimizer,
           "adagrad": d5tf.AdaGradOptimizer, "rmsprop": d5tf.RMSPropOptimizer}[name]
    opt = cls(ex, learning_rate=lr)
    first = ex.inference({"input": x, "label": label})["loss"]
    for epoch in range(5):
        for i in range(0, 256, 32):
            opt.step({"input": x[i:i + 32], "label": label[i:i + 32]})
    last = ex.inference({"input": x, "label": label})
    assert last["loss"] < 0.3 * first
    assert (last["output"].argmax(1) == label).mean() > 0.95
