"""Framework operators (``deep500lite.lv1.framework_op``): one ONNX operator of a framework as a
validated operator, checked with the Level 0 forward and gradient tests."""

from __future__ import annotations

import numpy as np
import pytest

import deep500lite as d5
from deep500lite.lv0 import validation as v
from deep500lite.lv1.framework_op import framework_op
from support import framework_params


def _normal(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("framework", framework_params(["reference", "torch", "onnxruntime"]))
def test_framework_softmax_forward_and_gradient(framework):
    x = _normal((3, 6), np.float32)
    op = framework_op(framework, "Softmax", [d5.tensordesc(np.float32, [3, 6])], axis=-1)
    assert v.test_op_forward(op, [x], _softmax(x.astype(np.float64)).astype(np.float32), verbose=False).passed
    g = _normal((3, 6), np.float32, seed=3)
    res = v.test_op_gradient(op, [x], grad_inputs=g, verbose=False)
    assert res.passed, res.reason
    assert res.method == "directional+elementwise"
    y = _softmax(x.astype(np.float64))
    exact = y * (g - (g * y).sum(axis=-1, keepdims=True))
    np.testing.assert_allclose(res.numerical["input"], exact, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(res.analytic["input"], exact, rtol=1e-4, atol=1e-6)


def _conv_inputs():
    rng = np.random.default_rng(5)
    return [rng.standard_normal(s).astype(np.float32) for s in ((1, 2, 5, 5), (3, 2, 3, 3), (3,))]


@pytest.mark.parametrize("framework", framework_params(["torch", "onnxruntime"]))
def test_framework_conv_matches_the_reference_executor(framework):
    xs = _conv_inputs()
    descs = [d5.tensordesc(np.float32, a.shape) for a in xs]
    op = framework_op(framework, "Conv", descs, pads=[1, 1, 1, 1], strides=[2, 1])
    reference = framework_op("reference", "Conv", descs, pads=[1, 1, 1, 1], strides=[2, 1])
    assert op.output_descriptors[0].shape == (1, 3, 3, 5)
    assert v.test_op_forward(op, xs, reference.forward(*xs), verbose=False).passed
    res = v.test_op_gradient(op, xs, verbose=False, directions=4, exact_limit=0)
    assert res.passed, res.reason
    assert list(res.metrics) == ["X", "W", "B"]
    g = _normal((1, 3, 3, 5), np.float32, seed=4)
    mine = op.backward([g], xs, [op.forward(*xs)])
    theirs = reference.backward([g], xs, [reference.forward(*xs)])
    for a, b in zip(mine, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # the bias gradient is the sum of the output gradient over batch and space
    np.testing.assert_allclose(theirs[2], g.sum(axis=(0, 2, 3)), rtol=1e-5)


@pytest.mark.parametrize("framework", framework_params(["reference", "onnxruntime"]))
def test_framework_op_with_a_wrong_backward_fails(framework):
    xs = _conv_inputs()
    conv = framework_op(framework, "Conv", [d5.tensordesc(np.float32, a.shape) for a in xs], pads=[1, 1, 1, 1])

    class Wrong(d5.Operator):
        input_names = conv.input_names

        def forward(self, *inputs):
            return conv.forward(*inputs)

        def backward(self, grads, fwd_inputs, fwd_outputs):
            gx, gw, gb = conv.backward(grads, fwd_inputs, fwd_outputs)
            return gx, gw * np.float32(1.1), gb

        def supports_dtype(self, dtype):
            return conv.supports_dtype(dtype)

    res = v.test_op_gradient(Wrong(), xs, verbose=False, directions=4, exact_limit=0)
    assert not res.passed and "input 'W'" in res.reason
    assert res.details["X"]["passed"] and res.details["B"]["passed"]


def test_framework_op_bad_arguments():
    desc = d5.tensordesc(np.float32, [2, 3])
    with pytest.raises(ValueError, match="'NoSuchOp' is not an ONNX operator"):
        framework_op("reference", "NoSuchOp", [desc])
    with pytest.raises(d5.UserError, match="Unknown framework 'caffe'"):
        framework_op("caffe", "Relu", [desc])
    with pytest.raises(ValueError, match="Relu takes at most 1 inputs. Received: 2"):
        framework_op("reference", "Relu", [desc, desc])
    with pytest.raises(ValueError, match="Conv needs at least 2 inputs"):
        framework_op("reference", "Conv", [d5.tensordesc(np.float32, [1, 1, 3, 3])])
    op = framework_op("reference", "Relu", [desc])
    with pytest.raises(ValueError, match=r"takes inputs float32\[2x3\] .* Received: float32\[3, 2\]"):
        op.forward(np.zeros((3, 2), np.float32))


def test_level0_names_are_deprecated_aliases():
    """FrameworkOp moved to level 1; deep500lite.lv0.FrameworkOp still works and warns where it went."""
    import deep500lite.lv0 as lv0
    import deep500lite.lv1 as lv1

    for name in ("FrameworkOp", "framework_op"):
        with pytest.warns(DeprecationWarning, match=f"deep500lite.lv1.{name}"):
            assert getattr(lv0, name) is getattr(lv1, name)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        lv0.nothing  # noqa: B018
