"""ONNX Runtime's gradient rewrites keep the autodiff graph's accuracy (against the reference executor in float64).

The rewrites (frameworks/onnxruntime/grad_rewrite.py) replace the autodiff's forms of convolution
gradients and the ReLU mask by equal computations ONNX Runtime runs faster. They must not cost
precision: over convolution geometries that take each rewrite, and on the zoo's RepVGG (22
blocks; its last stage normalizes over two values at batch 2, so its gradients are
ill-conditioned), ONNX Runtime with the rewrites passes the accuracy rule of ``verify`` against
the reference executor in float64, as it does without them.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime", reason="needs onnxruntime")

import deep500lite as d5  # noqa: E402
from deep500lite.frameworks.onnxruntime.grad_rewrite import REWRITES, rewrite_training_model  # noqa: E402
from deep500lite.lv1.autodiff import build_training_model  # noqa: E402
from deep500lite.lv1.verify import GroundTruth  # noqa: E402


def _ort(rewrites):
    def make(model, spelling, device=None):
        ex = d5.executor(d5.load_model(model), "onnxruntime")
        ex.grad_rewrites = rewrites
        return ex
    return make


def _conv_model(kernel, stride, pad, size, cin, cout):
    rng = np.random.default_rng(kernel * 100 + stride * 10 + pad + size)
    w = (rng.standard_normal((cout, cin, kernel, kernel)) * 0.2).astype(np.float32)
    out = (size + 2 * pad - kernel) // stride + 1
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[kernel] * 2, strides=[stride] * 2,
                              pads=[pad] * 4),
             helper.make_node("Relu", ["y"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["z"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMean", ["z"], ["out"], keepdims=0, axes=[2, 3])]
    w2 = (rng.standard_normal((cout, cout, 3, 3)) * 0.1).astype(np.float32)
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, cin, size, size])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, cout])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w2, "w2")])
    assert out >= 1
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((2, cin, size, size)).astype(np.float32)}


# (kernel, stride, pad, size, in channels, out channels): few channels on a large image (the
# weight-gradient rewrite by positions), many channels (by channels, the input gradient, NCHWc),
# strided 1x1 kernels (the columns as a strided slice), odd sizes and pads.
GEOMETRIES = [(k, s, p, size, cin, cout) for k, s in itertools.product([1, 3, 5], [1, 2])
              for p, size, cin, cout in ((k // 2, 16, 3, 16), (k // 2, 5, 16, 32), (0, 7, 16, 16))]


@pytest.mark.parametrize("kernel, stride, pad, size, cin, cout", GEOMETRIES)
def test_rewritten_convolution_gradients_hold(kernel, stride, pad, size, cin, cout):
    model, feeds = _conv_model(kernel, stride, pad, size, cin, cout)
    truth = GroundTruth(model, feeds, train=True, loss="mse")
    for rewrites in (REWRITES, ()):
        report = truth.report("onnxruntime", _ort(rewrites), localize_failures=False)
        assert report.status == "pass", (rewrites, report.worst_gradient, report.error)
        assert report.worst_gradient[1] < 1e-4, (rewrites, report.worst_gradient)


def test_every_rewrite_is_exercised_by_the_geometries():
    applied = dict.fromkeys(REWRITES, 0)
    for geometry in GEOMETRIES:
        model, _ = _conv_model(*geometry)
        net = d5.load_model(model)
        net.add_operation(helper.make_node("ReduceSum", ["out"], ["loss"], keepdims=0))
        for name, count in rewrite_training_model(build_training_model(net, "loss"), REWRITES)[1].items():
            applied[name] += count
    # nchwc_conv needs ONNX Runtime's blocked kernels (AVX2 or AVX-512 CPUs); the others always apply
    assert all(applied[name] > 0 for name in ("weight_gradient", "input_gradient", "relu_mask")), applied


@pytest.mark.requires("torch")
def test_repvgg_gradients_hold_with_and_without_the_rewrites():
    from deep500lite.frameworks.torch.zoo import build

    model = build("repvgg", "torchscript", fold_constants=False)
    truth = GroundTruth(model.proto, model.feeds, train=True, loss="cross_entropy")
    assert truth.floor_gradients > 1e-3  # ill-conditioned: BatchNorm over two values in the last stage
    errors = {}
    for rewrites in (REWRITES, ()):
        report = truth.report("onnxruntime", _ort(rewrites), localize_failures=False)
        assert report.status == "pass", (rewrites, report.worst_gradient, truth.floor_gradients)
        errors[rewrites] = report.worst_gradient[1]
    # the rewrites change the order of summation, not the precision
    assert errors[REWRITES] < 3 * max(errors[()], truth.floor_gradients), errors
    onnx.checker.check_model(model.proto)
