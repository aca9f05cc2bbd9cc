"""Deep500's form of test_executor_inference, and OnnxTestParser over the installed onnx package's tests."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import deep500lite as d5
from deep500lite.errors import FeedError, MissingDatasetError, UserError


def _network(dims=("N", 3)):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))
    k = helper.make_tensor_value_info("k", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    s = helper.make_tensor_value_info("s", TensorProto.INT64, None)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["k"], ["s"])],
                              "g", [x, k], [y, s])
    return d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), check=False)


def test_random_inputs_and_timing(capsys):
    ex = d5.executor(_network(), "reference")
    np.random.seed(0)
    results = d5.test_executor_inference(ex)
    printed = capsys.readouterr().out
    assert "WallclockTime on inference for output 'y'" in printed and "for output 's'" in printed
    # one WallclockTime per output, Deep500's default: 100 runs, their times averaged 10 at a time
    assert len(results) == 2 and all(len(t) == 10 and min(t) > 0 for t in results)
    x = results.inputs["x"]
    assert x.shape == (1, 3) and x.dtype == np.float32 and (0 <= x).all() and (x < 1).all()  # np.random.rand
    assert results.inputs["k"].dtype == np.int64
    np.testing.assert_array_equal(results.outputs["y"], x)
    assert results.comparison is None and results.passed is None


def test_given_inputs_and_reference_outputs(capsys):
    ex = d5.executor(_network(), "reference")
    x = np.array([[-1.0, 2.0, -3.0]], np.float32)
    k = np.array([1, 2], np.int64)
    results = d5.test_executor_inference(ex, inputs={"x": x, "k": k},
                                         reference_outputs={"y": np.maximum(x, 0)}, metrics=[d5.L2Error()])
    assert results == [0.0] and results.passed  # only 'y' has a reference to compare with
    assert "L2Error on inference for output 'y': 0.0" in capsys.readouterr().out
    wrong = d5.test_executor_inference(ex, {"x": x, "k": k}, reference_outputs={"y": x}, metrics=[d5.L2Error()])
    assert wrong[0] == pytest.approx(np.sqrt(10)) and not wrong.passed


def test_deep500_form_errors():
    ex = d5.executor(_network(), "reference")
    with pytest.raises(UserError, match="pass reference_outputs"):
        d5.test_executor_inference(ex, metrics=[d5.L2Error()])
    with pytest.raises(UserError, match="not both"):
        d5.test_executor_inference(ex, {}, {"y": 1}, reference_outputs={"y": 1})
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    shapeless = d5.load_model(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                                                  [x], [y]),
                                                opset_imports=[helper.make_opsetid("", 17)]), check=False)
    with pytest.raises(FeedError, match="declares no shape"):
        d5.test_executor_inference(d5.executor(shapeless, "reference"))


def test_deep500lite_form_unchanged():
    ex = d5.executor(_network(), "reference")
    feeds = {"x": np.ones((2, 3), np.float32), "k": np.ones(2, np.int64)}
    result = d5.test_executor_inference(ex, feeds, d5.executor(_network(), "reference"))
    assert isinstance(result, d5.ExecutorComparison) and result.passed


@pytest.fixture(scope="module")
def parser():
    return d5.OnnxTestParser()


def test_onnx_test_parser_kinds(parser):
    tests = parser.all_tests
    assert set(tests) == {"Node", "Real", "Simple", "PyTorchConverted", "PyTorchOperator"}
    assert "test_relu" in tests["Node"] and len(tests["Node"]) > 1000
    assert parser.get_test("test_no_such_test") is None


def test_node_test_is_a_file_and_its_data(parser):
    test = parser.get_test("test_relu")
    model = onnx.load(test.model)
    assert [i.name for i in model.graph.input] == ["x"]
    (data,) = test.data_sets
    np.testing.assert_array_equal(data.outputs["y"], np.maximum(data.inputs["x"], 0))
    ex = d5.executor(d5.parser.load_and_parse_model(test.model), "reference")
    assert d5.test_executor_inference(ex, inputs=data.inputs, reference_outputs=data.outputs,
                                      metrics=[d5.MaxError()]).passed


def test_shipped_test_folders_are_read_with_names(parser):
    test = parser.get_test("test_operator_maxpool")  # PyTorchOperator: tensors saved without names
    graph = onnx.load(test.model).graph
    data = test.data_sets[0]
    assert list(data.inputs) == [graph.input[0].name] and list(data.outputs) == [graph.output[0].name]
    ex = d5.executor(d5.parser.load_and_parse_model(test.model), "reference")
    assert d5.test_executor_inference(ex, inputs=data.inputs, reference_outputs=data.outputs,
                                      metrics=[d5.MaxError()]).passed


def test_real_tests_need_files_nothing_downloads(parser):
    with pytest.raises(MissingDatasetError, match="does not download"):
        parser.get_test(parser.all_tests["Real"][0])
