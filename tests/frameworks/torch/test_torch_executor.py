"""The torch executor and the native torch executor, against independently computed answers."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import deep500lite as d5  # noqa: E402
import exporters  # noqa: E402
from deep500lite import networks  # noqa: E402
from deep500lite.frameworks.torch import TorchExecutor, TorchNativeExecutor  # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-4)


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, elem=TensorProto.FLOAT):
    """A tensor's value info; an int ``shape`` is a rank with unnamed dimensions."""
    if isinstance(shape, int):
        shape = [f"d{i}" for i in range(shape)]
    return helper.make_tensor_value_info(name, elem, shape)


# ------------------------------------------------------------ exported models
@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_torch_exported_cnn_matches_torch(tmp_path, dynamo):
    path, feeds, expected = exporters.torch_cnn(tmp_path, dynamo=dynamo)
    out = d5.executor(d5.load_model(path), "torch").inference(feeds)
    for name, value in expected.items():
        np.testing.assert_allclose(out[name], value, **TOL)


def test_legacy_export_runs_other_batch_sizes(tmp_path):
    path, feeds, _ = exporters.torch_cnn(tmp_path, batch=2)
    _, feeds5, expected5 = exporters.torch_cnn(tmp_path / "..", batch=5)
    ex = d5.executor(d5.load_model(path), "torch")
    np.testing.assert_allclose(ex.inference(feeds5)["y"], expected5["y"], **TOL)


@pytest.mark.requires("tf2onnx")
def test_keras_exported_cnn_matches_keras(tmp_path):
    path, feeds, expected = exporters.keras_cnn(tmp_path)
    out = d5.executor(d5.load_model(path), "torch").inference(feeds)
    for name, value in expected.items():
        np.testing.assert_allclose(out[name], value, **TOL)


# ------------------------------------------------------------------ zoo models
@pytest.mark.parametrize("name,shape", [("lenet", (1, 8, 8)), ("mlp", (6,)), ("bn_cnn", (3, 8, 8))])
def test_zoo_models_match_reference(name, shape):
    net, i, o = networks.create_model(name, None, shape=shape)
    feeds = net.random_feeds(batch_size=3, seed=5)
    expected = d5.executor(net, "reference").inference(feeds)[o]
    out = d5.executor(net, "torch").inference(feeds)[o]
    np.testing.assert_allclose(out, expected, **TOL)


