"""deep500lite's ONNX autodiff (deep500lite.lv1.autodiff) and the executors that run it.

Every gradient rule is checked against central finite differences in float64 (one executor per
case, parameters perturbed with numpy through ``feed_tensor``); whole models are checked against
torch autograd in float32 on the reference and ONNX Runtime executors.
"""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import deep500lite as d5
from deep500lite.errors import UnsupportedOperatorError
from deep500lite.lv1.autodiff import build_training_model, save_backward_graph, updated_name

AUTODIFF_FRAMEWORKS = [
    "reference",
    pytest.param("onnxruntime", marks=pytest.mark.requires("onnxruntime")),
]

OPSET = 17


def _rel_l2(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def _net(nodes, params, consts=None, loss_from="out", opset=OPSET, seed=0, inputs=None):
    """A Network: ``nodes`` compute ``loss_from``; loss = sum(loss_from * R) with a fixed random R.

    ``params`` (float arrays) become trainable initializers, ``consts`` non-float initializers,
    ``inputs`` (name -> array) graph inputs. When ``loss_from`` is ``"loss"`` the nodes compute
    the scalar loss themselves.
    """
    consts = consts or {}
    inputs = inputs or {}
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in {**params, **consts}.items()]
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
           for k, v in inputs.items()]
    graph = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info(loss_from, 0, None)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    if loss_from != "loss":
        from onnx.reference import ReferenceEvaluator

        out = ReferenceEvaluator(model).run([loss_from], dict(inputs))[0]
        r = np.random.default_rng(seed + 1).standard_normal(np.shape(out)).astype(out.dtype)
        graph = model.graph
        graph.initializer.append(numpy_helper.from_array(r, "R"))
        graph.node.extend([helper.make_node("Mul", [loss_from, "R"], ["weighted"]),
                           helper.make_node("ReduceSum", ["weighted"], ["loss"], keepdims=0)])
        del graph.output[:]
        graph.output.append(helper.make_tensor_value_info("loss", helper.np_dtype_to_tensor_dtype(out.dtype), []))
    model = onnx.shape_inference.infer_shapes(model)
    onnx.checker.check_model(model)
    return d5.load_model(model)


def _check_fd(net, feeds=None, eps=1e-6, tol=1e-6, skip=("R",), framework="reference"):
    """Compare every gradient with central finite differences of the training-mode loss (float64)."""
    feeds = feeds or {}
    ex = d5.executor(net, framework)
    ex.inference_and_backprop(feeds, "loss")
    pairs = [(p, g) for p, g in ex.network.gradient("loss") if p not in skip]
    assert pairs, "the case differentiates nothing"
    grads = dict(zip([g for _, g in pairs], ex.network.fetch_tensors([g for _, g in pairs])))
    for p, gname in pairs:
        base = np.array(ex.network.fetch_tensor(p), copy=True)
        assert grads[gname].shape == base.shape and grads[gname].dtype == base.dtype
        flat = base.reshape(-1)
        # Every element of small tensors, a random sample of 48 of larger ones.
        picked = np.arange(flat.size) if flat.size <= 64 else np.sort(
            np.random.default_rng(flat.size).choice(flat.size, 48, replace=False))
        numeric = np.zeros(picked.size)
        for n, j in enumerate(picked):
            vals = []
            for sign in (1.0, -1.0):
                pert = flat.copy()
                pert[j] += sign * eps
                ex.network.feed_tensor(p, pert.reshape(base.shape))
                vals.append(float(ex.inference_and_backprop(feeds, "loss")["loss"]))
            numeric[n] = (vals[0] - vals[1]) / (2 * eps)
        ex.network.feed_tensor(p, base)
        err = _rel_l2(grads[gname].reshape(-1)[picked], numeric)
        assert err < tol, f"gradient of '{p}': relative L2 error {err:.2e} against finite differences"
    return ex


def _rand(rng, *shape, positive=False, dtype=np.float64):
    x = rng.standard_normal(shape)
    if positive:
        x = np.abs(x) + 0.5
    return x.astype(dtype)


def _node(op, ins, outs=("out",), **attrs):
    return helper.make_node(op, list(ins), list(outs), name=f"{op.lower()}_{outs[0]}", **attrs)


# ------------------------------------------------------------------------ rules vs finite differences
R = np.random.default_rng(0)

