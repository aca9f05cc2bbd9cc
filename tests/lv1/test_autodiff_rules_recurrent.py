"""ONNX autodiff rules for recurrent and resampling models: LSTM, GRU, RNN, Resize, GroupNormalization,
trigonometric and other elementwise operators, and the smooth reductions.

Each rule's gradient, computed by the training graph on the reference executor, is compared with
central finite differences of the loss in float64 (the helpers of ``test_autodiff.py``); ONNX
Runtime runs the same graphs in float32 and must agree with the reference executor. LSTM, GRU
and RNN are also checked on ``torch.onnx.export``-ed models against torch autograd in float64.
"""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
from test_autodiff import _assert_onnxruntime_matches_reference, _check_fd, _float32_nodes, _net, _node, _rand

import deep500lite as d5
from deep500lite.errors import UnsupportedOperatorError
from deep500lite.lv1.autodiff import NOT_DIFFERENTIABLE, build_training_model, operators_without_gradient

R = np.random.default_rng(142)
T, N, I, H = 3, 2, 4, 3  # sequence length, batch, input size, hidden size
SKIP = ("R", "r0", "r1", "r2", "scales")  # the loss's fixed random weights, Resize's scales: not checked


def _recurrent(op, used, dirs=1, bias=True, h0=False, c0=False, **attrs):
    """``op`` on X [T, N, I]; loss = sum of every used output (0: Y, 1: Y_h, 2: Y_c) times a random tensor."""
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    params = {"x": _rand(R, T, N, I), "w": _rand(R, dirs, gates * H, I) * 0.6,
              "r": _rand(R, dirs, gates * H, H) * 0.6}
    ins = ["x", "w", "r", "", "", "", ""]
    if bias:
        params["b"], ins[3] = _rand(R, dirs, 2 * gates * H) * 0.5, "b"
    if h0:
        params["h0"], ins[5] = _rand(R, dirs, N, H) * 0.5, "h0"
    if c0:
        params["c0"], ins[6] = _rand(R, dirs, N, H) * 0.5, "c0"
    while ins and not ins[-1]:
        ins.pop()
    outs = ["y", "yh", "yc"][:3 if op == "LSTM" else 2]
    shapes = {"y": (T, dirs, N, H), "yh": (dirs, N, H), "yc": (dirs, N, H)}
    if dirs == 2:
        attrs["direction"] = "bidirectional"
    nodes = [_node(op, ins, outs, hidden_size=H, **attrs)]
    terms = []
    for k in used:
        o = outs[k]
        params[f"r{k}"] = _rand(R, *shapes[o])
        nodes += [_node("Mul", [o, f"r{k}"], [f"m{k}"]), _node("ReduceSum", [f"m{k}"], [f"l{k}"], keepdims=0)]
        terms.append(f"l{k}")
    nodes.append(_node("Sum", terms, ["loss"]))
    return nodes, params, None, 17, "loss"


def _resize(shape, mode, ctm, scales=None, sizes=None, **attrs):
    consts = {"scales": np.array(scales, np.float32)} if scales is not None else {"sizes": np.array(sizes, np.int64)}
    ins = ["x", "", "scales"] if scales is not None else ["x", "", "", "sizes"]
    return ([_node("Resize", ins, mode=mode, coordinate_transformation_mode=ctm, **attrs)],
            {"x": _rand(R, *shape)}, consts, 18)


def _unary(op, x, **attrs):
    return [_node(op, ["a"], **attrs)], {"a": x}, None, 17


def _reduce(op, x, axes, keepdims):
    return [_node(op, ["a", "axes"], keepdims=keepdims)], {"a": x}, {"axes": np.array(axes, np.int64)}, 18


