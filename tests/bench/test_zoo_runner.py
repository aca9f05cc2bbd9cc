"""The zoo runner (deep500lite.bench.zoo) on hand-made models whose answers are computed here in numpy.

The real models (transformers, keras.applications, torch.nn) are tested through the CLI slice in
tests/cli/test_bench_zoo.py; here the runner's own logic is checked: tolerances relative to the
output's and each gradient's scale, parameters stored transposed or twice, failures named.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deep500lite.bench import zoo
from deep500lite.bench.zoo_model import ZooModel, map_parameters
from deep500lite.errors import UserError
from support import framework_params

N, IN, OUT = 4, 6, 3


def _gemm_model(w_in_out: np.ndarray, b: np.ndarray, *, two_copies: bool = False) -> onnx.ModelProto:
    """logits = x @ w + b, the weight stored as the (OUT, IN) initializer "W" used with transB=1.

    With ``two_copies`` the logits are x @ w + x @ w2 + b where "W2" holds the same values again
    (as an exporter that keeps a weight and its copy would), so the weight's gradient is the sum.
    """
    nodes = [helper.make_node("Gemm", ["x", "W", "b"], ["y1"], transB=1)]
    inits = [numpy_helper.from_array(w_in_out.T.astype(np.float32).copy(), "W"),
             numpy_helper.from_array(b.astype(np.float32), "b")]
    if two_copies:
        nodes += [helper.make_node("MatMul", ["x", "W2"], ["y2"]), helper.make_node("Add", ["y1", "y2"], ["logits"])]
        inits.append(numpy_helper.from_array(w_in_out.astype(np.float32), "W2"))
    else:
        nodes[0].output[0] = "logits"
    graph = helper.make_graph(nodes, "gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, IN])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [N, OUT])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _answers(x, w, b, labels, copies=1):
    """float64 logits and d(mean cross-entropy)/d(w, b), by hand."""
    logits = copies * x @ w + b
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    d = (p - np.eye(OUT)[labels]) / len(labels)
    return logits, {"fc.weight": copies * x.T @ d, "fc.bias": d.sum(0)}


def _zoo_model(two_copies=False, scale=1.0) -> ZooModel:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, IN)).astype(np.float32)
    w = (rng.standard_normal((IN, OUT)) * scale).astype(np.float32).astype(np.float64)
    b = (rng.standard_normal(OUT) * scale).astype(np.float32).astype(np.float64)
    labels = np.array([0, 2, 1, 2], dtype=np.int64)
    proto = _gemm_model(w, b, two_copies=two_copies)
    logits, grads = _answers(x.astype(np.float64), w, b, labels, 2 if two_copies else 1)
    params, unmapped = map_parameters({"fc.weight": w, "fc.bias": b}, proto)
    return ZooModel("gemm", "numpy", "hand", proto, {"x": x}, "logits", labels, logits,
                    logits.astype(np.float32), params, grads, grads, unmapped)


def test_map_parameters_finds_transposed_and_copied_weights_by_value():
    model = _zoo_model(two_copies=True)
    assert model.parameters["fc.weight"] == [("W", (1, 0)), ("W2", (0, 1))]
    assert model.parameters["fc.bias"] == [("b", (0,))]
    assert model.unmapped == []
    params, unmapped = map_parameters({"other": np.arange(6.0).reshape(2, 3)}, model.proto)
    assert params == {} and unmapped == ["other"]


@pytest.mark.parametrize("framework", framework_params(["reference", "onnxruntime", "torch", "tensorflow"]))
@pytest.mark.parametrize("two_copies", [False, True])
def test_checks_pass_against_answers_computed_by_hand(framework, two_copies):
    model = _zoo_model(two_copies)
    inference = zoo.check_inference(model, framework)
    assert inference.status == "pass", inference.detail
    assert inference.error < 1e-6
    training = zoo.check_training(model, framework)
    assert training.status == "pass", training.detail
    assert training.error < 1e-5


def test_a_wrong_answer_fails_and_names_what_is_wrong():
    model = _zoo_model()
    model.logits64 = model.logits64 * (1 + 2e-4)
    model.logits32 = model.logits64.astype(np.float32)  # the producer's own float32 agrees with its float64
    cell = zoo.check_inference(model, "reference")
    assert cell.status == "fail" and 1e-4 < cell.error < 1e-3
    assert "output's scale" in cell.detail
    model = _zoo_model()
    model.gradients64 = dict(model.gradients64, **{"fc.bias": model.gradients64["fc.bias"] * 1.01})
    model.gradients32 = model.gradients64
    cell = zoo.check_training(model, "reference")
    assert cell.status == "fail" and "fc.bias" in cell.detail


def test_gradient_tolerance_follows_the_producers_own_float32_error():
    # A producer whose float32 gradients are 1% off its float64 ones (ill-conditioned): an
    # executor 2% off passes (within 10x), one 20% off does not.
    assert zoo.gradient_tolerance(None) == zoo.gradient_tolerance(1e-6) == zoo.GRADIENT_TOLERANCE
    assert zoo.gradient_tolerance(0.01) == pytest.approx(0.1)
    for factor, status in ((1.02, "pass"), (1.2, "fail")):
        model = _zoo_model()
        right = model.gradients64
        model.gradients64 = {k: v * factor for k, v in right.items()}
        model.gradients32 = {k: v * 1.01 for k, v in model.gradients64.items()}
        cell = zoo.check_training(model, "reference")
        assert cell.status == status, (factor, cell)
        assert cell.producer_error == pytest.approx(0.01, rel=1e-6)


def test_tolerance_is_relative_to_the_output_scale():
    # Logits of ~1e-9: an absolute tolerance of 1e-4 would pass any answer, even all zeros.
    model = _zoo_model(scale=1e-9)
    model.feeds = {"x": model.feeds["x"] * 1e-9}
    model.logits64 = model.logits64 * 0 + (model.feeds["x"].astype(np.float64) @ np.asarray(
        numpy_helper.to_array(model.proto.graph.initializer[0]), dtype=np.float64).T
        + numpy_helper.to_array(model.proto.graph.initializer[1]))
    assert np.abs(model.logits64).max() < 1e-8
    assert zoo.check_inference(model, "reference").status == "pass"
    model.logits64 = model.logits64 + 1e-9
    model.logits32 = model.logits64.astype(np.float32)
    cell = zoo.check_inference(model, "reference")
    assert cell.status == "fail" and cell.error > 0.1


def test_an_executor_error_becomes_the_cells_reason():
    model = _zoo_model()
    model.feeds = {"x": np.zeros((N, IN + 1), np.float32)}
    cell = zoo.check_inference(model, "reference")
    assert cell.status == "error" and cell.detail
    assert "\n" not in cell.detail


def test_format_matrix_footnotes_each_failing_cell():
    case = zoo.ZooCase("gemm", "hand", "numpy", "numpy")
    result = zoo.ZooResult([case], ["reference", "onnxruntime"], ["inference"])
    result.cells = [zoo.Cell(case.key, "reference", "inference", "pass", 3e-8),
                    zoo.Cell(case.key, "onnxruntime", "inference", "error", detail="Gemm went wrong")]
    text = zoo.format_matrix(result, "markdown")
    assert "ok 3e-08" in text and "ERROR [1]" in text
    assert "[1] gemm/hand on onnxruntime, inference: Gemm went wrong" in text
    assert [c.executor for c in result.failures] == ["onnxruntime"]


def test_unknown_model_exporter_or_slice_is_a_user_error():
    with pytest.raises(UserError, match="Received: nosuchmodel"):
        zoo.list_cases("nosuchmodel")
    with pytest.raises(UserError, match="Received: onnxmltools"):
        zoo.list_cases(exporters="onnxmltools")
    with pytest.raises(UserError, match="Received: 'all'"):
        zoo.list_cases(subset="all")
