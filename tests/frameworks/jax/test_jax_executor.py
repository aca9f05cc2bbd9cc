"""The jax executor's inference: values against the reference executor, shape folding, compile-time
accounting, feeds, parameters, devices and errors."""

import numpy as np
import pytest

pytest.importorskip("jax", reason="needs jax")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import deep500lite as d5  # noqa: E402
from deep500lite import networks  # noqa: E402
from deep500lite.errors import (DeviceError, ExecutionError, FeedError, UnsupportedOperatorError,  # noqa: E402
                                UserKeyError)
from deep500lite.frameworks import jax as d5jax  # noqa: E402


def _model(nodes, inputs, outputs, initializers=(), opset=17, check=True):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), check=check)


def _compare(name, batch, tol, **kwargs):
    net = networks.create_model(name, batch, **kwargs)[0]
    feeds = net.random_feeds(batch, seed=1)
    expected = d5.executor(net.copy(), "reference").inference(feeds)
    ex = d5.executor(net, "jax")
    assert isinstance(ex, d5jax.JaxExecutor)
    got = ex.inference(feeds)
    assert set(got) == set(expected)
    for k in expected:
        assert got[k].dtype == expected[k].dtype and got[k].shape == expected[k].shape
        np.testing.assert_allclose(got[k], expected[k], rtol=tol, atol=tol)
    return ex, feeds


def test_lenet_inference_equals_reference():
    ex, _ = _compare("lenet", 4, 1e-5)
    assert ex.options == {"jit": True, "platform": "cpu", "matmul_precision": "highest"}


def test_mlp_and_simple_cnn_equal_reference():
    _compare("mlp", 3, 1e-5)
    _compare("simple_cnn", 2, 1e-5)


def test_small_bert_equals_reference():
    """A transformer from the builders: Gather embeddings, MatMul attention, Softmax, Erf GELU, LayerNorm."""
    _compare("bert", 2, 1e-4, vocab_size=50, hidden=16, layers=1, heads=2, max_positions=16, shape=(8,))


def _shape_chain_model():
    """y = Reshape(x, Concat(Gather(Shape(x), 0), [-1])): the target shape comes from the traced input."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Relu", ["flat"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 12])], inits)


def test_shape_chain_folds_so_reshape_compiles():
    """XLA needs Reshape's target as a constant: it is only known because Shape..Concat folded while tracing."""
    ex = d5.executor(_shape_chain_model(), "jax")
    x = np.random.default_rng(0).standard_normal((5, 3, 4)).astype(np.float32)
    y = ex.inference({"x": x})["y"]
    np.testing.assert_array_equal(y, np.maximum(x.reshape(5, 12), 0))
    # another batch size folds to another target and compiles a second executable
    x2 = x[:2]
    np.testing.assert_array_equal(ex.inference({"x": x2})["y"], np.maximum(x2.reshape(2, 12), 0))
    assert len(ex._compiled) == 2


def test_compile_seconds_counted_once_per_signature():
    ex = d5.executor(_shape_chain_model(), "jax")
    assert ex.compile_seconds == 0.0
    x = np.ones((2, 3, 4), np.float32)
    ex.inference({"x": x})
    first = ex.compile_seconds
    assert first > 0
    ex.inference({"x": x * 2})
    assert ex.compile_seconds == first
    ex.inference({"x": np.ones((3, 3, 4), np.float32)})
    assert ex.compile_seconds > first


def test_jit_false_runs_eagerly_with_same_values():
    net = networks.create_model("lenet", 2)[0]
    feeds = net.random_feeds(2, seed=3)
    jitted = d5.executor(net.copy(), "jax").inference(feeds)["output"]
    eager = d5jax.JaxExecutor(net, jit=False)
    # float32 rounding of another evaluation order: with oneDNN limited to AVX2 one logit of 0.087 moved by 2e-6,
    # so the absolute part scales with the output (1e-5 of its largest value), as it does in test_executor_inference
    np.testing.assert_allclose(eager.inference(feeds)["output"], jitted, rtol=1e-5, atol=1e-5 * np.abs(jitted).max())
    assert eager.compile_seconds == 0.0 and eager.options["jit"] is False


def _linear():
    w = np.arange(6, dtype=np.float32).reshape(2, 3) / 10
    return _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
                  [numpy_helper.from_array(w, "w")])