# name -> (nodes, float parameters, other constants, opset[, loss_from])
CASES = {
    "lstm_all_outputs_initial_states": _recurrent("LSTM", (0, 1, 2), h0=True, c0=True),
    "lstm_bidirectional_y": _recurrent("LSTM", (0,), dirs=2),
    "lstm_reverse_yc_only": _recurrent("LSTM", (2,), direction="reverse", h0=True),
    "gru_linear_before_reset": _recurrent("GRU", (0, 1), h0=True, linear_before_reset=1),
    "gru_reset_before_linear": _recurrent("GRU", (0, 1), h0=True),
    "gru_bidirectional_no_bias": _recurrent("GRU", (1,), dirs=2, bias=False, linear_before_reset=1),
    "rnn_y_h": _recurrent("RNN", (0, 1), h0=True),
    "rnn_bidirectional_no_bias": _recurrent("RNN", (0,), dirs=2, bias=False),
    "resize_nearest_asymmetric_up": _resize((1, 2, 3, 4), "nearest", "asymmetric", scales=[1, 1, 2, 2],
                                            nearest_mode="floor"),
    "resize_nearest_half_pixel_down": _resize((2, 1, 5, 6), "nearest", "half_pixel", scales=[1, 1, 0.6, 0.5],
                                              nearest_mode="round_prefer_ceil"),
    "resize_nearest_default_sizes": _resize((1, 2, 3, 3), "nearest", "half_pixel", sizes=[1, 2, 7, 5]),
    "resize_linear_half_pixel_up": _resize((1, 2, 3, 4), "linear", "half_pixel", scales=[1, 1, 2, 1.5]),
    "resize_linear_align_corners_sizes": _resize((2, 1, 4, 3), "linear", "align_corners", sizes=[2, 1, 7, 5]),
    "resize_linear_pytorch_half_pixel": _resize((1, 1, 4, 5), "linear", "pytorch_half_pixel",
                                                sizes=[1, 1, 1, 8]),
    "resize_linear_asymmetric_down": _resize((1, 2, 6, 5), "linear", "asymmetric", scales=[1, 1, 0.5, 0.7]),
    # cubic, antialias and the other coordinate modes: the matrix comes from onnx.reference.
    "resize_cubic_half_pixel_up": _resize((1, 2, 3, 4), "cubic", "half_pixel", scales=[1, 1, 2, 1.5]),
    "resize_cubic_sizes_exclude_outside": _resize((1, 1, 5, 4), "cubic", "align_corners", sizes=[1, 1, 3, 7],
                                                  exclude_outside=1, cubic_coeff_a=-0.5),
    "resize_linear_antialias_down": _resize((1, 2, 6, 8), "linear", "half_pixel", scales=[1, 1, 0.5, 0.5],
                                            antialias=1),
    "resize_linear_half_pixel_symmetric": _resize((1, 1, 4, 5), "linear", "half_pixel_symmetric",
                                                  scales=[1, 1, 1.5, 0.6]),
    "group_norm_opset18_per_group": ([_node("GroupNormalization", ["x", "s", "b"], num_groups=2, epsilon=1e-3)],
                                     {"x": _rand(R, 2, 4, 3, 3), "s": _rand(R, 2), "b": _rand(R, 2)}, None, 18),
    "group_norm_opset21_per_channel": ([_node("GroupNormalization", ["x", "s", "b"], num_groups=3,
                                              stash_type=onnx.TensorProto.DOUBLE)],
                                       {"x": _rand(R, 2, 6, 5), "s": _rand(R, 6), "b": _rand(R, 6)}, None, 21),
    "sin": _unary("Sin", _rand(R, 3, 4) * 2),
    "cos": _unary("Cos", _rand(R, 3, 4) * 2),
    "tan": _unary("Tan", _rand(R, 3, 4) * 0.6),
    "asin": _unary("Asin", np.tanh(_rand(R, 3, 4)) * 0.9),
    "acos": _unary("Acos", np.tanh(_rand(R, 3, 4)) * 0.9),
    "atan": _unary("Atan", _rand(R, 3, 4) * 2),
    "sinh": _unary("Sinh", _rand(R, 3, 4)),
    "cosh": _unary("Cosh", _rand(R, 3, 4)),
    "asinh": _unary("Asinh", _rand(R, 3, 4) * 2),
    "acosh": _unary("Acosh", _rand(R, 3, 4, positive=True) + 1.0),
    "atanh": _unary("Atanh", np.tanh(_rand(R, 3, 4)) * 0.9),
    "thresholded_relu": _unary("ThresholdedRelu", np.where(np.abs(_rand(R, 3, 4)) < 0.1, 0.5, _rand(R, 3, 4)) + 0.3,
                               alpha=0.3),
    "celu": _unary("Celu", _rand(R, 3, 4) * 2, alpha=0.7),
    "mean_broadcast": ([_node("Mean", ["a", "b", "c"])], {"a": _rand(R, 3, 4), "b": _rand(R, 4), "c": _rand(R, 3, 1)},
                       None, 17),
    "reduce_sum_square": _reduce("ReduceSumSquare", _rand(R, 2, 3, 4), [1], 0),
    "reduce_l1": _reduce("ReduceL1", _rand(R, 2, 3, 4) + np.sign(_rand(R, 2, 3, 4)) * 0.1, [0, 2], 1),
    "reduce_l2": _reduce("ReduceL2", _rand(R, 2, 3, 4), [-1], 0),
    "reduce_log_sum": _reduce("ReduceLogSum", _rand(R, 2, 3, 4, positive=True), [1, 2], 1),
    "reduce_log_sum_exp": _reduce("ReduceLogSumExp", _rand(R, 2, 3, 4), [2], 0),
    "reduce_prod": _reduce("ReduceProd", _rand(R, 2, 3, 4, positive=True), [1], 1),
    "lp_normalization_p2": _unary("LpNormalization", _rand(R, 3, 4), axis=1),
    # onnx.reference's p=1 norm sums x, not |x|: the input is positive, where the two agree.
    "lp_normalization_p1": _unary("LpNormalization", _rand(R, 2, 3, 4, positive=True), axis=-2, p=1),
}

