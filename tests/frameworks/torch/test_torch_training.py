"""Training on the torch executor: gradients against torch autograd on the original modules,
training-mode BatchNormalization and Dropout, and the native torch optimizers against their
formulas computed in numpy."""

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch")

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import deep500lite as d5  # noqa: E402
from deep500lite import datasets, networks  # noqa: E402
from deep500lite.errors import ModelError  # noqa: E402
from deep500lite.frameworks import torch as d5torch  # noqa: E402
from deep500lite.frameworks.torch import TorchExecutor, TorchNativeExecutor  # noqa: E402
from deep500lite.frameworks.torch.models import LeNet, ResNet20, export_onnx  # noqa: E402

GRAD_TOL = 1e-4  # relative L2 error, float32

# The TorchScript exporter warns about its own deprecation and about dropping BatchNorm counters.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning",
                                        "ignore::torch.jit.TracerWarning")


def _rel_l2(actual, expected):
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30)


def _with_loss(net, output):
    net.add_operation(datasets.dataset_loss("digits")([output, "label"], "loss"))
    return net


def _feeds(shape, batch, classes=10, seed=0):
    rng = np.random.default_rng(seed)
    return {"input": rng.standard_normal((batch, *shape)).astype(np.float32),
            "label": rng.integers(0, classes, batch).astype(np.int64)}


def _load(module, host, names):
    """Copy the network's values ``names`` (in order) into the module's state_dict entries."""
    keys = [k for k in module.state_dict() if not k.endswith("num_batches_tracked")]
    assert len(keys) == len(names), (keys, names)
    with torch.no_grad():
        state = module.state_dict()
        for key, name in zip(keys, names):
            assert tuple(state[key].shape) == host[name].shape, (key, name)
            state[key].copy_(torch.from_numpy(host[name]))
    return dict(zip(keys, names))


def _torch_grads(module, feeds):
    module.zero_grad(set_to_none=True)
    x = torch.from_numpy(feeds["input"])
    loss = F.cross_entropy(module(x), torch.from_numpy(feeds["label"]))
    loss.backward()
    return float(loss), {k: p.grad.numpy() for k, p in module.named_parameters()}


def _check_grads(ex, feeds, module, key_to_param):
    expected_loss, expected = _torch_grads(module, feeds)
    out = ex.inference_and_backprop(feeds, "loss")
    np.testing.assert_allclose(out["loss"], expected_loss, rtol=1e-5)
    pairs = ex.network.gradient("loss")
    grads = dict(zip([p for p, _ in pairs], ex.network.fetch_tensors([g for _, g in pairs])))
    assert set(grads) == {key_to_param[k] for k in expected}
    for key, value in expected.items():
        got = grads[key_to_param[key]]
        assert got.shape == value.shape and got.dtype == np.float32
        assert _rel_l2(got, value) <= GRAD_TOL, (key, _rel_l2(got, value))


# ----------------------------------------------------------- gradient agreement
def test_mlp_gradients_match_torch_autograd():
    net, _, o = networks.create_model("mlp", None, shape=(64,))
    _with_loss(net, o)
    module = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    names = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"]
    mapping = _load(module, net.host_values(), names)
    _check_grads(TorchExecutor(net), _feeds((64,), 8), module, mapping)


