"""ONNX autodiff rules added for real models: activations, LayerNormalization, Clip,
Where, Split, indexing and scatter operators, Einsum, reductions and a Concat of run-time sizes,
and the report of every missing gradient at once.

Each rule's gradient, computed by the training graph on the reference executor, is compared with
central finite differences of the loss in float64 (the helpers of ``test_autodiff.py``).
"""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_autodiff import _assert_onnxruntime_matches_reference, _check_fd, _float32_nodes, _net, _node, _rand

import deep500lite as d5
from deep500lite.errors import UnsupportedOperatorError
from deep500lite.lv1.autodiff import (NOT_DIFFERENTIABLE, build_training_model, differentiable_operators,
                                      operators_without_gradient)

R = np.random.default_rng(14)


def _away_from(x, points, margin=0.05):
    """``x`` with every element moved at least ``margin`` away from the kinks at ``points``."""
    x = np.array(x, copy=True)
    for p in points:
        near = np.abs(x - p) < margin
        x[near] = p + np.where(x[near] >= p, margin, -margin)
    return x


def _ln_outputs_loss():
    """LayerNormalization whose three outputs (Y, Mean, InvStdDev) all feed the loss."""
    nodes = [_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=1, epsilon=1e-2)]
    # Mean and InvStdDev are float32 (the default stash type): cast to float64 before the loss.
    nodes += [_node("Cast", ["mean"], ["mean64"], to=TensorProto.DOUBLE),
              _node("Cast", ["inv"], ["inv64"], to=TensorProto.DOUBLE)]
    for k, t in enumerate(("y", "mean64", "inv64")):
        nodes += [_node("Mul", [t, f"r{k}"], [f"w{k}"]), _node("ReduceSum", [f"w{k}"], [f"l{k}"], keepdims=0)]
    nodes.append(_node("Sum", ["l0", "l1", "l2"], ["loss"]))
    params = {"x": _rand(R, 2, 3, 4), "s": _rand(R, 3, 4), "b": _rand(R, 3, 4),
              "r0": _rand(R, 2, 3, 4), "r1": _rand(R, 2, 1, 1), "r2": _rand(R, 2, 1, 1)}
    return nodes, params


