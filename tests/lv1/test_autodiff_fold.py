"""Shape arithmetic folded before differentiation (deep500lite.lv1.autodiff.fold), and AveragePool
with ceil_mode=1 where rounding up adds no partial window.

Exporters compute pads and sizes from ``Shape`` at run time (transformers' TensorFlow-style "same"
padding); with static input shapes all of it is constant, and the rules that need static sizes
must then work. Gradients are checked against central finite differences in float64.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper
from test_autodiff import _check_fd, _net, _node, _rand

from deep500lite.errors import UnsupportedOperatorError
from deep500lite.lv1.autodiff import build_training_model
from deep500lite.lv1.autodiff.fold import fold_constants

R = np.random.default_rng(7)


def _same_padding_net():
    """x [1, 2, 5, 5] padded by pads computed from Shape(x) (total (k - 1) for k=3, split low/high),
    then a 3x3 convolution with stride 2 and a weight used through a Transpose (which must stay)."""
    consts = {"two": np.array([2], np.int64), "hw": np.array([2, 3], np.int64),
              "k1": np.array([2, 2], np.int64), "zero2": np.array([0, 0], np.int64)}
    nodes = [
        _node("Shape", ["x"], ["s"]),
        _node("Gather", ["s", "hw"], ["sp"], axis=0),               # [5, 5]
        _node("Sub", ["k1", "zero2"], ["total"]),                    # [2, 2]: k - 1
        _node("Div", ["total", "two"], ["low"]),
        _node("Sub", ["total", "low"], ["high"]),
        _node("Mul", ["sp", "zero2"], ["nothing"]),                  # depends on Shape, folds to zeros
        _node("Add", ["low", "nothing"], ["low2"]),
        _node("Concat", ["zero2", "low2", "zero2", "high"], ["pads"], axis=0),
        _node("Pad", ["x", "pads"], ["xp"]),
        _node("Transpose", ["wt"], ["w"], perm=[1, 0, 2, 3]),
        _node("Conv", ["xp", "w"], ["out"], strides=[2, 2], kernel_shape=[3, 3]),
    ]
    params = {"x": _rand(R, 1, 2, 5, 5), "wt": _rand(R, 2, 3, 3, 3)}
    return _net(nodes, params, consts, opset=17)


def test_shape_arithmetic_is_folded_and_weights_are_not():
    net = _same_padding_net()
    model = net._model
    model.graph.initializer.extend(numpy_helper.from_array(np.asarray(v), k) for k, v in
                                   zip(net.initializers, net.fetch_tensors(net.initializers)))
    folded = fold_constants(model)
    ops = [n.op_type for n in folded.graph.node]
    assert "Shape" not in ops and "Concat" not in ops
    assert ops.count("Transpose") == 1 and "Pad" in ops and "Conv" in ops
    pads = next(n for n in folded.graph.node if n.output[0] == "pads")
    assert pads.op_type == "Constant"
    assert numpy_helper.to_array(pads.attribute[0].t).tolist() == [0, 0, 1, 1, 0, 0, 1, 1]
    assert [n.op_type for n in model.graph.node].count("Shape") == 1  # the input is not changed


def test_gradient_through_folded_pads_matches_finite_differences():
    _check_fd(_same_padding_net())


def test_average_pool_ceil_mode_without_partial_windows():
    # 7 = 1 + 3 * 2: ceil and floor both give 4 outputs; the rule is the ceil_mode=0 one.
    nodes = [_node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)]
    _check_fd(_net(nodes, {"x": _rand(R, 1, 2, 7, 7)}))


@pytest.mark.parametrize("attrs, shape", [
    (dict(kernel_shape=[2, 2], strides=[2, 2]), (1, 2, 5, 5)),
    (dict(kernel_shape=[3, 2], strides=[2, 3], pads=[1, 0, 1, 1], count_include_pad=1), (2, 1, 6, 7)),
    (dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 0]), (1, 1, 6, 6)),
    # EfficientNet's pooler in transformers: a kernel far larger than the 1x1 input
    (dict(kernel_shape=[8, 8], strides=[8, 8], count_include_pad=1), (2, 3, 1, 1)),
])
def test_average_pool_ceil_mode_with_partial_windows(attrs, shape):
    nodes = [_node("AveragePool", ["x"], ceil_mode=1, **attrs)]
    _check_fd(_net(nodes, {"x": _rand(R, *shape)}))


def test_average_pool_partial_windows_need_static_sizes():
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [_node("Mul", ["x", "w"], ["xw"]),
         _node("AveragePool", ["xw"], ["y"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
         _node("ReduceSum", ["y"], ["loss"], keepdims=0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [1, 1, "H", "W"])],
        [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, [])],
        initializer=[numpy_helper.from_array(np.ones((1, 1, 1, 1)), "w")])
    import deep500lite as d5

    net = d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    with pytest.raises(UnsupportedOperatorError, match="AveragePool"):
        build_training_model(net, "loss")


def test_grouped_convolution_gradient_is_one_node_per_gradient_whatever_the_groups():
    # A depthwise layer of 64 channels: the backward pass is one ConvTranspose (dx) and one grouped
    # Conv (dw), not one of each per group (MobileNetV2's training graph went from 45,249 nodes to 2,501).
    from collections import Counter

    nodes = [_node("Conv", ["x", "w"], group=64, pads=[1, 1, 1, 1], strides=[2, 2])]
    net = _net(nodes, {"x": _rand(R, 2, 64, 6, 6), "w": _rand(R, 64, 1, 3, 3)})
    counts = Counter(n.op_type for n in build_training_model(net, "loss").graph.node)
    assert counts["ConvTranspose"] == 1 and counts["Conv"] == 2, counts  # forward + weight gradient
    _check_fd(net)
