"""Every framework package has the same module names per role; old names keep working, deprecated."""

import importlib
import warnings

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets, networks
from deep500lite.registry import FRAMEWORKS, import_framework, is_framework_available

# Role modules this test checks in each framework package, from the specs (ops/, dtypes.py, bench.py
# and the plugins' own modules are checked by their own tests).
_CHECKED = ("executor", "custom", "optimizers", "native", "models", "distributed")
ROLES = {name: [r for r in _CHECKED if r in spec.roles] for name, spec in FRAMEWORKS.items()
         if spec.module.startswith("deep500lite.frameworks.")}
REFERENCE_OPTIMIZERS = ["GradientDescent", "MomentumOptimizer", "NesterovOptimizer", "AdaGradOptimizer",
                        "RMSPropOptimizer", "AdamOptimizer", "AcceleGradOptimizer"]


def _framework(name):
    if not is_framework_available(name):
        pytest.skip(f"{name} is not installed")
    return import_framework(name)


@pytest.mark.parametrize("framework", sorted(ROLES))
def test_role_modules(framework):
    package = _framework(framework)
    for role in ROLES[framework]:
        module = importlib.import_module(f"{package.__name__}.{role}")
        assert module.__doc__ and module.__all__, f"{module.__name__} has no docstring or __all__"
        assert f"``{role}" in package.__doc__, f"{package.__name__}'s docstring does not list {role}"
    optimizers = importlib.import_module(f"{package.__name__}.optimizers")
    for name in optimizers.__all__:
        assert getattr(package, name) is getattr(optimizers, name), name


# ------------------------------------------------------------------ onnxruntime's optimizers
def _mlp(seed):
    net, i, o = networks.create_model("mlp", 8, classes=10, shape=(12,), seed=seed)
    net.add_operation(datasets.dataset_loss("digits")([o, "label"], "loss"))
    return net, i


def test_onnxruntime_exports_the_reference_optimizers():
    ort = _framework("onnxruntime")
    from deep500lite.frameworks import reference as d5ref

    assert set(REFERENCE_OPTIMIZERS) <= set(ort.__all__)
    for name in REFERENCE_OPTIMIZERS:
        assert getattr(ort, name) is getattr(d5ref, name), name


def test_onnxruntime_adam_trains_like_the_reference():
    ort = _framework("onnxruntime")
    from deep500lite.frameworks import reference as d5ref

    rng = np.random.default_rng(0)
    feeds_in = rng.standard_normal((8, 12)).astype(np.float32)
    label = rng.integers(0, 10, size=8).astype(np.int64)
    runs = []
    for framework, optimizer_class in (("onnxruntime", ort.AdamOptimizer), ("reference", d5ref.AdamOptimizer)):
        net, name = _mlp(seed=2)
        optimizer = optimizer_class(d5.executor(net, framework), learning_rate=0.01)
        losses = [float(optimizer.step({name: feeds_in, "label": label})["loss"]) for _ in range(12)]
        runs.append((losses, {p: net.fetch_tensors([p])[0] for p in net.parameters}))
    (ort_losses, ort_params), (ref_losses, ref_params) = runs
    np.testing.assert_allclose(ort_losses, ref_losses, rtol=1e-4, atol=1e-6)
    assert ort_losses[-1] < 0.7 * ort_losses[0]
    for p in ref_params:
        np.testing.assert_allclose(ort_params[p], ref_params[p], rtol=1e-4, atol=1e-5, err_msg=p)


# ------------------------------------------------------------------ tensorflow's old names
def test_keras_executor_is_a_deprecated_alias():
    tf = _framework("tensorflow")
    from deep500lite.frameworks.tensorflow import native

    with pytest.warns(DeprecationWarning, match="use deep500lite.frameworks.tensorflow.TensorFlowNativeExecutor"):
        from deep500lite.frameworks.tensorflow import KerasExecutor
    assert KerasExecutor is tf.TensorFlowNativeExecutor is native.TensorFlowNativeExecutor
    with pytest.warns(DeprecationWarning, match="TensorFlowNativeExecutor"):
        from deep500lite.frameworks.tensorflow.native import KerasExecutor as from_native
    assert from_native is tf.TensorFlowNativeExecutor
    with pytest.warns(DeprecationWarning, match="NativeNetwork"):
        assert native.KerasNetwork is tf.NativeNetwork
    assert "KerasExecutor" not in tf.__all__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tf.TensorFlowNativeExecutor.__name__ == "TensorFlowNativeExecutor"
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchExecutor'"):
        tf.NoSuchExecutor  # noqa: B018


def test_keras_to_onnx_is_a_deprecated_alias():
    _framework("tensorflow")
    pytest.importorskip("tf2onnx")
    from deep500lite.frameworks.tensorflow import models

    model = models.lenet(classes=4, input_shape=(8, 8, 1))
    with pytest.warns(DeprecationWarning, match="use export_onnx"):
        proto = models.to_onnx(model, batch_size=2)
    x = np.random.default_rng(1).standard_normal((2, 8, 8, 1)).astype(np.float32)
    net = d5.load_model(proto)
    (out,) = d5.executor(net, "reference").inference({net.inputs[0]: x}).values()
    np.testing.assert_allclose(out, model(x).numpy(), rtol=1e-4, atol=1e-4)