# name -> (nodes, float parameters, other constants, opset, loss_from)
CASES = {
    "layernorm_last_axis": ([_node("LayerNormalization", ["x", "s", "b"], epsilon=1e-3)],
                            {"x": _rand(R, 2, 3, 5), "s": _rand(R, 5), "b": _rand(R, 5)}, None, 17),
    "layernorm_axis1": ([_node("LayerNormalization", ["x", "s", "b"], axis=1)],
                        {"x": _rand(R, 2, 3, 4), "s": _rand(R, 3, 4), "b": _rand(R, 3, 4)}, None, 17),
    "layernorm_negative_axis_no_bias": ([_node("LayerNormalization", ["x", "s"], axis=-2)],
                                        {"x": _rand(R, 3, 2, 4), "s": _rand(R, 2, 4)}, None, 17),
    "layernorm_all_outputs": (*_ln_outputs_loss(), None, 17, "loss"),
    "erf": ([_node("Erf", ["a"])], {"a": _rand(R, 3, 4)}, None, 17),
    "gelu_none": ([_node("Gelu", ["a"])], {"a": _rand(R, 3, 4) * 2}, None, 20),
    "gelu_tanh": ([_node("Gelu", ["a"], approximate="tanh")], {"a": _rand(R, 3, 4) * 2}, None, 20),
    "clip_min_max_inputs": ([_node("Clip", ["a", "lo", "hi"])],
                            {"a": _away_from(_rand(R, 4, 5), [-0.5, 0.7]), "lo": np.array(-0.5),
                             "hi": np.array(0.7)}, None, 17),
    "clip_max_only": ([_node("Clip", ["a", "", "hi"])], {"a": _away_from(_rand(R, 4, 5), [0.3]),
                                                         "hi": np.array(0.3)}, None, 17),
    "clip_no_bounds": ([_node("Clip", ["a"])], {"a": _rand(R, 3, 2)}, None, 17),
    "hardswish": ([_node("HardSwish", ["a"])], {"a": _away_from(_rand(R, 4, 6) * 3, [-3, 3])}, None, 17),
    "hardsigmoid": ([_node("HardSigmoid", ["a"], alpha=0.3, beta=0.4)],
                    {"a": _away_from(_rand(R, 4, 6) * 3, [-0.4 / 0.3, 0.6 / 0.3])}, None, 17),
    "softplus": ([_node("Softplus", ["a"])], {"a": _rand(R, 3, 4) * 2}, None, 17),
    "mish": ([_node("Mish", ["a"])], {"a": _rand(R, 3, 4) * 2}, None, 18),
    "elu": ([_node("Elu", ["a"], alpha=0.7)], {"a": _away_from(_rand(R, 3, 4), [0])}, None, 17),
    "abs": ([_node("Abs", ["a"])], {"a": _away_from(_rand(R, 3, 4), [0])}, None, 17),
    "reciprocal": ([_node("Reciprocal", ["a"])], {"a": _rand(R, 3, 4, positive=True)}, None, 17),
    "where_broadcast": ([_node("Where", ["cond", "a", "b"])], {"a": _rand(R, 3, 4), "b": _rand(R, 4)},
                        {"cond": R.random((2, 3, 4)) > 0.5}, 17),
    "split_one_output_unused": ([_node("Split", ["a", "sizes"], ["p", "q"], axis=1), _node("Mul", ["p", "p"])],
                                {"a": _rand(R, 2, 5)}, {"sizes": np.array([2, 3], np.int64)}, 17),
    "split_both_outputs": ([_node("Split", ["a"], ["p", "q"], axis=-1), _node("Mul", ["p", "q"])],
                           {"a": _rand(R, 3, 4)}, None, 17),
    "reduce_mean_axes_input": ([_node("ReduceMean", ["a", "axes"], keepdims=0)], {"a": _rand(R, 2, 3, 4)},
                               {"axes": np.array([-1, 0], np.int64)}, 18),
    "softmax_axis0": ([_node("Softmax", ["a"], axis=0)], {"a": _rand(R, 3, 4)}, None, 17),
    "log_softmax_axis1": ([_node("LogSoftmax", ["a"], axis=1)], {"a": _rand(R, 2, 3, 4)}, None, 17),
    "gather_embedding": ([_node("Gather", ["emb", "ids"])], {"emb": _rand(R, 6, 4)},
                         {"ids": np.array([[0, 5, 2], [2, 2, 1]], np.int64)}, 17),
    "matmul_batch_broadcast": ([_node("MatMul", ["a", "b"])], {"a": _rand(R, 2, 1, 3, 4), "b": _rand(R, 1, 3, 4, 2)},
                               None, 17),
    "pow_both_inputs": ([_node("Pow", ["a", "p"])], {"a": _rand(R, 2, 3, positive=True), "p": _rand(R, 2, 1)},
                        None, 17),
    "tile": ([_node("Tile", ["a", "reps"])], {"a": _rand(R, 2, 3)}, {"reps": np.array([2, 3], np.int64)}, 17),
    "gather_elements_duplicates": ([_node("GatherElements", ["a", "idx"], axis=1)], {"a": _rand(R, 3, 4)},
                                   {"idx": np.array([[0, 0, 3, 1, 3], [2, 1, 1, 0, 2], [3, 3, 3, 0, 1]], np.int64)},
                                   17),
    "gather_nd_duplicates": ([_node("GatherND", ["a", "idx"])], {"a": _rand(R, 3, 4, 2)},
                             {"idx": np.array([[0, 1], [2, 3], [0, 1]], np.int64)}, 17),
    "gather_nd_batch_dims": ([_node("GatherND", ["a", "idx"], batch_dims=1)], {"a": _rand(R, 3, 4, 2)},
                             {"idx": np.array([[1], [3], [1]], np.int64)}, 17),
    "scatter_nd": ([_node("ScatterND", ["d", "idx", "u"])], {"d": _rand(R, 4, 3), "u": _rand(R, 2, 3)},
                   {"idx": np.array([[1], [3]], np.int64)}, 17),
    "scatter_nd_add": ([_node("ScatterND", ["d", "idx", "u"], reduction="add")],
                       {"d": _rand(R, 4, 3), "u": _rand(R, 3, 3)}, {"idx": np.array([[1], [3], [1]], np.int64)}, 17),
    "scatter_elements": ([_node("ScatterElements", ["d", "idx", "u"], axis=1)],
                         {"d": _rand(R, 3, 4), "u": _rand(R, 3, 2)},
                         {"idx": np.array([[0, 3], [2, 1], [1, 0]], np.int64)}, 17),
    "scatter_elements_add": ([_node("ScatterElements", ["d", "idx", "u"], axis=0, reduction="add")],
                             {"d": _rand(R, 3, 4), "u": _rand(R, 2, 4)},
                             {"idx": np.array([[0, 2, 2, 1], [0, 1, 2, 1]], np.int64)}, 17),
    "trilu_lower": ([_node("Trilu", ["a", "k"], upper=0)], {"a": _rand(R, 2, 4, 4)}, {"k": np.array(1, np.int64)},
                    17),
    "trilu_upper_default_k": ([_node("Trilu", ["a"])], {"a": _rand(R, 3, 5)}, None, 17),
    "max_broadcast": ([_node("Max", ["a", "b"])], {"a": _rand(R, 3, 4), "b": _rand(R, 4)}, None, 17),
    "min_three_inputs": ([_node("Min", ["a", "b", "c"])], {"a": _rand(R, 3, 4), "b": _rand(R, 3, 1), "c": _rand(R, 4)},
                         None, 17),
    "reduce_max_drop": ([_node("ReduceMax", ["a"], axes=[1], keepdims=0)], {"a": _rand(R, 2, 3, 4)}, None, 17),
    "reduce_min_axes_input": ([_node("ReduceMin", ["a", "axes"], keepdims=1)], {"a": _rand(R, 2, 3, 4)},
                              {"axes": np.array([0, 2], np.int64)}, 18),
    "global_max_pool": ([_node("GlobalMaxPool", ["x"])], {"x": _rand(R, 2, 3, 4, 4)}, None, 17),
    "prelu": ([_node("PRelu", ["a", "slope"])], {"a": _away_from(_rand(R, 2, 3, 4), [0]), "slope": _rand(R, 3, 1)},
              None, 17),
    "selu": ([_node("Selu", ["a"])], {"a": _away_from(_rand(R, 3, 4), [0])}, None, 17),
    "softsign": ([_node("Softsign", ["a"])], {"a": _away_from(_rand(R, 3, 4), [0])}, None, 17),
    "instance_norm": ([_node("InstanceNormalization", ["x", "s", "b"], epsilon=1e-3)],
                      {"x": _rand(R, 2, 3, 4, 5), "s": _rand(R, 3), "b": _rand(R, 3)}, None, 17),
    "einsum_batched_matmul": ([_node("Einsum", ["a", "b"], equation="bij,bjk->bik")],
                              {"a": _rand(R, 2, 3, 4), "b": _rand(R, 2, 4, 5)}, None, 17),
    "einsum_attention_scores": ([_node("Einsum", ["q", "k"], equation="bhid, bhjd -> bhij")],
                                {"q": _rand(R, 2, 2, 3, 4), "k": _rand(R, 2, 2, 5, 4)}, None, 17),
    "topk_values": ([_node("TopK", ["a", "k"], ["out", "idx"], axis=1)], {"a": _rand(R, 3, 5)},
                    {"k": np.array([2], np.int64)}, 17),
    "cumsum_reverse_exclusive": ([_node("CumSum", ["a", "ax"], reverse=1, exclusive=1)], {"a": _rand(R, 3, 4)},
                                 {"ax": np.array(1, np.int64)}, 17),
    "cumsum": ([_node("CumSum", ["a", "ax"])], {"a": _rand(R, 3, 4)}, {"ax": np.array(-2, np.int64)}, 17),
    "conv_transpose_stride_pad_outpad_bias": ([_node("ConvTranspose", ["x", "w", "b"], strides=[2, 2],
                                                     pads=[1, 0, 0, 1], output_padding=[1, 0])],
                                              {"x": _rand(R, 2, 3, 3, 4), "w": _rand(R, 3, 2, 3, 2), "b": _rand(R, 2)},
                                              None, 17),
    "conv_transpose_dilated": ([_node("ConvTranspose", ["x", "w"], dilations=[2, 1], strides=[1, 2])],
                               {"x": _rand(R, 1, 4, 3, 3), "w": _rand(R, 4, 3, 2, 2)}, None, 17),
    "conv_transpose_1d": ([_node("ConvTranspose", ["x", "w"], strides=[3])], {"x": _rand(R, 2, 2, 4),
                                                                              "w": _rand(R, 2, 3, 2)}, None, 17),
    "mod_fmod": ([_node("Mod", ["a", "m"], fmod=1)],  # floating-point Mod needs fmod=1
                 {"a": np.array([[2.3, -2.3, 5.3], [-0.4, 1.6, -3.6]]), "m": np.array([0.7, -0.9, 1.1])}, None, 17),
    "depth_to_space_dcr": ([_node("DepthToSpace", ["a"], blocksize=2)], {"a": _rand(R, 2, 8, 2, 3)}, None, 17),
    "depth_to_space_crd": ([_node("DepthToSpace", ["a"], blocksize=2, mode="CRD")], {"a": _rand(R, 2, 8, 2, 3)},
                           None, 17),
    "space_to_depth": ([_node("SpaceToDepth", ["a"], blocksize=2)], {"a": _rand(R, 2, 3, 4, 6)}, None, 17),
    "floor_not_differentiable": ([_node("Floor", ["a"], ["f"]), _node("Mul", ["f", "a"])],
                                 {"a": _away_from(_rand(R, 3, 4) * 3, [-4, -3, -2, -1, 0, 1, 2, 3, 4])}, None, 17),
}


