"""Tests for the Keras side of the real-model zoo (``deep500lite.frameworks.tensorflow.zoo``)."""

import numpy as np
import pytest

from deep500lite.errors import UserError

pytestmark = pytest.mark.requires("tensorflow", "tf2onnx", "onnxruntime")

SMALL = ("keras_mobilenet_v2", "keras_mobilenet_v3_small")


@pytest.fixture(scope="module")
def zoo():
    from deep500lite.frameworks.tensorflow import zoo

    return zoo


@pytest.fixture(scope="module", params=SMALL)
def built(request, zoo):
    return zoo.build(request.param)


@pytest.fixture(scope="module")
def prepared(built, zoo):
    """The Keras models behind ``built``, rebuilt from the same seed: (float32, float64, images, labels)."""
    return zoo._prepare(built.name, 2, 0)


def test_names_and_source(zoo):
    names = zoo.model_names()
    assert len(names) >= 10 and len(set(names)) == len(names)
    assert all(n.startswith("keras_") for n in names)
    assert set(SMALL) <= set(names)
    assert zoo.model_source("keras_vgg16") == "keras.applications"
    assert zoo.EXPORTERS == ("tf2onnx",)


def test_unknown_name_and_exporter(zoo):
    with pytest.raises(UserError, match=r"keras_mobilenet_v2.*Received: 'resnet9000'"):
        zoo.build("resnet9000")
    with pytest.raises(UserError, match="Received: 'nope'"):
        zoo.model_source("nope")
    with pytest.raises(UserError, match=r"tf2onnx.*Received: 'dynamo'"):
        zoo.build("keras_mobilenet_v2", exporter="dynamo")


def test_outputs_and_feeds(built):
    proto = built.proto
    assert [o.name for o in proto.graph.output] == [built.output]
    (name, images), = built.feeds.items()
    assert name == proto.graph.input[0].name
    assert images.dtype == np.float32 and images.shape[0] == 2 and images.shape[-1] == 3
    assert built.labels.dtype == np.int64 and built.labels.shape == (2,)
    assert set(built.labels.tolist()) <= set(range(5))
    assert built.logits64.shape == (2, 5) and built.logits64.dtype == np.float64
    assert np.all(np.isfinite(built.logits64))
    scale = np.abs(built.logits64).max()
    assert 1e-2 < scale < 100
    # the two samples must not collapse onto the same logits
    assert np.abs(built.logits64[0] - built.logits64[1]).max() > 1e-3 * scale
    np.testing.assert_allclose(built.logits32, built.logits64, rtol=0, atol=1e-4 * scale)


def test_onnxruntime_matches_keras_float64(built):
    import onnxruntime as ort

    session = ort.InferenceSession(built.proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (out,) = session.run([built.output], built.feeds)
    scale = np.abs(built.logits64).max()
    np.testing.assert_allclose(out, built.logits64, rtol=0, atol=1e-4 * scale)


def test_parameters_cover_trainable_weights(built, prepared):
    from onnx import numpy_helper

    assert built.unmapped == []
    assert set(built.parameters) == set(built.gradients64) == set(built.gradients32)
    assert any(node.op_type == "BatchNormalization" for node in built.proto.graph.node)
    model = prepared[0]
    values = {v.path: v.numpy() for v in model.trainable_variables}
    assert set(values) == set(built.parameters)
    inits = {i.name: numpy_helper.to_array(i) for i in built.proto.graph.initializer}
    for path, places in built.parameters.items():
        for init, perm in places:
            np.testing.assert_array_equal(inits[init], values[path].transpose(perm))
        assert built.gradients64[path].shape == values[path].shape


def _loss(tf, model, images, labels):
    logits = model(tf.constant(images, tf.float64), training=True)
    return float(tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)))


def test_gradients_match_finite_differences(built, prepared):
    import tensorflow as tf

    _, model64, images, labels = prepared
    np.testing.assert_array_equal(images, next(iter(built.feeds.values())))
    np.testing.assert_array_equal(labels, built.labels)
    np.testing.assert_allclose(np.asarray(model64(images.astype(np.float64), training=False)), built.logits64,
                               rtol=1e-12, atol=1e-12)
    variables = {v.path: v for v in model64.trainable_variables}
    # first conv kernel, a BatchNormalization gamma deep inside, the classifier kernel
    gamma = [p for p in variables if p.endswith("/gamma")]
    picks = [model64.trainable_variables[0].path, gamma[len(gamma) // 2], model64.trainable_variables[-2].path]
    rng = np.random.default_rng(1)
    # small step: batch-2 BatchNormalization makes the loss strongly curved along early weights
    h = 1e-7
    for path in picks:
        var = variables[path]
        base = var.numpy()
        grad = built.gradients64[path]
        flat = int(np.argmax(np.abs(grad)))  # the largest entry and a random one
        for index in (flat, int(rng.integers(base.size))):
            idx = np.unravel_index(index, base.shape)
            bumped = base.copy()
            bumped[idx] += h
            var.assign(bumped)
            up = _loss(tf, model64, images, labels)
            bumped[idx] -= 2 * h
            var.assign(bumped)
            down = _loss(tf, model64, images, labels)
            var.assign(base)
            numeric = (up - down) / (2 * h)
            scale = np.abs(grad).max()
            assert abs(numeric - grad[idx]) <= 1e-5 * scale + 1e-6, (path, idx, numeric, grad[idx])


def test_export_failure_names_model_and_exporter(zoo, monkeypatch):
    import tensorflow as tf
    import tf2onnx

    from deep500lite.errors import ModelExportError

    def broken(*args, **kwargs):
        raise ValueError("Erfc is not supported\nmore detail")

    monkeypatch.setattr(tf2onnx.convert, "from_keras", broken)
    spec = zoo._SPECS["keras_mobilenet_v2"]
    with pytest.raises(ModelExportError, match=r"tf2onnx could not export keras_mobilenet_v2: ValueError: Erfc is not"):
        zoo._export("keras_mobilenet_v2", object(), spec, 2, tf, tf2onnx)
