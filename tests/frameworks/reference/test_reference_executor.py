"""The reference executor: numpy answers computed in the test, and feed checking."""

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import networks


def _relu(x):
    return np.maximum(x, 0)


def test_mlp_matches_numpy(rng):
    net, i, o = networks.create_model("mlp", None, classes=4, shape=(6,), hidden=(5,))
    W1, b1, W2, b2 = net.fetch_tensors(["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"])
    x = rng.standard_normal((3, 6)).astype(np.float32)
    expected = _relu(x @ W1.T + b1) @ W2.T + b2
    out = d5.executor(net, "reference").inference({i: x})[o]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_lenet_first_convolution_matches_numpy(rng):
    net, i, _ = networks.create_model("lenet", 2, shape=(1, 8, 8))
    net.add_output("conv1")
    W, b = net.fetch_tensors(["conv1.weight", "conv1.bias"])
    x = rng.standard_normal((2, 1, 8, 8)).astype(np.float32)
    padded = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)))
    expected = np.zeros((2, 6, 8, 8), np.float64)
    for r in range(8):
        for c in range(8):
            patch = padded[:, :, r:r + 5, c:c + 5]
            expected[:, :, r, c] = np.einsum("nchw,ochw->no", patch, W) + b
    out = d5.executor(net, "reference").inference({i: x})["conv1"]
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_feed_tensor_changes_the_result(rng):
    net, i, o = networks.create_model("mlp", 2, classes=2, shape=(3,), hidden=())
    ex = d5.executor(net, "reference")
    net.feed_tensor("fc1.weight", np.zeros((2, 3), np.float32))
    net.feed_tensor("fc1.bias", np.array([1.5, -2], np.float32))
    out = ex.inference({i: rng.standard_normal((2, 3)).astype(np.float32)})[o]
    np.testing.assert_array_equal(out, [[1.5, -2], [1.5, -2]])


@pytest.fixture
def lenet_executor():
    net, _, _ = networks.create_model("lenet", 4, shape=(1, 8, 8))
    return d5.executor(net, "reference")


def test_wrong_dtype(lenet_executor):
    with pytest.raises(d5.FeedError, match=r"Input 'input' must have dtype float32. Received: float64"):
        lenet_executor.inference({"input": np.zeros((4, 1, 8, 8))})


def test_wrong_shape(lenet_executor):
    with pytest.raises(d5.FeedError, match=r"Input 'input' must have shape \[4, 1, 8, 8\]. Received: \[4, 1, 9, 9\]"):
        lenet_executor.inference({"input": np.zeros((4, 1, 9, 9), np.float32)})


def test_missing_and_unknown_inputs(lenet_executor):
    with pytest.raises(d5.FeedError, match=r"Missing input\(s\) \['input'\]"):
        lenet_executor.inference({})
    with pytest.raises(d5.FeedError, match=r"Unknown input\(s\) \['image'\]. The network's inputs are \['input'\]"):
        lenet_executor.inference({"input": np.zeros((4, 1, 8, 8), np.float32), "image": np.zeros(1)})
    with pytest.raises(d5.FeedError, match="Feeds must be a dict"):
        lenet_executor.inference([np.zeros((4, 1, 8, 8), np.float32)])


def test_open_batch_dimension_accepts_any_batch(lenet_file, rng):
    ex = d5.executor(d5.load_model(lenet_file), "reference")
    for n in (1, 5):
        assert ex.inference({"input": rng.standard_normal((n, 1, 8, 8)).astype(np.float32)})["output"].shape == (n, 10)


def test_unsupported_operator_is_named():
    from onnx import TensorProto, helper

    node = helper.make_node("FancyOp", ["x"], ["y"], domain="com.example", name="my_fancy_node")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(d5.UnsupportedOperatorError, match=r"'com.example::FancyOp' \(node 'my_fancy_node'\)"):
        d5.executor(d5.load_model(model, check=False), "reference")


def test_inference_and_backprop_needs_a_scalar_y(lenet_executor):
    with pytest.raises(ValueError, match="scalar"):
        lenet_executor.inference_and_backprop({"input": np.zeros((4, 1, 8, 8), np.float32)}, "output")
