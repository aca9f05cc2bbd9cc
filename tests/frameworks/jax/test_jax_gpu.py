"""The jax executor on a GPU: the same values as on the CPU, training included, and ``bench overhead
--device gpu:0``. Skipped where JAX sees no GPU (CI has none); run on a lent GPU machine."""

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="needs jax")

import deep500lite as d5  # noqa: E402
from deep500lite import datasets, networks  # noqa: E402


def _gpus() -> int:
    try:
        return len(jax.devices("gpu"))
    except RuntimeError:
        return 0


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_gpus() == 0, reason="needs a GPU visible to JAX")]


def _lenet(batch):
    net, inp, out = networks.create_model("lenet", batch, classes=10, shape=(1, 28, 28), seed=0)
    net.add_operation(datasets.SoftmaxCrossEntropy()([out, "label"], "loss"))
    rng = np.random.default_rng(0)
    feeds = {inp: rng.standard_normal((batch, 1, 28, 28)).astype(np.float32),
             "label": rng.integers(0, 10, batch).astype(np.int64)}
    return net, feeds


def test_gpu_inference_and_gradients_equal_cpu():
    net, feeds = _lenet(8)
    cpu = d5.executor(net.copy(), "jax")
    gpu = d5.executor(net, "jax", device="gpu:0")
    assert gpu.options["platform"] == "gpu"
    expected, got = cpu.inference_and_backprop(feeds, "loss"), gpu.inference_and_backprop(feeds, "loss")
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=1e-5)
    for name in net.gradient("loss"):
        np.testing.assert_allclose(gpu.fetch_tensor(name[1]), cpu.fetch_tensor(name[1]), rtol=1e-4, atol=1e-5)


def test_gpu_training_steps_equal_cpu():
    from deep500lite.frameworks.jax import MomentumOptimizer

    net, feeds = _lenet(16)
    losses = {}
    for device in ("cpu", "gpu:0"):
        ex = d5.executor(net.copy(), "jax", device=device)
        opt = MomentumOptimizer(ex, learning_rate=0.05, momentum=0.9)
        losses[device] = [float(opt.step(feeds)["loss"]) for _ in range(5)]
    np.testing.assert_allclose(losses["gpu:0"], losses["cpu"], rtol=1e-4)
    assert losses["gpu:0"][-1] < losses["gpu:0"][0]


def test_bench_overhead_on_gpu():
    from deep500lite.bench.overhead import run_overhead

    for training in (False, True):
        (result,) = run_overhead("jax", ["lenet"], 16, max_time=0.5, training=training, device="gpu:0")
        assert result.paired.ratio.median > 0 and result.paired.ratio.n >= 3
        assert result.max_abs_error < 1e-3