def test_feeds_and_parameters():
    ex = d5.executor(_linear(), "jax")
    x = np.array([[1.0, 2.0]], np.float32)
    with pytest.raises(FeedError, match="dtype float32"):
        ex.inference({"x": x.astype(np.float64)})
    with pytest.raises(FeedError, match="Missing input"):
        ex.inference({})
    with pytest.raises(FeedError, match="shape"):
        ex.inference({"x": np.ones((1, 3), np.float32)})
    assert ex.has_tensor("w") and not ex.has_tensor("nope")
    with pytest.raises(UserKeyError, match="'nope'"):
        ex.fetch_tensor("nope")
    with pytest.raises(FeedError, match=r"expected float32\[2, 3\]"):
        ex.network.feed_tensor("w", np.ones((3, 2), np.float32))
    new_w = np.full((2, 3), 0.5, np.float32)
    compiled = ex.compile_seconds
    ex.inference({"x": x})
    compiled = ex.compile_seconds
    ex.network.feed_tensor("w", new_w)
    np.testing.assert_allclose(ex.inference({"x": x})["y"], x @ new_w)
    assert ex.compile_seconds == compiled  # parameters are arguments: no recompilation
    np.testing.assert_array_equal(ex.network.fetch_tensor("w"), new_w)
    out = ex.inference({"x": x})["y"]
    out[...] = 7  # outputs are the caller's own arrays
    np.testing.assert_allclose(ex.inference({"x": x})["y"], x @ new_w)


def test_missing_gpu_is_a_device_error():
    import jax

    try:
        n = len(jax.devices("gpu"))
    except RuntimeError:
        n = 0
    with pytest.raises(DeviceError, match="jax executor cannot run on gpu"):
        d5.executor(_linear(), "jax", device=f"gpu:{n}")


def test_impossible_reshape_is_an_execution_error_naming_the_node():
    net = _model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="bad_reshape")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])],
                 [numpy_helper.from_array(np.array([4, 2], np.int64), "shape")],
                 check=False)  # load_model's checks would refuse this Reshape up front; here the run fails
    ex = d5.executor(net, "jax")
    with pytest.raises(ExecutionError, match=r"bad_reshape.*Reshape.*\[2, 3\], \[2\]") as info:
        ex.inference({"x": np.ones((2, 3), np.float32)})
    assert info.value.node == "bad_reshape" and info.value.op_type == "Reshape"


def test_shape_fed_at_run_time_becomes_a_constant_of_the_trace():
    """A Reshape target fed as an input is traced as a constant: one executable per fed value."""
    net = _model([helper.make_node("Reshape", ["x", "s"], ["y"])],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                  helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    ex = d5.executor(net, "jax")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(ex.inference({"x": x, "s": np.array([3, 2])})["y"], x.reshape(3, 2))
    first = ex.compile_seconds
    np.testing.assert_array_equal(ex.inference({"x": x + 1, "s": np.array([3, 2])})["y"], (x + 1).reshape(3, 2))
    assert ex.compile_seconds == first
    np.testing.assert_array_equal(ex.inference({"x": x, "s": np.array([6, 1])})["y"], x.reshape(6, 1))
    assert ex.compile_seconds > first


class _Double(d5.CustomPythonOp):
    """2 * x in numpy."""

    def forward(self, x):
        return 2 * x

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return 2 * grads[0]


def test_custom_operator_runs_through_a_host_callback_and_differentiates():
    net = _linear()
    desc = d5.tensordesc(np.float32, (1, 3))
    net.add_custom_operation("JaxTestDouble", ["y"], ["z"], op=_Double([desc], [desc]))
    net.add_operation(helper.make_node("ReduceSum", ["z"], ["loss"], keepdims=0))
    try:
        ex = d5.executor(net, "jax")
        x = np.array([[1.0, 2.0]], np.float32)
        w = ex.network.fetch_tensor("w")
        out = ex.inference_and_backprop({"x": x}, "loss")
        np.testing.assert_allclose(out["z"], 2 * (x @ w), rtol=1e-6)
        # d sum(2 * x @ w) / dw = 2 * x^T 1
        np.testing.assert_allclose(ex.network.fetch_tensor("w_grad"), 2 * x.T @ np.ones((1, 3), np.float32))
    finally:
        d5.unregister_op("JaxTestDouble")


def test_unsupported_operator_names_the_op():
    net = _model([helper.make_node("Det", ["x"], ["y"])],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    with pytest.raises(UnsupportedOperatorError, match="'Det'"):
        d5.executor(net, "jax")


def test_float64_and_int64_stay_exact():
    """x64 is on: a float64 graph computes in float64 and int64 values above 2**31 survive."""
    net = _model([helper.make_node("Mul", ["x", "x"], ["y"]), helper.make_node("Add", ["i", "i"], ["j"])],
                 [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2]),
                  helper.make_tensor_value_info("i", TensorProto.INT64, [1])],
                 [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2]),
                  helper.make_tensor_value_info("j", TensorProto.INT64, [1])])
    x = np.array([1 + 1e-12, 3.0])
    out = d5.executor(net, "jax").inference({"x": x, "i": np.array([2 ** 40], np.int64)})
    assert out["y"].dtype == np.float64 and out["y"][0] == x[0] * x[0]
    assert out["j"].dtype == np.int64 and out["j"][0] == 2 ** 41