CASES = {
    "gemm_transB_bias": ([_node("Gemm", ["a", "b", "c"], transB=1, alpha=0.7, beta=1.3)],
                         {"a": _rand(R, 3, 4), "b": _rand(R, 5, 4), "c": _rand(R, 5)}),
    "gemm_transA_colbias": ([_node("Gemm", ["a", "b", "c"], transA=1)],
                            {"a": _rand(R, 4, 3), "b": _rand(R, 4, 5), "c": _rand(R, 3, 1)}),
    "gemm_both_scalar": ([_node("Gemm", ["a", "b", "c"], transA=1, transB=1, alpha=-1.5, beta=0.5)],
                         {"a": _rand(R, 4, 3), "b": _rand(R, 5, 4), "c": _rand(R)}),
    "gemm_no_c": ([_node("Gemm", ["a", "b"])], {"a": _rand(R, 3, 4), "b": _rand(R, 4, 2)}),
    "matmul_batched": ([_node("MatMul", ["a", "b"])], {"a": _rand(R, 2, 3, 4), "b": _rand(R, 2, 4, 5)}),
    "matmul_broadcast": ([_node("MatMul", ["a", "b"])], {"a": _rand(R, 2, 1, 3, 4), "b": _rand(R, 3, 4, 2)}),
    "matmul_vec_mat": ([_node("MatMul", ["a", "b"])], {"a": _rand(R, 4), "b": _rand(R, 2, 4, 3)}),
    "matmul_mat_vec": ([_node("MatMul", ["a", "b"])], {"a": _rand(R, 2, 3, 4), "b": _rand(R, 4)}),
    "matmul_vec_vec": ([_node("MatMul", ["a", "b"])], {"a": _rand(R, 4), "b": _rand(R, 4)}),
    "add_broadcast": ([_node("Add", ["a", "b"])], {"a": _rand(R, 2, 3, 4), "b": _rand(R, 3, 1)}),
    "sub_broadcast": ([_node("Sub", ["a", "b"])], {"a": _rand(R, 3, 1), "b": _rand(R, 2, 1, 4)}),
    "mul_broadcast": ([_node("Mul", ["a", "b"])], {"a": _rand(R, 2, 3, 4), "b": _rand(R, 4)}),
    "div_broadcast": ([_node("Div", ["a", "b"])], {"a": _rand(R, 2, 3, 4), "b": _rand(R, 1, 3, 1, positive=True)}),
    "mul_scalar": ([_node("Mul", ["a", "b"])], {"a": _rand(R, 2, 3), "b": _rand(R)}),
    "relu": ([_node("Relu", ["a"])], {"a": _rand(R, 3, 5)}),
    "leaky_relu": ([_node("LeakyRelu", ["a"], alpha=0.2)], {"a": _rand(R, 3, 5)}),
    "sigmoid": ([_node("Sigmoid", ["a"])], {"a": _rand(R, 3, 5)}),
    "tanh": ([_node("Tanh", ["a"])], {"a": _rand(R, 3, 5)}),
    "exp": ([_node("Exp", ["a"])], {"a": _rand(R, 3, 5)}),
    "log": ([_node("Log", ["a"])], {"a": _rand(R, 3, 5, positive=True)}),
    "sqrt": ([_node("Sqrt", ["a"])], {"a": _rand(R, 3, 5, positive=True)}),
    "neg": ([_node("Neg", ["a"])], {"a": _rand(R, 3, 5)}),
    "pow_broadcast": ([_node("Pow", ["a", "b"])], {"a": _rand(R, 3, 4, positive=True), "b": _rand(R, 4)}),
    "identity": ([_node("Identity", ["a"])], {"a": _rand(R, 3, 5)}),
    "flatten": ([_node("Flatten", ["a"], axis=2)], {"a": _rand(R, 2, 3, 2, 2)}),
    "reshape": ([_node("Reshape", ["a", "shape"])], {"a": _rand(R, 2, 3, 4)},
                {"shape": np.array([4, -1], np.int64)}),
    "squeeze_unsqueeze": ([_node("Squeeze", ["a", "ax0"], ["sq"]), _node("Unsqueeze", ["sq", "ax2"])],
                          {"a": _rand(R, 1, 3, 4)},
                          {"ax0": np.array([0], np.int64), "ax2": np.array([2], np.int64)}),
    "pow_constant_exponent": ([_node("Pow", ["a", "e"])], {"a": _rand(R, 3, 4, positive=True)},
                              {"e": np.array(3, np.int64)}),
    "transpose": ([_node("Transpose", ["a"], perm=[2, 0, 1])], {"a": _rand(R, 2, 3, 4)}),
    "transpose_default": ([_node("Transpose", ["a"])], {"a": _rand(R, 2, 3, 4)}),
    "conv_stride_pad_bias": ([_node("Conv", ["x", "w", "b"], strides=[2, 2], pads=[1, 0, 1, 2])],
                             {"x": _rand(R, 2, 3, 7, 6), "w": _rand(R, 4, 3, 3, 3), "b": _rand(R, 4)}),
    "conv_dilation": ([_node("Conv", ["x", "w"], dilations=[2, 1], pads=[1, 1, 1, 1])],
                      {"x": _rand(R, 1, 2, 6, 5), "w": _rand(R, 3, 2, 2, 3)}),
    "conv_same_upper_stride3": ([_node("Conv", ["x", "w"], strides=[3, 3], auto_pad="SAME_UPPER")],
                                {"x": _rand(R, 1, 2, 7, 8), "w": _rand(R, 2, 2, 3, 3)}),
    "conv_grouped": ([_node("Conv", ["x", "w", "b"], group=2, strides=[1, 2], pads=[1, 1, 0, 1])],
                     {"x": _rand(R, 2, 4, 5, 5), "w": _rand(R, 6, 2, 3, 2), "b": _rand(R, 6)}),
    "conv_depthwise": ([_node("Conv", ["x", "w"], group=3, pads=[1, 1, 1, 1])],
                       {"x": _rand(R, 2, 3, 4, 4), "w": _rand(R, 3, 1, 3, 3)}),
    "conv1d": ([_node("Conv", ["x", "w", "b"], strides=[2], pads=[1, 1])],
               {"x": _rand(R, 2, 2, 9), "w": _rand(R, 3, 2, 3), "b": _rand(R, 3)}),
    "maxpool_2x2": ([_node("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2])], {"x": _rand(R, 2, 2, 4, 4)}),
    "maxpool_overlap_pad": ([_node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
                            {"x": _rand(R, 1, 2, 5, 5)}),
    "maxpool_ceil_dilated": ([_node("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2], dilations=[2, 1],
                                    ceil_mode=1)], {"x": _rand(R, 1, 2, 7, 5)}),
    "global_average_pool": ([_node("GlobalAveragePool", ["x"])], {"x": _rand(R, 2, 3, 4, 5)}),
    "average_pool": ([_node("AveragePool", ["x"], kernel_shape=[2, 2], strides=[2, 2])], {"x": _rand(R, 2, 2, 4, 4)}),
    "average_pool_pad_exclude": ([_node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2],
                                        pads=[1, 1, 1, 1])], {"x": _rand(R, 1, 2, 5, 5)}),
    "average_pool_pad_include": ([_node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2],
                                        pads=[1, 0, 1, 1], count_include_pad=1)], {"x": _rand(R, 1, 2, 5, 6)}),
    "batchnorm_training": ([_node("BatchNormalization", ["x", "s", "b", "m", "v"], epsilon=1e-3)],
                           {"x": _rand(R, 4, 3, 2, 2), "s": _rand(R, 3), "b": _rand(R, 3),
                            "m": _rand(R, 3), "v": _rand(R, 3, positive=True)}),
    "batchnorm_training_2d": ([_node("BatchNormalization", ["x", "s", "b", "m", "v"])],
                              {"x": _rand(R, 5, 3), "s": _rand(R, 3), "b": _rand(R, 3),
                               "m": _rand(R, 3), "v": _rand(R, 3, positive=True)}),
    "softmax": ([_node("Softmax", ["a"], axis=1)], {"a": _rand(R, 2, 3, 4)}),
    "softmax_last": ([_node("Softmax", ["a"])], {"a": _rand(R, 3, 5)}),
    "log_softmax": ([_node("LogSoftmax", ["a"], axis=-1)], {"a": _rand(R, 2, 3, 4)}),
    "concat": ([_node("Concat", ["a", "b", "c"], axis=1)],
               {"a": _rand(R, 2, 1, 3), "b": _rand(R, 2, 3, 3), "c": _rand(R, 2, 2, 3)}),
    "slice_steps": ([_node("Slice", ["a", "st", "en", "ax", "sp"])], {"a": _rand(R, 4, 6)},
                    {"st": np.array([-1, 1], np.int64), "en": np.array([-10, 6], np.int64),
                     "ax": np.array([0, 1], np.int64), "sp": np.array([-2, 2], np.int64)}),
    "gather_duplicates": ([_node("Gather", ["a", "idx"], axis=1)], {"a": _rand(R, 3, 4)},
                          {"idx": np.array([[0, 2], [2, 3]], np.int64)}),
    "pad_constant": ([_node("Pad", ["a", "pads"])], {"a": _rand(R, 2, 3)},
                     {"pads": np.array([1, 0, 2, 3], np.int64)}),
    "reduce_sum_keep": ([_node("ReduceSum", ["a", "axes"], keepdims=1)], {"a": _rand(R, 2, 3, 4)},
                        {"axes": np.array([0, 2], np.int64)}),
    "reduce_sum_all": ([_node("ReduceSum", ["a"], keepdims=0)], {"a": _rand(R, 2, 3)}),
    "reduce_mean_drop": ([_node("ReduceMean", ["a"], axes=[1], keepdims=0)], {"a": _rand(R, 2, 3, 4)}),
    "multiple_consumers": ([_node("Mul", ["a", "a"], ["sq"]), _node("Relu", ["a"], ["r"]),
                            _node("Add", ["sq", "r"], ["s1"]), _node("Tanh", ["a"], ["t"]),
                            _node("Sum", ["s1", "t", "a"])], {"a": _rand(R, 3, 4)}),
    "expand_cast": ([_node("Cast", ["a"], ["c"], to=TensorProto.DOUBLE), _node("Expand", ["c", "shape"])],
                    {"a": _rand(R, 3, 1)}, {"shape": np.array([2, 3, 4], np.int64)}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rule_matches_finite_differences(case):
    nodes, params, *rest = CASES[case]
    net = _net(nodes, params, rest[0] if rest else None)
    _check_fd(net)


@pytest.mark.requires("onnxruntime")
@pytest.mark.parametrize("case", sorted(CASES))
def test_rule_onnxruntime_agrees_with_reference_float32(case):
    # The reference gradients are checked against finite differences above; here ONNX Runtime
    # runs the same training graph in float32.
    nodes, params, *rest = CASES[case]
    params = {k: v.astype(np.float32) for k, v in params.items()}
    _assert_onnxruntime_matches_reference(_net(_float32_nodes(nodes), params, rest[0] if rest else None))


def _float32_nodes(nodes):
    """The nodes with every Cast to float64 made a Cast to float32."""
    return [helper.make_node(n.op_type, n.input, n.output, name=n.name, **{
        a.name: (TensorProto.FLOAT if a.name == "to" else helper.get_attribute_value(a)) for a in n.attribute})
        for n in nodes]


def _assert_onnxruntime_matches_reference(net):
    """One training step's loss and float32 gradients on ONNX Runtime equal the reference executor's."""
    grads = {}
    for fw in ("reference", "onnxruntime"):
        ex = d5.executor(net, fw)
        loss = ex.inference_and_backprop({}, "loss")["loss"]
        names = [g for _, g in ex.network.gradient("loss")]
        grads[fw] = (loss, dict(zip(names, ex.network.fetch_tensors(names))))
    np.testing.assert_allclose(grads["onnxruntime"][0], grads["reference"][0], rtol=1e-5, atol=1e-6)
    for name, g in grads["reference"][1].items():
        got = grads["onnxruntime"][1][name]
        assert got.dtype == np.float32
        assert _rel_l2(got, g) < 1e-5, name


OPSET13_CASES = ["maxpool_overlap_pad", "gather_duplicates", "reduce_mean_drop", "batchnorm_training",
                 "softmax", "concat", "conv_stride_pad_bias", "matmul_broadcast"]


@pytest.mark.parametrize("case", OPSET13_CASES)
def test_rule_matches_finite_differences_opset13(case):
    # Opset 13 takes ReduceMean axes as an attribute and has no ScatterElements reduction.
    nodes, params, *rest = CASES[case]
    net = _net(nodes, params, rest[0] if rest else None, opset=13)
    _check_fd(net)


LABELS = np.array([2, 0, 3, 1, 3], np.int64)

LOSS_CASES = {
    "sce_mean": dict(reduction="mean"),
    "sce_sum": dict(reduction="sum"),
    "sce_none": dict(reduction="none"),
    "sce_mean_weights": dict(reduction="mean", weights=True),
    "sce_mean_ignore": dict(reduction="mean", ignore_index=3),
    "sce_mean_weights_ignore": dict(reduction="mean", weights=True, ignore_index=0),
    "sce_sum_weights_spatial": dict(reduction="sum", weights=True, spatial=True),
    "sce_log_prob": dict(reduction="mean", log_prob=True),
    "nll_mean": dict(op="NegativeLogLikelihoodLoss", reduction="mean"),
    "nll_weights_ignore": dict(op="NegativeLogLikelihoodLoss", reduction="mean", weights=True, ignore_index=1),
    "nll_none_spatial": dict(op="NegativeLogLikelihoodLoss", reduction="none", spatial=True),
}


@pytest.mark.parametrize("framework", AUTODIFF_FRAMEWORKS)
@pytest.mark.parametrize("case", sorted(LOSS_CASES))
def test_class_loss_matches_finite_differences(case, framework):
    cfg = LOSS_CASES[case]
    rng = np.random.default_rng(3)
    op = cfg.get("op", "SoftmaxCrossEntropyLoss")
    spatial = cfg.get("spatial", False)
    scores = rng.standard_normal((5, 4, 2) if spatial else (5, 4))
    labels = np.stack([LABELS, LABELS[::-1]], axis=1) if spatial else LABELS
    params = {"scores": scores}
    ins = ["scores", "labels"]
    if cfg.get("weights"):
        params["w"] = rng.uniform(0.5, 2.0, 4)
        ins.append("w")
    attrs = {"reduction": cfg["reduction"]}
    if "ignore_index" in cfg:
        attrs["ignore_index"] = cfg["ignore_index"]
    outs = ["out", "log_prob"] if cfg.get("log_prob") else ["out"]
    loss_from = "loss" if cfg["reduction"] != "none" else "out"
    if loss_from == "loss":
        outs[0] = "loss"
    net = _net([helper.make_node(op, ins, outs, name="the_loss", **attrs)], params, {"labels": labels},
               loss_from=loss_from)
    _check_fd(net, framework=framework)


@pytest.mark.parametrize("framework", AUTODIFF_FRAMEWORKS)
def test_softmax_cross_entropy_log_prob_used_downstream(framework):
    rng = np.random.default_rng(8)
    nodes = [helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["ce", "logp"], reduction="sum"),
             _node("Mul", ["logp", "k"], ["lk"]), _node("ReduceSum", ["lk"], ["extra"], keepdims=0),
             _node("Add", ["ce", "extra"], ["loss"])]
    net = _net(nodes, {"scores": rng.standard_normal((5, 4)), "k": rng.standard_normal((5, 4))},
               {"labels": LABELS}, loss_from="loss")
    _check_fd(net, framework=framework)


@pytest.mark.parametrize("framework", AUTODIFF_FRAMEWORKS)
def test_dropout_training_uses_mask_and_scale(framework):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((4, 50)).astype(np.float32)
    net = _net([_node("Dropout", ["a", "ratio"], ["out", "mask"])], {"a": a},
               {"ratio": np.array(0.25, np.float32)})
    net.add_output("out")
    ex = d5.executor(net, framework)
    masks = []
    for _ in range(2):
        out = ex.inference_and_backprop({}, "loss")["out"]
        grad = ex.network.fetch_tensor("a_grad")
        kept = out != 0
        masks.append(kept)
        assert 0.5 < kept.mean() < 0.95  # a mask was drawn
        np.testing.assert_allclose(out[kept], a[kept] / 0.75, rtol=1e-6)
        r = ex.network.fetch_tensor("R")
        np.testing.assert_allclose(grad, np.where(kept, r / 0.75, 0.0), rtol=1e-6)
    assert (masks[0] != masks[1]).any()  # a new mask every step
    # Inference is not affected by dropout.
    np.testing.assert_array_equal(ex.inference({})["out"], a)


@pytest.mark.parametrize("framework", AUTODIFF_FRAMEWORKS)
def test_dropout_with_open_shape_draws_mask_in_graph(framework):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 40)).astype(np.float32)
    nodes = [_node("Mul", ["x", "w"], ["h"]), _node("Dropout", ["h", "ratio"], ["out"])]
    inits = [numpy_helper.from_array(np.full(40, 2.0, np.float32), "w"),
             numpy_helper.from_array(np.array(0.5, np.float32), "ratio")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 40])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 40])], initializer=inits)
    net = d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8))
    net.add_operation(helper.make_node("ReduceSum", ["out"], ["loss"], keepdims=0))
    ex = d5.executor(net, framework)
    out = ex.inference_and_backprop({"x": x}, "loss")["out"]
    kept = out != 0
    assert 0.2 < kept.mean() < 0.8
    np.testing.assert_allclose(out[kept], 4 * x[kept], rtol=1e-6)
    np.testing.assert_allclose(ex.network.fetch_tensor("w_grad"), (kept * x * 2).sum(axis=0), rtol=1e-5)


