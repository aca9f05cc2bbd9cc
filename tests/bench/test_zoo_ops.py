"""Every operator in the real-model zoo's graphs has an ONNX-autodiff rule or is declared not differentiable."""

from __future__ import annotations

from deep500lite.bench.zoo_ops import ZOO_OP_TYPES
from deep500lite.lv1.autodiff import NOT_DIFFERENTIABLE, differentiable_operators, operators_without_gradient


def test_every_zoo_operator_has_a_rule_or_is_not_differentiable():
    assert operators_without_gradient(ZOO_OP_TYPES) == []
    # the list is the real one: recurrent layers, attention and normalizations are in it
    assert {"LSTM", "GRU", "RNN", "Resize", "LayerNormalization", "Einsum", "GatherND", "ScatterND"} <= ZOO_OP_TYPES
    assert ZOO_OP_TYPES & set(NOT_DIFFERENTIABLE) and ZOO_OP_TYPES & set(differentiable_operators())