class _ZooLeNet8(nn.Module):
    """The zoo's LeNet for 1x8x8 samples (conv2 keeps its size with padding 2)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5, padding=2)
        self.fc1 = nn.Linear(16 * 2 * 2, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = F.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def test_lenet_gradients_match_torch_autograd():
    net, _, o = networks.create_model("lenet", None, shape=(1, 8, 8))
    _with_loss(net, o)
    module = _ZooLeNet8()
    names = [f"{layer}.{kind}" for layer in ("conv1", "conv2", "fc1", "fc2", "fc3") for kind in ("weight", "bias")]
    mapping = _load(module, net.host_values(), names)
    _check_grads(TorchExecutor(net), _feeds((1, 8, 8), 8), module, mapping)


def test_zoo_resnet20_gradients_and_running_mean_match_torch_train_mode():
    net, _, o = networks.create_model("resnet", None, shape=(3, 16, 16), depth=20)
    _with_loss(net, o)
    module = ResNet20().train()
    mapping = _load(module, net.host_values(), net.parameters)
    ex = TorchExecutor(net)
    _check_grads(ex, _feeds((3, 16, 16), 4), module, mapping)
    # The running means follow the same rule in torch (momentum 0.1 = 1 - ONNX's 0.9).
    state = module.state_dict()
    for key, name in mapping.items():
        if key.endswith("running_mean"):
            np.testing.assert_allclose(net.fetch_tensor(name), state[key].numpy(), rtol=1e-5, atol=1e-6)


def _export_train_mode(module, example, **kwargs):
    # export_onnx exports in eval mode, where torch folds each BatchNormalization into its
    # convolution; training mode keeps the BatchNormalization nodes (training_mode=1).
    buf = io.BytesIO()
    torch.onnx.export(module.train(), example, buf, dynamo=False, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, **kwargs)
    return onnx.load_from_string(buf.getvalue())


def test_exported_resnet20_gradients_match_torch_train_mode():
    torch.manual_seed(0)
    module = ResNet20()
    feeds = _feeds((3, 16, 16), 4)
    model = _export_train_mode(module, (torch.from_numpy(feeds["input"]),), input_names=["input"],
                               output_names=["output"])
    assert sum(n.op_type == "BatchNormalization" for n in model.graph.node) == 21
    net = _with_loss(d5.load_model(model), "output")
    params = {k for k, _ in module.named_parameters()}
    assert params <= set(net.parameters)
    _check_grads(TorchExecutor(net), feeds, module.train(), {k: k for k in params})


def test_exported_lenet_with_cross_entropy_loss_gradients_match():
    torch.manual_seed(0)
    module = LeNet()
    feeds = _feeds((1, 28, 28), 6)
    net = _with_loss(d5.load_model(export_onnx(module, torch.from_numpy(feeds["input"]))), "output")
    names = {k for k, _ in module.named_parameters()}
    assert names <= set(net.parameters)
    _check_grads(TorchExecutor(net), feeds, module, {k: k for k in names})


class _CnnWithLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 10)

    def forward(self, x, label):
        x = F.max_pool2d(torch.tanh(self.conv(x)), 2)
        x = x.view(x.size(0), -1)  # Shape/Gather/Unsqueeze/Concat/Reshape in the exported graph
        return F.cross_entropy(self.fc(x), label)


def test_exported_model_computing_cross_entropy_gradients_match():
    torch.manual_seed(0)
    module = _CnnWithLoss()
    feeds = _feeds((1, 8, 8), 5)
    x, label = torch.from_numpy(feeds["input"]), torch.from_numpy(feeds["label"])
    buf = io.BytesIO()
    torch.onnx.export(module, (x, label), buf, dynamo=False, opset_version=17, input_names=["input", "label"],
                      output_names=["loss"], dynamic_axes={"input": {0: "N"}, "label": {0: "N"}})
    model = onnx.load_from_string(buf.getvalue())
    assert "SoftmaxCrossEntropyLoss" in {n.op_type for n in model.graph.node}
    ex = TorchExecutor(model)
    loss = module(x, label)
    loss.backward()
    out = ex.inference_and_backprop(feeds, "loss")
    np.testing.assert_allclose(out["loss"], float(loss), rtol=1e-5)
    for key, p in module.named_parameters():
        assert _rel_l2(ex.network.fetch_tensor(f"{key}_grad"), p.grad.numpy()) <= GRAD_TOL, key


# ---------------------------------------------------------- training-mode operators
def _bn_model(momentum=0.8, eps=1e-5, channels=3):
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, channels).astype(np.float32), "scale"),
             numpy_helper.from_array(rng.uniform(-0.5, 0.5, channels).astype(np.float32), "bias"),
             numpy_helper.from_array(rng.uniform(-0.5, 0.5, channels).astype(np.float32), "mean"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, channels).astype(np.float32), "var"),
             numpy_helper.from_array(rng.standard_normal((2, channels)).astype(np.float32), "w")]
    nodes = [helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"],
                              epsilon=eps, momentum=momentum),
             helper.make_node("GlobalAveragePool", ["y"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "w"], ["logits"], transB=1),
             helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "label"], ["loss"]),
             helper.make_node("Identity", ["loss"], ["loss_copy"])]
    graph = helper.make_graph(
        nodes, "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels, 4, 4]),
                      helper.make_tensor_value_info("label", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", channels, 4, 4]),
         helper.make_tensor_value_info("loss_copy", TensorProto.FLOAT, [])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_batchnorm_training_uses_batch_statistics_and_updates_running_stats_by_onnx_rule():
    model = _bn_model(momentum=0.8)
    ex = TorchExecutor(model)
    host = {n: v.copy() for n, v in ex.network.host_values().items()}
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((5, 3, 4, 4)).astype(np.float32) * 2 + 1,
             "label": np.array([0, 1, 1, 0, 1], np.int64)}
    x = feeds["x"].astype(np.float64)
    batch_mean, batch_var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))  # biased, as ONNX
    # "loss" is not a graph output (only its Identity copy is); it is still computed.
    out = ex.inference_and_backprop(feeds, y="loss")
    assert set(out) == {"y", "loss_copy"}
    expected_y = ((x - batch_mean[None, :, None, None]) / np.sqrt(batch_var[None, :, None, None] + 1e-5)
                  * host["scale"][None, :, None, None] + host["bias"][None, :, None, None])
    np.testing.assert_allclose(out["y"], expected_y, rtol=1e-4, atol=1e-5)
    mean, var = ex.network.fetch_tensors(["mean", "var"])
    np.testing.assert_allclose(mean, host["mean"] * 0.8 + batch_mean * 0.2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var, host["var"] * 0.8 + batch_var * 0.2, rtol=1e-5, atol=1e-6)
    # Running statistics are state, not trainable: no gradient for them.
    assert [p for p, _ in ex.network.gradient("loss")] == ["scale", "bias", "w"]
    assert not ex.has_tensor("mean_grad")
    # A second step applies the rule again, from the updated values.
    ex.inference_and_backprop(feeds, y="loss")
    np.testing.assert_allclose(ex.network.fetch_tensor("mean"), (host["mean"] * 0.8 + batch_mean * 0.2) * 0.8
                               + batch_mean * 0.2, rtol=1e-5, atol=1e-6)
    # inference still normalizes with the (now updated) running statistics.
    y = ex.inference(feeds)["y"]
    m, v = ex.network.fetch_tensors(["mean", "var"])
    expected = ((x - m[None, :, None, None]) / np.sqrt(v[None, :, None, None] + 1e-5)
                * host["scale"][None, :, None, None] + host["bias"][None, :, None, None])
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


def test_batchnorm_training_gradients_match_finite_differences():
    model = _bn_model()
    feeds = {"x": np.random.default_rng(1).standard_normal((4, 3, 4, 4)).astype(np.float32),
             "label": np.array([0, 1, 1, 0], np.int64)}
    ex = TorchExecutor(model)
    ex.inference_and_backprop(feeds, "loss")
    grads = {p: ex.network.fetch_tensor(g) for p, g in ex.network.gradient("loss")}
    host = {n: v.astype(np.float64) for n, v in ex.network.host_values().items()}
    x = feeds["x"].astype(np.float64)

    def loss(scale, bias, w):
        m, v = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
        y = (x - m[None, :, None, None]) / np.sqrt(v[None, :, None, None] + 1e-5) * scale[None, :, None, None] \
            + bias[None, :, None, None]
        logits = y.mean(axis=(2, 3)) @ w.T
        logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
        return -logp[np.arange(4), feeds["label"]].mean()

    values = {"scale": host["scale"], "bias": host["bias"], "w": host["w"]}
    for name in values:
        fd = np.zeros_like(values[name])
        for idx in np.ndindex(fd.shape):
            plus = {k: v.copy() for k, v in values.items()}
            minus = {k: v.copy() for k, v in values.items()}
            plus[name][idx] += 1e-6
            minus[name][idx] -= 1e-6
            fd[idx] = (loss(**plus) - loss(**minus)) / 2e-6
        assert _rel_l2(grads[name], fd) <= GRAD_TOL, name


def _dropout_model(ratio=0.5):
    nodes = [helper.make_node("Dropout", ["x", "ratio"], ["y"]),
             helper.make_node("Mul", ["y", "w"], ["z"]),
             helper.make_node("ReduceSum", ["z"], ["loss"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "dropout", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 32]),
         helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializer=[numpy_helper.from_array(np.array(ratio, np.float32), "ratio"),
                     numpy_helper.from_array(np.full((64, 32), 2.0, np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_dropout_is_active_in_training_with_a_seeded_mask():
    x = np.random.default_rng(0).uniform(1, 2, (64, 32)).astype(np.float32)
    ex = TorchExecutor(_dropout_model(0.25), seed=7)
    np.testing.assert_array_equal(ex.inference({"x": x})["y"], x)  # inference: identity
    y = ex.inference_and_backprop({"x": x}, "loss")["y"]
    kept = y != 0
    np.testing.assert_allclose(y[kept], x[kept] / 0.75, rtol=1e-6)
    assert 0.6 < kept.mean() < 0.9
    # The gradient of sum(w * dropout(x)) with respect to w is the dropped-out x.
    np.testing.assert_allclose(ex.network.fetch_tensor("w_grad"), y, rtol=1e-6)
    # Same seed, same masks; another seed, other masks; the next step draws a new mask.
    same = TorchExecutor(_dropout_model(0.25), seed=7).inference_and_backprop({"x": x}, "loss")["y"]
    other = TorchExecutor(_dropout_model(0.25), seed=8).inference_and_backprop({"x": x}, "loss")["y"]
    np.testing.assert_array_equal(same, y)
    assert not np.array_equal(other != 0, kept)
    assert not np.array_equal(ex.inference_and_backprop({"x": x}, "loss")["y"] != 0, kept)
    np.testing.assert_array_equal(ex.inference({"x": x})["y"], x)


# ---------------------------------------------------------------- gradient storage
def test_gradients_stay_on_the_device_as_tensors():
    net, _, o = networks.create_model("mlp", None, shape=(6,), hidden=(5,))
    _with_loss(net, o)
    ex = TorchExecutor(net)
    assert not ex.has_tensor("fc1.weight_grad")
    with pytest.raises(KeyError, match="inference_and_backprop"):
        net.fetch_tensor("fc1.weight_grad")
    param = ex.torch_tensor("fc1.weight")
    ex.inference_and_backprop(_feeds((6,), 4), "loss")
    assert ex.torch_tensor("fc1.weight") is param and param.is_leaf and param.requires_grad
    grad = ex.torch_tensor("fc1.weight_grad")
    assert isinstance(grad, torch.Tensor) and grad is param.grad and grad.device == param.device
    fetched = net.fetch_tensor("fc1.weight_grad")
    assert isinstance(fetched, np.ndarray) and fetched.shape == (5, 6)
    fetched[...] = 0  # a copy
    assert float(grad.abs().sum()) > 0
    assert {g for _, g in net.gradient("loss")} == {"fc1.weight_grad", "fc1.bias_grad", "fc2.weight_grad",
                                                   "fc2.bias_grad"}
    assert all(ex.has_tensor(g) for _, g in net.gradient("loss"))
    # Each call computes fresh gradients (no accumulation across calls).
    ex.inference_and_backprop(_feeds((6,), 4), "loss")
    np.testing.assert_allclose(net.fetch_tensor("fc1.weight_grad"), grad.numpy(), rtol=1e-6)


def test_parameter_reached_only_through_argmax_has_a_zero_gradient():
    nodes = [helper.make_node("ArgMax", ["w"], ["i"], axis=1, keepdims=0),
             helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "f"], ["a"]),
             helper.make_node("Mul", ["x", "v"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("ReduceSum", ["s"], ["loss"], keepdims=0)]
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        nodes, "argmax", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializer=[numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "w"),
                     numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "v")])
    ex = TorchExecutor(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    x = np.array([1.0, 2.0, 3.0], np.float32)
    ex.inference_and_backprop({"x": x}, "loss")
    assert [p for p, _ in ex.network.gradient("loss")] == ["w", "v"]
    w_grad, v_grad = ex.network.fetch_tensors(["w_grad", "v_grad"])
    np.testing.assert_array_equal(w_grad, np.zeros((3, 4), np.float32))
    np.testing.assert_allclose(v_grad, x)


def test_inference_after_training_runs_in_inference_mode():
    net, _, o = networks.create_model("bn_cnn", None, shape=(3, 8, 8), width=4)
    _with_loss(net, o)
    ex = TorchExecutor(net)
    feeds = _feeds((3, 8, 8), 4)
    ex.inference_and_backprop(feeds, "loss")
    ref_net = net.copy()
    reference = d5.executor(ref_net, "reference")
    for name in net.parameters:
        ref_net.feed_tensor(name, net.fetch_tensor(name))
    np.testing.assert_allclose(ex.inference(feeds)["loss"], reference.inference(feeds)["loss"], rtol=1e-5)


def test_backprop_errors_name_the_problem():
    net, _, o = networks.create_model("mlp", None, shape=(6,), hidden=(5,))
    _with_loss(net, o)
    ex = TorchExecutor(net)
    with pytest.raises(ModelError, match="nope"):
        ex.inference_and_backprop(_feeds((6,), 4), "nope")
    with pytest.raises(ValueError, match="scalar"):
        ex.inference_and_backprop(_feeds((6,), 4), o)


# ------------------------------------------------------------------ optimizers
def _mlp_for_optimizers():
    net, _, o = networks.create_model("mlp", None, shape=(6,), hidden=(8,))
    return _with_loss(net, o)


def _formula(name, kw):
    """The documented update of each native optimizer, in numpy (float64)."""
    lr = kw.get("learning_rate")

    def sgd(w, g, s, t):
        return w - lr * g

    def momentum(w, g, s, t):
        mu = kw["momentum"]
        s["b"] = g if "b" not in s else mu * s["b"] + g
        return w - lr * (g + mu * s["b"] if kw.get("nesterov") else s["b"])

    def adagrad(w, g, s, t):
        s["A"] = s.get("A", 0) + g * g
        return w - lr * g / (np.sqrt(s["A"]) + kw["epsilon"])

    def rmsprop(w, g, s, t):
        s["A"] = kw["beta"] * s.get("A", 0) + (1 - kw["beta"]) * g * g
        return w - lr * g / (np.sqrt(s["A"]) + kw["epsilon"])

    def adam(w, g, s, t):
        b1, b2 = kw["beta1"], kw["beta2"]
        s["m"] = b1 * s.get("m", 0) + (1 - b1) * g
        s["v"] = b2 * s.get("v", 0) + (1 - b2) * g * g
        m_hat, v_hat = s["m"] / (1 - b1 ** t), s["v"] / (1 - b2 ** t)
        return w - lr * m_hat / (np.sqrt(v_hat) + kw["epsilon"])

    return {"GradientDescent": sgd, "MomentumOptimizer": momentum, "NesterovOptimizer": momentum,
            "AdaGradOptimizer": adagrad, "RMSPropOptimizer": rmsprop, "AdamOptimizer": adam}[name]


OPTIMIZERS = [
    ("GradientDescent", dict(learning_rate=0.1)),
    ("MomentumOptimizer", dict(learning_rate=0.05, momentum=0.9)),
    ("MomentumOptimizer", dict(learning_rate=0.05, momentum=0.8, nesterov=True)),
    ("NesterovOptimizer", dict(learning_rate=0.05, momentum=0.7)),
    ("AdaGradOptimizer", dict(learning_rate=0.1, epsilon=1e-8)),
    ("RMSPropOptimizer", dict(learning_rate=0.01, beta=0.9, epsilon=1e-8)),
    ("AdamOptimizer", dict(learning_rate=0.01, beta1=0.9, beta2=0.99, epsilon=1e-8)),
]


@pytest.mark.parametrize("name,kw", OPTIMIZERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(OPTIMIZERS)])
def test_native_optimizer_updates_follow_their_formula(name, kw):
    net = _mlp_for_optimizers()
    ex = TorchExecutor(net)
    cls = getattr(d5torch, name)
    opt = cls(ex, **kw)
    extra = {"nesterov": True} if name == "NesterovOptimizer" else {}
    update = _formula(name, {**kw, **extra})
    pairs = net.gradient("loss")
    expected = {p: net.fetch_tensor(p).astype(np.float64) for p, _ in pairs}
    state = {p: {} for p, _ in pairs}
    for t in range(1, 4):
        feeds = _feeds((6,), 8, seed=t)
        out = opt.step(feeds)
        assert np.isfinite(out["loss"])
        for p, g in pairs:
            grad = net.fetch_tensor(g).astype(np.float64)  # the gradient this step used
            # Each step's gradient is taken at the executor's current parameters.
            expected[p] = update(expected[p], grad, state[p], t)
            np.testing.assert_allclose(net.fetch_tensor(p), expected[p], rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name} step {t} {p}")


@pytest.mark.parametrize("name,kw", [("GradientDescent", dict(learning_rate=0.1)),
                                     ("MomentumOptimizer", dict(learning_rate=0.05, momentum=0.9)),
                                     ("NesterovOptimizer", dict(learning_rate=0.05, momentum=0.9)),
                                     ("AdaGradOptimizer", dict(learning_rate=0.1, epsilon=1e-8)),
                                     ("RMSPropOptimizer", dict(learning_rate=0.01, beta=0.9, epsilon=1e-8)),
                                     ("AdamOptimizer", dict(learning_rate=0.01, beta1=0.9, beta2=0.99,
                                                            epsilon=1e-8))])
def test_native_optimizer_matches_the_reference_optimizer_at_a_constant_learning_rate(name, kw):
    from deep500lite.frameworks import reference

    native, numpy_ref = TorchExecutor(_mlp_for_optimizers()), TorchExecutor(_mlp_for_optimizers())
    opt_native, opt_ref = getattr(d5torch, name)(native, **kw), getattr(reference, name)(numpy_ref, **kw)
    for t in range(3):
        opt_native.step(_feeds((6,), 8, seed=t))
        opt_ref.step(_feeds((6,), 8, seed=t))
    for p in native.network.parameters:
        np.testing.assert_allclose(native.network.fetch_tensor(p), numpy_ref.network.fetch_tensor(p),
                                   rtol=1e-5, atol=1e-6, err_msg=p)


def test_optimizer_updates_parameters_in_place_without_numpy():
    net = _mlp_for_optimizers()
    ex = TorchExecutor(net)
    opt = d5torch.MomentumOptimizer(ex, learning_rate=0.1, momentum=0.9)
    tensors = {p: ex.torch_tensor(p) for p in net.parameters}
    pointers = {p: t.data_ptr() for p, t in tensors.items()}
    before = {p: t.detach().clone() for p, t in tensors.items()}

    def no_numpy(*args, **kwargs):
        raise AssertionError("the native optimizer converted a tensor to numpy")

    ex.fetch_tensor = no_numpy
    ex.feed_tensor = no_numpy
    opt.step(_feeds((6,), 8))
    for p, t in tensors.items():
        assert ex.torch_tensor(p) is t and t.data_ptr() == pointers[p] and t.is_leaf
        assert not torch.equal(t, before[p])


def test_set_parameter_changes_the_learning_rate_between_steps():
    net = _mlp_for_optimizers()
    ex = TorchExecutor(net)
    opt = d5torch.GradientDescent(ex, learning_rate=0.1)
    opt.step(_feeds((6,), 8, seed=1))
    opt.set_parameter("learning_rate", 0.01)
    assert opt.learning_rate == 0.01
    assert all(g["lr"] == 0.01 for g in opt.torch_optimizer.param_groups)
    w = net.fetch_tensor("fc1.weight").astype(np.float64)
    opt.step(_feeds((6,), 8, seed=2))
    g = net.fetch_tensor("fc1.weight_grad")
    np.testing.assert_allclose(net.fetch_tensor("fc1.weight"), w - 0.01 * g, rtol=1e-5, atol=1e-7)
    with pytest.raises(AttributeError, match="no hyperparameter 'rate'"):
        opt.set_parameter("rate", 0.1)
    with pytest.raises(ValueError, match="learning_rate"):
        opt.set_parameter("learning_rate", -1.0)


def test_set_parameter_before_the_first_step_and_adam_betas():
    net = _mlp_for_optimizers()
    ex = TorchExecutor(net)
    opt = d5torch.AdamOptimizer(ex, learning_rate=0.01)
    opt.set_parameter("learning_rate", 0.02)
    opt.step(_feeds((6,), 8))
    assert opt.torch_optimizer.param_groups[0]["lr"] == 0.02
    opt.set_parameter("beta2", 0.9)
    opt.set_parameter("epsilon", 1e-6)
    group = opt.torch_optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.9) and group["eps"] == 1e-6
    momentum = d5torch.MomentumOptimizer(TorchExecutor(_mlp_for_optimizers()), momentum=0.5)
    momentum.step(_feeds((6,), 8))
    momentum.set_parameter("momentum", 0.95)
    assert momentum.torch_optimizer.param_groups[0]["momentum"] == 0.95


def test_gradient_modifier_is_applied_before_the_update():
    net = _mlp_for_optimizers()
    ex = TorchExecutor(net)
    seen = []

    def weight_decay(name, param, grad):
        seen.append(name)
        return grad + 0.1 * param

    opt = d5torch.GradientDescent(ex, learning_rate=0.5, gradient_modifier=weight_decay)
    w = net.fetch_tensor("fc2.weight").astype(np.float64)
    opt.step(_feeds((6,), 8))
    assert sorted(seen) == sorted(p for p, _ in net.gradient("loss"))
    g = net.fetch_tensor("fc2.weight_grad").astype(np.float64)  # the modified gradient
    np.testing.assert_allclose(net.fetch_tensor("fc2.weight"), w - 0.5 * g, rtol=1e-5, atol=1e-7)
    # ... which is the raw gradient plus the decay term.
    raw = TorchExecutor(_mlp_for_optimizers())
    raw.inference_and_backprop(_feeds((6,), 8), "loss")
    np.testing.assert_allclose(g, raw.network.fetch_tensor("fc2.weight_grad") + 0.1 * w, rtol=1e-5, atol=1e-7)


def test_native_optimizer_on_a_native_module():
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 3))
    ex = TorchNativeExecutor(module, loss_fn=F.cross_entropy)
    opt = d5torch.GradientDescent(ex, learning_rate=0.1)
    w = module[0].weight.detach().clone()
    opt.step(_feeds((6,), 5, classes=3))
    np.testing.assert_allclose(module[0].weight.detach().numpy(),
                               (w - 0.1 * module[0].weight.grad).numpy(), rtol=1e-6)


def test_optimizer_rejects_other_executors():
    reference = d5.executor(_mlp_for_optimizers(), "reference")
    with pytest.raises(TypeError, match="reference optimizers"):
        d5torch.GradientDescent(reference)


@pytest.mark.parametrize("name", ["MomentumOptimizer", "AdamOptimizer"])
def test_training_the_zoo_mlp_lowers_the_loss(name):
    rng = np.random.default_rng(0)
    centers = np.array([[2, 2, 0, 0], [-2, -2, 0, 0]], np.float32)
    labels = rng.integers(0, 2, 256).astype(np.int64)
    x = (centers[labels] + rng.standard_normal((256, 4)).astype(np.float32) * 0.5).astype(np.float32)
    net, _, o = networks.create_model("mlp", None, classes=2, shape=(4,), hidden=(16,))
    _with_loss(net, o)
    ex = TorchExecutor(net)
    opt = getattr(d5torch, name)(ex, learning_rate=0.05 if name == "MomentumOptimizer" else 0.01)
    full = {"input": x, "label": labels}
    first = float(ex.inference(full)["loss"])
    for epoch in range(5):
        for i in range(0, 256, 32):
            opt.step({"input": x[i:i + 32], "label": labels[i:i + 32]})
    last = float(ex.inference(full)["loss"])
    accuracy = (ex.inference(full)[o].argmax(1) == labels).mean()
    assert last < 0.25 * first and accuracy > 0.95, (first, last, accuracy)
