"""load_model and the Network API, bad input included."""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import deep500lite as d5
from deep500lite import datasets, networks


def _affine_model(weight=None):
    w = np.arange(6, dtype=np.float32).reshape(3, 2) if weight is None else weight
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "affine",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
        initializer=[numpy_helper.from_array(w, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_load_from_path_bytes_and_proto(tmp_path):
    model = _affine_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    for src in (path, str(path), path.read_bytes(), model):
        net = d5.load_model(src)
        assert net.inputs == ["x"] and net.outputs == ["y"] and net.get_params() == ["W"]
        np.testing.assert_array_equal(net.fetch_tensors(["W"])[0], numpy_helper.to_array(model.graph.initializer[0]))
    assert d5.load_model(path).source == str(path)


def test_network_and_load_model_leave_the_callers_proto_unchanged():
    model = _affine_model()
    before = model.SerializeToString()
    for make in (d5.Network, d5.load_model):
        net = make(model)
        assert model.SerializeToString() == before, make.__name__
        net.feed_tensor("W", np.ones((3, 2), np.float32))
        net.add_output("y")
        assert model.SerializeToString() == before, make.__name__
        assert len(model.graph.initializer) == 1
    # The network's graph is its own: a later change to the caller's proto does not reach it.
    net = d5.Network(model)
    model.graph.node[0].op_type = "Gemm"
    assert net.graph.node[0].op_type == "MatMul"
    roundtrip = net.to_onnx()
    model.graph.node[0].op_type = "MatMul"
    assert roundtrip.SerializeToString() == model.SerializeToString()


def test_missing_file(tmp_path):
    with pytest.raises(d5.ModelError, match=r"ONNX model '.*nope.onnx' does not exist"):
        d5.load_model(tmp_path / "nope.onnx")


def test_folder_is_not_a_model(tmp_path):
    with pytest.raises(d5.ModelError, match="is a folder, not a regular file; give a file inside it"):
        d5.load_model(tmp_path)


def test_empty_file(tmp_path):
    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    with pytest.raises(d5.ModelError, match=r"'.*empty.onnx' is empty \(0 bytes\)"):
        d5.load_model(p)


def test_not_onnx(tmp_path):
    p = tmp_path / "notes.onnx"
    p.write_text("this is a text file, not a protobuf\n" * 10)
    with pytest.raises(d5.ModelError, match=r"notes.onnx"):
        d5.load_model(p)


@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.5, 0.7, 0.9, 0.99])
def test_truncated_file(tmp_path, lenet_file, fraction):
    data = lenet_file.read_bytes()
    p = tmp_path / "cut.onnx"
    p.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(d5.ModelError, match=r"cut.onnx' (cannot be decoded|is not a valid ONNX model|holds no)"):
        d5.load_model(p)


def test_invalid_graph_is_named(tmp_path):
    model = _affine_model()
    model.graph.node[0].input[0] = "undefined_tensor"
    p = tmp_path / "bad.onnx"
    p.write_bytes(model.SerializeToString())
    with pytest.raises(d5.ModelError, match=r"bad.onnx' is not a valid ONNX model: .*undefined_tensor"):
        d5.load_model(p)


def _with_external(tmp_path, location):
    model = _affine_model()
    t = model.graph.initializer[0]
    raw = numpy_helper.to_array(t).tobytes()
    t.ClearField("float_data")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value=location)
    p = tmp_path / "model" / "ext.onnx"
    p.parent.mkdir(exist_ok=True)
    p.write_bytes(model.SerializeToString())
    return p, raw


def test_external_data_inside_folder_loads(tmp_path):
    p, raw = _with_external(tmp_path, "weights.bin")
    (p.parent / "weights.bin").write_bytes(raw)
    net = d5.load_model(p)
    np.testing.assert_array_equal(net.fetch_tensors(["W"])[0], np.arange(6, dtype=np.float32).reshape(3, 2))


@pytest.mark.parametrize("location", ["../secret.bin", "sub/../../secret.bin"])
def test_external_data_outside_folder_is_refused(tmp_path, location):
    p, raw = _with_external(tmp_path, location)
    (tmp_path / "secret.bin").write_bytes(raw)
    with pytest.raises(d5.ModelError, match=r"points outside the model's folder '.*'; refusing to read it"):
        d5.load_model(p)


def test_external_data_absolute_path_is_refused(tmp_path):
    secret = tmp_path / "secret.bin"
    p, raw = _with_external(tmp_path, str(secret))
    secret.write_bytes(raw)
    with pytest.raises(d5.ModelError, match=r"only paths relative to the model's folder are allowed"):
        d5.load_model(p)