def test_mlp_matches_numpy(rng):
    net, i, o = networks.create_model("mlp", None, classes=4, shape=(6,), hidden=(5,))
    W1, b1, W2, b2 = net.fetch_tensors(["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"])
    x = rng.standard_normal((3, 6)).astype(np.float32)
    expected = np.maximum(x @ W1.T + b1, 0) @ W2.T + b2
    np.testing.assert_allclose(d5.executor(net, "torch").inference({i: x})[o], expected, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------- parameters
def test_feed_tensor_changes_the_result(rng):
    net, i, o = networks.create_model("mlp", 2, classes=2, shape=(3,), hidden=())
    ex = d5.executor(net, "torch")
    x = rng.standard_normal((2, 3)).astype(np.float32)
    ex.inference({i: x})
    net.feed_tensor("fc1.weight", np.zeros((2, 3), np.float32))
    net.feed_tensor("fc1.bias", np.array([1.5, -2], np.float32))
    np.testing.assert_array_equal(ex.inference({i: x})[o], [[1.5, -2], [1.5, -2]])
    np.testing.assert_array_equal(net.fetch_tensors(["fc1.bias"])[0], [1.5, -2])


def test_outputs_and_fetches_never_alias_held_tensors():
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    model = _model([helper.make_node("Identity", ["w"], ["w_out"]),
                    helper.make_node("Identity", ["x"], ["x_out"])],
                   [_vi("x", [2])], [_vi("w_out", [2, 3]), _vi("x_out", [2])],
                   [numpy_helper.from_array(w, "w")])
    ex = d5.executor(d5.load_model(model), "torch")
    x = np.ones(2, np.float32)
    out = ex.inference({"x": x})
    out["w_out"][:] = -1
    out["x_out"][:] = -1
    ex.network.fetch_tensors(["w"])[0][:] = -1
    np.testing.assert_array_equal(ex.inference({"x": x})["w_out"], w)
    np.testing.assert_array_equal(x, [1, 1])


def test_integer_initializers_fold_and_refeeding_them_rebuilds(rng):
    # Shape(w) -> Gather -> Concat with an int64 initializer -> Reshape: folded at build time.
    w = rng.standard_normal((4, 6)).astype(np.float32)
    nodes = [
        helper.make_node("Shape", ["w"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["d0"], axis=0),
        helper.make_node("Concat", ["d0", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    net = d5.load_model(_model(nodes, [_vi("x", [2, 12])], [_vi("y", 2)], inits))
    ex = d5.executor(net, "torch")
    x = rng.standard_normal((2, 12)).astype(np.float32)
    np.testing.assert_array_equal(ex.inference({"x": x})["y"], x.reshape(4, -1))
    net.feed_tensor("minus1", np.array([3], np.int64))
    with pytest.raises(RuntimeError, match="node 'y' \\(Reshape\\)"):
        ex.inference({"x": x})
    net.feed_tensor("minus1", np.array([6], np.int64))
    np.testing.assert_array_equal(ex.inference({"x": x})["y"], x.reshape(4, 6))


def test_added_output_is_returned(rng):
    net, i, _ = networks.create_model("lenet", 2, shape=(1, 8, 8))
    ex = d5.executor(net, "torch")
    net.add_output("conv1")
    x = rng.standard_normal((2, 1, 8, 8)).astype(np.float32)
    expected = d5.executor(net.copy(), "reference").inference({i: x})["conv1"]
    np.testing.assert_allclose(ex.inference({i: x})["conv1"], expected, **TOL)


# --------------------------------------------------------------- operators
def _compare_with_reference(model, feeds, tol=TOL):
    expected = d5.executor(d5.load_model(model), "reference").inference(feeds)
    out = d5.executor(d5.load_model(model), "torch").inference(feeds)
    for name, value in expected.items():
        np.testing.assert_allclose(out[name], value, **tol, err_msg=name)


@pytest.mark.parametrize("attrs", [
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(auto_pad="SAME_LOWER", strides=[2, 1]),
    dict(auto_pad="VALID", dilations=[2, 1]),
    dict(pads=[0, 1, 2, 0], strides=[1, 2]),
    dict(pads=[1, 1, 1, 1], group=2),
], ids=["same_upper", "same_lower", "valid", "asymmetric", "groups"])
def test_conv_padding_modes_match_reference(rng, attrs):
    w = rng.standard_normal((4, 2 if attrs.get("group") else 4, 3, 3)).astype(np.float32)
    model = _model([helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], **attrs)],
                   [_vi("x", [2, 4, 7, 6])], [_vi("y", 4)],
                   [numpy_helper.from_array(w, "w"),
                    numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")])
    _compare_with_reference(model, {"x": rng.standard_normal((2, 4, 7, 6)).astype(np.float32)})


@pytest.mark.parametrize("attrs", [
    dict(strides=[2, 2], output_padding=[1, 0], pads=[1, 0, 0, 1]),
    dict(strides=[2, 2], output_shape=[10, 9]),
    dict(strides=[3, 2], auto_pad="SAME_UPPER", dilations=[1, 2]),
], ids=["output_padding", "output_shape", "same_upper"])
def test_conv_transpose_matches_reference(rng, attrs):
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    model = _model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)],
                   [_vi("x", [1, 3, 4, 4])], [_vi("y", 4)],
                   [numpy_helper.from_array(w, "w"),
                    numpy_helper.from_array(rng.standard_normal(2).astype(np.float32), "b")])
    _compare_with_reference(model, {"x": rng.standard_normal((1, 3, 4, 4)).astype(np.float32)})


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[2, 2], pads=[0, 1, 1, 0], dilations=[2, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 0, 2, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[2, 2], auto_pad="SAME_UPPER", strides=[2, 2])),
], ids=["max_ceil", "max_asym_dilated", "avg_asym_include_pad", "avg_ceil", "avg_same"])
def test_pooling_matches_reference(rng, op, attrs):
    model = _model([helper.make_node(op, ["x"], ["y"], **attrs)], [_vi("x", [2, 3, 7, 8])], [_vi("y", 4)])
    _compare_with_reference(model, {"x": rng.standard_normal((2, 3, 7, 8)).astype(np.float32)})


