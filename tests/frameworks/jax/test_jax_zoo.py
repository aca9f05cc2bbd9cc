"""The real-model zoo's checks (``deep500lite.bench.zoo``) on the JAX executor.

A hand-made model whose answers are computed here in numpy, then two real models of the zoo's CI
slice (a BatchNorm CNN from transformers and an LSTM, exported by torch) checked against torch's
float64 answers, as ``deep500lite bench zoo --frameworks jax`` checks them.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from deep500lite.bench import zoo
from deep500lite.bench.zoo_model import ZooModel, map_parameters

pytest.importorskip("jax")
pytest.importorskip("deep500lite.frameworks.jax.executor")


def _hand_model() -> ZooModel:
    """logits = relu(x @ w1^T) @ w2 + b with float64 logits and gradients computed by hand."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    w1 = rng.standard_normal((6, 5)).astype(np.float32).astype(np.float64)
    w2 = rng.standard_normal((6, 3)).astype(np.float32).astype(np.float64)
    b = rng.standard_normal(3).astype(np.float32).astype(np.float64)
    labels = np.array([0, 2, 1, 2], dtype=np.int64)
    nodes = [helper.make_node("Gemm", ["x", "W1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "W2"], ["m"]), helper.make_node("Add", ["m", "b"], ["logits"])]
    inits = [numpy_helper.from_array(w1.astype(np.float32), "W1"), numpy_helper.from_array(w2.astype(np.float32), "W2"),
             numpy_helper.from_array(b.astype(np.float32), "b")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [4, 3])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x64 = x.astype(np.float64)
    h = x64 @ w1.T
    r = np.maximum(h, 0)
    logits = r @ w2 + b
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    d = (p - np.eye(3)[labels]) / len(labels)
    dh = (d @ w2.T) * (h > 0)
    grads = {"fc1.weight": dh.T @ x64, "fc2.weight": r.T @ d, "fc2.bias": d.sum(0)}
    params, unmapped = map_parameters({"fc1.weight": w1, "fc2.weight": w2, "fc2.bias": b}, proto)
    return ZooModel("mlp", "numpy", "hand", proto, {"x": x}, "logits", labels, logits, logits.astype(np.float32),
                    params, grads, grads, unmapped)


def test_checks_pass_against_answers_computed_by_hand():
    model = _hand_model()
    inference = zoo.check_inference(model, "jax")
    assert inference.status == "pass", inference.detail
    assert inference.error < 1e-6
    training = zoo.check_training(model, "jax")
    assert training.status == "pass", training.detail
    assert training.error < 1e-5


def test_a_wrong_answer_fails_on_jax():
    model = _hand_model()
    model.gradients64 = dict(model.gradients64, **{"fc2.bias": model.gradients64["fc2.bias"] * 1.01})
    model.gradients32 = model.gradients64
    cell = zoo.check_training(model, "jax")
    assert cell.status == "fail" and "fc2.bias" in cell.detail


@pytest.mark.requires("torch", "transformers")
@pytest.mark.parametrize("name", ["resnet", "lstm"])
def test_zoo_models_pass_on_jax(name):
    result = zoo.run_zoo(zoo.list_cases(name, "torchscript"), ["jax"])
    assert [c.status for c in result.cells] == ["pass", "pass"], [(c.check, c.detail) for c in result.cells]
    assert all(c.error is not None for c in result.cells)