# Cases whose forward pass has float32 steps even on float64 inputs: onnx.reference computes Erf
# (and so Gelu without approximation) in float32, and LayerNormalization's Mean and InvStdDev
# outputs have the stash type, float32. Rounding of ~1e-7 relative divided by the step 2 * eps
# needs eps = 1e-3 (truncation error ~eps^2 = 1e-6) and a tolerance of 1e-4.
FLOAT32_STEPS = {"erf", "gelu_none", "layernorm_all_outputs"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_new_rule_matches_finite_differences(case):
    nodes, params, consts, opset, *rest = CASES[case]
    net = _net(nodes, params, consts, opset=opset, loss_from=rest[0] if rest else "out")
    _check_fd(net, **(dict(eps=1e-3, tol=1e-4) if case in FLOAT32_STEPS else {}))


def _open_dim_net(x_shape, w, axis):
    """Concat of an input with an open dimension and the parameter ``w``; loss = sum(out * out)."""
    nodes = [_node("Concat", ["x", "w"], ["c"], axis=axis), _node("Mul", ["c", "c"], ["sq"]),
             _node("ReduceSum", ["sq"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, x_shape)],
                              [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, [])],
                              initializer=[numpy_helper.from_array(w, "w")])
    return d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


@pytest.mark.parametrize("axis", [0, -1])
def test_concat_with_run_time_sizes_matches_finite_differences(axis):
    rng = np.random.default_rng(7)
    x_shape = ["N", 3] if axis == 0 else [2, "K"]
    x = rng.standard_normal((4, 3) if axis == 0 else (2, 5))
    w = rng.standard_normal((2, 3))
    net = _open_dim_net(x_shape, w, axis)
    model = build_training_model(net, "loss")
    assert any(n.op_type == "Shape" for n in model.graph.node)  # the split sizes come from run time
    ex = d5.executor(net, "reference")
    ex.inference_and_backprop({"x": x}, "loss")
    np.testing.assert_allclose(ex.network.fetch_tensor("w_grad"), 2 * w, rtol=1e-12)
    _check_fd(net, feeds={"x": x})