def _onnx_weights(weights, gate_order, hidden):
    """Reorder torch's stacked gate blocks into ONNX's gate order."""
    blocks = np.split(weights, len(gate_order), axis=0)
    return np.concatenate([blocks[i] for i in gate_order], axis=0)


def _rnn_onnx_params(module, gate_order, hidden):
    W, R, B = [], [], []
    for suffix in ["", "_reverse"][: 2 if module.bidirectional else 1]:
        get = lambda n: getattr(module, n + suffix).detach().numpy()  # noqa: E731
        W.append(_onnx_weights(get("weight_ih_l0"), gate_order, hidden))
        R.append(_onnx_weights(get("weight_hh_l0"), gate_order, hidden))
        B.append(np.concatenate([_onnx_weights(get("bias_ih_l0"), gate_order, hidden),
                                 _onnx_weights(get("bias_hh_l0"), gate_order, hidden)]))
    return np.stack(W), np.stack(R), np.stack(B)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_bidirectional_rnn_with_sequence_lens_matches_torch_nn(rng, kind):
    seq, batch, inp, hidden = 5, 3, 4, 6
    torch.manual_seed(0)
    module = getattr(torch.nn, kind)(inp, hidden, bidirectional=True)
    # torch gate order: LSTM i,f,g,o -> ONNX i,o,f,c; GRU r,z,n -> ONNX z,r,h.
    order = [0, 3, 1, 2] if kind == "LSTM" else [1, 0, 2]
    W, R, B = _rnn_onnx_params(module, order, hidden)
    x = rng.standard_normal((seq, batch, inp)).astype(np.float32)
    h0 = rng.standard_normal((2, batch, hidden)).astype(np.float32)
    lens = np.array([5, 2, 4], np.int32)
    inputs = ["x", "W", "R", "B", "lens", "h0"] + (["c0"] if kind == "LSTM" else [])
    outputs = ["y", "y_h"] + (["y_c"] if kind == "LSTM" else [])
    extra = dict(linear_before_reset=1) if kind == "GRU" else {}
    node = helper.make_node(kind, inputs, outputs, hidden_size=hidden, direction="bidirectional", **extra)
    feeds_vi = [_vi("x", list(x.shape)), _vi("lens", [batch], TensorProto.INT32), _vi("h0", list(h0.shape))]
    c0 = rng.standard_normal((2, batch, hidden)).astype(np.float32)
    if kind == "LSTM":
        feeds_vi.append(_vi("c0", list(c0.shape)))
    model = _model([node], feeds_vi, [_vi(o, 4 if o == "y" else 3) for o in outputs],
                   [numpy_helper.from_array(v, n) for v, n in [(W, "W"), (R, "R"), (B, "B")]])
    feeds = {"x": x, "lens": lens, "h0": h0, **({"c0": c0} if kind == "LSTM" else {})}
    out = d5.executor(d5.load_model(model), "torch").inference(feeds)

    packed = torch.nn.utils.rnn.pack_padded_sequence(torch.from_numpy(x), torch.from_numpy(lens.astype(np.int64)),
                                                     enforce_sorted=False)
    state = (torch.from_numpy(h0), torch.from_numpy(c0)) if kind == "LSTM" else torch.from_numpy(h0)
    with torch.no_grad():
        y, final = module(packed, state)
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=seq)
    expected_y = y.numpy().reshape(seq, batch, 2, hidden).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(out["y"], expected_y, **TOL)
    h_n = final[0] if kind == "LSTM" else final
    np.testing.assert_allclose(out["y_h"], h_n.numpy(), **TOL)
    if kind == "LSTM":
        np.testing.assert_allclose(out["y_c"], final[1].numpy(), **TOL)


