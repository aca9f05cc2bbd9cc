"""TensorFlow converters added for real models: grouped and depthwise convolutions with bias,
forward against onnx.reference and backward against torch autograd in float64; a small CNN through
GroupNormalization and Resize; gradients of the added indexing ops and of fmod against finite differences. Their
forward passes are also checked by ONNX's node tests in test_conformance_tensorflow.py."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="needs tensorflow: pip install 'deep500lite[tensorflow]'")

from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import deep500lite as d5  # noqa: E402

# (C_in, C_out, group, kernel, Conv attributes)
CONV_CASES = {
    "grouped": (4, 8, 2, (3, 3), dict(pads=[1, 1, 1, 1])),
    "grouped_strided_asymmetric_pads": (6, 9, 3, (3, 2), dict(strides=[2, 1], pads=[1, 0, 0, 1])),
    "depthwise": (4, 4, 4, (3, 3), dict(pads=[1, 1, 1, 1])),
    "depthwise_multiplier": (4, 8, 4, (3, 3), dict(pads=[1, 1, 1, 1])),
    "depthwise_strided": (5, 5, 5, (3, 3), dict(strides=[2, 2], pads=[1, 2, 0, 1])),
    "depthwise_dilated": (4, 12, 4, (3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),
    "depthwise_dilated_strided": (4, 4, 4, (3, 3), dict(dilations=[2, 1], strides=[2, 2], pads=[1, 1, 1, 1])),
    "depthwise_same_upper": (3, 6, 3, (5, 5), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    "grouped_dilated": (4, 4, 2, (3, 3), dict(dilations=[2, 2])),
    # Dilated 2-D convolutions train with oneDNN off too (TensorFlow's CPU Conv2D gradients refuse dilations
    # then), and with explicit padding, which Conv2D's gradients refuse with oneDNN on as well.
    "dilated_asymmetric_pads": (3, 5, 1, (3, 3), dict(dilations=[2, 3], pads=[1, 2, 3, 0])),
    "dilated_strided": (3, 4, 1, (3, 2), dict(dilations=[2, 2], strides=[2, 3], pads=[1, 1, 1, 1])),
    "grouped_dilated_padded_strided": (6, 4, 2, (2, 3), dict(dilations=[3, 2], strides=[1, 2], pads=[2, 0, 1, 2])),
    "dilated_same_upper": (3, 4, 1, (3, 3), dict(dilations=[2, 2], auto_pad="SAME_UPPER")),
    "depthwise_1d": (4, 8, 4, (3,), dict(pads=[1, 2], strides=[2])),
    "grouped_3d": (4, 6, 2, (2, 2, 2), dict(pads=[0, 1, 0, 1, 0, 1])),
}


def _conv_model(case, dtype=np.float32, with_loss=False):
    c_in, c_out, group, kernel, attrs = CONV_CASES[case]
    rng = np.random.default_rng(0)
    w = rng.standard_normal((c_out, c_in // group, *kernel)).astype(dtype)
    b = rng.standard_normal(c_out).astype(dtype)
    onnx_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, **attrs)]
    outputs = [helper.make_tensor_value_info("y", onnx_type, None)]
    if with_loss:  # a loss whose gradient differs per output element
        nodes += [helper.make_node("Sigmoid", ["y"], ["s"]), helper.make_node("Mul", ["s", "y"], ["p"]),
                  helper.make_node("ReduceSum", ["p"], ["loss"], keepdims=0)]
        outputs = [helper.make_tensor_value_info("loss", onnx_type, [])]
    spatial = [9] * len(kernel)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx_type, [2, c_in, *spatial])],
                              outputs, initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((2, c_in, *spatial)).astype(dtype)
    return model, x, w, b


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_grouped_conv_with_bias_matches_onnx_reference(case, dtype):
    model, x, _, _ = _conv_model(case, dtype)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = d5.executor(d5.load_model(model, check=False), "tensorflow").inference({"x": x})["y"]
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def _torch_conv_grads(case, x, w, b):
    import torch
    c_in, c_out, group, kernel, attrs = CONV_CASES[case]
    n = len(kernel)
    xt = torch.from_numpy(x.astype(np.float64))
    wt = torch.from_numpy(w.astype(np.float64)).requires_grad_()
    bt = torch.from_numpy(b.astype(np.float64)).requires_grad_()
    pads = attrs.get("pads", [0] * 2 * n)
    xt = torch.nn.functional.pad(xt, [p for i in reversed(range(n)) for p in (pads[i], pads[i + n])])
    conv = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}[n]
    y = conv(xt, wt, bt, stride=attrs.get("strides", 1), dilation=attrs.get("dilations", 1), groups=group)
    (torch.sigmoid(y) * y).sum().backward()
    return wt.grad.numpy(), bt.grad.numpy()


@pytest.mark.requires("torch")
@pytest.mark.parametrize("case", sorted(c for c in CONV_CASES if "auto_pad" not in CONV_CASES[c][4]))
def test_grouped_conv_with_bias_gradients_match_torch(case):
    model, x, w, b = _conv_model(case, with_loss=True)
    net = d5.load_model(model, check=False)
    d5.executor(net, "tensorflow").inference_and_backprop({"x": x}, "loss")
    grads = dict(zip(["w", "b"], net.fetch_tensors(["w_grad", "b_grad"])))
    expected = dict(zip(["w", "b"], _torch_conv_grads(case, x, w, b)))
    for name in ("w", "b"):
        assert grads[name].shape == expected[name].shape
        np.testing.assert_allclose(grads[name], expected[name], rtol=1e-4,
                                   atol=1e-4 * np.abs(expected[name]).max())


def _cnn_model():
    """Depthwise Conv -> GroupNormalization -> Resize (linear, half_pixel) -> grouped Conv -> loss."""
    rng = np.random.default_rng(1)
    params = {"w1": rng.standard_normal((8, 1, 3, 3)), "b1": rng.standard_normal(8),
              "gamma": rng.standard_normal(8), "beta": rng.standard_normal(8),
              "w2": rng.standard_normal((6, 4, 3, 3)), "b2": rng.standard_normal(6)}
    params = {k: v.astype(np.float32) for k, v in params.items()}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], group=4, pads=[1, 1, 1, 1]),
             helper.make_node("GroupNormalization", ["c1", "gamma", "beta"], ["g"], num_groups=2),
             helper.make_node("Resize", ["g", "", "scales"], ["r"], mode="linear"),
             helper.make_node("Conv", ["r", "w2", "b2"], ["y"], group=2, strides=[2, 2]),
             helper.make_node("Sigmoid", ["y"], ["s"]), helper.make_node("Mul", ["s", "y"], ["p"]),
             helper.make_node("ReduceSum", ["p"], ["loss"], keepdims=0)]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes.insert(0, helper.make_node("Constant", [], ["scales"], value=scales))  # a constant, not a parameter
    outputs = [helper.make_tensor_value_info("y", 1, None), helper.make_tensor_value_info("loss", 1, [])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2, 4, 6, 6])], outputs,
                              initializer=[numpy_helper.from_array(v, k) for k, v in params.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return model, rng.standard_normal((2, 4, 6, 6)).astype(np.float32), params


def test_cnn_with_added_ops_matches_onnx_reference():
    model, x, _ = _cnn_model()
    expected = ReferenceEvaluator(model).run(["y"], {"x": x})[0]
    got = d5.executor(d5.load_model(model, check=False), "tensorflow").inference({"x": x})["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


@pytest.mark.requires("torch")
def test_cnn_with_added_ops_gradients_match_torch():
    import torch
    from torch.nn import functional as F

    model, x, params = _cnn_model()
    net = d5.load_model(model, check=False)
    d5.executor(net, "tensorflow").inference_and_backprop({"x": x}, "loss")
    names = [p for p, _ in net.gradient("loss")]
    assert sorted(names) == sorted(params)
    got = dict(zip(names, net.fetch_tensors([g for _, g in net.gradient("loss")])))
    t = {k: torch.from_numpy(v.astype(np.float64)).requires_grad_() for k, v in params.items()}
    h = F.conv2d(torch.from_numpy(x.astype(np.float64)), t["w1"], t["b1"], padding=1, groups=4)
    h = F.group_norm(h, 2, t["gamma"], t["beta"], eps=1e-5)
    h = F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=False)
    y = F.conv2d(h, t["w2"], t["b2"], stride=2, groups=2)
    (torch.sigmoid(y) * y).sum().backward()
    for name in params:
        expected = t[name].grad.numpy()
        np.testing.assert_allclose(got[name], expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max(), err_msg=name)


# op -> (a node from the float64 parameter "p" [3, 4] to "o", the constant inputs it uses)
_GRAD_CASES = {
    "GatherND": (lambda: helper.make_node("GatherND", ["p", "i"], ["o"]), {"i": np.array([[0, 1], [2, -1], [0, 1]])}),
    "ScatterND": (lambda: helper.make_node("ScatterND", ["p", "i", "u"], ["o"]),
                  {"i": np.array([[1], [2]]), "u": np.full((2, 4), 0.5)}),
    "ScatterElements": (lambda: helper.make_node("ScatterElements", ["p", "i", "u"], ["o"], axis=1, reduction="mul"),
                        {"i": np.array([[0, 0], [3, 1], [2, 2]]), "u": np.full((3, 2), 1.5)}),
    "Einsum": (lambda: helper.make_node("Einsum", ["p", "p"], ["o"], equation="ij,kj"), {}),
    "TopK": (lambda: helper.make_node("TopK", ["p", "k"], ["o", "idx"], axis=0, largest=0), {"k": np.array([2])}),
    "Trilu": (lambda: helper.make_node("Trilu", ["p"], ["o"], upper=0), {}),
    # fmod: TensorFlow registers no gradient for TruncateMod; p as the dividend, then as a broadcast divisor
    "Mod_fmod_dividend": (lambda: helper.make_node("Mod", ["p", "d"], ["o"], fmod=1),
                          {"d": np.array([0.7, -0.9, 1.3, -0.45])}),
    "Mod_fmod_divisor": (lambda: helper.make_node("Mod", ["u", "p"], ["o"], fmod=1),
                         {"u": np.linspace(-9.3, 8.9, 24).reshape(2, 3, 4)}),
}


@pytest.mark.parametrize("op", sorted(_GRAD_CASES))
def test_added_op_gradients_match_finite_differences(op):
    make, consts = _GRAD_CASES[op]
    rng = np.random.default_rng(2)
    p = rng.standard_normal((3, 4))
    nodes = [helper.make_node("Constant", [], [k], value=numpy_helper.from_array(v, k)) for k, v in consts.items()]
    nodes += [make(), helper.make_node("Mul", ["o", "o"], ["sq"]), helper.make_node("ReduceSum", ["sq"], ["loss"],
                                                                                   keepdims=0)]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("loss", 11, [])],
                              initializer=[numpy_helper.from_array(p, "p")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    net = d5.load_model(model, check=False)
    ex = d5.executor(net, "tensorflow")
    ex.inference_and_backprop({}, "loss")
    (grad,) = net.fetch_tensors(["p_grad"])

    # the same graph with p as an input, evaluated by onnx.reference in float64
    as_input = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("p", 11, [3, 4])],
                                 [helper.make_tensor_value_info("loss", 11, [])])
    reference = ReferenceEvaluator(helper.make_model(as_input, opset_imports=[helper.make_opsetid("", 18)]))

    def loss_at(value):
        return float(reference.run(None, {"p": value})[0])
    eps = 1e-6
    expected = np.zeros_like(p)
    for idx in np.ndindex(*p.shape):
        hi, lo = p.copy(), p.copy()
        hi[idx] += eps
        lo[idx] -= eps
        expected[idx] = (loss_at(hi) - loss_at(lo)) / (2 * eps)
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-6)


# TensorFlow has no CPU MaxPool3D/AvgPool3D kernels for float16 and float64: the converter pools twice in 2-D
POOL3D_CASES = {
    "max_strided_padded": ("MaxPool", dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2], pads=[1, 1, 0, 0, 1, 1])),
    "max_dilated": ("MaxPool", dict(kernel_shape=[2, 2, 2], dilations=[2, 1, 2])),
    "avg_strided": ("AveragePool", dict(kernel_shape=[3, 2, 2], strides=[1, 2, 2])),
    "avg_padded_exclusive": ("AveragePool", dict(kernel_shape=[2, 2, 3], pads=[1, 0, 1, 0, 1, 1], count_include_pad=0)),
}


def _pool3d_model(case, dtype, x=None):
    op_type, attrs = POOL3D_CASES[case]
    onnx_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [helper.make_node(op_type, ["x"], ["y"], **attrs)]
    if x is None:
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx_type, [2, 3, 5, 6, 7])],
                                  [helper.make_tensor_value_info("y", onnx_type, None)])
    else:  # x a parameter, with a loss whose gradient differs per output element
        nodes += [helper.make_node("Sigmoid", ["y"], ["s"]), helper.make_node("Mul", ["s", "y"], ["p"]),
                  helper.make_node("ReduceSum", ["p"], ["loss"], keepdims=0)]
        graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("loss", onnx_type, [])],
                                  initializer=[numpy_helper.from_array(x, "x")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
@pytest.mark.parametrize("case", sorted(POOL3D_CASES))
def test_3d_pooling_without_a_tensorflow_kernel_matches_onnx_reference(case, dtype):
    x = np.random.default_rng(3).standard_normal((2, 3, 5, 6, 7)).astype(dtype)
    model = _pool3d_model(case, dtype)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = d5.executor(d5.load_model(model, check=False), "tensorflow").inference({"x": x})["y"]
    assert got.shape == expected.shape and got.dtype == expected.dtype
    tol = 1e-3 if dtype == np.float16 else 1e-12
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


@pytest.mark.requires("torch")
@pytest.mark.parametrize("case", sorted(POOL3D_CASES))
def test_3d_pooling_without_a_tensorflow_kernel_gradients_match_torch(case):
    import torch

    x = np.random.default_rng(4).standard_normal((2, 3, 5, 6, 7))
    net = d5.load_model(_pool3d_model(case, np.float64, x), check=False)
    d5.executor(net, "tensorflow").inference_and_backprop({}, "loss")
    (got,) = net.fetch_tensors(["x_grad"])
    op_type, attrs = POOL3D_CASES[case]
    xt = torch.from_numpy(x).requires_grad_()
    pads = attrs.get("pads", [0] * 6)
    fill = -np.inf if op_type == "MaxPool" else 0.0
    padded = torch.nn.functional.pad(xt, [p for i in (2, 1, 0) for p in (pads[i], pads[i + 3])], value=fill)
    if op_type == "MaxPool":
        y = torch.nn.functional.max_pool3d(padded, attrs["kernel_shape"], attrs.get("strides", 1),
                                           dilation=attrs.get("dilations", 1))
    else:  # count_include_pad=0: the mean over the window's cells inside x
        ones = torch.nn.functional.pad(torch.ones_like(xt), [p for i in (2, 1, 0) for p in (pads[i], pads[i + 3])])
        size, stride = attrs["kernel_shape"], attrs.get("strides", 1)
        y = (torch.nn.functional.avg_pool3d(padded, size, stride) /
             torch.nn.functional.avg_pool3d(ones, size, stride))
    (torch.sigmoid(y) * y).sum().backward()
    np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-10, atol=1e-12)