# ---------------------------------------------------------------------------- errors and the graph
def test_unsupported_operator_names_op_and_node():
    net = _net([helper.make_node("Det", ["a"], ["out"], name="my_det")], {"a": _rand(R, 3, 3)})
    with pytest.raises(UnsupportedOperatorError, match=r"'Det'.*'my_det'"):
        build_training_model(net, "loss")
    ex = d5.executor(net, "reference")
    with pytest.raises(UnsupportedOperatorError, match="Det"):
        ex.inference_and_backprop({}, "loss")


def test_non_float_inputs_get_no_gradient():
    net = _net([_node("Gather", ["a", "idx"])], {"a": _rand(R, 4, 3)}, {"idx": np.array([1, 1, 3], np.int64)})
    ex = d5.executor(net, "reference")
    ex.inference_and_backprop({}, "loss")
    assert [p for p, _ in ex.network.gradient("loss")] == ["a", "R"]
    assert not ex.has_tensor("idx_grad")


def test_saved_backward_graph_passes_checker(tmp_path):
    from deep500lite import networks
    from deep500lite.datasets import dataset_loss

    net, _, out = networks.create_model("bn_cnn", 2, shape=(1, 8, 8))
    net.add_operation(dataset_loss("digits")([out, "label"], "loss"))
    path = tmp_path / "train.onnx"
    save_backward_graph(net, "loss", path)
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    outputs = {o.name for o in model.graph.output}
    assert {"output", "loss", "conv1.weight_grad", "fc.bias_grad", "bn1.running_mean__updated"} <= outputs
    assert "bn1.running_mean_grad" not in outputs


