"""Control flow on every executor and through deep500lite's ONNX autodiff.

The operators themselves are checked by ONNX's backend node tests (test_if, test_loop11,
test_scan*, test_nonmaxsuppression_*) on each executor; here: the Loop forms those tests leave
out (a trip count without a condition, scan outputs of two axes), values a body reads from the
outer graph, and the gradients of loops, scans and branches lowered by the autodiff.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import deep500lite as d5
from deep500lite.errors import UnsupportedOperatorError
from deep500lite.lv1.autodiff.lower import lower_control_flow
from deep500lite.lv1.control_flow import subgraph_captures
from deep500lite.lv1.verify import default_executors, format_report, verify_model

EXECUTORS = [e for e in ("reference", "torch", "tensorflow", "onnxruntime", "jax") if e in default_executors()]
W = np.array([[1.5, 0.5], [0.9, 1.1]], np.float32)


def _loop(watched: bool) -> onnx.ModelProto:
    """``x <- x @ w`` with scan output x: three times (a for loop), or while i < 2 (a condition in the body)."""
    cond = (helper.make_node("Less", ["i", "limit"], ["c_out"]) if watched
            else helper.make_node("Identity", ["c"], ["c_out"]))
    body = helper.make_graph(
        [cond, helper.make_node("MatMul", ["x", "w"], ["x_out"]), helper.make_node("Identity", ["x"], ["s"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", TensorProto.FLOAT, [2, 2]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 2])])
    inputs = ["", "go", "x0"] if watched else ["trips", "", "x0"]
    graph = helper.make_graph(
        [helper.make_node("Loop", inputs, ["xf", "states"], body=body)], "loop",
        [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("xf", TensorProto.FLOAT, [2, 2]),
         helper.make_tensor_value_info("states", TensorProto.FLOAT, [3, 2, 2])],
        [numpy_helper.from_array(W, "w"), numpy_helper.from_array(np.array(3, np.int64), "trips"),
         numpy_helper.from_array(np.array(True), "go"), numpy_helper.from_array(np.array(2, np.int64), "limit")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_body_reads_outer_values_as_captures():
    node = _loop(True).graph.node[0]
    assert subgraph_captures(node) == ["limit", "w"]


@pytest.mark.parametrize("watched", [False, True], ids=["for", "while"])
@pytest.mark.parametrize("framework", EXECUTORS)
def test_loop_runs_as_onnx_defines_it(framework, watched):
    x0 = np.eye(2, dtype=np.float32)
    out = d5.executor(d5.load_model(_loop(watched)), framework).inference({"x0": x0})
    states = [x0, x0 @ W, x0 @ W @ W]
    np.testing.assert_allclose(out["xf"], x0 @ W @ W @ W, rtol=1e-6)
    assert out["states"].shape == (3, 2, 2)  # stacked along a new axis, not concatenated
    np.testing.assert_allclose(out["states"], np.stack(states), rtol=1e-6)


def test_autodiff_unrolls_a_for_loop_and_refuses_a_run_time_condition_by_name():
    lowered = lower_control_flow(_loop(False))
    assert "Loop" not in {n.op_type for n in lowered.graph.node}
    assert sum(n.op_type == "MatMul" for n in lowered.graph.node) == 3
    kept = lower_control_flow(_loop(True))
    assert [n.op_type for n in kept.graph.node] == ["Loop"]
    net = d5.load_model(_loop(True))
    net.add_operation(helper.make_node("ReduceSum", ["xf"], ["loss"], keepdims=0))
    with pytest.raises(UnsupportedOperatorError, match="'Loop'"):
        d5.executor(net, "reference").inference_and_backprop({"x0": np.eye(2, dtype=np.float32)}, "loss")


@pytest.mark.skipif("torch" not in default_executors(), reason="needs torch")
def test_gradients_through_loop_scan_and_if_exported_by_torch_agree_everywhere():
    from deep500lite.frameworks.torch.zoo_graphs import build_graph

    model = build_graph("scan_if")
    # the autodiff lowers Scan (static length) and If (both branches and a Where) into plain nodes
    assert {"Scan", "If"} & {n.op_type for n in lower_control_flow(model.proto).graph.node} == set()
    result = verify_model(model.proto, frameworks=EXECUTORS, feeds=model.feeds[0], train=True)
    assert result.passed, format_report(result)
    assert {"cell.weight", "pos.weight", "neg.weight"} <= set(result.reports[0].gradients)
