"""d5.parser (Deep500's ONNX parser module), input/output nodes as Deep500 gave them, add_operation's index."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import deep500lite as d5
from deep500lite.errors import ModelError, UserTypeError
from deep500lite.lv1.value_info import TensorDataType, ValueInfo


def _model(unused_input=False):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])
    inputs = [x]
    if unused_input:  # as older exporters listed initializers and stray inputs
        inputs += [helper.make_tensor_value_info("stray", TensorProto.FLOAT, [1]),
                   helper.make_tensor_value_info("W", TensorProto.FLOAT, [3, 2])]
    w = onnx.numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(3, 2), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g", inputs, [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_load_and_parse_model_gives_a_network_with_deep500_nodes(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(_model(unused_input=True), path)
    model = d5.parser.load_and_parse_model(str(path))
    assert isinstance(model, d5.Network)
    assert "Removed 1 superfluous nodes in graph" in capsys.readouterr().out  # 'stray'; W is read
    (node,) = model.get_input_nodes()
    assert node.name == "x" and node == "x"
    assert node.type.shape.shape == [None, 3] and node.type.type.to_numpy() is np.float32
    assert node.type.type == TensorDataType.FLOAT
    out = model.get_output_nodes()[0]
    assert out.name == "y" and out.type.shape.shape == [None, 2]
    assert model.get_inputs() == ["x"] and model.get_outputs() == ["y"]
    assert model.get_input_nodes() == model.inputs  # still usable as the list of names
    ex = d5.executor(model, "reference")
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(ex.inference({"x": x})["y"], x @ np.arange(6, dtype=np.float32).reshape(3, 2))


def test_binary_proto_and_raw_forms(tmp_path):
    proto = _model()
    assert d5.parser.load_and_parse_binary(proto.SerializeToString()).inputs == ["x"]
    assert d5.parser.parse_model(proto).outputs == ["y"]
    path = tmp_path / "copy.onnx"
    d5.parser.save_onnxdef(proto, str(path))
    raw = d5.parser.load_model_only(str(path))
    assert isinstance(raw, onnx.ModelProto) and [i.name for i in raw.graph.initializer] == ["W"]
    net = d5.parser.load_and_parse_model(str(path))
    d5.parser.save_onnxdef(net, str(tmp_path / "net.onnx"))
    assert d5.parser.load_and_parse_model(str(tmp_path / "net.onnx")).parameters == ["W"]


def test_parser_errors(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        d5.parser.load_and_parse_model(str(tmp_path / "missing.onnx"))
    with pytest.raises(UserTypeError, match="path of an .onnx file"):
        d5.parser.load_and_parse_model(_model())
    with pytest.raises(UserTypeError, match="expects an onnx.ModelProto"):
        d5.parser.parse_model(b"bytes")
    with pytest.raises(ModelError):
        d5.parser.load_and_parse_binary(b"not onnx")


def test_add_operation_returns_the_place_of_the_operation():
    net = d5.load_model(_model())
    loss = helper.make_node("ReduceSum", ["y"], ["total"], keepdims=0)
    assert net.add_operation(loss) == 1
    assert net.add_operation([helper.make_node("Neg", ["total"], ["neg"])]) == 2
    assert net.outputs == ["y", "total", "neg"]


def test_value_info_untyped_and_pickled():
    import pickle

    node = ValueInfo.from_descriptor("seq", None)
    assert node == "seq" and node.type is None
    node = ValueInfo.from_descriptor("ids", d5.TensorDescriptor(np.int64, (4,)))
    again = pickle.loads(pickle.dumps(node))
    assert again == "ids" and again.type.type.to_numpy() is np.int64 and again.type.shape.shape == [4]
    assert TensorDataType.from_numpy(np.float16) == TensorDataType.FLOAT16
    with pytest.raises(UserTypeError, match="no element type"):
        TensorDataType.from_numpy(np.dtype("datetime64[s]"))