# -------------------------------------------------------------------- whole models vs torch autograd
def _torch():
    return pytest.importorskip("torch")


def _with_cross_entropy(net_class):
    """A torch module class computing ``cross_entropy(net_class()(x), target)`` (exported whole)."""
    t = _torch()

    class WithLoss(t.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net_class()

        def forward(self, x, target):
            return t.nn.functional.cross_entropy(self.net(x), target)

    return WithLoss


def _compare_grads(ex, expected: dict, loss_value, torch_loss, tol=1e-4):
    pairs = ex.network.gradient("loss")
    assert {p for p, _ in pairs} == set(expected)
    got = dict(zip([p for p, _ in pairs], ex.network.fetch_tensors([g for _, g in pairs])))
    np.testing.assert_allclose(loss_value, torch_loss, rtol=1e-5)
    for p, g in expected.items():
        assert got[p].dtype == np.float32 and got[p].shape == g.shape
        err = _rel_l2(got[p], g)
        assert err <= tol, f"{p}: relative L2 error {err:.2e} against torch autograd"


def _zoo(name, batch, shape, **kwargs):
    from deep500lite import networks
    from deep500lite.datasets import dataset_loss

    net, _, out = networks.create_model(name, batch, shape=shape, **kwargs)
    net.add_operation(dataset_loss("digits")([out, "label"], "loss"))
    return net


def _torch_params(net, requires_grad=True):
    t = _torch()
    return {k: t.tensor(v, requires_grad=requires_grad) for k, v in net.host_values().items()
            if np.asarray(v).dtype == np.float32}


@pytest.mark.parametrize("framework", AUTODIFF_FRAMEWORKS)
def test_mlp_gradients_match_torch(framework):
    t = _torch()
    F = t.nn.functional
    net = _zoo("mlp", 8, (1, 8, 8))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 1, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 10, 8).astype(np.int64)
    W = _torch_params(net)
    h = t.tensor(x).flatten(1)
    for i in (1, 2):
        h = t.relu(F.linear(h, W[f"fc{i}.weight"], W[f"fc{i}.bias"]))
    loss = F.cross_entropy(F.linear(h, W["fc3.weight"], W["fc3.bias"]), t.tensor(labels))
    loss.backward()
    ex = d5.executor(net, framework)
    out = ex.inference_and_backprop({"input": x, "label": labels}, "loss")
    _compare_grads(ex, {k: v.grad.numpy() for k, v in W.items()}, out["loss"], loss.item())


