"""Training on every executor: the same gradients, running statistics and optimizer steps."""

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets, networks
from deep500lite.frameworks import reference as d5ref


def _trainable(model, shape, seed=0, **kwargs):
    net, i, o = networks.create_model(model, 8, classes=10, shape=shape, seed=seed, **kwargs)
    net.add_operation(datasets.dataset_loss("digits")([o, "label"], "loss"))
    rng = np.random.default_rng(seed)
    feeds = {i: rng.standard_normal((8, *shape)).astype(np.float32),
             "label": rng.integers(0, 10, size=8).astype(np.int64)}
    return net, feeds


def _rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)


@pytest.mark.parametrize("model,shape,kwargs", [("mlp", (12,), {}), ("lenet", (1, 8, 8), {}),
                                                ("bn_cnn", (3, 8, 8), {})])
def test_gradients_match_the_reference_executor(framework, model, shape, kwargs):
    net, feeds = _trainable(model, shape, **kwargs)
    ex, ref = d5.executor(net, framework), d5.executor(net, "reference")
    out, ref_out = ex.inference_and_backprop(feeds, "loss"), ref.inference_and_backprop(feeds, "loss")
    assert abs(float(out["loss"]) - float(ref_out["loss"])) < 1e-5
    pairs = ex.network.gradient("loss")
    assert len(pairs) == len(net.parameters) - (4 if model == "bn_cnn" else 0)  # BN running stats excluded
    for param, grad in pairs:
        g, g_ref = ex.network.fetch_tensor(grad), ref.network.fetch_tensor(grad)
        assert g.shape == ex.network.fetch_tensor(param).shape
        assert _rel_l2(g, g_ref) <= 1e-4, param
    if model == "bn_cnn":  # running statistics updated by ONNX's rule on both
        for stat in ("bn1.running_mean", "bn2.running_var"):
            np.testing.assert_allclose(ex.network.fetch_tensor(stat), ref.network.fetch_tensor(stat),
                                       rtol=1e-4, atol=1e-6)


def test_reference_optimizer_trains_on_every_executor(framework):
    net, feeds = _trainable("lenet", (1, 8, 8), seed=1)
    ex = d5.executor(net, framework)
    opt = d5ref.MomentumOptimizer(ex, learning_rate=0.05, momentum=0.9)
    losses = [float(opt.step(feeds)["loss"]) for _ in range(15)]
    assert losses[-1] < 0.5 * losses[0]


def test_backprop_from_a_non_scalar_is_refused(framework):
    net, feeds = _trainable("mlp", (12,))
    with pytest.raises(ValueError, match="scalar"):
        d5.executor(net, framework).inference_and_backprop(feeds, "output")


def test_executor_backprop_verdict(framework):
    net, feeds = _trainable("lenet", (1, 8, 8), seed=2)
    reference = d5.executor(net, "reference")
    result = d5.test_executor_backprop(d5.executor(net, framework), feeds, reference)
    assert result.passed, result.summary()
    assert set(result.metrics) == {g for _, g in net.gradient("loss")}
    wrong = d5.executor(net, framework)
    wrong.network.feed_tensor("fc1.weight", wrong.network.fetch_tensor("fc1.weight") * np.float32(1.5))
    result = d5.test_executor_backprop(wrong, feeds, reference)
    assert not result.passed and result.metrics["fc1.weight_grad"]["RelativeL2Error"] > 1e-3
