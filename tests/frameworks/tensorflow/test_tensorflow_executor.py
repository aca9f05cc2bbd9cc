"""The TensorFlow executor: exported models, zoo models, layouts, devices, errors, Keras models."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="needs tensorflow: pip install 'deep500lite[tensorflow]'")

import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import deep500lite as d5  # noqa: E402
import exporters  # noqa: E402
from deep500lite import networks  # noqa: E402
from deep500lite.frameworks.tensorflow import KerasExecutor, TensorFlowExecutor  # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-4)


def _has_gpu():
    return bool(tf.config.list_physical_devices("GPU"))


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _init(name, array):
    return onnx.numpy_helper.from_array(np.asarray(array), name)


def _load(model):
    # Outputs declared without a shape (the tests leave them to the executors) fail onnx.checker.
    return d5.load_model(model, check=False)


def _compare_with_reference(model, feeds):
    expected = d5.executor(_load(model), "reference").inference(feeds)
    got = d5.executor(_load(model), "tensorflow").inference(feeds)
    assert expected.keys() == got.keys()
    for k in expected:
        np.testing.assert_allclose(got[k], expected[k], **TOL)
    return got


# ------------------------------------------------------------------ exported models
@pytest.mark.requires("torch")
@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_torch_exported_cnn_matches_torch(tmp_path, dynamo):
    path, feeds, expected = exporters.torch_cnn(tmp_path, dynamo=dynamo)
    out = d5.executor(d5.load_model(path), "tensorflow").inference(feeds)
    np.testing.assert_allclose(out["y"], expected["y"], **TOL)


@pytest.mark.requires("torch")
def test_torch_legacy_export_with_open_batch_runs_other_batches(tmp_path):
    path, feeds, expected = exporters.torch_cnn(tmp_path, batch=3)
    ex = d5.executor(d5.load_model(path), "tensorflow")
    x = feeds["x"]
    for rows in (slice(0, 1), slice(0, 3), slice(1, 3)):
        np.testing.assert_allclose(ex.inference({"x": x[rows]})["y"], expected["y"][rows], **TOL)
    assert ex._fn.experimental_get_tracing_count() == 1


@pytest.mark.requires("tf2onnx")
def test_keras_exported_cnn_matches_keras(tmp_path):
    path, feeds, expected = exporters.keras_cnn(tmp_path)
    out = d5.executor(d5.load_model(path), "tensorflow").inference(feeds)
    (name,) = expected
    np.testing.assert_allclose(out[name], expected[name], **TOL)


# ---------------------------------------------------------------------- zoo models
@pytest.mark.parametrize("name,shape", [("mlp", (6,)), ("lenet", (1, 8, 8)), ("bn_cnn", (3, 8, 8))])
def test_zoo_models_match_reference(name, shape, rng):
    net, i, o = networks.create_model(name, None, classes=5, shape=shape)
    x = rng.standard_normal((4,) + shape).astype(np.float32)
    expected = d5.executor(net, "reference").inference({i: x})[o]
    got = d5.executor(net, "tensorflow").inference({i: x})[o]
    assert got.shape == (4, 5)
    np.testing.assert_allclose(got, expected, **TOL)


def test_feed_tensor_changes_the_result(rng):
    net, i, o = networks.create_model("mlp", 2, classes=2, shape=(3,), hidden=())
    ex = d5.executor(net, "tensorflow")
    ex.inference({i: rng.standard_normal((2, 3)).astype(np.float32)})  # traced with the old values
    net.feed_tensor("fc1.weight", np.zeros((2, 3), np.float32))
    net.feed_tensor("fc1.bias", np.array([1.5, -2], np.float32))
    out = ex.inference({i: rng.standard_normal((2, 3)).astype(np.float32)})[o]
    np.testing.assert_array_equal(out, [[1.5, -2], [1.5, -2]])
    np.testing.assert_array_equal(net.fetch_tensors(["fc1.bias"])[0], [1.5, -2])


def test_feed_tensor_rejects_another_shape():
    net, _, _ = networks.create_model("mlp", 2, classes=2, shape=(3,), hidden=())
    d5.executor(net, "tensorflow")
    with pytest.raises(d5.FeedError, match=r"expected float32\[2, 3\]. Received: float32\[3, 3\]"):
        net.feed_tensor("fc1.weight", np.zeros((3, 3), np.float32))


def test_add_output_rebuilds(rng):
    net, i, _ = networks.create_model("lenet", 2, shape=(1, 8, 8))
    ex = d5.executor(net, "tensorflow")
    net.add_output("conv1")
    x = rng.standard_normal((2, 1, 8, 8)).astype(np.float32)
    expected = d5.executor(net, "reference").inference({i: x})["conv1"]
    np.testing.assert_allclose(ex.inference({i: x})["conv1"], expected, **TOL)


# --------------------------------------------------------------------------- layout
def _transposes(ex):
    graph = ex._fn.get_concrete_function().graph
    return sum(op.type == "Transpose" for op in graph.get_operations())


def test_conv_chain_runs_channels_last_with_two_transposes(rng):
    c = 4
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["n1"]),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "p1"], ["a"]),  # residual, both channels-last
        helper.make_node("Mul", ["a", "scale"], ["y"]),  # per-channel [C, 1, 1] constant
    ]
    inits = [_init("w", rng.standard_normal((c, 3, 3, 3)).astype(np.float32)),
             _init("w2", rng.standard_normal((c, c, 3, 3)).astype(np.float32)),
             _init("b", rng.standard_normal(c).astype(np.float32)),
             _init("s", rng.uniform(0.5, 1.5, c).astype(np.float32)),
             _init("bb", rng.standard_normal(c).astype(np.float32)),
             _init("m", rng.standard_normal(c).astype(np.float32)),
             _init("v", rng.uniform(0.5, 1.5, c).astype(np.float32)),
             _init("scale", rng.standard_normal((c, 1, 1)).astype(np.float32))]
    model = _model(nodes, [_vi("x", [None, 3, 8, 8])], [_vi("y", [None, c, 4, 4])], inits)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    _compare_with_reference(model, {"x": x})
    ex = d5.executor(_load(model), "tensorflow")
    # the input to NHWC, the output back to NCHW; weight transposes are of rank 4 too, so count data ones
    graph = ex._fn.get_concrete_function().graph
    data = [op for op in graph.get_operations() if op.type == "Transpose"
            and op.inputs[0].op.type not in ("ReadVariableOp", "Identity", "Const")]
    assert len(data) == 2, [op.inputs[0].op.type for op in data]


def test_flatten_after_pool_and_transpose_node_compose(rng):
    nodes = [
        helper.make_node("AveragePool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Transpose", ["p"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Flatten", ["t"], ["f"]),
        helper.make_node("ReduceMean", ["p"], ["r"], axes=[2, 3], keepdims=0),
        helper.make_node("Concat", ["p", "p"], ["cat"], axis=1),
        helper.make_node("Softmax", ["cat"], ["sm"], axis=1),
        helper.make_node("Shape", ["sm"], ["shape"]),
    ]
    outs = [_vi("f", None), _vi("r", None), _vi("sm", None), _vi("shape", None, TensorProto.INT64)]
    model = _model(nodes, [_vi("x", [2, 3, 4, 6])], outs)
    got = _compare_with_reference(model, {"x": rng.standard_normal((2, 3, 4, 6)).astype(np.float32)})
    assert list(got["shape"]) == [2, 6, 2, 3]


@pytest.mark.parametrize("attrs,shape,wshape", [
    (dict(group=2, strides=[2, 2], dilations=[2, 2], pads=[1, 2, 0, 1]), [1, 4, 9, 9], [6, 2, 3, 3]),
    (dict(auto_pad="SAME_LOWER", strides=[2, 2]), [2, 3, 7, 6], [4, 3, 2, 3]),
    (dict(auto_pad="SAME_UPPER", dilations=[2, 1]), [2, 3, 7, 6], [4, 3, 3, 3]),
    (dict(group=3, pads=[1, 1]), [2, 3, 9], [6, 1, 3]),
    (dict(strides=[1, 2, 1], pads=[0, 1, 1, 1, 0, 0]), [1, 2, 4, 5, 3], [3, 2, 2, 3, 2]),
], ids=["grouped-dilated-strided-asym", "same-lower", "same-upper-dilated", "conv1d-grouped", "conv3d"])
def test_conv_variants_match_reference(attrs, shape, wshape, rng):
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    model = _model([node], [_vi("x", shape)], [_vi("y", None)],
                   [_init("w", rng.standard_normal(wshape).astype(np.float32))])
    _compare_with_reference(model, {"x": rng.standard_normal(shape).astype(np.float32)})


def test_conv_transpose_asymmetric_pads_output_padding_matches_reference(rng):
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 0, 0, 1],
                            output_padding=[1, 1])
    model = _model([node], [_vi("x", [2, 4, 5, 4])], [_vi("y", None)],
                   [_init("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
                    _init("b", rng.standard_normal(3).astype(np.float32))])
    _compare_with_reference(model, {"x": rng.standard_normal((2, 4, 5, 4)).astype(np.float32)})


@pytest.mark.requires("torch")
def test_conv_transpose_grouped_dilated_matches_torch(rng):
    # onnx.reference fails on grouped, dilated ConvTranspose; torch computes the expected values.
    import torch

    x = rng.standard_normal((2, 4, 5, 4)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=2, strides=[2, 1], dilations=[1, 2],
                            pads=[1, 1, 1, 1])
    model = _model([node], [_vi("x", [2, 4, 5, 4])], [_vi("y", None)], [_init("w", w), _init("b", b)])
    got = d5.executor(_load(model), "tensorflow").inference({"x": x})["y"]
    expected = torch.nn.functional.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b),
                                                    stride=(2, 1), padding=1, groups=2, dilation=(1, 2)).numpy()
    np.testing.assert_allclose(got, expected, **TOL)


@pytest.mark.parametrize("op_type,attrs", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, pads=[1, 1, 0, 0])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1], count_include_pad=0)),
])
def test_pool_variants_match_reference(op_type, attrs, rng):
    node = helper.make_node(op_type, ["x"], ["y"], **attrs)
    model = _model([node], [_vi("x", [2, 3, 8, 7])], [_vi("y", None)])
    _compare_with_reference(model, {"x": rng.standard_normal((2, 3, 8, 7)).astype(np.float32)})


def test_lstm_bidirectional_with_initial_state_matches_reference(rng):
    hidden, inp = 3, 2
    node = helper.make_node("LSTM", ["x", "w", "r", "b", "", "h0", "c0"], ["y", "yh", "yc"],
                            hidden_size=hidden, direction="bidirectional")
    inits = [_init("w", rng.standard_normal((2, 4 * hidden, inp)).astype(np.float32)),
             _init("r", rng.standard_normal((2, 4 * hidden, hidden)).astype(np.float32)),
             _init("b", rng.standard_normal((2, 8 * hidden)).astype(np.float32))]
    model = _model([node], [_vi("x", [5, 4, inp]), _vi("h0", [2, 4, hidden]), _vi("c0", [2, 4, hidden])],
                   [_vi("y", None), _vi("yh", None), _vi("yc", None)], inits)
    _compare_with_reference(model, {"x": rng.standard_normal((5, 4, inp)).astype(np.float32),
                                    "h0": rng.standard_normal((2, 4, hidden)).astype(np.float32),
                                    "c0": rng.standard_normal((2, 4, hidden)).astype(np.float32)})


def test_softmax_cross_entropy_with_weights_and_ignore_index(rng):
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["s", "t", "wt"], ["loss", "logp"], ignore_index=1)
    model = _model([node], [_vi("s", [3, 4, 2]), _vi("t", [3, 2], TensorProto.INT64), _vi("wt", [4])],
                   [_vi("loss", None), _vi("logp", None)], opset=13)
    s = rng.standard_normal((3, 4, 2)).astype(np.float32)
    t = np.array([[0, 1], [3, 2], [1, 1]], np.int64)
    w = rng.uniform(0.5, 2, 4).astype(np.float32)
    got = d5.executor(_load(model), "tensorflow").inference({"s": s, "t": t, "wt": w})
    logp = s - np.log(np.exp(s).sum(axis=1, keepdims=True))
    mask = t != 1
    picked = np.take_along_axis(logp, t[:, None, :], axis=1)[:, 0, :]
    expected = -(picked * w[t] * mask).sum() / (w[t] * mask).sum()
    np.testing.assert_allclose(got["loss"], expected, **TOL)
    np.testing.assert_allclose(got["logp"], logp, **TOL)


# ----------------------------------------------------------------- devices & errors
@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU")
def test_gpu_request_is_a_clear_device_error():
    net, _, _ = networks.create_model("mlp", 2, classes=2, shape=(3,), hidden=())
    assert not TensorFlowExecutor.supports_device(d5.GPUDevice(0))
    with pytest.raises(d5.DeviceError, match=r"cannot run on gpu:0: tf.config.list_physical_devices\('GPU'\)"):
        d5.executor(net, "tensorflow", device="gpu:0")


@pytest.mark.skipif(not _has_gpu(), reason="needs a GPU visible to TensorFlow")
def test_gpu_matches_cpu(rng):
    net, i, o = networks.create_model("lenet", None, shape=(1, 8, 8))
    x = rng.standard_normal((3, 1, 8, 8)).astype(np.float32)
    cpu = d5.executor(net, "tensorflow").inference({i: x})[o]
    gpu = d5.executor(net, "tensorflow", device="gpu:0").inference({i: x})[o]
    np.testing.assert_allclose(gpu, cpu, **TOL)


def test_custom_domain_operator_is_named():
    node = helper.make_node("FancyOp", ["x"], ["y"], domain="com.example", name="my_fancy_node")
    graph = helper.make_graph([node], "g", [_vi("x", [1])], [_vi("y", [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(d5.UnsupportedOperatorError, match=r"'com.example::FancyOp' \(node 'my_fancy_node'\)"):
        d5.executor(d5.load_model(model, check=False), "tensorflow")


def test_unsupported_standard_operator_is_named():
    node = helper.make_node("Det", ["x"], ["y"], name="det_node")
    model = _model([node], [_vi("x", [2, 2])], [_vi("y", [])])
    with pytest.raises(d5.UnsupportedOperatorError, match=r"'Det' \(node 'det_node'\). Executors that support it"):
        d5.executor(d5.load_model(model), "tensorflow")


def test_type_tensorflow_lacks_is_refused_up_front():
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E4M3FNUZ, name="to_fp8")
    model = _model([node], [_vi("x", [2])], [_vi("y", [2], TensorProto.FLOAT8E4M3FNUZ)], opset=21)
    with pytest.raises(d5.UnsupportedOperatorError, match="FLOAT8E4M3FNUZ"):
        d5.executor(d5.load_model(model), "tensorflow")


def test_wrong_feed_dtype_is_a_feed_error():
    net, i, _ = networks.create_model("mlp", 2, classes=2, shape=(3,), hidden=())
    with pytest.raises(d5.FeedError, match="must have dtype float32"):
        d5.executor(net, "tensorflow").inference({i: np.zeros((2, 3))})


# ------------------------------------------------------------------- Keras executor
@pytest.fixture
def keras_model():
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    inp = keras.Input((5,), name="x")
    out = keras.layers.Dense(3, name="head")(keras.layers.Dense(4, activation="tanh", name="hidden")(inp))
    return keras.Model(inp, out)


def test_keras_executor_inference_and_loss(keras_model, rng):
    import keras

    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    ex = KerasExecutor(keras_model, input_names=["x"], loss=loss, label_name="label")
    x = rng.standard_normal((6, 5)).astype(np.float32)
    y = np.array([0, 1, 2, 0, 1, 2], np.int64)
    logits = keras_model(x).numpy()
    assert ex.network.inputs == ["x"]
    assert set(ex.network.parameters) == {"hidden/kernel", "hidden/bias", "head/kernel", "head/bias"}
    np.testing.assert_allclose(ex.inference({"x": x})["output"], logits, **TOL)
    out = ex.inference({"x": x, "label": y})
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(out["loss"], -logp[np.arange(6), y].mean(), **TOL)
    with pytest.raises(d5.FeedError, match=r"Unknown input\(s\) \['image'\]"):
        ex.inference({"x": x, "image": x})


def test_keras_executor_feed_tensor_and_gradients(keras_model, rng):
    import keras

    loss = keras.losses.MeanSquaredError()
    ex = KerasExecutor(keras_model, loss=loss)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    target = rng.standard_normal((4, 3)).astype(np.float32)
    ex.network.feed_tensor("head/bias", np.array([1.0, 2.0, 3.0], np.float32))
    np.testing.assert_array_equal(ex.network.fetch_tensors(["head/bias"])[0], [1, 2, 3])
    out = ex.inference_and_backprop({"x": x, "label": target})
    # gradient of the MSE with respect to the last bias, by hand: mean over rows of 2 (pred - t) / 3
    pred = keras_model(x).numpy()
    np.testing.assert_allclose(out["output"], pred, **TOL)
    expected_bias_grad = (2 * (pred - target) / 3).mean(axis=0)
    (grad,) = ex.network.fetch_tensors(["head/bias_grad"])
    np.testing.assert_allclose(grad, expected_bias_grad, **TOL)
    assert ("hidden/kernel", "hidden/kernel_grad") in ex.network.gradient("loss")
    with pytest.raises(d5.FeedError, match="must be 'loss' or one of"):
        ex.inference_and_backprop({"x": x, "label": target}, y="nope")


@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU")
def test_keras_executor_gpu_request_is_a_device_error(keras_model):
    with pytest.raises(d5.DeviceError, match="gpu:0"):
        KerasExecutor(keras_model, device="gpu:0")