@pytest.mark.parametrize("framework", AUTODIFF_FRAMEWORKS)
def test_lenet_gradients_match_torch(framework):
    t = _torch()
    F = t.nn.functional
    net = _zoo("lenet", 8, (1, 8, 8))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 1, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 10, 8).astype(np.int64)
    W = _torch_params(net)
    h = F.max_pool2d(t.relu(F.conv2d(t.tensor(x), W["conv1.weight"], W["conv1.bias"], padding=2)), 2)
    h = F.max_pool2d(t.relu(F.conv2d(h, W["conv2.weight"], W["conv2.bias"], padding=2)), 2)
    h = h.flatten(1)
    h = t.relu(F.linear(h, W["fc1.weight"], W["fc1.bias"]))
    h = t.relu(F.linear(h, W["fc2.weight"], W["fc2.bias"]))
    loss = F.cross_entropy(F.linear(h, W["fc3.weight"], W["fc3.bias"]), t.tensor(labels))
    loss.backward()
    ex = d5.executor(net, framework)
    out = ex.inference_and_backprop({"input": x, "label": labels}, "loss")
    _compare_grads(ex, {k: v.grad.numpy() for k, v in W.items()}, out["loss"], loss.item())


def _resnet20_onnx_name(torch_name: str) -> str:
    """Map a parameter of frameworks/torch/models.ResNet20 to the zoo ResNet-20's name."""
    parts = torch_name.split(".")
    if parts[0] == "layers":
        idx = int(parts[1])
        block = f"layer{idx // 3 + 1}.{idx % 3}"
        rest = parts[2:]
        if rest[0] == "shortcut":
            rest = ["shortcut" if rest[1] == "0" else "shortcut_bn"] + rest[2:]
        return ".".join([block] + rest)
    return torch_name


