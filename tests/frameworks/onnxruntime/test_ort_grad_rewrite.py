"""ONNX Runtime's gradient rewrites (frameworks/onnxruntime/grad_rewrite.py): the rewritten training
graph gives the reference executor's gradients on convolution networks (strides, pads, dilations,
bias or none, 1-D, grouped, ConvTranspose layers) and on a ResNet-20 step; the rewrites apply
where they should, leave alone what they do not handle, and refuse unknown names."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime")

import onnxruntime as ort  # noqa: E402

import deep500lite as d5  # noqa: E402
import deep500lite.frameworks.onnxruntime as ortfw  # noqa: E402
import deep500lite.frameworks.reference as d5ref  # noqa: E402
from deep500lite import datasets, networks  # noqa: E402
from deep500lite.errors import UserError  # noqa: E402
from deep500lite.frameworks.onnxruntime.grad_rewrite import (  # noqa: E402
    REWRITES, nchwc_block_size, rewrite_training_model)
from deep500lite.lv1.autodiff import build_training_model  # noqa: E402

BATCH = 3


def _conv_net(channels, size, second, bias=True, transpose=False, rank=2):
    """x -> Conv(3x3, pads 1) -> Relu -> ``second`` (Conv or ConvTranspose attrs) -> loss = mean(y * t)."""
    rng = np.random.default_rng(7)
    c_in, c_mid, c_out = channels
    spatial = [size] * rank
    k1 = [3] * rank
    attrs = dict(second)
    group = attrs.get("group", 1)
    k2 = attrs.pop("kernel", [3] * rank)
    inits = [numpy_helper.from_array(rng.standard_normal((c_mid, c_in, *k1)).astype(np.float32) * 0.3, "w1"),
             numpy_helper.from_array(rng.standard_normal(c_mid).astype(np.float32) * 0.1, "b1")]
    w2shape = (c_mid, c_out // group, *k2) if transpose else (c_out, c_mid // group, *k2)
    inits.append(numpy_helper.from_array(rng.standard_normal(w2shape).astype(np.float32) * 0.3, "w2"))
    second_inputs = ["h", "w2"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(c_out).astype(np.float32) * 0.1, "b2"))
        second_inputs.append("b2")
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * (2 * rank)),
             helper.make_node("Relu", ["c1"], ["h"]),
             helper.make_node("ConvTranspose" if transpose else "Conv", second_inputs, ["y"], kernel_shape=k2, **attrs),
             helper.make_node("Mul", ["y", "t"], ["yt"]),
             helper.make_node("ReduceMean", ["yt"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                 [BATCH, c_in, *spatial]),
                                                  helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    inferred = onnx.shape_inference.infer_shapes(model)
    y = next(v for v in inferred.graph.value_info if v.name == "y")
    yshape = [d.dim_value for d in y.type.tensor_type.shape.dim]
    model.graph.input[1].CopyFrom(helper.make_tensor_value_info("t", TensorProto.FLOAT, yshape))
    feeds = {"x": rng.standard_normal((BATCH, c_in, *spatial)).astype(np.float32),
             "t": rng.standard_normal(yshape).astype(np.float32)}
    return d5.load_model(model), feeds


B = nchwc_block_size()  # ONNX Runtime's NCHWc channel block on this CPU (0: none)
CASES = [  # id, channels, size, second layer, bias, transpose, rank, expected counts (dW, dX, NCHWc Conv)
    ("stride1_pad1_bias", (17, 18, 20), 8, {"pads": [1, 1, 1, 1]}, True, False, 2, (2, 1, 0)),
    ("stride2_pad1_nobias", (17, 18, 20), 9, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, False, False, 2, (2, 0, 0)),
    ("stride2_pad0_cut_rows", (16, 17, 18), 8, {"strides": [2, 2]}, True, False, 2, (2, 0, 0)),
    ("dilation2_asym_pads", (17, 18, 19), 9, {"pads": [2, 1, 0, 2], "dilations": [2, 2]}, True, False, 2, (2, 1, 0)),
    ("kernel_1x3_stride_2x1", (17, 18, 19), 7, {"kernel": [1, 3], "pads": [0, 1, 0, 1], "strides": [2, 1]}, False,
     False, 2, (2, 0, 0)),
    ("conv1d", (17, 18, 19), 10, {"pads": [1, 1]}, True, False, 1, (2, 1, 0)),
    ("grouped_left_alone", (18, 20, 22), 8, {"pads": [1, 1, 1, 1], "group": 2}, True, False, 2, (1, 0, 0)),
    ("conv_transpose_layer", (17, 18, 19), 6, {"pads": [1, 1, 1, 1], "strides": [2, 2], "output_padding": [1, 1]},
     True, True, 2, (2, 0, 0)),
    # below MIN_CHANNELS on small images (LeNet's sizes): measured slower rewritten, so left alone
    ("few_channels_left_alone", (1, 6, 16), 12, {"kernel": [5, 5]}, True, False, 2, (0, 0, 0)),
    # ...but rewritten from MIN_POSITIONS output positions (16x16, a stem's size)
    ("few_channels_large_image", (3, 6, 5), 16, {"pads": [1, 1, 1, 1]}, True, False, 2, (2, 0, 0)),
    # strided 1x1 kernels (ResNet's shortcuts): the columns are a strided Slice of x; stride 1 is left alone
    ("pointwise_stride1_left_alone", (17, 18, 19), 6, {"kernel": [1, 1]}, True, False, 2, (1, 0, 0)),
    ("pointwise_stride2_odd_size", (5, 18, 7), 7, {"kernel": [1, 1], "strides": [2, 2]}, False, False, 2,
     (1, 0, 0)),
    ("pointwise_stride_2x3_conv1d_rank", (17, 18, 19), 11, {"kernel": [1], "strides": [3]}, True, False, 1,
     (2, 0, 0)),
    ("pointwise_padded_left_alone", (17, 18, 19), 6, {"kernel": [1, 1], "pads": [1, 1, 1, 1]}, True, False, 2,
     (1, 0, 0)),
    # channels a multiple of the block: the forward Convs and the stride-1 input gradient run NCHWc
    ("nchwc_stride1_bias", (16, 16, 32), 6, {"pads": [1, 1, 1, 1]}, True, False, 2, (2, 1, 3 if B else 0)),
    ("nchwc_stride2_dilated", (16, 32, 16), 9, {"pads": [2, 2, 2, 2], "strides": [2, 2], "dilations": [2, 2]},
     False, False, 2, (2, 0, 2 if B else 0)),
]


def _params(net):
    return {k: np.array(v) for k, v in zip(net.initializers, net.fetch_tensors(net.initializers))}


def _reference_grads(net, feeds):
    ex = d5.executor(net, "reference")
    out = ex.inference_and_backprop(feeds, "loss")
    return float(np.asarray(out["loss"])), {g: np.array(net.fetch_tensor(g)) for _, g in net.gradient("loss")}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rewritten_gradients_equal_the_reference_executor(case):
    _, channels, size, second, bias, transpose, rank, (n_weight, n_input, n_nchwc) = case
    net, feeds = _conv_net(channels, size, second, bias, transpose, rank)
    model = build_training_model(net, "loss")
    fast, counts = rewrite_training_model(model)
    assert counts["weight_gradient"] == n_weight and counts["input_gradient"] == n_input
    assert counts["relu_mask"] == 1 and counts["nchwc_conv"] == n_nchwc
    ops = [n.op_type for n in fast.graph.node]
    assert ops.count("ConvTranspose") == [n.op_type for n in model.graph.node].count("ConvTranspose") - n_input
    # the rewritten graph, run by ONNX Runtime, against the reference executor (onnx.reference)
    loss, want = _reference_grads(net, feeds)
    session = ort.InferenceSession(fast.SerializeToString(), providers=["CPUExecutionProvider"])
    params = _params(net)
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(names, {**feeds, **params})))
    np.testing.assert_allclose(got["loss"], loss, rtol=1e-5)
    assert set(want) <= set(got)
    for g, value in want.items():
        np.testing.assert_allclose(got[g], value, rtol=1e-4, atol=1e-5, err_msg=g)
    # and through the executor's own training path
    ex = d5.executor(d5.load_model(net.to_onnx()), "onnxruntime")
    ex.inference_and_backprop(feeds, "loss")
    for g, value in want.items():
        np.testing.assert_allclose(ex.network.fetch_tensor(g), value, rtol=1e-4, atol=1e-5, err_msg=g)


def test_a_wrong_weight_gradient_is_caught():
    # the comparison above can fail: a one-hot kernel with one tap misplaced gives other gradients
    net, feeds = _conv_net((16, 17, 18), 6, {"pads": [1, 1, 1, 1]}, True, False, 2)
    fast, _ = rewrite_training_model(build_training_model(net, "loss"), ("weight_gradient",))
    onehot = next(t for t in fast.graph.initializer if t.name.startswith("onehot"))
    value = numpy_helper.to_array(onehot).copy()
    value[0] = np.roll(value[0], 1)
    onehot.CopyFrom(numpy_helper.from_array(value, onehot.name))
    _, want = _reference_grads(net, feeds)
    session = ort.InferenceSession(fast.SerializeToString(), providers=["CPUExecutionProvider"])
    params = _params(net)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, {**feeds, **params})))
    wrong = [g for g in want if not np.allclose(got[g], want[g], rtol=1e-4, atol=1e-5)]
    assert wrong == [next(g for g in want if g.startswith("w2"))]  # the backward pass meets the last layer first


def test_unknown_rewrite_is_refused_and_none_leaves_the_graph():
    net, _ = _conv_net((2, 3, 4), 6, {"pads": [1, 1, 1, 1]}, True, False, 2)
    model = build_training_model(net, "loss")
    allowed = r"allowed weight_gradient, input_gradient, relu_mask, nchwc_conv\. Received: \['im2col'\]"
    with pytest.raises(UserError, match=allowed):
        rewrite_training_model(model, ("weight_gradient", "im2col"))
    same, counts = rewrite_training_model(model, ())
    assert counts == {} and same.SerializeToString() == model.SerializeToString()
    assert set(REWRITES) == {"weight_gradient", "input_gradient", "relu_mask", "nchwc_conv"}


def test_dynamic_spatial_shapes_are_left_alone():
    net, feeds = _conv_net((16, 17, 18), 6, {"pads": [1, 1, 1, 1]}, True, False, 2)
    model = build_training_model(net, "loss")
    assert rewrite_training_model(model)[1]["weight_gradient"] == 2  # with its shapes
    for value in model.graph.input:  # forget the spatial sizes of the input
        if value.name == "x":
            for d in value.type.tensor_type.shape.dim[2:]:
                d.dim_param = "s"
    del model.graph.value_info[:]
    _, counts = rewrite_training_model(model)
    assert counts["weight_gradient"] == 0


def _resnet(batch):
    net, _, out = networks.create_model("resnet", batch, classes=10, shape=(3, 16, 16), depth=20, seed=0)
    net.add_operation(datasets.dataset_loss("digits")([out, "label"], "loss"))
    return net


def test_resnet20_fused_step_matches_the_reference_executor():
    rng = np.random.default_rng(1)
    feeds = {"input": rng.standard_normal((2, 3, 16, 16)).astype(np.float32), "label": rng.integers(0, 10, 2)}
    kwargs = {"learning_rate": 0.05, "momentum": 0.9}
    fused = d5.executor(_resnet(2), "onnxruntime")
    fopt = ortfw.MomentumOptimizer(fused, **kwargs)
    floss = float(np.asarray(fopt.step(feeds)["loss"]))
    # every weight gradient: 18 3x3 layers, the stem (3 channels, 16x16 = MIN_POSITIONS) and two 1x1 shortcuts
    # 16-64 channels are multiples of every NCHWc block (16, 8, 4): 18 forward + 16 input-gradient Convs
    assert fused._fused.rewrites == {"weight_gradient": 21, "input_gradient": 16, "relu_mask": 19,
                                     "nchwc_conv": 34 if B else 0}
    ref = d5.executor(_resnet(2), "reference")
    rloss = float(np.asarray(d5ref.MomentumOptimizer(ref, **kwargs).step(feeds)["loss"]))
    np.testing.assert_allclose(floss, rloss, rtol=1e-5)
    for p, g in ref.network.gradient("loss"):
        np.testing.assert_allclose(fused.network.fetch_tensor(g), ref.network.fetch_tensor(g), rtol=1e-3, atol=1e-5,
                                   err_msg=g)
        np.testing.assert_allclose(fused.network.fetch_tensor(p), ref.network.fetch_tensor(p), rtol=1e-4, atol=1e-6,
                                   err_msg=p)