def test_all_missing_gradients_reported_in_one_error():
    nodes = [helper.make_node("LRN", ["a"], ["s"], name="the_lrn", size=1),
             helper.make_node("LpPool", ["s"], ["c"], name="lp1", kernel_shape=[2, 2]),
             helper.make_node("Det", ["b"], ["t"], name="det"), _node("Add", ["c", "t"])]
    net = _net(nodes, {"a": _rand(R, 1, 2, 2, 2), "b": _rand(R, 3, 3)})
    with pytest.raises(UnsupportedOperatorError) as info:
        build_training_model(net, "loss")
    msg = str(info.value)
    for op, name in (("LRN", "the_lrn"), ("LpPool", "lp1"), ("Det", "det")):
        assert f"operator '{op}' (node '{name}')" in msg
    assert msg.rstrip().endswith("Received: op_types ['Det', 'LRN', 'LpPool']")
    assert sorted(info.value.nodes) == [("det", "Det"), ("lp1", "LpPool"), ("the_lrn", "LRN")]


def test_missing_rule_and_failing_rule_reported_together():
    # DepthToSpace in CRD mode needs static sizes; with an open batch and channel count it fails.
    nodes = [_node("Det", ["a"], ["s"]), _node("Mul", ["x", "a"], ["xa"]),
             _node("DepthToSpace", ["xa"], ["d"], blocksize=2, mode="CRD"),
             _node("ReduceSum", ["d"], ["rd"], keepdims=0), _node("Add", ["s", "rd"], ["loss"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["N", "C", 2, 2])],
                              [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, [])],
                              initializer=[numpy_helper.from_array(np.array([[0.5, 0.1], [0.2, 0.4]]), "a")])
    net = d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    with pytest.raises(UnsupportedOperatorError, match=r"operator 'Det'.*mode CRD needs the static") as info:
        build_training_model(net, "loss")
    assert sorted(t for _, t in info.value.nodes) == ["DepthToSpace", "Det"]


