"""The TensorFlow executor's parameter storage layouts (HWIO filters, dense weights permuted behind a
channels-last Flatten): values cross the API in the ONNX layout, and training with them equals the
torch executor and onnx.reference."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="needs tensorflow: pip install 'deep500lite[tensorflow]'")
torch = pytest.importorskip("torch", reason="needs torch: pip install 'deep500lite[torch]'")

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import deep500lite as d5  # noqa: E402
from deep500lite import networks  # noqa: E402
from deep500lite.datasets import dataset_loss  # noqa: E402
from deep500lite.errors import UserKeyError  # noqa: E402
from deep500lite.frameworks import tensorflow as d5tf  # noqa: E402
from deep500lite.frameworks import torch as d5torch  # noqa: E402
from deep500lite.frameworks.tensorflow.param_layout import AxisLayout, RowLayout  # noqa: E402


def rel_l2(got, expected):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return np.linalg.norm(got - expected) / max(np.linalg.norm(expected), 1e-30)


def _zoo(name, shape, **kwargs):
    net, _, out = networks.create_model(name, None, shape=shape, **kwargs)
    net.add_operation(dataset_loss("digits")([out, "label"], "loss"))
    return net


def _batches(k, shape, seed=0, n=8):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((n, *shape)).astype(np.float32), rng.integers(0, 10, n).astype(np.int64))
            for _ in range(k)]


def _step_graph_ops(opt):
    fn = opt._step_fn
    return [op.type for cf in fn._list_all_concrete_functions_for_serialization() for op in cf.graph.get_operations()]


def test_lenet_parameters_are_stored_hwio_and_permuted_but_cross_the_api_in_onnx_layout():
    net = _zoo("lenet", (1, 12, 12))
    initial = dict(zip(net.parameters, net.fetch_tensors(net.parameters)))
    ex = d5.executor(net, "tensorflow")
    conv = [p for p in net.parameters if initial[p].ndim == 4]
    assert conv and all(isinstance(ex._layouts[p], AxisLayout) for p in conv)
    for p in conv:
        o, i, kh, kw = initial[p].shape
        assert tuple(ex._variables[p].shape) == (kh, kw, i, o)  # HWIO in TensorFlow's memory
    assert [p for p, lay in ex._layouts.items() if isinstance(lay, RowLayout)] == ["fc1.weight"]
    for p in net.parameters:  # fetched back exactly, in the ONNX layout
        np.testing.assert_array_equal(ex.fetch_tensor(p), initial[p])
    # feed_tensor takes ONNX-layout values; inference then equals onnx.reference with them
    rng = np.random.default_rng(5)
    fed = {p: (0.1 * rng.standard_normal(initial[p].shape)).astype(np.float32) for p in ("conv2.weight", "fc1.weight")}
    for p, v in fed.items():
        ex.feed_tensor(p, v)
        np.testing.assert_array_equal(ex.fetch_tensor(p), v)
    x, label = _batches(1, (1, 12, 12))[0]
    proto = net.to_onnx()
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    inits.update(fed)
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in inits.items())
    expected = ReferenceEvaluator(proto).run(None, {"input": x, "label": label})
    got = ex.inference({"input": x, "label": label})
    for name, value in zip([o.name for o in proto.graph.output], expected):
        assert rel_l2(got[name], value) <= 1e-5, name


@pytest.mark.parametrize("model,shape,kwargs", [("lenet", (1, 12, 12), {}), ("resnet", (3, 8, 8), {"depth": 20})])
def test_momentum_steps_equal_the_torch_executor(model, shape, kwargs):
    """Losses, parameters (ONNX layout), the last gradients and BatchNorm running statistics after
    k steps equal the torch executor's from the same start (torch's and Keras's momentum rules agree
    at a constant learning rate)."""
    tf_net, torch_net = _zoo(model, shape, **kwargs), _zoo(model, shape, **kwargs)
    tf_ex, torch_ex = d5.executor(tf_net, "tensorflow"), d5.executor(torch_net, "torch")
    tf_opt = d5tf.MomentumOptimizer(tf_ex, learning_rate=0.05, momentum=0.9)
    torch_opt = d5torch.MomentumOptimizer(torch_ex, learning_rate=0.05, momentum=0.9)
    for x, label in _batches(3, shape, seed=1):
        a = tf_opt.step({"input": x, "label": label})
        b = torch_opt.step({"input": x, "label": label})
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-4)
    names = tf_net.parameters
    assert names == torch_net.parameters
    stats = [n for n in names if n.endswith(("running_mean", "running_var"))]
    assert (model == "resnet") == bool(stats)
    for n in names:  # BatchNorm running statistics included
        assert rel_l2(tf_ex.fetch_tensor(n), torch_ex.fetch_tensor(n)) <= 1e-4, n
    grads = [g for _, g in tf_net.gradient("loss")]
    for g, a, b in zip(grads, tf_net.fetch_tensors(grads), torch_net.fetch_tensors(grads)):
        assert a.shape == b.shape and rel_l2(a, b) <= 1e-3, g
    # The step's graph transposes only the channels-first input: no filter, no gradient, no activation.
    assert _step_graph_ops(tf_opt).count("Transpose") == 1


def test_keep_gradients_false_gives_the_same_steps_without_fetchable_gradients():
    shape = (1, 12, 12)
    kept, dropped = _zoo("lenet", shape), _zoo("lenet", shape)
    a = d5tf.MomentumOptimizer(d5.executor(kept, "tensorflow"), learning_rate=0.05, momentum=0.9)
    b = d5tf.MomentumOptimizer(d5.executor(dropped, "tensorflow"), learning_rate=0.05, momentum=0.9)
    b.keep_gradients = False
    for x, label in _batches(2, shape, seed=2):
        np.testing.assert_array_equal(a.step({"input": x, "label": label})["loss"],
                                      b.step({"input": x, "label": label})["loss"])
    for p in kept.parameters:
        np.testing.assert_array_equal(kept.fetch_tensor(p), dropped.fetch_tensor(p))
    assert kept.fetch_tensor("conv1.weight_grad").shape == kept.fetch_tensor("conv1.weight").shape
    with pytest.raises(UserKeyError, match="conv1.weight_grad"):
        dropped.fetch_tensor("conv1.weight_grad")


def test_gradient_modifier_sees_and_returns_onnx_layout_gradients():
    shape = (1, 12, 12)
    plain, modified = _zoo("lenet", shape), _zoo("lenet", shape)
    seen = {}

    def halve(name, param, grad):
        seen[name] = (param.shape, grad.shape)
        return grad * 0.5

    a = d5tf.GradientDescent(d5.executor(plain, "tensorflow"), learning_rate=0.05)
    b = d5tf.GradientDescent(d5.executor(modified, "tensorflow"), learning_rate=0.1, gradient_modifier=halve)
    x, label = _batches(1, shape, seed=3)[0]
    a.step({"input": x, "label": label})
    b.step({"input": x, "label": label})
    assert seen["conv1.weight"] == ((6, 1, 5, 5), (6, 1, 5, 5))
    for p in plain.parameters:
        assert rel_l2(modified.fetch_tensor(p), plain.fetch_tensor(p)) <= 1e-6, p


def _flatten_gemm_model(trans_b: bool, flatten_is_output: bool):
    """Conv -> Relu -> Flatten -> Gemm (B [K, N] or, transposed, [N, K]) -> loss-free output."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    k, n = 4 * 5 * 5, 3
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"], axis=1),
             helper.make_node("Gemm", ["f", "B"], ["y"], transB=int(trans_b)),
             helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n]),
               helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    if flatten_is_output:
        outputs.append(helper.make_tensor_value_info("f", TensorProto.FLOAT, [2, k]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2, 5, 5])],
                              outputs, [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("trans_b,flatten_is_output", [(False, False), (True, False), (False, True)])
def test_flatten_gemm_weight_permutation_matches_onnx_reference_and_torch_gradients(trans_b, flatten_is_output):
    proto = _flatten_gemm_model(trans_b, flatten_is_output)
    ex = d5.executor(d5.load_model(proto), "tensorflow")
    assert isinstance(ex._layouts.get("B"), RowLayout) != flatten_is_output  # a Flatten output stays ONNX
    x = np.random.default_rng(12).standard_normal((2, 2, 5, 5)).astype(np.float32)
    expected = dict(zip([o.name for o in proto.graph.output], ReferenceEvaluator(proto).run(None, {"x": x})))
    got = ex.inference_and_backprop({"x": x}, "loss")
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5)
    inits = {t.name: torch.tensor(numpy_helper.to_array(t), requires_grad=True) for t in proto.graph.initializer}
    r = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x), inits["w"], padding=1)).flatten(1)
    (r @ (inits["B"].T if trans_b else inits["B"])).sum().backward()
    for name in ("w", "B"):
        np.testing.assert_allclose(ex.fetch_tensor(f"{name}_grad"), inits[name].grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel,pads", [(5, [2, 2, 2, 2]), (4, [1, 1, 2, 2]), (4, [2, 2, 1, 1])])
def test_conv_explicit_pads_equal_onnx_reference_and_torch_gradients(kernel, pads):
    """Explicit pads equal to SAME's run as TensorFlow's "SAME" convolution; other pads do not."""
    rng = np.random.default_rng(13)
    w = rng.standard_normal((3, 2, kernel, kernel)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[kernel, kernel], pads=pads),
             helper.make_node("ReduceSumSquare", ["y"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2, 7, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 7, 7]),
                               helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                              [numpy_helper.from_array(w, "w")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(proto)
    x = rng.standard_normal((2, 2, 7, 7)).astype(np.float32)
    ex = d5.executor(d5.load_model(proto), "tensorflow")
    got = ex.inference_and_backprop({"x": x}, "loss")
    expected_y, expected_loss = ReferenceEvaluator(proto).run(None, {"x": x})
    np.testing.assert_allclose(got["y"], expected_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["loss"], expected_loss, rtol=1e-5)
    tw = torch.tensor(w, requires_grad=True)
    xt = torch.nn.functional.pad(torch.from_numpy(x), (pads[1], pads[3], pads[0], pads[2]))
    (torch.nn.functional.conv2d(xt, tw) ** 2).sum().backward()
    np.testing.assert_allclose(ex.fetch_tensor("w_grad"), tw.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_filter_read_by_other_nodes_too_keeps_onnx_values_and_gradients():
    """A filter also read by a weight-decay term: stored HWIO, seen OIHW by that term; its gradient
    sums both paths, as torch's does."""
    rng = np.random.default_rng(14)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3]),
             helper.make_node("ReduceSumSquare", ["y"], ["data_loss"], keepdims=0),
             helper.make_node("ReduceSum", ["w"], ["decay"], keepdims=0),
             helper.make_node("Add", ["data_loss", "decay"], ["loss"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2, 5, 5])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                              [numpy_helper.from_array(w, "w")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.standard_normal((2, 2, 5, 5)).astype(np.float32)
    ex = d5.executor(d5.load_model(proto), "tensorflow")
    assert isinstance(ex._layouts["w"], AxisLayout)
    got = ex.inference_and_backprop({"x": x}, "loss")
    tw = torch.tensor(w, requires_grad=True)
    loss = (torch.nn.functional.conv2d(torch.from_numpy(x), tw) ** 2).sum() + tw.sum()
    loss.backward()
    np.testing.assert_allclose(got["loss"], loss.item(), rtol=1e-5)
    np.testing.assert_allclose(ex.fetch_tensor("w_grad"), tw.grad.numpy(), rtol=1e-4, atol=1e-4)
