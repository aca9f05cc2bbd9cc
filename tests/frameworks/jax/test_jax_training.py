"""Training on the jax executor: gradients and BatchNormalization running statistics against the torch
executor, Dropout's keys, compile-time accounting of training steps, and loss decrease."""

import numpy as np
import pytest

pytest.importorskip("jax", reason="needs jax")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import deep500lite as d5  # noqa: E402
from deep500lite import datasets, networks  # noqa: E402
from deep500lite.errors import FeedError  # noqa: E402
from deep500lite.frameworks import jax as d5jax  # noqa: E402

GRAD_TOL = 1e-4  # relative L2 error, float32


def _rel_l2(actual, expected):
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30)


def _zoo(name, shape, **kwargs):
    net, _, out = networks.create_model(name, None, shape=shape, **kwargs)
    net.add_operation(datasets.dataset_loss("digits")([out, "label"], "loss"))
    return net


def _feeds(shape, batch, seed=0):
    rng = np.random.default_rng(seed)
    return {"input": rng.standard_normal((batch, *shape)).astype(np.float32),
            "label": rng.integers(0, 10, batch).astype(np.int64)}


def _both(net, feeds):
    """(jax executor, torch executor) after one inference_and_backprop each on ``feeds``."""
    pytest.importorskip("torch", reason="the expected values come from the torch executor")
    ex, tex = d5.executor(net.copy(), "jax"), d5.executor(net.copy(), "torch")
    out, tout = ex.inference_and_backprop(feeds, "loss"), tex.inference_and_backprop(feeds, "loss")
    np.testing.assert_allclose(out["loss"], tout["loss"], rtol=1e-5)
    pairs = net.gradient("loss")
    assert pairs
    for _, g in pairs:
        got, expected = ex.network.fetch_tensor(g), tex.network.fetch_tensor(g)
        assert got.shape == expected.shape and got.dtype == expected.dtype
        assert _rel_l2(got, expected) <= GRAD_TOL, (g, _rel_l2(got, expected))
    return ex, tex


def test_lenet_gradients_match_the_torch_executor():
    shape = (1, 12, 12)
    _both(_zoo("lenet", shape), _feeds(shape, 8))


def test_batchnorm_gradients_and_running_statistics_match_the_torch_executor():
    shape = (3, 8, 8)
    net = _zoo("bn_cnn", shape, width=8)
    assert "BatchNormalization" in net.operators()
    feeds = _feeds(shape, 4)
    ex, tex = _both(net, feeds)
    stats = [n for n in net.initializers if n not in dict(net.gradient("loss")) and
             net.host_values()[n].dtype == np.float32]
    assert stats  # the running means and variances
    for name in stats:
        before = net.host_values()[name]
        got = ex.network.fetch_tensor(name)
        assert not np.array_equal(got, before), name
        np.testing.assert_allclose(got, tex.network.fetch_tensor(name), rtol=1e-5, atol=1e-6)
    # inference afterwards uses the updated running statistics, like torch's
    np.testing.assert_allclose(ex.inference(feeds)["output"], tex.inference(feeds)["output"], rtol=1e-4, atol=1e-5)


def _dropout_net():
    nodes = [helper.make_node("Dropout", ["x", "ratio"], ["y"]),
             helper.make_node("Mul", ["y", "w"], ["z"]),
             helper.make_node("ReduceSum", ["z"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1000])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1000]),
                               helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                              initializer=[numpy_helper.from_array(np.array(0.5, np.float32), "ratio"),
                                           numpy_helper.from_array(np.ones(1000, np.float32), "w")])
    return d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_dropout_draws_a_new_seeded_mask_each_step():
    x = np.ones(1000, np.float32)
    a, b = d5jax.JaxExecutor(_dropout_net(), seed=5), d5jax.JaxExecutor(_dropout_net(), seed=5)
    first = a.inference_and_backprop({"x": x}, "loss")["y"]
    kept = first != 0
    assert 400 < kept.sum() < 600
    np.testing.assert_allclose(first[kept], 2.0)  # scaled by 1 / (1 - ratio)
    # the gradient of sum(dropout(x) * w) w.r.t. w is the mask itself
    np.testing.assert_allclose(a.network.fetch_tensor("w_grad"), first)
    second = a.inference_and_backprop({"x": x}, "loss")["y"]
    assert not np.array_equal(second, first)
    np.testing.assert_array_equal(b.inference_and_backprop({"x": x}, "loss")["y"], first)  # same seed, same masks
    np.testing.assert_array_equal(a.inference({"x": x})["y"], x)  # inference: no dropout


def test_training_compiles_once_per_signature_and_y_must_be_a_scalar():
    shape = (1, 8, 8)
    ex = d5.executor(_zoo("lenet", shape), "jax")
    feeds = _feeds(shape, 4)
    ex.inference_and_backprop(feeds, "loss")
    after_first = ex.compile_seconds
    assert after_first > 0
    ex.inference_and_backprop(_feeds(shape, 4, seed=1), "loss")
    assert ex.compile_seconds == after_first
    with pytest.raises(FeedError, match="y='output' must be a scalar"):
        ex.inference_and_backprop(feeds, "output")


def test_sgd_steps_lower_the_loss_in_one_compiled_step():
    shape = (1, 8, 8)
    ex = d5.executor(_zoo("lenet", shape), "jax")
    feeds = _feeds(shape, 16)
    opt = d5jax.GradientDescent(ex, learning_rate=0.05)
    losses = [float(opt.step(feeds)["loss"]) for _ in range(15)]
    assert losses[-1] < 0.7 * losses[0], losses
    # forward, backward and update are one executable, compiled at the first step only
    assert [k[0][0] for k in ex._compiled] == ["step"]
    # the step's gradients are those of the parameters before its update
    params = {p: ex.network.fetch_tensor(p) for p, _ in ex.network.gradient("loss")}
    opt.step(feeds)
    for p, g in ex.network.gradient("loss"):
        np.testing.assert_allclose(ex.network.fetch_tensor(p), params[p] - 0.05 * ex.network.fetch_tensor(g),
                                   rtol=1e-5, atol=1e-7)