def test_operator_tables_are_disjoint_and_cover_the_bundled_zoo():
    from deep500lite import networks

    assert not set(differentiable_operators()) & NOT_DIFFERENTIABLE
    assert operators_without_gradient(["Gelu", "Shape", "Det", "Det"]) == ["Det"]
    for name in networks.list_models():
        small = {"shape": (3, 32, 32)}
        if name == "bert":  # token ids, and small: the defaults are BERT-base's 110M parameters
            small = dict(shape=(8,), layers=1, hidden=8, heads=2, vocab_size=16)
        net, _, _ = networks.create_model(name, 2, **small)
        ops = {n.op_type for n in net.graph.node}
        assert operators_without_gradient(ops) == [], name


def test_new_backward_graphs_pass_the_checker():
    for case in ("layernorm_all_outputs", "gelu_tanh", "clip_min_max_inputs", "split_one_output_unused"):
        nodes, params, consts, opset, *rest = CASES[case]
        net = _net(nodes, params, consts, opset=opset, loss_from=rest[0] if rest else "out")
        onnx.checker.check_model(build_training_model(net, "loss"), full_check=True)


@pytest.mark.requires("onnxruntime")
@pytest.mark.parametrize("case", sorted(CASES))
def test_new_rule_onnxruntime_agrees_with_reference_float32(case):
    # The same training graph in float32 on ONNX Runtime and on the reference executor.
    nodes, params, consts, opset, *rest = CASES[case]
    params = {k: v.astype(np.float32) for k, v in params.items()}
    _assert_onnxruntime_matches_reference(
        _net(_float32_nodes(nodes), params, consts, opset=opset, loss_from=rest[0] if rest else "out"))


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_with_run_time_axes_matches_finite_differences(op, keepdims):
    axes = np.array([2, -3], np.int64)
    # The reduced shape is unknown to shape inference; a Reshape to a constant shape gives the loss a rank.
    shape = np.array([1, 3, 1] if keepdims else [3], np.int64)
    net = _net([_node(op, ["a", "axes"], ["red"], keepdims=keepdims), _node("Reshape", ["red", "shape"])],
               {"a": _rand(R, 2, 3, 4)}, {"shape": shape}, opset=18, inputs={"axes": axes})
    assert net.graph.input[0].name == "axes"  # a graph input: known only at run time
    _check_fd(net, feeds={"axes": axes})


@pytest.mark.requires("torch")
def test_torch_exported_transformer_and_mobile_blocks_match_torch_float64():
    # A TorchScript export of a GELU TransformerEncoder and a block with grouped Conv, GroupNorm
    # (exported as InstanceNormalization), Hardswish, ConvTranspose, PixelShuffle (DepthToSpace),
    # Hardsigmoid, ReLU6 (Clip) and Mish: every parameter gradient of the reference executor's
    # training graph against torch autograd in float64. onnx.reference computes Erf in float32,
    # which bounds the agreement at ~1e-7 relative.
    import torch

    torch.manual_seed(0)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, activation="gelu", dropout=0.0)
            self.enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.conv = torch.nn.Sequential(
                torch.nn.Conv2d(4, 8, 3, groups=2), torch.nn.GroupNorm(2, 8), torch.nn.Hardswish(),
                torch.nn.ConvTranspose2d(8, 4, 2, stride=2), torch.nn.PixelShuffle(2), torch.nn.Hardsigmoid(),
                torch.nn.ReLU6(), torch.nn.Mish())

        def forward(self, x, y):
            return self.enc(x).pow(2).mean() + self.conv(y).sum() * 0.01

    model = Model().double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    y = torch.randn(2, 4, 8, 8, dtype=torch.float64)
    buf = io.BytesIO()
    torch.onnx.export(model, (x, y), buf, opset_version=17, dynamo=False, input_names=["x", "y"],
                      output_names=["loss"], do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
    net = d5.load_model(onnx.load_from_string(buf.getvalue()))
    model.zero_grad()
    loss = model(x, y)
    loss.backward()
    expected = {k: p.grad.numpy() for k, p in model.named_parameters()}
    ex = d5.executor(net, "reference")
    out = ex.inference_and_backprop({"x": x.numpy(), "y": y.numpy()}, "loss")
    np.testing.assert_allclose(out["loss"], loss.item(), rtol=1e-7)
    pairs = [(p, g) for p, g in ex.network.gradient("loss") if p in expected]
    assert len(pairs) == len(expected)
    for p, g in pairs:
        got = ex.network.fetch_tensor(g)
        assert np.linalg.norm(got - expected[p]) <= 1e-6 * np.linalg.norm(expected[p]), p
