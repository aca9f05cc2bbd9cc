"""The TensorFlow executor names the failing node in graph mode and eagerly, forward and in the training
step's backward pass (tests/lv1/test_execution_errors.py checks forward failures on every executor)."""

import itertools

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="needs tensorflow: pip install 'deep500lite[tensorflow]'")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import deep500lite as d5  # noqa: E402
from deep500lite.errors import ExecutionError  # noqa: E402
from deep500lite.frameworks.tensorflow import executor as tf_executor  # noqa: E402

_names = itertools.count()
X = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)


class DoubleWithBrokenBackward(d5.CustomPythonOp):
    """2 * x forward; a backward that fails the way a user's buggy one would."""

    def forward(self, x):
        return 2 * x

    def backward(self, grads, fwd_inputs, fwd_outputs):
        raise ValueError("this backward is broken")


@pytest.fixture(params=["graph", "eager"])
def mode(request):
    """The executor's functions as traced graphs, or run eagerly (``tf.config.run_functions_eagerly``)."""
    eager = request.param == "eager"
    tf.config.run_functions_eagerly(eager)
    yield request.param
    tf.config.run_functions_eagerly(False)


def _network():
    """scale (Mul) -> double (a custom op whose backward fails) -> sum (ReduceSum): the loss."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["h"], name="scale")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.full(3, 0.5, np.float32), "w")])
    net = d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    op_type = f"BrokenBackward{next(_names)}"
    op = DoubleWithBrokenBackward([d5.tensordesc(np.float32, (2, 3))], [d5.tensordesc(np.float32, (2, 3))])
    net.add_custom_operation(op_type, ["h"], ["d"], op=op, name="double")
    net.add_operation(helper.make_node("ReduceSum", ["d"], ["loss"], keepdims=0, name="sum"))
    return net, op_type


def test_a_failing_backward_names_its_node(mode):
    net, op_type = _network()
    try:
        ex = d5.executor(net, "tensorflow")
        np.testing.assert_allclose(ex.inference({"x": X})["h"], X * 0.5)
        with pytest.raises(ExecutionError) as info:
            ex.inference_and_backprop({"x": X}, "loss")
    finally:
        d5.unregister_op(op_type)
    error = info.value
    assert (error.node, error.op_type, error.input_shapes) == ("double", op_type, [[2, 3]]), str(error)
    assert str(error).startswith(f"The tensorflow executor failed in node 'double' ({op_type}) of the training "
                                 "graph with input shapes [2, 3]: "), str(error)
    assert "this backward is broken" in error.cause


def test_a_failing_forward_names_its_node_eagerly_too(mode):
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["h"], name="scale"),
         helper.make_node("Reshape", ["h", "shape"], ["y"], name="bad_reshape"),
         helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0, name="sum")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3]),
              helper.make_tensor_value_info("shape", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.full(3, 0.5, np.float32), "w")])
    ex = d5.executor(d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])),
                     "tensorflow")
    feeds = {"x": X, "shape": np.array([7], np.int64)}
    for run, where in ((ex.inference, ""), (lambda f: ex.inference_and_backprop(f, "loss"), " of the training graph")):
        with pytest.raises(ExecutionError) as info:
            run(feeds)
        assert (info.value.node, info.value.op_type, info.value.input_shapes) == ("bad_reshape", "Reshape",
                                                                                  [[2, 3], [1]]), str(info.value)
        assert str(info.value).startswith(f"The tensorflow executor failed in node 'bad_reshape' (Reshape){where} "
                                          "with input shapes [2, 3], [1]: "), str(info.value)


def test_tensorflows_message_names_the_node_scope_of_a_failing_kernel():
    # The scopes the executor traces each node in name the failing kernel, forward and backward.
    x = tf.Variable(np.ones((2, 3), np.float32))

    @tf.function
    def forward(shape):
        with tf.name_scope(tf_executor._node_scope(0)):
            h = x * 2.0
        with tf.name_scope(tf_executor._node_scope(12)):
            return tf.reshape(h, shape)

    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        forward(tf.constant([7]))
    assert tf_executor._scoped_node(info.value, 13) == 12
    assert tf_executor._scoped_node(info.value, 12) is None  # an index the graph does not have

    @tf.function
    def backward(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            with tf.name_scope(tf_executor._node_scope(3)):
                y = tf.numpy_function(lambda a: a, [x], tf.float32)
                y = tf.raw_ops.CheckNumerics(tensor=y, message="kept")
            with tf.name_scope(tf_executor._node_scope(4)):
                loss = tf.reduce_sum(y * np.inf)
        return tape.gradient(loss, x)

    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        backward(tf.ones((2, 2)))
    assert "gradient_tape/d5node3/" in str(info.value)
    assert tf_executor._scoped_node(info.value, 5) == 3
