"""The vectorized Conv, Gemm and ScatterElements kernels of the reference executor equal onnx.reference's own.

Random inputs, with strides, pads, dilations, groups, auto_pad, 1-D to 3-D; float32 results agree within float32
round-off (different summation order), float64 within float64 round-off. The LeNet training step on the reference
executor gives the same loss and parameters with and without the new kernels.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from deep500lite.frameworks.reference.ops import FAST_OPS
from deep500lite.frameworks.reference.ops.conv import Conv
from deep500lite.frameworks.reference.ops.gemm import Gemm
from deep500lite.frameworks.reference.ops.shape import ScatterElements

_TENSOR = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
           np.dtype(np.int64): TensorProto.INT64}


def _both(op_type, kernel, feeds, **attrs):
    """(onnx.reference's result, the kernel's result) of a one-node model."""
    names = list(feeds)
    node = helper.make_node(op_type, names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, _TENSOR[v.dtype], None)
                                            for k, v in feeds.items()],
                              [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = ReferenceEvaluator(model, new_ops=[kernel]).run(None, feeds)[0]
    return want, got


def _close(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    eps = np.finfo(want.dtype).eps
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=64 * eps, atol=64 * eps * scale)


CONV_CASES = [
    dict(),
    dict(pads=[2, 2, 2, 2]),
    dict(strides=[2, 2], pads=[1, 0, 2, 1]),
    dict(strides=[2, 1], dilations=[2, 3], pads=[1, 1, 1, 1]),
    dict(group=3),
    dict(group=3, strides=[2, 2], dilations=[2, 2], pads=[2, 2, 2, 2]),
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(auto_pad="SAME_LOWER", strides=[2, 2]),
    dict(auto_pad="VALID", strides=[3, 3]),
    dict(dims=1, strides=[2], pads=[1, 2], dilations=[2]),
    dict(dims=3, strides=[1, 2, 1], pads=[1, 0, 0, 0, 1, 1]),
    dict(bias=False, group=1),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("attrs", CONV_CASES, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()) or "plain")
def test_conv_matches_onnx_reference(attrs, dtype):
    attrs = dict(attrs)
    dims, bias = attrs.pop("dims", 2), attrs.pop("bias", True)
    group = attrs.get("group", 1)
    rng = np.random.default_rng(len(CONV_CASES))
    size = {1: (11,), 2: (9, 8), 3: (5, 6, 4)}[dims]
    x = rng.normal(size=(2, 3 * group) + size).astype(dtype)
    w = rng.normal(size=(2 * group, 3) + (3,) * dims).astype(dtype)
    feeds = {"x": x, "w": w}
    if bias:
        feeds["b"] = rng.normal(size=2 * group).astype(dtype)
    want, got = _both("Conv", Conv, feeds, **attrs)
    _close(got, want)


def test_conv_weight_gradient_shape_matches_onnx_reference():
    """The weight-gradient convolution of LeNet's first layer (a 28x28 kernel over the batch as channels)."""
    rng = np.random.default_rng(1)
    feeds = {"x": rng.normal(size=(1, 8, 28, 28)).astype(np.float32),
             "w": rng.normal(size=(6, 8, 28, 28)).astype(np.float32)}
    want, got = _both("Conv", Conv, feeds, pads=[2, 2, 2, 2])
    _close(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("attrs", [dict(), dict(transA=1), dict(transB=1), dict(transA=1, transB=1),
                                   dict(alpha=0.5, beta=2.0), dict(alpha=1.0, beta=0.0), dict(no_c=True),
                                   dict(scalar_c=True, transB=1)], ids=str)
def test_gemm_matches_onnx_reference(attrs, dtype):
    attrs = dict(attrs)
    no_c, scalar_c = attrs.pop("no_c", False), attrs.pop("scalar_c", False)
    rng = np.random.default_rng(2)
    a = rng.normal(size=(7, 5) if not attrs.get("transA") else (5, 7)).astype(dtype)
    b = rng.normal(size=(5, 4) if not attrs.get("transB") else (4, 5)).astype(dtype)
    feeds = {"a": a, "b": b}
    if not no_c:
        feeds["c"] = (rng.normal(size=()) if scalar_c else rng.normal(size=(4,))).astype(dtype)
    want, got = _both("Gemm", Gemm, feeds, **attrs)
    _close(got, want)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements_matches_onnx_reference(reduction, axis):
    rng = np.random.default_rng(3)
    data = rng.normal(size=(4, 5, 6))
    shape = [3, 4, 5]
    size = data.shape[axis]
    shape[axis] = 7  # more updates than the axis holds: duplicates
    # distinct indices per line for "none" (which duplicate wins is not defined by ONNX); any for reductions
    if reduction == "none":
        shape[axis] = size
        idx = np.argsort(rng.random(shape), axis=axis) - (size if axis == 1 else 0)  # negative ones on axis 1
    else:
        idx = rng.integers(-size, size, size=shape)
    feeds = {"data": data, "indices": idx.astype(np.int64), "updates": rng.normal(size=shape)}
    want, got = _both("ScatterElements", ScatterElements, feeds, axis=axis, reduction=reduction)
    _close(got, want)


def test_scatter_elements_rejects_out_of_range_indices():
    op = ScatterElements.__new__(ScatterElements)
    with pytest.raises(ValueError, match=r"indices must be in \[-3, 2\].*Received: indices from 0 to 3"):
        op._run(np.zeros(3), np.array([0, 3]), np.ones(2))


def test_lenet_training_step_equals_onnx_reference_kernels(monkeypatch):
    """Two momentum steps on the reference executor: the new kernels vs onnx.reference's (all FAST_OPS but them)."""
    from deep500lite.bench.overhead import d5_training_step
    from deep500lite.frameworks.reference import executor as executor_module
    from deep500lite.frameworks.reference.optimizers import MomentumOptimizer

    def run(ops):
        monkeypatch.setattr(executor_module, "FAST_OPS", ops)
        step, _, ex = d5_training_step("reference", "lenet", 16, np.random.default_rng(0), MomentumOptimizer)
        losses = [float(step()) for _ in range(2)]
        return losses, {k: np.array(ex.fetch_tensor(k)) for k in ex.network.initializers}

    new_losses, new_params = run(FAST_OPS)
    old_losses, old_params = run([k for k in FAST_OPS if k not in (Conv, Gemm, ScatterElements)])
    np.testing.assert_allclose(new_losses, old_losses, rtol=1e-5)
    for k in old_params:
        np.testing.assert_allclose(new_params[k], old_params[k], rtol=1e-4, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("shape, kernel", [((3, 4, 8, 8), [2, 2]), ((2, 3, 7, 9), [2, 3]), ((2, 2, 4, 6, 5), [2, 2, 2]),
                                           ((2, 3, 9, 9), [3, 3])])
def test_max_pool_tiling_windows_and_indices_match_onnx_reference(shape, kernel, storage_order):
    """Kernel equal to stride (the reshape path): values and Indices, with ties (first maximum wins)."""
    from deep500lite.frameworks.reference.ops import MaxPool

    rng = np.random.default_rng(4)
    x = rng.integers(-3, 3, size=shape).astype(np.float32)  # many ties
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=kernel, strides=kernel,
                            storage_order=storage_order)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    got = ReferenceEvaluator(model, new_ops=[MaxPool]).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[1].dtype == np.int64
