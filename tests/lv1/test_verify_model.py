"""``verify_model``: executors against the reference executor in float64, and the diverging node of a planted fault.

The models are real exports (transformers' ResNet through torch's TorchScript exporter, the
zoo's GhostNet), the faults are planted in one executor only: a torch kernel that computes one
node wrong (forward), a torch node whose backward is wrong, and a node corrupted in the graph
ONNX Runtime is given. ``verify_model`` must name that node, with its operator and shapes.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deep500lite.errors import UserError
from deep500lite.lv1.verify import (FLOOR_FACTOR, GRADIENT_TOLERANCE, INFERENCE_TOLERANCE, default_executors,
                                    feeds_as_float64, format_report, passes, relative_error, to_float64, tolerance,
                                    verify_model)
from deep500lite.lv1.verify.localize import PROBE_SUFFIX, add_gradient_probes, expose_intermediates


def _mixed_model() -> onnx.ModelProto:
    """float32 arithmetic with a Constant(value_float), a Cast to float, ConstantOfShape and an int path."""
    nodes = [
        helper.make_node("Constant", [], ["third"], value_float=1.0 / 3.0),
        helper.make_node("Mul", ["x", "third"], ["a"]),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("ConstantOfShape", ["shape"], ["ones"],
                         value=numpy_helper.from_array(np.array([1.0], np.float32))),
        helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["a", "ones"], ["b"]),
        helper.make_node("Mul", ["b", "nf"], ["c"]),
        helper.make_node("MatMul", ["c", "w"], ["y"]),
        helper.make_node("ArgMax", ["y"], ["k"], axis=1, keepdims=0),
    ]
    w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                                               helper.make_tensor_value_info("n", TensorProto.INT64, [2, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("k", TensorProto.INT64, [2])],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_float64_twin_computes_every_float_in_float64_and_keeps_integers():
    import deep500lite as d5

    model = _mixed_model()
    twin = to_float64(model)
    assert [i.data_type for i in twin.graph.initializer] == [TensorProto.DOUBLE]
    assert twin.graph.output[0].type.tensor_type.elem_type == TensorProto.DOUBLE
    assert twin.graph.output[1].type.tensor_type.elem_type == TensorProto.INT64
    assert next(a.i for n in twin.graph.node if n.op_type == "Cast" for a in n.attribute) == TensorProto.DOUBLE
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32),
             "n": np.array([[2], [3]], np.int64)}
    out64 = d5.executor(d5.load_model(twin), "reference").inference(feeds_as_float64(feeds))
    assert out64["y"].dtype == np.float64 and out64["k"].dtype == np.int64
    x = feeds["x"].astype(np.float64)
    w = numpy_helper.to_array(model.graph.initializer[0]).astype(np.float64)
    third = float(np.float32(1.0 / 3.0))  # the model's constant: float32's 1/3, computed with in float64
    expected = ((x * third + 1.0) * np.array([[2.0], [3.0]])) @ w
    np.testing.assert_allclose(out64["y"], expected, rtol=1e-14)
    np.testing.assert_array_equal(out64["k"], expected.argmax(1))


def test_rule_is_relative_to_scale_and_the_float32_floor():
    want = np.array([1e-9, -2e-9])
    assert relative_error(want * (1 + 1e-3), want, 2e-9) == pytest.approx(1e-3)
    assert relative_error(np.zeros(3), np.zeros(2), 1.0) == float("inf")
    assert relative_error(np.array([1, 2]), np.array([1, 2]), 1.0) == 0.0
    assert relative_error(np.array([1, 3]), np.array([1, 2]), 1.0) == float("inf")
    assert relative_error(np.array([np.nan]), np.array([1.0]), 1.0) == float("inf")
    assert relative_error(np.array([-np.inf, 1.0]), np.array([-np.inf, 1.0]), 1.0) == 0.0
    assert tolerance("inference", None) == INFERENCE_TOLERANCE
    assert tolerance("gradient", 1e-7) == GRADIENT_TOLERANCE
    assert tolerance("gradient", 0.02) == pytest.approx(FLOOR_FACTOR * 0.02)
    assert tolerance("gradient", float("nan")) == GRADIENT_TOLERANCE
    assert passes(0.15, "gradient", 0.02) and not passes(0.25, "gradient", 0.02)


def test_probes_observe_each_nodes_input_gradient():
    model = _mixed_model()
    observed, names = expose_intermediates(model)
    assert {"a", "ones", "b", "c", "nf"} <= set(names)
    shapes = {n: (2, 4) for n in ("x", "a", "ones", "b", "c")}
    shapes.update({"w": (4, 3), "nf": (2, 1)})
    probed, probes = add_gradient_probes(observed, shapes)
    # MatMul reads c and w through probes; the int path gets none
    assert {(i, name) for _, i, name in probes.values()} >= {(0, "c"), (1, "w"), (0, "x")}
    assert all(PROBE_SUFFIX in p for p in probes)
    assert all(name not in ("shape", "n") for _, _, name in probes.values())
    onnx.checker.check_model(probed)


@pytest.fixture(scope="module")
def resnet():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from deep500lite.bench.zoo import verify_input

    return verify_input("resnet/torchscript", training=True)[:2]


def _planted(monkeypatch, op_type, index, model, mode):
    """Make the torch executor compute the ``index``-th ``op_type`` node wrong; returns that node."""
    import torch

    from deep500lite.frameworks.torch import ops as torch_ops

    node = [n for n in model.graph.node if n.op_type == op_type][index]
    original = torch_ops.CONVERTERS[op_type]

    class WrongBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad * 1.5

    def converter(spec):
        fn = original(spec)
        if spec.name != node.name:
            return fn
        if mode == "forward":
            return lambda *xs: fn(*xs) * 1.05
        return lambda *xs: WrongBackward.apply(fn(*xs))

    monkeypatch.setitem(torch_ops.CONVERTERS, op_type, converter)
    return node


@pytest.mark.requires("torch", "transformers")
def test_a_planted_forward_fault_is_named_with_its_operator_and_shapes(monkeypatch, resnet):
    model, feeds = resnet
    node = _planted(monkeypatch, "Relu", 2, model, "forward")
    result = verify_model(model, frameworks=["reference", "torch"], feeds=feeds)
    reference, torch_report = result.reports
    assert reference.status == "pass" and torch_report.status == "fail"
    found = torch_report.divergence
    assert (found.phase, found.node, found.op_type) == ("forward", node.name, "Relu")
    assert found.input_shapes and found.input_shapes[0] == found.output_shapes[0]
    assert found.error == pytest.approx(0.05, rel=0.05)
    text = format_report(result)
    assert node.name in text and "FAIL" in text and "1 of 2 executors pass" in text


@pytest.mark.requires("torch", "transformers")
def test_a_planted_backward_fault_is_named_in_the_backward_walk(monkeypatch, resnet):
    model, feeds = resnet
    node = _planted(monkeypatch, "Conv", 3, model, "backward")
    result = verify_model(model, frameworks=["torch"], feeds=feeds, train=True)
    report = result.reports[0]
    assert report.inference_ok and report.gradients_ok is False
    found = report.divergence
    assert (found.phase, found.node, found.op_type) == ("backward", node.name, "Conv"), found
    assert found.tensor == node.input[0]
    assert len(found.input_shapes) == len(node.input)


@pytest.mark.requires("torch", "transformers", "onnxruntime")
def test_a_node_corrupted_for_one_executor_is_named(resnet):
    import deep500lite as d5

    model, feeds = resnet
    target = [n for n in model.graph.node if n.op_type == "Add"][1]

    def make_executor(m, spelling, device):
        if spelling == "onnxruntime":  # this executor gets the graph with the node corrupted
            corrupted = onnx.ModelProto()
            corrupted.CopyFrom(m)
            next(n for n in corrupted.graph.node if n.name == target.name).op_type = "Sub"
            m = corrupted
        return d5.executor(d5.load_model(m), spelling)

    result = verify_model(model, frameworks=["onnxruntime", "reference"], feeds=feeds, make_executor=make_executor)
    ort_report, reference = result.reports
    assert reference.status == "pass" and ort_report.status == "fail"
    assert (ort_report.divergence.node, ort_report.divergence.op_type) == (target.name, "Add")


def test_every_executor_passes_on_an_exported_model_with_gradients(exported):
    if "torch" not in exported:
        pytest.skip("needs torch")
    path, feeds, _ = exported["torch"]
    wanted = [e for e in ("reference", "torch", "onnxruntime", "tensorflow") if e in default_executors()]
    result = verify_model(path, frameworks=wanted, feeds=feeds, train=True, loss="mse")
    assert result.passed, format_report(result)
    assert result.loss == "mse of 'y'"
    for report in result.reports:
        assert report.gradients and max(report.gradients.values()) < 1e-4
        assert set(report.outputs) == {"y"}
    data = result.to_dict()
    assert data["passed"] and data["rule"]["floor_factor"] == FLOOR_FACTOR


def test_bad_loss_and_executor_are_user_errors():
    model = _mixed_model()
    feeds = {"x": np.ones((2, 4), np.float32), "n": np.ones((2, 1), np.int64)}
    with pytest.raises(UserError, match="Received: 'nosuch'"):
        verify_model(model, frameworks=["reference"], feeds=feeds, train=True, loss="nosuch")
    with pytest.raises(UserError, match="Received: 'cross_entropy:k'"):
        verify_model(model, frameworks=["reference"], feeds=feeds, train=True, loss="cross_entropy:k")
    with pytest.raises(UserError, match="caffe"):
        verify_model(model, frameworks=["caffe"], feeds=feeds)