def test_softmax_cross_entropy_with_weights_and_ignore_index(rng):
    scores = rng.standard_normal((4, 3, 2)).astype(np.float32)
    labels = np.array([[0, 2], [1, -1], [2, 2], [-1, 0]], np.int64)
    weights = np.array([0.5, 1.0, 2.0], np.float32)
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["s", "l", "w"], ["loss", "logp"], ignore_index=-1)
    model = _model([node], [_vi("s", [4, 3, 2]), _vi("l", [4, 2], TensorProto.INT64), _vi("w", [3])],
                   [_vi("loss", []), _vi("logp", 3)], opset=13)
    out = d5.executor(d5.load_model(model), "torch").inference({"s": scores, "l": labels, "w": weights})
    logp = scores - np.log(np.exp(scores).sum(axis=1, keepdims=True))
    keep = labels != -1
    safe = np.where(keep, labels, 0)
    picked = np.take_along_axis(logp, safe[:, None, :], axis=1)[:, 0, :]
    w = weights[safe] * keep
    np.testing.assert_allclose(out["loss"], -(picked * w).sum() / w.sum(), **TOL)
    np.testing.assert_allclose(out["logp"], logp, **TOL)


# ----------------------------------------------------------------- errors
def test_gpu_request_is_a_clear_device_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the error is for machines without it")
    net, _, _ = networks.create_model("mlp", 2, shape=(3,))
    with pytest.raises(d5.DeviceError, match=r"cannot run on gpu:0: torch.cuda.is_available\(\) is False"):
        d5.executor(net, "torch", device="gpu:0")
    assert not TorchExecutor.supports_device(d5.GPUDevice(0))
    assert TorchExecutor.supports_device(d5.CPUDevice())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_matches_cpu(rng):
    net, i, o = networks.create_model("bn_cnn", None, shape=(3, 8, 8))
    feeds = net.random_feeds(batch_size=4)
    expected = d5.executor(net, "torch").inference(feeds)[o]
    ex = d5.executor(net.copy(), "torch", device="gpu:0")
    out = ex.inference(feeds)[o]
    ex.synchronize()
    np.testing.assert_allclose(out, expected, **TOL)


