"""The plain-JAX benchmark models (``deep500lite.frameworks.jax.models``) against deep500lite's executors.

The native models must compute what their ONNX export computes: outputs and parameter gradients
are compared with the torch executor (an independent implementation) and with the JAX executor
on the same weights.
"""

from __future__ import annotations

import numpy as np
import pytest

from deep500lite.bench.overhead import with_loss
from deep500lite.errors import UserError
from deep500lite.lv1.network import gradient_name, load_model
from deep500lite.registry import executor

jax = pytest.importorskip("jax")
models = pytest.importorskip("deep500lite.frameworks.jax.models")

# small inputs keep the tests fast; lenet's 8x8 path pads its second convolution
CASES = [("lenet", (1, 8, 8)), ("lenet", (1, 28, 28)), ("resnet20", (3, 4, 4))]


def _model(name, shape, seed=0):
    return (models.lenet if name == "lenet" else models.resnet20)(input_shape=shape, seed=seed)


def _perturbed_state(model, rng):
    """Running statistics away from (0, 1), so that a batch norm that ignores them is caught."""
    state = {k: (rng.uniform(-0.5, 0.5, v.shape) if k.endswith("mean") else rng.uniform(0.5, 2.0, v.shape))
             .astype(np.float32) for k, v in model.state.items()}
    return type(model)(model.name, model.forward, model.params, {k: jax.numpy.asarray(v) for k, v in state.items()},
                       model.input_shape, model.classes)


def _native_grads(model, x, y, batch_stats):
    def loss(params):
        return models.cross_entropy(model.forward(params, model.state, x, batch_stats)[0], y)

    value, grads = jax.jit(jax.value_and_grad(loss))(model.params)
    return float(value), {k: np.asarray(v) for k, v in grads.items()}


def _executor_grads(model, x, y, framework):
    ex = executor(with_loss(load_model(models.export_onnx(model))), framework)
    out = ex.inference_and_backprop({"input": x, "label": y}, "loss")
    names = list(model.params)
    grads = dict(zip(names, ex.network.fetch_tensors([gradient_name(n) for n in names])))
    return float(np.asarray(out["loss"])), grads


def _framework(name):
    if name == "jax":
        pytest.importorskip("deep500lite.frameworks.jax.executor")
    else:
        pytest.importorskip(name)
    return name


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("name,shape", CASES)
def test_native_inference_equals_the_executor(framework, name, shape):
    rng = np.random.default_rng(1)
    model = _perturbed_state(_model(name, shape), rng)
    x = rng.standard_normal((3, *shape)).astype(np.float32)
    ex = executor(load_model(models.export_onnx(model)), _framework(framework))
    expected = ex.inference({"input": x})["output"]
    got = np.asarray(models.inference_function(model)(x))
    assert got.shape == (3, 10)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


@pytest.mark.parametrize("framework", ["torch", "jax"])
@pytest.mark.parametrize("name,shape", [("lenet", (1, 8, 8)), ("resnet20", (3, 4, 4))])
def test_native_gradients_equal_the_executor(framework, name, shape):
    # deep500lite's executors train with batch statistics (docs/training.md), as the native step does
    rng = np.random.default_rng(2)
    model = _perturbed_state(_model(name, shape), rng)
    x = rng.standard_normal((4, *shape)).astype(np.float32)
    y = rng.integers(0, 10, 4).astype(np.int64)
    loss, grads = _native_grads(model, x, y, True)
    ex_loss, ex_grads = _executor_grads(model, x, y, _framework(framework))
    assert loss == pytest.approx(ex_loss, rel=1e-4)
    scale = max(np.abs(g).max() for g in ex_grads.values())
    for k in model.params:
        np.testing.assert_allclose(grads[k], ex_grads[k], rtol=1e-3, atol=1e-4 * scale, err_msg=k)


def test_weights_round_trip_through_onnx():
    model = _model("resnet20", (3, 8, 8), seed=3)
    other = _model("resnet20", (3, 8, 8), seed=4)
    assert not np.array_equal(np.asarray(model.params["fc.weight"]), np.asarray(other.params["fc.weight"]))
    loaded = models.load_onnx_weights(other, models.export_onnx(model))
    for k in model.params:
        np.testing.assert_array_equal(np.asarray(loaded.params[k]), np.asarray(model.params[k]))
    for k in model.state:
        np.testing.assert_array_equal(np.asarray(loaded.state[k]), np.asarray(model.state[k]))
    with pytest.raises(UserError, match="Received: "):
        models.load_onnx_weights(model, models.export_onnx(_model("lenet", (1, 8, 8))))


def test_bad_input_shape_is_a_user_error():
    with pytest.raises(UserError, match=r"Received: input_shape=\(1, 8, 9\)"):
        models.lenet(input_shape=(1, 8, 9))
    with pytest.raises(UserError, match="three positive integers"):
        models.resnet20(input_shape=(32, 32))


def test_native_training_step_lowers_the_loss_like_momentum_sgd():
    rng = np.random.default_rng(5)
    model = _model("lenet", (1, 8, 8))
    x = rng.standard_normal((8, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, 8).astype(np.int64)
    step, carry = models.training_step(model, learning_rate=0.05, momentum=0.9)
    carry, first = step(carry, x, y)
    # one momentum step by hand from the same weights: w1 = w0 - lr * g0 (zero initial velocity)
    _, g0 = _native_grads(model, x, y, False)
    for k, w in carry[0].items():
        np.testing.assert_allclose(np.asarray(w), np.asarray(model.params[k]) - 0.05 * g0[k], rtol=1e-5, atol=1e-6)
    for _ in range(30):
        carry, loss = step(carry, x, y)
    assert float(loss) < 0.5 * float(first)


def test_native_steps_equal_the_executors_momentum_optimizer():
    # batch statistics, running-statistic updates and momentum over several steps, on both sides
    optimizers = pytest.importorskip("deep500lite.frameworks.jax.optimizers")
    rng = np.random.default_rng(6)
    # 8x8: at 4x4 the last stage's batch statistics cover 4 values and float32 round-off grows
    model = _perturbed_state(_model("resnet20", (3, 8, 8)), rng)
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, 4).astype(np.int64)
    ex = executor(with_loss(load_model(models.export_onnx(model))), "jax")
    optimizer = optimizers.MomentumOptimizer(ex, learning_rate=0.05, momentum=0.9)
    step, carry = models.training_step(model, learning_rate=0.05, momentum=0.9)
    for _ in range(3):
        carry, loss = step(carry, x, y)
        np.testing.assert_allclose(optimizer.step({"input": x, "label": y})["loss"], float(loss), rtol=1e-4)
    trained = models.load_onnx_weights(model, ex.network)
    for k, w in {**carry[0], **carry[2]}.items():
        expected = {**trained.params, **trained.state}[k]
        np.testing.assert_allclose(np.asarray(w), np.asarray(expected), rtol=1e-3, atol=1e-5, err_msg=k)
