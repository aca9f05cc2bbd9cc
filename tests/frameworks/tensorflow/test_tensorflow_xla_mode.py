"""The TensorFlow executor's XLA mode (``jit_compile=True``): the same results as without XLA for
inference and training, the running statistics updated once per step, compile time counted apart."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="needs tensorflow")

import deep500lite as d5  # noqa: E402
from deep500lite import datasets, networks  # noqa: E402
from deep500lite.errors import UserTypeError  # noqa: E402


def _bn_net():
    net, _, out = networks.create_model("bn_cnn", None, classes=3, shape=(1, 6, 6), seed=0, width=4)
    net.add_operation(datasets.SoftmaxCrossEntropy()([out, "label"], "loss"))
    return net, out


def _feeds(seed, batch=8):
    rng = np.random.default_rng(seed)
    return {"input": rng.standard_normal((batch, 1, 6, 6)).astype(np.float32),
            "label": rng.integers(0, 3, batch).astype(np.int64)}


def test_xla_matches_plain_tensorflow_and_counts_compile_time_apart():
    net, out = _bn_net()
    plain = d5.executor(net, "tensorflow")
    xla = d5.executor(net, "tensorflow:xla")
    assert xla.options == {"jit_compile": True} and plain.options == {"jit_compile": False}

    a, b = plain.inference(_feeds(1)), xla.inference(_feeds(1))
    for name in (out, "loss"):
        np.testing.assert_allclose(b[name], a[name], rtol=1e-4, atol=1e-5)
    first = xla.compile_seconds
    assert first > 0.0
    xla.inference(_feeds(2))  # same shapes: nothing compiled
    assert xla.compile_seconds == first
    xla.inference(_feeds(3, batch=5))  # a new batch size: XLA compiles again
    assert xla.compile_seconds > first

    grads = [g for _, g in net.gradient("loss")]
    stats = [n for n in net.initializers if "running" in n or n.endswith(("_mean", "_var"))]
    assert stats, net.initializers
    for step in range(2):
        feeds = _feeds(10 + step)
        a, b = plain.inference_and_backprop(feeds), xla.inference_and_backprop(feeds)
        np.testing.assert_allclose(b["loss"], a["loss"], rtol=1e-4, atol=1e-5)
        # The compile-time measurement runs the first step twice; the state it changed is restored,
        # so the running statistics moved once, as without XLA.
        for name in grads + stats:
            np.testing.assert_allclose(xla.fetch_tensor(name), plain.fetch_tensor(name),
                                       rtol=1e-4, atol=1e-5, err_msg=name)
        if step == 0:
            after_first = xla.compile_seconds
            assert after_first > first
    assert xla.compile_seconds == after_first


def test_jit_compile_must_be_a_bool():
    net, _ = _bn_net()
    with pytest.raises(UserTypeError, match="jit_compile must be True or False. Received: 'yes'"):
        d5.executor(net, "tensorflow", jit_compile="yes")
