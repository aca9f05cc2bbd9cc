"""The Keras native executor trains under test_training with the reference optimizer (its network lacked input descriptors)."""

import numpy as np
import pytest

import deep500lite as d5

pytest.importorskip("tensorflow")
import keras  # noqa: E402

from deep500lite.frameworks.reference import GradientDescent  # noqa: E402
from deep500lite.frameworks.tensorflow import TensorFlowNativeExecutor  # noqa: E402


def test_keras_native_executor_trains_with_test_training():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((3, 4)).astype(np.float32) * 3
    labels = rng.integers(0, 3, 600)
    points = (centers[labels] + rng.standard_normal((600, 4))).astype(np.float32)
    train = d5.NumpyDataset(points[:480], "x", labels[:480].astype(np.int64), "label")
    test = d5.NumpyDataset(points[480:], "x", labels[480:].astype(np.int64), "label")
    model = keras.Sequential([keras.Input((4,), name="x"), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(3)])
    ex = TensorFlowNativeExecutor(model, input_names=["x"],
                                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    desc = ex.network.input_descriptors()["x"]
    assert desc.dtype == np.float32 and desc.shape == (None, 4)
    assert ex.network.get_input_nodes()[0].type.shape.shape == [None, 4]
    results = d5.test_training(ex, train, test, GradientDescent(ex, 0.1), 3, 32, "output",
                               metrics=[d5.TestAccuracy()])
    losses = [s["loss"] for s in results.stats.steps]
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    assert results[0] > 80


@pytest.mark.parametrize("layer", ["Conv1D", "Conv2D", "Conv1DTranspose", "Conv2DTranspose"])
def test_keras_channels_first_convolutions_run_or_are_refused_up_front(layer):
    # TensorFlow's CPU kernels take NCHW only with oneDNN on; CI runs this with oneDNN on and off.
    from deep500lite.errors import UnsupportedOperatorError
    from deep500lite.frameworks.tensorflow.native import cpu_runs_nchw_convolutions

    rank = 1 if "1D" in layer else 2
    shape = (3,) + (6,) * rank
    keras.utils.set_random_seed(0)
    conv = getattr(keras.layers, layer)(4, 3, data_format="channels_first", name="first_conv")
    model = keras.Sequential([keras.Input(shape), conv, keras.layers.Flatten(), keras.layers.Dense(2)])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if not cpu_runs_nchw_convolutions():
        with pytest.raises(UnsupportedOperatorError, match=rf"data_format='channels_first'.*oneDNN is off.*"
                                                           rf"Received: layers 'first_conv' \({layer}\)"):
            TensorFlowNativeExecutor(model, loss=loss)
        return
    x = np.random.default_rng(0).standard_normal((2, *shape)).astype(np.float32)
    ex = TensorFlowNativeExecutor(model, input_names=["x"], loss=loss)
    out = ex.inference_and_backprop({"x": x, "label": np.array([0, 1])})
    np.testing.assert_allclose(out["output"], model(x).numpy(), rtol=1e-5, atol=1e-5)
    kernel = next(p for p in ex.network.parameters if p.endswith("first_conv/kernel"))
    assert np.abs(ex.network.fetch_tensors([kernel + "_grad"])[0]).max() > 0
