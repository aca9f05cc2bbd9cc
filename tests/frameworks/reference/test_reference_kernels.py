"""The reference executor's own numpy kernels (MaxPool, AveragePool, GatherElements) and its operator table.

Pooling is checked against hand-computed values and against torch (ceil_mode shapes where
``onnx.reference`` is wrong); GatherElements against ``np.take_along_axis`` semantics written out
by hand, at sizes where ``onnx.reference`` (``np.choose``) fails.
"""

import itertools
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import deep500lite as d5
from deep500lite.errors import UserError
from deep500lite.frameworks.reference import SUPPORTED_OPS
from deep500lite.frameworks.reference.ops import FAST_OPS, GatherElements
from deep500lite.frameworks.reference.ops.pool import pool_output_shape


def _model(op, inputs, outputs, opset=19, **attrs):
    node = helper.make_node(op, [name for name, _ in inputs], [name for name, _ in outputs], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, None) for n, t in inputs],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _pool(op, x, indices=False, **attrs):
    outputs = [("y", TensorProto.FLOAT)] + ([("i", TensorProto.INT64)] if indices else [])
    model = _model(op, [("x", TensorProto.FLOAT)], outputs, **attrs)
    return ReferenceEvaluator(model, new_ops=FAST_OPS).run(None, {"x": x})


# (input size, kernel, stride, pads, expected ceil_mode output size), by the ONNX rule:
# ceil((in + pads - kernel) / stride) + 1, less one where the last window would start in the right padding.
CEIL_SHAPES = [
    (5, 2, 2, (0, 0), 3),  # last window [4, 6) starts inside the input
    (3, 2, 1, (1, 1), 4),  # onnx.reference returns 3
    (4, 3, 1, (1, 1), 4),  # onnx.reference returns 3
    (5, 2, 2, (1, 1), 3),  # ceil gives 4, but the 4th window would start at 6 = in + left pad: dropped
    (6, 3, 2, (1, 1), 4),  # 4th window starts at 6 < 7: kept
    (112, 3, 2, (0, 0), 56),
    (7, 2, 3, (1, 1), 3),
]


@pytest.mark.parametrize("size,kernel,stride,pads,expected", CEIL_SHAPES)
def test_pool_output_shape_ceil_mode(size, kernel, stride, pads, expected):
    out, begin, end = pool_output_shape([size], [kernel], [stride], [1], list(pads), ceil_mode=True)
    assert out == [expected] and begin == [pads[0]] and end == [pads[1]]
    x = np.arange(2 * 3 * size * size, dtype=np.float32).reshape(2, 3, size, size)
    attrs = dict(kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[*pads[:1]] * 2 + [*pads[1:]] * 2,
                 ceil_mode=1)
    for op in ("MaxPool", "AveragePool"):
        assert _pool(op, x, **attrs)[0].shape == (2, 3, expected, expected)


def test_pool_output_shape_auto_pad():
    assert pool_output_shape([7], [3], [2], [1], [0, 0], False, "SAME_UPPER") == ([4], [1], [1])
    assert pool_output_shape([6], [3], [2], [1], [0, 0], False, "SAME_UPPER") == ([3], [0], [1])
    assert pool_output_shape([6], [3], [2], [1], [0, 0], False, "SAME_LOWER") == ([3], [1], [0])
    assert pool_output_shape([7], [3], [2], [1], [9, 9], True, "VALID") == ([3], [0], [0])


def test_max_pool_ceil_mode_by_hand():
    x = np.array([[[1, 5, 2, 8, 3]]], dtype=np.float32)
    y, i = _pool("MaxPool", x, indices=True, kernel_shape=[2], strides=[2], ceil_mode=1)
    np.testing.assert_array_equal(y, [[[5, 8, 3]]])  # the last window holds x[4] alone
    np.testing.assert_array_equal(i, [[[1, 3, 4]]])
    y, = _pool("MaxPool", x, kernel_shape=[2], strides=[1], pads=[1, 1], ceil_mode=1)
    np.testing.assert_array_equal(y, [[[1, 5, 5, 8, 8, 3]]])