# onnx.reference computes opset 18 GroupNormalization in float32 (its function body casts): the
# finite differences need a larger step and tolerance (see test_autodiff_rules.FLOAT32_STEPS).
FLOAT32_STEPS = {"group_norm_opset18_per_group"}
UNCHECKED = {"group_norm_opset18_per_group", "group_norm_opset21_per_channel"}


def _unchecked_net(nodes, params, opset):
    """``loss = sum(out * R)`` without onnx.checker, which rejects the deprecated GroupNormalization-18."""
    r = np.random.default_rng(5).standard_normal(params["x"].shape).astype(params["x"].dtype)
    nodes = list(nodes) + [_node("Mul", ["out", "R"], ["weighted"]),
                           _node("ReduceSum", ["weighted"], ["loss"], keepdims=0)]
    inits = [onnx.numpy_helper.from_array(v, k) for k, v in {**params, "R": r}.items()]
    dtype = onnx.helper.np_dtype_to_tensor_dtype(r.dtype)
    # ONNX has no shape inference for GroupNormalization: its output shape is declared.
    graph = onnx.helper.make_graph(nodes, "g", [], [onnx.helper.make_tensor_value_info("loss", dtype, [])],
                                   initializer=inits,
                                   value_info=[onnx.helper.make_tensor_value_info("out", dtype, r.shape)])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)], ir_version=8)
    return d5.load_model(model, check=False)


def _case_net(case, float32=False):
    nodes, params, consts, opset, *rest = CASES[case]
    if float32:
        nodes, params = _float32_nodes(nodes), {k: v.astype(np.float32) for k, v in params.items()}
    if case in UNCHECKED:
        return _unchecked_net(nodes, params, opset)
    return _net(nodes, params, consts, opset=opset, loss_from=rest[0] if rest else "out")