def _range_from_float_initializer():
    """loss = sum(x[:, Range(Cast(start_f), 4)] * w): a float scalar initializer fixes a shape."""
    inits = [numpy_helper.from_array(np.array(1.0, np.float32), "start_f"),
             numpy_helper.from_array(np.array(4, np.int64), "limit"),
             numpy_helper.from_array(np.array(1, np.int64), "delta"),
             numpy_helper.from_array(np.array([0.5, -1.0, 2.0], np.float32), "w")]
    nodes = [helper.make_node("Cast", ["start_f"], ["start"], to=TensorProto.INT64),
             helper.make_node("Range", ["start", "limit", "delta"], ["idx"]),
             helper.make_node("Gather", ["x", "idx"], ["g"], axis=1),
             helper.make_node("Mul", ["g", "w"], ["m"]),
             helper.make_node("ReduceSum", ["m"], ["loss"], keepdims=0)]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                  [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)


def test_float_initializer_that_fixes_a_shape_becomes_a_trace_constant():
    # As in torch's dynamo exports of transformers: Range's start is Cast from a float scalar initializer.
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    net = _range_from_float_initializer()
    ex = d5.executor(net, "jax")
    out = ex.inference_and_backprop({"x": x}, "loss")
    cols = x[:, 1:4]
    np.testing.assert_allclose(out["loss"], (cols * [0.5, -1.0, 2.0]).sum(), rtol=1e-6)
    np.testing.assert_allclose(net.fetch_tensors(["w_grad"])[0], cols.sum(0), rtol=1e-6)
    np.testing.assert_array_equal(net.fetch_tensors(["start_f_grad"])[0], 0.0)
    # Feeding that initializer recompiles with the new value (columns 0..3 now: four, which w cannot take).
    net.feed_tensor("start_f", np.array(0.0, np.float32))
    with pytest.raises(ExecutionError, match="node 'm'"):
        ex.inference({"x": x})
    net.feed_tensor("start_f", np.array(1.0, np.float32))
    np.testing.assert_allclose(ex.inference({"x": x})["loss"], (cols * [0.5, -1.0, 2.0]).sum(), rtol=1e-6)


def test_fed_gather_index_out_of_range_is_an_error_not_a_clamp():
    # XLA clamps out-of-range gather indices; ONNX calls them an error, and so does every other executor.
    nodes = [helper.make_node("Gather", ["table", "ids"], ["y"], axis=0, name="embed")]
    table = numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(4, 2), "table")
    net = _model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])], [table])
    ex = d5.executor(net, "jax")
    np.testing.assert_array_equal(ex.inference({"ids": np.array([3, -1, 0])})["y"], [[6, 7], [6, 7], [0, 1]])
    with pytest.raises(ExecutionError, match=r"node 'embed' \(Gather\).*index 4 is out of range") as info:
        ex.inference({"ids": np.array([0, 4, 1])})
    assert info.value.__context__ is None



def test_compiler_options_reach_xla_and_unknown_ones_are_dropped():
    net, _, _ = networks.create_model("mlp", 2, shape=(8,))
    feeds = net.random_feeds(2)
    want = d5.executor(net.copy(), "reference").inference(feeds)
    for options, listed in (({"xla_cpu_use_fusion_emitters": True}, {"xla_cpu_use_fusion_emitters": True}),
                            ({"xla_no_such_option": 1}, None), ({}, None)):
        ex = d5.executor(net.copy(), "jax", compiler_options=options)
        got = ex.inference(feeds)
        assert ex.options.get("compiler_options") == listed, options
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