def test_average_pool_ceil_mode_by_hand():
    x = np.array([[[1, 5, 2, 8, 3]]], dtype=np.float32)
    y, = _pool("AveragePool", x, kernel_shape=[2], strides=[2], ceil_mode=1)
    np.testing.assert_allclose(y, [[[3, 5, 3]]])  # the last window averages x[4] alone
    # Explicit padding counts with count_include_pad; the position ceil_mode adds past it does not.
    y, = _pool("AveragePool", x, kernel_shape=[2], strides=[2], pads=[1, 1], ceil_mode=1, count_include_pad=1)
    np.testing.assert_allclose(y, [[[0.5, 3.5, 5.5]]])
    y, = _pool("AveragePool", x, kernel_shape=[2], strides=[2], pads=[1, 1], ceil_mode=1)
    np.testing.assert_allclose(y, [[[1, 3.5, 5.5]]])


def test_max_pool_indices_storage_order():
    x = np.array([[[[1, 9], [7, 3]]]], dtype=np.float32)
    _, i = _pool("MaxPool", x, indices=True, kernel_shape=[1, 2], strides=[1, 1])
    np.testing.assert_array_equal(i, [[[[1], [2]]]])  # row-major: x[0, 1] -> 1, x[1, 0] -> 2
    _, i = _pool("MaxPool", x, indices=True, kernel_shape=[1, 2], strides=[1, 1], storage_order=1)
    np.testing.assert_array_equal(i, [[[[2], [1]]]])  # column-major: x[0, 1] -> 2, x[1, 0] -> 1


def test_max_pool_integer_input():
    x = np.array([[[-5, -3, -9]]], dtype=np.int8)
    model = _model("MaxPool", [("x", TensorProto.INT8)], [("y", TensorProto.INT8)], kernel_shape=[2],
                   pads=[1, 1], strides=[1])
    y, = ReferenceEvaluator(model, new_ops=FAST_OPS).run(None, {"x": x})
    np.testing.assert_array_equal(y, [[[-5, -3, -3, -9]]])
    assert y.dtype == np.int8


def _pool_cases():
    for op, size, kernel, stride, pad, dilation, ceil, include in itertools.product(
            ("MaxPool", "AveragePool"), (5, 8), (2, 3), (1, 2, 3), (0, 1), (1, 2), (0, 1), (0, 1)):
        if (op == "AveragePool" and dilation > 1) or (op == "MaxPool" and include):
            continue
        yield op, size, kernel, stride, pad, dilation, ceil, include


@pytest.mark.requires("torch")
@pytest.mark.parametrize("op,size,kernel,stride,pad,dilation,ceil,include", list(_pool_cases()))
def test_pool_matches_torch(op, size, kernel, stride, pad, dilation, ceil, include):
    import torch
    f = torch.nn.functional
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, size, size + 1)).astype(np.float32)
    attrs = dict(kernel_shape=[kernel, 2], strides=[stride, 1], pads=[pad, 0, pad, 0], ceil_mode=ceil)
    xt = torch.from_numpy(x)
    if op == "MaxPool":
        y, i = _pool(op, x, indices=True, dilations=[dilation, 1], **attrs)
        want, want_i = f.max_pool2d(xt, (kernel, 2), (stride, 1), (pad, 0), (dilation, 1), ceil_mode=bool(ceil),
                                    return_indices=True)
        plane = x.shape[2] * x.shape[3]
        np.testing.assert_array_equal(i, want_i.numpy() + np.arange(6).reshape(2, 3, 1, 1) * plane)
    else:
        y, = _pool(op, x, count_include_pad=include, **attrs)
        want = f.avg_pool2d(xt, (kernel, 2), (stride, 1), (pad, 0), ceil_mode=bool(ceil),
                            count_include_pad=bool(include))
    assert y.shape == tuple(want.shape)
    np.testing.assert_allclose(y, want.numpy(), rtol=1e-6, atol=1e-6)


def _gather(data, indices, axis):
    model = _model("GatherElements", [("d", TensorProto.FLOAT), ("i", TensorProto.INT64)], [("y", TensorProto.FLOAT)],
                   axis=axis)
    return ReferenceEvaluator(model, new_ops=FAST_OPS).run(None, {"d": data, "i": indices})[0]


