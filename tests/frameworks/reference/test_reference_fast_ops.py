"""The reference executor's numpy kernels equal onnx.reference's own implementation where that one is right.

ConvTranspose everywhere; MaxPool, AveragePool without ceil_mode and GatherElements with up to 32 indices and a
non-negative axis. Where onnx.reference is wrong (some ceil_mode shapes, MaxPool with auto_pad=SAME_LOWER, MaxPool
Indices with padding, GatherElements past 32 indices or with a negative axis), test_reference_kernels.py checks the
kernels against hand-computed values, torch and ONNX Runtime instead.

(output_shape is covered by ONNX's backend test test_convtranspose_output_shape in the conformance run;
onnx.reference itself refuses some output_shape cases.)
"""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from deep500lite.frameworks.reference.ops import AveragePool, GatherElements, MaxPool
from deep500lite.frameworks.reference.ops.conv import ConvTranspose

CASES = [
    dict(strides=[1, 1]),
    dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
    dict(strides=[2, 2], dilations=[2, 2]),
    dict(strides=[3], pads=[1, 1], output_padding=[2]),
    dict(strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(strides=[2, 2], auto_pad="SAME_LOWER"),
    dict(strides=[2, 1], pads=[0, 1, 2, 0]),
    dict(strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1]),
    dict(strides=[1, 1], dilations=[2, 2], auto_pad="VALID"),
]


@pytest.mark.parametrize("attrs", CASES, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()))
def test_conv_transpose_matches_onnx_reference(attrs):
    rng = np.random.default_rng(0)
    n_spatial = len(attrs["strides"])
    x = rng.normal(size=(2, 3) + (4,) * n_spatial).astype(np.float32)
    w = rng.normal(size=(3, 2) + (3,) * n_spatial).astype(np.float32)
    b = rng.normal(size=2).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in "xwb"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"x": x, "w": w, "b": b}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = ReferenceEvaluator(model, new_ops=[ConvTranspose]).run(None, feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


POOL_CASES = [
    dict(kernel_shape=[3, 3], strides=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[2, 3], strides=[2, 1], pads=[0, 1, 1, 0], dilations=[1, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER"),
    dict(kernel_shape=[2, 2], strides=[2, 2], auto_pad="VALID"),
    dict(kernel_shape=[3], strides=[2], pads=[1, 1]),
    dict(kernel_shape=[2, 2, 2], strides=[1, 2, 1], pads=[1, 0, 0, 0, 1, 1]),
]


@pytest.mark.parametrize("op,kernel,attrs", [
    (op, kernel, attrs) for op, kernel in [("MaxPool", MaxPool), ("AveragePool", AveragePool)] for attrs in POOL_CASES
    if not (op == "MaxPool" and attrs.get("auto_pad") == "SAME_LOWER")  # onnx.reference: one output too few
], ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()) if isinstance(a, dict) else None)
def test_pool_matches_onnx_reference(op, kernel, attrs):
    if op == "AveragePool" and "dilations" in attrs:
        attrs = {k: v for k, v in attrs.items() if k != "dilations"}
    n_spatial = len(attrs["kernel_shape"])
    x = np.random.default_rng(0).normal(size=(2, 3) + (7,) * n_spatial).astype(np.float32)
    outputs = ["y", "i"] if op == "MaxPool" else ["y"]
    extra = {"count_include_pad": 1} if op == "AveragePool" and "pads" in attrs else {}
    node = helper.make_node(op, ["x"], outputs, **attrs, **extra)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT if o == "y" else TensorProto.INT64,
                                                             None) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    got = ReferenceEvaluator(model, new_ops=[kernel]).run(None, {"x": x})
    padded = "pads" in attrs or attrs.get("auto_pad", "").startswith("SAME")
    if padded:  # onnx.reference gives MaxPool's Indices in padded coordinates (negative ones, too)
        got, want = got[:1], want[:1]
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("axis", [0, 1])  # onnx.reference fails on a negative axis
def test_gather_elements_matches_onnx_reference(axis):
    rng = np.random.default_rng(0)
    data = rng.normal(size=(4, 5)).astype(np.float32)
    indices = rng.integers(-data.shape[axis], data.shape[axis], size=(3, 5) if axis == 0 else (4, 2))
    node = helper.make_node("GatherElements", ["d", "i"], ["y"], axis=axis)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("d", TensorProto.FLOAT, None),
                                            helper.make_tensor_value_info("i", TensorProto.INT64, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    want = ReferenceEvaluator(model).run(None, {"d": data, "i": indices})[0]
    got = ReferenceEvaluator(model, new_ops=[GatherElements]).run(None, {"d": data, "i": indices})[0]
    np.testing.assert_array_equal(got, want)
