"""Run-time failures name the node: every executor turns a framework error raised while running a
network into one :class:`~deep500lite.ExecutionError` naming the executor, the ONNX node, its op type
and input shapes, with the framework's message reduced to its cause; and ``test_executor_inference``
judges outputs against their own scale."""

import gc

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import deep500lite as d5
from deep500lite import registry
from deep500lite.errors import ExecutionError
from deep500lite.lv1.execution_errors import execution_error, framework_cause

X = np.ones((2, 3), np.float32)

# kind -> (failing node, op type, its input shapes as the message prints them, extra feeds)
CASES = {
    "reshape": ("bad_reshape", "Reshape", "[2, 3], [1]", {"shape": np.array([7], np.int64)}),
    "gather": ("bad_gather", "Gather", "[2, 3], [2]", {"idx": np.array([0, 5], np.int64)}),
    "matmul": ("bad_matmul", "MatMul", "[2, 3], [4, 2]", {"b": np.ones((4, 2), np.float32)}),
}


def bad_model(kind, with_loss=False):
    """A graph whose second node fails at run time; what makes it fail is fed, so no executor sees it before."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    inits = [numpy_helper.from_array(np.full((3,), 0.5, np.float32), "w")]
    nodes = [helper.make_node("Mul", ["x", "w"], ["h"], name="scale")]
    if kind == "reshape":  # six values into seven
        extra = helper.make_tensor_value_info("shape", TensorProto.INT64, [1])
        nodes.append(helper.make_node("Reshape", ["h", "shape"], ["y"], name="bad_reshape"))
        out = ["M"]
    elif kind == "gather":  # row 5 of two
        extra = helper.make_tensor_value_info("idx", TensorProto.INT64, [2])
        nodes.append(helper.make_node("Gather", ["h", "idx"], ["y"], axis=0, name="bad_gather"))
        out = ["M", 3]
    else:  # [2, 3] @ [4, 2]
        extra = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["K", "L"])
        nodes.append(helper.make_node("MatMul", ["h", "b"], ["y"], name="bad_matmul"))
        out = ["M", "L"]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)]
    if with_loss:
        nodes.append(helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0, name="sum"))
        outputs.append(helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    graph = helper.make_graph(nodes, "bad", [x, extra], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def feeds_for(kind):
    return {"x": X, **CASES[kind][3]}


def _check(error, framework, kind, training=False):
    name, op_type, shapes, _ = CASES[kind]
    text = str(error)
    assert "\n" not in text and "Traceback" not in text and "Graph execution error" not in text, text
    assert len(text) < 700, text
    where = " of the training graph" if training else ""
    if training and framework == "onnxruntime" and error.node != name:
        # ONNX Runtime may run the training graph's copy of the operator first (a node deep500lite named).
        assert error.node.startswith("__d5ad_") and error.op_type == op_type, text
        name = error.node
    assert text.startswith(f"The {framework} executor failed in node '{name}' ({op_type}){where} "
                           f"with input shapes {shapes}: "), text
    assert (error.executor, error.node, error.op_type) == (framework, name, op_type)
    assert error.input_shapes == [[int(d) for d in s.strip("[] ").split(",")] for s in shapes.split("], ")]
    assert error.cause and error.cause in text and len(error.cause) <= 400
    assert isinstance(error, d5.Deep500Error) and isinstance(error, RuntimeError)
    # Raised outside the framework's except block: no chained exception keeps its frames alive.
    assert error.__cause__ is None and error.__context__ is None


# the cases whose failure only a check of the values met at run time finds
VALUE_CHECKS = ("reshape", "gather")


def _skip_without_runtime_checks(framework, kind):
    if kind in VALUE_CHECKS and not registry.spec(framework).runtime_checks:
        pytest.skip(f"{framework} does not check the values it meets at run time (its spec: runtime_checks=False)")


@pytest.mark.parametrize("kind", list(CASES))
def test_inference_failure_names_the_node(framework, kind):
    _skip_without_runtime_checks(framework, kind)
    ex = d5.executor(bad_model(kind), framework)
    with pytest.raises(ExecutionError) as info:
        ex.inference(feeds_for(kind))
    _check(info.value, framework, kind)
    # The executor stays usable: feeds the graph accepts run.
    good = {"reshape": {"shape": np.array([6], np.int64)}, "gather": {"idx": np.array([1, 0], np.int64)},
            "matmul": {"b": np.ones((3, 2), np.float32)}}[kind]
    out = ex.inference({"x": X, **good})["y"]
    assert out.shape == {"reshape": (6,), "gather": (2, 3), "matmul": (2, 2)}[kind]
    np.testing.assert_allclose(out, np.full(out.shape, 1.5 if kind == "matmul" else 0.5, np.float32))


@pytest.mark.parametrize("kind", list(CASES))
def test_training_failure_names_the_node(framework, kind):
    _skip_without_runtime_checks(framework, kind)
    ex = d5.executor(bad_model(kind, with_loss=True), framework)
    with pytest.raises(ExecutionError) as info:
        ex.inference_and_backprop(feeds_for(kind), "loss")
    _check(info.value, framework, kind, training=True)


def test_feed_errors_stay_feed_errors(framework):
    ex = d5.executor(bad_model("gather"), framework)
    with pytest.raises(d5.FeedError):
        ex.inference({"x": np.ones((2, 4), np.float32), "idx": np.array([0, 1], np.int64)})


def test_failed_runs_leave_nothing_alive(framework):
    # The error holds no framework exception, so dropping it frees the failed run's frames.
    ex = d5.executor(bad_model("reshape"), framework)
    for _ in range(3):
        try:
            ex.inference(feeds_for("reshape"))
        except ExecutionError as exc:
            assert exc.__context__ is None and exc.__cause__ is None
    gc.collect()
    assert ex.inference({"x": X, "shape": np.array([-1], np.int64)})["y"].shape == (6,)


def test_execution_error_is_exported():
    assert d5.ExecutionError is ExecutionError and "ExecutionError" in d5.__all__


# -- the message helper ------------------------------------------------------------------------------------------------

class OpError(Exception):
    """Stands in for tf.errors.OpError: the text of its ``message`` is what TensorFlow prints."""

    def __init__(self, message):
        super().__init__(message)
        self.message = message


def test_tensorflow_graph_execution_error_is_reduced_to_its_cause():
    trace = "\n".join(f'  File "/site-packages/keras/src/layer{i}.py", line {i}, in call' for i in range(40))
    exc = OpError("Graph execution error:\n\nDetected at node Reshape defined at (most recent call last):\n"
                  f"{trace}\n\nInput to reshape is a tensor with 6 values, but the requested shape has 7\n"
                  "\t [[{{node Reshape}}]] [Op:__inference_forward_123]")
    assert framework_cause(exc) == ("OpError: Input to reshape is a tensor with 6 values, but the requested "
                                    "shape has 7")


def test_onnxruntime_status_and_source_location_are_dropped():
    exc = RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Non-zero status code returned while running "
                       "Gather node. Name:'g' Status Message: indices element out of data bounds, idx=5 must be "
                       "within the inclusive range [-2,1]")
    assert framework_cause(exc) == ("RuntimeError: indices element out of data bounds, idx=5 must be within the "
                                    "inclusive range [-2,1]")


def test_long_causes_are_cut_and_unknown_nodes_said():
    cause = framework_cause(ValueError("x" * 5000))
    assert len(cause) == 400 and cause.endswith("...")
    error = execution_error("torch", ValueError("boom"))
    assert str(error) == ("The torch executor failed while running the network; the failing node could not be "
                          "determined: ValueError: boom")
    assert error.node is None and error.op_type is None and error.input_shapes is None


# -- tolerances relative to the output's scale -------------------------------------------------------------------------

class _Fixed:
    """A stand-in executor returning fixed outputs."""

    def __init__(self, outputs):
        self.outputs = outputs

    def inference(self, feeds):
        return dict(self.outputs)


def test_all_zero_output_fails_against_a_tiny_reference():
    ref = {"y": np.linspace(1e-9, 3e-9, 8).astype(np.float32)}
    result = d5.test_executor_inference(_Fixed({"y": np.zeros(8, np.float32)}), {}, ref)
    assert not result.passed, result.summary()
    assert result.scales["y"] == pytest.approx(3e-9)
    # float32 rounding of the same values passes.
    assert d5.test_executor_inference(_Fixed({"y": ref["y"] * np.float32(1 + 1e-6)}), {}, ref).passed


def test_absolute_tolerance_scales_with_the_output():
    ref = {"y": np.array([1000.0, 1e-6], np.float32)}
    # 0.05 off on the small element is within atol * scale = 1e-4 * 1000 = 0.1; 0.2 is not.
    assert d5.test_executor_inference(_Fixed({"y": np.array([1000.0, 0.05], np.float32)}), {}, ref).passed
    result = d5.test_executor_inference(_Fixed({"y": np.array([1000.0, 0.2], np.float32)}), {}, ref)
    assert not result.passed and "FAILED" in result.summary() and "x the output's scale" in result.summary()
    # The keywords still set both parts.
    assert d5.test_executor_inference(_Fixed({"y": np.array([1000.0, 0.2], np.float32)}), {}, ref, atol=1e-3).passed
    assert not d5.test_executor_inference(_Fixed({"y": np.array([1000.05, 1e-6], np.float32)}), {}, ref,
                                          rtol=0.0, atol=1e-8).passed


def test_non_finite_values_must_match():
    ref = {"y": np.array([np.inf, 1.0, np.nan])}
    assert d5.test_executor_inference(_Fixed({"y": np.array([np.inf, 1.0, np.nan])}), {}, ref).passed
    assert not d5.test_executor_inference(_Fixed({"y": np.array([5.0, 1.0, np.nan])}), {}, ref).passed
    assert not d5.test_executor_inference(_Fixed({"y": np.array([np.inf, 1.0, 2.0])}), {}, ref).passed
    zeros = {"y": np.zeros(3)}
    assert d5.test_executor_inference(_Fixed({"y": np.zeros(3)}), {}, zeros).passed
    assert not d5.test_executor_inference(_Fixed({"y": np.full(3, 1e-6)}), {}, zeros).passed


def test_a_graph_wrong_before_running_is_reported_at_its_node(framework):
    # Shapes fully declared and the Reshape's target an initializer: TensorFlow fails while tracing,
    # the others while running; all name the node.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [7])
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="relu"),
             helper.make_node("Reshape", ["h", "s"], ["y"], name="static_reshape")]
    graph = helper.make_graph(nodes, "g", [x], [y], [numpy_helper.from_array(np.array([7], np.int64), "s")])
    # check=False: load_model's own checks refuse this Reshape up front (tests/reliability); here the run fails.
    ex = d5.executor(d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                                   check=False), framework)
    with pytest.raises(ExecutionError) as info:
        ex.inference({"x": X})
    text = str(info.value)
    assert text.startswith(f"The {framework} executor failed in node 'static_reshape' (Reshape) with input shapes "
                           "[2, 3], [1]: "), text
    assert "{{node" not in text and "Traceback" not in text