def test_gather_elements_by_hand():
    data = np.array([[1, 2], [3, 4]], dtype=np.float32)
    np.testing.assert_array_equal(_gather(data, np.array([[0, 0], [1, 0]]), 1), [[1, 1], [4, 3]])
    np.testing.assert_array_equal(_gather(data, np.array([[-1, 0], [0, -2]]), 0), [[3, 2], [1, 2]])
    np.testing.assert_array_equal(_gather(data, np.array([[-1], [-2]]), -1), [[2], [3]])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_10000_indices(axis):
    rng = np.random.default_rng(0)
    data = rng.normal(size=(40, 50, 30)).astype(np.float32)
    size = data.shape[axis]
    shape = list(data.shape)
    shape[axis] = 10_000 // (data.size // data.shape[axis]) + 1  # >= 10,000 index values in all
    indices = rng.integers(-size, size, size=shape)
    assert indices.size >= 10_000
    got = _gather(data, indices, axis)
    positive = np.where(indices < 0, indices + size, indices)
    want = np.empty(indices.shape, dtype=data.dtype)
    for pos in np.ndindex(*indices.shape):  # the ONNX definition, element by element
        source = list(pos)
        source[axis] = positive[pos]
        want[pos] = data[tuple(source)]
    np.testing.assert_array_equal(got, want)


def test_gather_elements_out_of_range():
    with pytest.raises(UserError, match="Received: indices from 0 to 2"):
        GatherElements.eval(np.zeros((2, 2), np.float32), np.array([[0, 2]]), axis=1)


@pytest.mark.parametrize("op", ["Gelu", "HardSwish", "HardSigmoid", "Mish", "GroupNormalization",
                                "MaxPool", "GatherElements"])
def test_supported_ops_follow_onnx_reference(op):
    assert op in SUPPORTED_OPS


def test_supported_ops_are_onnx_operators():
    assert all(onnx.defs.has(op) for op in SUPPORTED_OPS)
    assert not {"OpRun", "OpFunction"} & SUPPORTED_OPS


def test_executor_runs_gelu_hardswish_and_ceil_pool():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Gelu", ["x"], ["a"]), helper.make_node("HardSwish", ["a"], ["b"]),
             helper.make_node("MaxPool", ["b"], ["y"], kernel_shape=[2, 2], strides=[1, 1], pads=[1, 1, 1, 1],
                              ceil_mode=1)]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 20)],
                              ir_version=9)
    executor = d5.executor(d5.Network(model), framework="reference")
    feed = np.random.default_rng(0).normal(size=(1, 2, 5, 5)).astype(np.float32)
    out = executor.inference({"x": feed})["y"]
    gelu = 0.5 * feed * (1 + np.vectorize(math.erf)(feed / np.sqrt(2)))
    hswish = gelu * np.clip(gelu / 6 + 0.5, 0, 1)
    padded = np.pad(hswish, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf)
    want = np.max([padded[:, :, i:i + 6, j:j + 6] for i in (0, 1) for j in (0, 1)], axis=0)
    assert out.shape == (1, 2, 6, 6)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


ORT_POOL_CASES = [
    dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER"),  # onnx.reference: one output too few
    dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),  # onnx.reference: Indices in padded coordinates
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    dict(kernel_shape=[2, 2, 2], strides=[2, 1, 2], pads=[1, 0, 1, 0, 1, 1], ceil_mode=1),
    dict(kernel_shape=[2, 2], strides=[2, 2], pads=[0, 1, 1, 0], dilations=[2, 1], ceil_mode=1),
]


@pytest.mark.requires("onnxruntime")
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("attrs", ORT_POOL_CASES, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()))
def test_pool_matches_onnxruntime(op, attrs):
    import onnxruntime
    if op == "AveragePool":
        attrs = {**{k: v for k, v in attrs.items() if k != "dilations"}, "count_include_pad": 1}
    x = np.random.default_rng(0).normal(size=(2, 3) + (7,) * len(attrs["kernel_shape"])).astype(np.float32)
    outputs = [("y", TensorProto.FLOAT)] + ([("i", TensorProto.INT64)] if op == "MaxPool" else [])
    model = _model(op, [("x", TensorProto.FLOAT)], outputs, **attrs)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})
    got = _pool(op, x, indices=op == "MaxPool", **attrs)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