@pytest.mark.parametrize("case", sorted(CASES))
def test_rule_matches_finite_differences(case):
    kw = dict(eps=1e-3, tol=1e-4) if case in FLOAT32_STEPS else {}
    _check_fd(_case_net(case), skip=SKIP, **kw)


@pytest.mark.requires("onnxruntime")
@pytest.mark.parametrize("case", sorted(CASES))
def test_rule_onnxruntime_agrees_with_reference_float32(case):
    _assert_onnxruntime_matches_reference(_case_net(case, float32=True))


def test_new_rules_are_registered_and_not_declared_non_differentiable():
    ops = ["LSTM", "GRU", "RNN", "Resize", "GroupNormalization", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan",
           "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "ThresholdedRelu", "Celu", "Shrink", "Mean", "CastLike",
           "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceProd",
           "LpNormalization"]
    assert operators_without_gradient(ops) == []
    assert "Hardmax" in NOT_DIFFERENTIABLE and operators_without_gradient(["Hardmax"]) == []


def test_backward_graphs_pass_the_checker():
    for case in ("lstm_all_outputs_initial_states", "gru_reset_before_linear", "resize_linear_half_pixel_up",
                 "group_norm_opset21_per_channel"):
        onnx.checker.check_model(build_training_model(_case_net(case), "loss"), full_check=True)


def test_resize_refuses_aspect_ratio_policies():
    nodes = [_node("Resize", ["x", "", "", "sizes"], mode="linear", keep_aspect_ratio_policy="not_larger")]
    net = _net(nodes, {"x": _rand(R, 1, 1, 3, 3)}, {"sizes": np.array([1, 1, 4, 5], np.int64)}, opset=19)
    with pytest.raises(UnsupportedOperatorError, match="keep_aspect_ratio_policy"):
        build_training_model(net, "loss")


def test_recurrent_refuses_dynamic_sequence_length_and_sequence_lens():
    w, r = _rand(R, 1, 3, I), _rand(R, 1, 3, 3)
    graph = onnx.helper.make_graph(
        [_node("RNN", ["x", "w", "r"], ["y"], hidden_size=3), _node("ReduceSum", ["y"], ["loss"], keepdims=0)], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, ["T", N, I])],
        [onnx.helper.make_tensor_value_info("loss", onnx.TensorProto.DOUBLE, [])],
        initializer=[onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(r, "r")])
    net = d5.load_model(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8))
    with pytest.raises(UnsupportedOperatorError, match="sequence length and input size must be static"):
        build_training_model(net, "loss")
    nodes = [_node("RNN", ["x", "w", "r", "", "lens"], hidden_size=3)]
    net = _net(nodes, {"x": _rand(R, T, N, I), "w": w, "r": r}, {"lens": np.array([T, T], np.int32)})
    with pytest.raises(UnsupportedOperatorError, match="sequence_lens is not supported"):
        build_training_model(net, "loss")


# ------------------------------------------------------------- torch-exported models vs torch autograd
# ONNX gate order (LSTM: i o f c; GRU: z r h) as blocks of torch's (LSTM: i f g o; GRU: r z n).
_TORCH_GATE_ORDER = {"LSTM": [0, 3, 1, 2], "GRU": [1, 0, 2], "RNN": [0]}


def _onnx_layout(grad, op, hidden):
    """A torch recurrent weight (or bias) gradient with its gate blocks in ONNX order."""
    blocks = [grad[k * hidden:(k + 1) * hidden] for k in range(len(_TORCH_GATE_ORDER[op]))]
    return np.concatenate([blocks[k] for k in _TORCH_GATE_ORDER[op]], axis=0)


