"""The torch executor's compiled mode (``compile=True``: ``torch.compile`` with inductor): the same
results as the eager mode for inference and training, compile time counted apart, clear errors."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch")

import deep500lite as d5  # noqa: E402
from deep500lite import datasets, networks  # noqa: E402
from deep500lite.errors import FrameworkNotAvailableError, UserError  # noqa: E402
from deep500lite.frameworks.torch import executor as torch_executor  # noqa: E402


def _bn_net():
    net, _, out = networks.create_model("bn_cnn", 8, classes=3, shape=(1, 6, 6), seed=0, width=4)
    net.add_operation(datasets.SoftmaxCrossEntropy()([out, "label"], "loss"))
    return net


def _feeds(seed):
    rng = np.random.default_rng(seed)
    return {"input": rng.standard_normal((8, 1, 6, 6)).astype(np.float32),
            "label": rng.integers(0, 3, 8).astype(np.int64)}


def test_compiled_matches_eager_and_counts_compile_time_apart():
    net = _bn_net()
    eager = d5.executor(net, "torch")
    compiled = d5.executor(net, "torch:compile")
    assert compiled.options == {"compile": True, "compile_mode": "default"}
    assert eager.options == {"compile": False} and eager.compile_seconds == 0.0

    a, b = eager.inference(_feeds(1)), compiled.inference(_feeds(1))
    np.testing.assert_allclose(b["loss"], a["loss"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b["output"] if "output" in b else list(b.values())[0],
                               a["output"] if "output" in a else list(a.values())[0], rtol=1e-4, atol=1e-5)
    first = compiled.compile_seconds
    assert first > 0.0
    compiled.inference(_feeds(2))  # same shapes: no recompilation
    assert compiled.compile_seconds == first

    grads = [g for _, g in net.gradient("loss")]
    stats = [n for n in net.initializers if "running" in n or n.endswith(("_mean", "_var"))]
    assert stats, net.initializers
    for step in range(2):  # the second step runs on running statistics the first one updated
        feeds = _feeds(10 + step)
        a, b = eager.inference_and_backprop(feeds), compiled.inference_and_backprop(feeds)
        np.testing.assert_allclose(b["loss"], a["loss"], rtol=1e-5, atol=1e-6)
        for name in grads + stats:
            np.testing.assert_allclose(compiled.fetch_tensor(name), eager.fetch_tensor(name),
                                       rtol=1e-4, atol=1e-5, err_msg=name)
        if step == 0:
            after_first = compiled.compile_seconds
            assert after_first > first  # the training graph (forward and backward) was compiled
    assert compiled.compile_seconds == after_first


def test_compile_mode_and_missing_compiler_errors(monkeypatch):
    net = _bn_net()
    with pytest.raises(UserError, match="compile_mode.*Received: compile_mode='fast'"):
        d5.executor(net, "torch", compile=True, compile_mode="fast")
    monkeypatch.setattr(torch_executor.shutil, "which", lambda name: None)
    with pytest.raises(FrameworkNotAvailableError, match="needs a C\\+\\+ compiler"):
        d5.executor(net, "torch", compile=True)
    assert d5.executor(net, "torch").inference(_feeds(0))  # the eager mode needs no compiler