def test_external_data_symlink_escape_is_refused(tmp_path):
    p, raw = _with_external(tmp_path, "link.bin")
    (tmp_path / "secret.bin").write_bytes(raw)
    os.symlink(tmp_path / "secret.bin", p.parent / "link.bin")
    with pytest.raises(d5.ModelError, match=r"points outside the model's folder"):
        d5.load_model(p)


def test_external_data_missing_file(tmp_path):
    p, _ = _with_external(tmp_path, "weights.bin")
    with pytest.raises(d5.ModelError, match=r"external data file 'weights.bin' for tensor 'W' is missing"):
        d5.load_model(p)


def test_wrong_type():
    with pytest.raises(TypeError, match="Received: int"):
        d5.load_model(42)


def test_feed_and_fetch_parameters():
    net = d5.load_model(_affine_model())
    new = np.ones((3, 2), np.float32)
    net.feed_tensor("W", new)
    np.testing.assert_array_equal(net.fetch_tensors(["W"])[0], new)
    with pytest.raises(d5.FeedError, match=r"expected float32\[3, 2\]. Received: float32\[2, 3\]"):
        net.feed_tensor("W", np.ones((2, 3), np.float32))
    with pytest.raises(d5.FeedError, match="unknown tensor 'V'"):
        net.feed_tensor("V", new)
    net.feed_tensor("V", new, is_param=True)
    assert "V" in net.get_params()
    with pytest.raises(KeyError, match="no tensor 'nothing'"):
        net.fetch_tensors(["nothing"])


def test_executor_owns_values_and_second_executor_gets_copy():
    net = d5.load_model(_affine_model())
    ex = d5.executor(net, "reference")
    assert ex.network is net
    net.feed_tensor("W", np.full((3, 2), 2, np.float32))
    x = np.ones((1, 3), np.float32)
    np.testing.assert_allclose(ex.inference({"x": x})["y"], [[6, 6]])
    ex2 = d5.executor(net, "reference")
    assert ex2.network is not net
    ex2.network.feed_tensor("W", np.zeros((3, 2), np.float32))
    np.testing.assert_allclose(ex.inference({"x": x})["y"], [[6, 6]])
    np.testing.assert_allclose(ex2.inference({"x": x})["y"], [[0, 0]])


def test_add_operation_adds_loss_and_label_input():
    net, input_node, output_node = networks.create_model("mlp", 4, classes=3, shape=(5,))
    loss = datasets.dataset_loss("digits")
    net.add_operation(loss([output_node, "label"], "loss"))
    assert net.inputs == ["input", "label"]
    assert "loss" in net.outputs
    ex = d5.executor(net, "reference")
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    y = np.array([0, 1, 2, 1], np.int64)
    out = ex.inference({"input": x, "label": y})
    logits = out["output"].astype(np.float64)
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    assert float(out["loss"]) == pytest.approx(-logp[np.arange(4), y].mean(), rel=1e-5)


def test_add_operation_unknown_input_is_named():
    net = d5.load_model(_affine_model())
    node = helper.make_node("Add", ["y", "bias"], ["z"])
    with pytest.raises(d5.ModelError, match=r"reads 'bias', which the network does not have"):
        net.add_operation(node)
    net.add_operation(node, inputs={"bias": d5.tensordesc(np.float32, [2])})
    assert net.inputs == ["x", "bias"] and net.outputs == ["y", "z"]


def test_add_output_and_gradient_list():
    net, _, _ = networks.create_model("lenet", 2, shape=(1, 8, 8))
    relu = next(n.output[0] for n in net.graph.node if n.op_type == "Relu")
    net.add_output(relu)
    assert relu in net.outputs
    out = d5.executor(net, "reference").inference(net.random_feeds())
    assert out[relu].shape == (2, 6, 8, 8) and (out[relu] >= 0).all()
    with pytest.raises(d5.ModelError, match="no node produces it"):
        net.add_output("not_a_tensor")
    assert net.gradient("output") == [(p, f"{p}_grad") for p in net.parameters]


def test_batchnorm_statistics_are_not_trainable():
    net, _, _ = networks.create_model("bn_cnn", 2, shape=(1, 8, 8))
    names = [p for p, _ in net.gradient("output")]
    assert "bn1.weight" in names and "bn1.running_mean" not in names and "bn1.running_var" not in names


def test_save_roundtrip(tmp_path):
    net = d5.load_model(_affine_model())
    net.feed_tensor("W", np.full((3, 2), 7, np.float32))
    net.save(tmp_path / "out.onnx")
    again = d5.load_model(tmp_path / "out.onnx")
    np.testing.assert_array_equal(again.fetch_tensors(["W"])[0], 7)