@pytest.mark.parametrize("framework", AUTODIFF_FRAMEWORKS)
def test_resnet20_gradients_and_running_stats_match_torch_train_mode(framework):
    t = _torch()
    from deep500lite.frameworks.torch.models import ResNet20

    t.manual_seed(0)
    module = ResNet20()
    module.train()
    net = _zoo("resnet", 4, (3, 8, 8), depth=20)
    state = {_resnet20_onnx_name(k): v.detach().numpy() for k, v in module.state_dict().items()
             if not k.endswith("num_batches_tracked")}
    # Random BN affine parameters and running statistics, so every rule sees non-trivial values.
    rng = np.random.default_rng(2)
    for k in list(state):
        if ".bn" in k or "bn1" in k or "shortcut_bn" in k:
            v = state[k]
            if k.endswith("running_var") or k.endswith("weight"):
                state[k] = rng.uniform(0.5, 1.5, v.shape).astype(np.float32)
            else:
                state[k] = (0.1 * rng.standard_normal(v.shape)).astype(np.float32)
    assert set(state) == set(net.initializers)
    for k, v in state.items():
        net.feed_tensor(k, v)
    module.load_state_dict({k: t.tensor(state[_resnet20_onnx_name(k)]) if not k.endswith("num_batches_tracked")
                            else v for k, v in module.state_dict().items()})
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 10, 4).astype(np.int64)
    bn_inputs = {}
    for mname, mod in module.named_modules():
        if isinstance(mod, t.nn.BatchNorm2d):
            mod.register_forward_pre_hook(
                lambda m, args, key=mname: bn_inputs.__setitem__(key, args[0].detach().numpy().astype(np.float64)))
    loss = t.nn.functional.cross_entropy(module(t.tensor(x)), t.tensor(labels))
    loss.backward()
    expected = {_resnet20_onnx_name(k): p.grad.numpy() for k, p in module.named_parameters()}
    ex = d5.executor(net, framework)
    out = ex.inference_and_backprop({"input": x, "label": labels}, "loss")
    _compare_grads(ex, expected, out["loss"], loss.item())
    # Running means follow torch's (momentum 0.1 == ONNX 0.9); variances use ONNX's biased rule,
    # checked with numpy on the BN inputs that torch saw.
    assert len(bn_inputs) == 21  # stem, 2 per block, 2 projection shortcuts
    for mname, h in bn_inputs.items():
        prefix = _resnet20_onnx_name(f"{mname}.running_mean")[: -len(".running_mean")]
        np.testing.assert_allclose(ex.network.fetch_tensor(f"{prefix}.running_mean"),
                                   module.get_submodule(mname).running_mean.numpy(), rtol=1e-4, atol=1e-5)
        expected_var = 0.9 * state[f"{prefix}.running_var"] + 0.1 * h.var(axis=(0, 2, 3))
        np.testing.assert_allclose(ex.network.fetch_tensor(f"{prefix}.running_var"), expected_var,
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("framework", AUTODIFF_FRAMEWORKS)
def test_torch_exported_resnet20_training_mode_matches_torch(framework):
    # export_onnx exports in eval mode, where torch folds BatchNorm into the convolutions; the
    # training-mode export keeps BatchNormalization(training_mode=1) with its three outputs.
    t = _torch()
    from deep500lite.frameworks.torch.models import ResNet20

    WithLoss = _with_cross_entropy(ResNet20)
    t.manual_seed(1)
    module = WithLoss().train()
    rng = np.random.default_rng(9)
    with t.no_grad():
        for mod in module.modules():
            if isinstance(mod, t.nn.BatchNorm2d):
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.normal_(0, 0.1)
                mod.running_mean.normal_(0, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
    state0 = {k: v.clone() for k, v in module.state_dict().items()}
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 10, 4).astype(np.int64)
    buf = io.BytesIO()
    t.onnx.export(module, (t.tensor(x), t.tensor(labels)), buf, dynamo=False, opset_version=17,
                  input_names=["input", "label"], output_names=["loss"], do_constant_folding=False,
                  training=t.onnx.TrainingMode.TRAINING)
    net = d5.load_model(buf.getvalue())
    # Tracing ran training-mode forwards, which moved torch's running statistics: restore them.
    module.load_state_dict(state0)
    for k, v in state0.items():
        if k in net.initializers:
            net.feed_tensor(k, v.numpy())
    assert "BatchNormalization" in net.operators()
    loss = module(t.tensor(x), t.tensor(labels))
    loss.backward()
    expected = {k: p.grad.numpy() for k, p in module.named_parameters()}
    ex = d5.executor(net, framework)
    out = ex.inference_and_backprop({"input": x, "label": labels}, "loss")
    _compare_grads(ex, expected, out["loss"], loss.item())
    for k, v in module.state_dict().items():
        if k.endswith("running_mean"):
            np.testing.assert_allclose(ex.network.fetch_tensor(k), v.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("framework", AUTODIFF_FRAMEWORKS)
def test_resnet20_from_export_onnx_training_matches_torch(framework):
    t = _torch()
    import inspect

    from deep500lite.datasets import dataset_loss
    from deep500lite.frameworks.torch.models import ResNet20, export_onnx

    if "training" not in inspect.signature(export_onnx).parameters:
        pytest.skip("export_onnx has no training mode in this version")
    t.manual_seed(2)
    module = ResNet20()
    state0 = {k: v.clone() for k, v in module.state_dict().items()}
    rng = np.random.default_rng(12)
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 10, 4).astype(np.int64)
    net = d5.load_model(export_onnx(module, t.tensor(x), training=True))
    assert "BatchNormalization" in net.operators()
    net.add_operation(dataset_loss("digits")(["output", "label"], "loss"))
    module.load_state_dict(state0)  # tracing ran training-mode forwards
    for k, v in state0.items():
        if k in net.initializers:
            net.feed_tensor(k, v.numpy())
    module.train()
    loss = t.nn.functional.cross_entropy(module(t.tensor(x)), t.tensor(labels))
    loss.backward()
    ex = d5.executor(net, framework)
    out = ex.inference_and_backprop({"input": x, "label": labels}, "loss")
    _compare_grads(ex, {k: p.grad.numpy() for k, p in module.named_parameters()}, out["loss"], loss.item())
    for k, v in module.state_dict().items():
        if k.endswith("running_mean"):
            np.testing.assert_allclose(ex.network.fetch_tensor(k), v.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("framework", AUTODIFF_FRAMEWORKS)
def test_running_statistics_follow_onnx_biased_rule(framework):
    t = _torch()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 2, 5, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    mean0 = rng.standard_normal(3).astype(np.float32)
    var0 = rng.uniform(0.5, 2, 3).astype(np.float32)
    nodes = [_node("Conv", ["input", "w"], ["h"], pads=[1, 1, 1, 1]),
             _node("BatchNormalization", ["h", "s", "b", "m", "v"], ["out"], momentum=0.8)]
    params = {"w": w, "s": np.ones(3, np.float32), "b": np.zeros(3, np.float32), "m": mean0, "v": var0}
    net = _net(nodes, params, inputs={"input": x})
    ex = d5.executor(net, framework)
    ex.inference_and_backprop({"input": x}, "loss")
    # Expected with numpy from the convolution (computed by torch) and ONNX's rule.
    h = t.nn.functional.conv2d(t.tensor(x), t.tensor(w), padding=1).numpy().astype(np.float64)
    batch_mean, batch_var = h.mean(axis=(0, 2, 3)), h.var(axis=(0, 2, 3))  # biased
    np.testing.assert_allclose(ex.network.fetch_tensor("m"), 0.8 * mean0 + 0.2 * batch_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ex.network.fetch_tensor("v"), 0.8 * var0 + 0.2 * batch_var, rtol=1e-5, atol=1e-6)
    # torch's BatchNorm (momentum 0.2) agrees on the mean; its variance is unbiased, ours is not.
    bn = t.nn.BatchNorm2d(3, momentum=0.2)
    bn.running_mean.copy_(t.tensor(mean0))
    bn.running_var.copy_(t.tensor(var0))
    bn.train()(t.tensor(h.astype(np.float32)))
    np.testing.assert_allclose(ex.network.fetch_tensor("m"), bn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(ex.network.fetch_tensor("v"), bn.running_var.numpy(), rtol=1e-6)
    # Inference afterwards uses the updated statistics.
    assert "m" not in {p for p, _ in ex.network.gradient("loss")}


@pytest.mark.parametrize("framework", AUTODIFF_FRAMEWORKS)
def test_torch_exported_cross_entropy_model_matches_torch(framework):
    t = _torch()
    from deep500lite.frameworks.torch.models import LeNet

    WithLoss = _with_cross_entropy(LeNet)
    t.manual_seed(0)
    module = WithLoss()
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 1, 28, 28)).astype(np.float32)
    labels = np.array([1, 7, 3], np.int64)
    buf = io.BytesIO()
    t.onnx.export(module, (t.tensor(x), t.tensor(labels)), buf, dynamo=False, opset_version=17,
                  input_names=["input", "label"], output_names=["loss"])
    net = d5.load_model(buf.getvalue())
    assert "SoftmaxCrossEntropyLoss" in net.operators()
    loss = module(t.tensor(x), t.tensor(labels))
    loss.backward()
    expected = {k: p.grad.numpy() for k, p in module.named_parameters()}
    ex = d5.executor(net, framework)
    out = ex.inference_and_backprop({"input": x, "label": labels}, "loss")
    _compare_grads(ex, expected, out["loss"], loss.item())


@pytest.mark.parametrize("framework", AUTODIFF_FRAMEWORKS)
@pytest.mark.parametrize("model", ["bn_cnn", "lenet"])
def test_open_batch_dimension_gives_same_gradients(framework, model):
    # With batch_size=None shape inference leaves the batch open: Shape-based ops take over.
    rng = np.random.default_rng(10)
    feeds = {"input": rng.standard_normal((3, 1, 8, 8)).astype(np.float32),
             "label": rng.integers(0, 10, 3).astype(np.int64)}
    results = []
    for batch in (3, None):
        ex = d5.executor(_zoo(model, batch, (1, 8, 8)), framework)
        loss = ex.inference_and_backprop(feeds, "loss")["loss"]
        names = [g for _, g in ex.network.gradient("loss")]
        results.append((loss, dict(zip(names, ex.network.fetch_tensors(names)))))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6)
    for name, g in results[0][1].items():
        assert _rel_l2(results[1][1][name], g) < 1e-6, name