def _exported(op, layers, bidirectional, float32):
    """The model exported (in float32 or float64), and torch autograd's float64 loss and gradients."""
    import torch

    torch.manual_seed(3)
    cls = {"LSTM": torch.nn.LSTM, "GRU": torch.nn.GRU, "RNN": torch.nn.RNN}[op]

    class Model(torch.nn.Module):  # the zoo's recurrent wrapper: a Linear on the last step
        def __init__(self):
            super().__init__()
            self.rnn = cls(5, 4, num_layers=layers, bidirectional=bidirectional)
            self.fc = torch.nn.Linear(8 if bidirectional else 4, 3)

        def forward(self, x, target):
            y = self.rnn(x)[0]
            return torch.nn.functional.cross_entropy(self.fc(y[-1]), target)

    model = Model() if float32 else Model().double()
    x = torch.randn(6, 3, 5, dtype=torch.float32 if float32 else torch.float64)
    target = torch.tensor([0, 2, 1])
    buf = io.BytesIO()
    torch.onnx.export(model, (x, target), buf, dynamo=False, opset_version=17, input_names=["input", "label"],
                      output_names=["loss"])
    model, feed = model.double(), x.numpy()
    loss = model(x.double(), target)
    loss.backward()
    return model, d5.load_model(buf.getvalue()), feed, target.numpy(), loss.item()


def _expected_onnx_gradients(model, net, op):
    """torch autograd's gradients under the names of the exported graph's initializers."""
    expected = {"fc.weight": model.fc.weight.grad.numpy(), "fc.bias": model.fc.bias.grad.numpy()}
    nodes = [n for n in net.graph.node if n.op_type == op]
    hidden = model.rnn.hidden_size
    for layer, node in enumerate(nodes):
        w, r, b = [], [], []
        for sfx in ("", "_reverse")[:2 if model.rnn.bidirectional else 1]:
            g = {k: getattr(model.rnn, f"{k}_l{layer}{sfx}").grad.numpy()
                 for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
            w.append(_onnx_layout(g["weight_ih"], op, hidden))
            r.append(_onnx_layout(g["weight_hh"], op, hidden))
            b.append(np.concatenate([_onnx_layout(g["bias_ih"], op, hidden), _onnx_layout(g["bias_hh"], op, hidden)]))
        for name, grads in zip(node.input[1:4], (w, r, b)):
            expected[name] = np.stack(grads)
    return expected


@pytest.mark.requires("torch")
@pytest.mark.parametrize("framework", ["reference", pytest.param("onnxruntime", marks=pytest.mark.requires("onnxruntime"))])
@pytest.mark.parametrize("op, layers, bidirectional", [("LSTM", 2, False), ("GRU", 1, True), ("RNN", 2, False),
                                                       ("LSTM", 1, True)])
def test_torch_exported_recurrent_model_matches_torch_autograd(framework, op, layers, bidirectional):
    # ONNX Runtime has no float64 kernels of LSTM, GRU and RNN: it trains the float32 export,
    # compared with the same float64 torch gradients.
    float32 = framework == "onnxruntime"
    model, net, x, target, torch_loss = _exported(op, layers, bidirectional, float32)
    assert sum(n.op_type == op for n in net.graph.node) == layers
    expected = _expected_onnx_gradients(model, net, op)
    ex = d5.executor(net, framework)
    out = ex.inference_and_backprop({"input": x, "label": target}, "loss")
    np.testing.assert_allclose(out["loss"], torch_loss, rtol=1e-5 if float32 else 1e-10)
    pairs = dict(ex.network.gradient("loss"))
    assert set(pairs) == set(expected)
    for p, g in expected.items():
        got = ex.network.fetch_tensor(pairs[p])
        assert got.shape == g.shape and got.dtype == (np.float32 if float32 else np.float64)
        err = np.linalg.norm(got - g) / np.linalg.norm(g)
        # Measured: ~1e-15 in float64, ~1e-6 in float32 (ONNX Runtime).
        assert err <= (1e-5 if float32 else 1e-10), f"{p}: relative L2 error {err:.2e} against torch autograd"