def test_custom_domain_operator_is_named():
    node = helper.make_node("FancyOp", ["x"], ["y"], domain="com.example", name="my_fancy_node")
    graph = helper.make_graph([node], "g", [_vi("x", [1])], [_vi("y", [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 1)])
    with pytest.raises(d5.UnsupportedOperatorError, match=r"'com.example::FancyOp' \(node 'my_fancy_node'\)"):
        d5.executor(d5.load_model(model, check=False), "torch")


def test_unsupported_onnx_operator_is_named():
    node = helper.make_node("Det", ["x"], ["y"], name="det1")
    model = _model([node], [_vi("x", [1, 1, 2, 2])], [_vi("y", 2)])
    with pytest.raises(d5.UnsupportedOperatorError, match=r"operator 'Det' \(node 'det1'\)"):
        d5.executor(d5.load_model(model), "torch")


def test_runtime_failure_names_the_node(rng):
    node = helper.make_node("MatMul", ["a", "b"], ["c"], name="bad_matmul")
    model = _model([node], [_vi("a", 2), _vi("b", 2)], [_vi("c", 2)])
    ex = d5.executor(d5.load_model(model), "torch")
    with pytest.raises(RuntimeError, match="node 'bad_matmul' \\(MatMul\\)"):
        ex.inference({"a": np.zeros((2, 3), np.float32), "b": np.zeros((4, 5), np.float32)})


def test_wrong_feeds_are_feed_errors():
    net, _, _ = networks.create_model("lenet", 4, shape=(1, 8, 8))
    ex = d5.executor(net, "torch")
    with pytest.raises(d5.FeedError, match="must have dtype float32. Received: float64"):
        ex.inference({"input": np.zeros((4, 1, 8, 8))})


# --------------------------------------------------------- native executor
def _linear_regression():
    torch.manual_seed(0)
    module = torch.nn.Linear(3, 1)
    return module, TorchNativeExecutor(module, input_names="x", output_names="pred",
                                       loss_fn=torch.nn.functional.mse_loss, label_name="y")


def test_native_inference_matches_numpy(rng):
    module, ex = _linear_regression()
    W, b = ex.network.fetch_tensors(["weight", "bias"])
    x = rng.standard_normal((5, 3)).astype(np.float32)
    out = ex.inference({"x": x})
    assert list(out) == ["pred"]
    np.testing.assert_allclose(out["pred"], x @ W.T + b, rtol=1e-5, atol=1e-6)
    assert ex.network.inputs == ["x", "y"] and ex.network.outputs == ["pred", "loss"]
    assert ex.network.parameters == ["weight", "bias"]


def test_native_backprop_matches_hand_computed_gradient(rng):
    module, ex = _linear_regression()
    W, b = ex.network.fetch_tensors(["weight", "bias"])
    x = rng.standard_normal((5, 3)).astype(np.float32)
    y = rng.standard_normal((5, 1)).astype(np.float32)
    out = ex.inference_and_backprop({"x": x, "y": y})
    r = x @ W.T + b - y  # loss = mean(r**2): dL/dW = 2/N r^T x, dL/db = 2/N sum(r)
    np.testing.assert_allclose(out["loss"], np.mean(r ** 2), rtol=1e-5)
    assert ex.network.gradient("loss") == [("weight", "weight_grad"), ("bias", "bias_grad")]
    gW, gb = ex.network.fetch_tensors(["weight_grad", "bias_grad"])
    np.testing.assert_allclose(gW, 2 / 5 * r.T @ x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gb, 2 / 5 * r.sum(axis=0), rtol=1e-5, atol=1e-6)


def test_native_feed_tensor_and_errors(rng):
    module, ex = _linear_regression()
    ex.network.feed_tensor("weight", np.array([[1, 2, 3]], np.float32))
    ex.network.feed_tensor("bias", np.array([0.5], np.float32))
    out = ex.inference({"x": np.array([[1, 1, 1]], np.float32), "y": np.array([[6]], np.float32)})
    np.testing.assert_allclose(out["pred"], [[6.5]])
    np.testing.assert_allclose(out["loss"], 0.25)
    np.testing.assert_array_equal(module.weight.detach().numpy(), [[1, 2, 3]])
    with pytest.raises(d5.FeedError, match=r"expected torch.float32\[1, 3\]"):
        ex.network.feed_tensor("weight", np.zeros((3, 1), np.float32))
    with pytest.raises(d5.FeedError, match=r"Missing input\(s\) \['y'\]"):
        ex.inference_and_backprop({"x": np.zeros((1, 3), np.float32)})
    with pytest.raises(d5.FeedError, match=r"Unknown input\(s\) \['z'\]"):
        ex.inference({"x": np.zeros((1, 3), np.float32), "z": 1})
    with pytest.raises(KeyError, match="weight_grad"):
        ex.network.fetch_tensors(["weight_grad"])


def test_native_gpu_request_is_a_device_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(d5.DeviceError, match="torch.cuda.is_available"):
        TorchNativeExecutor(torch.nn.Linear(2, 2), device="gpu:0")