@pytest.mark.parametrize("framework", AUTODIFF_FRAMEWORKS)
@pytest.mark.parametrize("batch", [1, 3])
def test_broadcast_with_open_dimensions_matches_finite_differences(framework, batch):
    # Both Add operands have an open batch dimension: the broadcast axes are found at run time.
    rng = np.random.default_rng(11)
    nodes = [_node("Mul", ["x", "w"], ["h"]), _node("Add", ["h", "x"], ["s"]),
             _node("Mul", ["s", "s"], ["sq"]), _node("ReduceMean", ["sq"], ["loss"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["N", 1, 3])],
        [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, [])],
        initializer=[numpy_helper.from_array(rng.standard_normal((4, 1)), "w")])
    net = d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8))
    _check_fd(net, {"x": rng.standard_normal((batch, 1, 3))}, framework=framework)


@pytest.mark.parametrize("framework", AUTODIFF_FRAMEWORKS)
def test_training_graph_built_once_and_params_fed(framework):
    net = _zoo("mlp", 4, (1, 8, 8))
    rng = np.random.default_rng(7)
    feeds = {"input": rng.standard_normal((4, 1, 8, 8)).astype(np.float32),
             "label": rng.integers(0, 10, 4).astype(np.int64)}
    ex = d5.executor(net, framework)
    first = ex.inference_and_backprop(feeds, "loss")["loss"]
    cache = ex._training_cache
    g = ex.network.fetch_tensor("fc1.weight_grad")
    ex.network.feed_tensor("fc1.weight", ex.network.fetch_tensor("fc1.weight") - 0.5 * g)
    second = ex.inference_and_backprop(feeds, "loss")["loss"]
    assert ex._training_cache is cache
    assert second < first
    np.testing.assert_allclose(ex.inference(feeds)["output"].shape, (4, 10))


def test_updated_name():
    assert updated_name("bn.running_mean") == "bn.running_mean__updated"
