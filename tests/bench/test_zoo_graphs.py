"""The zoo's graphs beyond classifiers on every executor: control flow, NonMaxSuppression, dynamic axes, a decoder.

Each case is exported by a public library's exporter (torch's dynamo and TorchScript exporters,
tf2onnx) from torch higher-order ops, torch.jit.script, tf.image, tf.while_loop and transformers'
BERT and GPT-2, and checked against the reference executor in float64 on every installed
executor, inference and (where the graph is differentiable) training.
"""

from __future__ import annotations

import pytest

from deep500lite.bench.zoo import list_cases, run_zoo
from deep500lite.lv1.verify import default_executors

pytestmark = pytest.mark.requires("torch", "transformers", "tensorflow", "tf2onnx", "onnxruntime")

EXECUTORS = [e for e in ("reference", "torch", "tensorflow", "onnxruntime", "jax") if e in default_executors()]


@pytest.fixture(scope="module")
def result():
    cases = [c for c in list_cases() if c.kind == "graph"]
    assert {c.name for c in cases} == {"scan_if", "loop", "bert_dynamic", "gpt2_kv", "detection", "while_loop"}
    return run_zoo(cases, EXECUTORS)


def _cells(result, name):
    return {(c.executor, c.check): c for c in result.cells if c.case.startswith(name + "/")}


@pytest.mark.parametrize("name", ["scan_if", "loop", "bert_dynamic", "gpt2_kv", "detection"])
def test_inference_and_training_pass_on_every_executor(result, name):
    cells = _cells(result, name)
    assert set(cells) == {(e, c) for e in EXECUTORS for c in ("inference", "training")}
    for (executor, check), cell in cells.items():
        assert cell.status == "pass", (executor, check, cell.detail)
        assert cell.error is not None and cell.error < 1e-4, (executor, check, cell.error)
    ops = set(result.op_types[next(iter(cells.values())).case])
    expected = {"scan_if": {"Scan", "If"}, "loop": {"Loop", "If"}, "detection": {"NonMaxSuppression"}}
    assert expected.get(name, set()) <= ops


def test_a_loop_with_a_run_time_trip_count_runs_everywhere_and_says_why_it_is_not_trained(result):
    cells = _cells(result, "while_loop")
    for executor in EXECUTORS:
        assert cells[(executor, "inference")].status == "pass", cells[(executor, "inference")].detail
        training = cells[(executor, "training")]
        assert training.status == "skip" and "trip count" in training.detail


def test_dynamic_axes_run_six_shapes_on_one_executor_with_the_rebuild_cost_reported(result):
    cells = _cells(result, "bert_dynamic")
    for executor in EXECUTORS:
        cell = cells[(executor, "inference")]
        compiled = cell.extra["compile_seconds"]
        assert len(compiled) == 6, cell.extra
        if executor in ("reference", "torch", "onnxruntime", "tensorflow"):
            assert all(c < 0.05 for c in compiled[1:]) and "no rebuild" in cell.detail, (executor, compiled)
        if executor == "jax":  # XLA compiles per shape: each new shape is reported with its cost
            assert all(c > 0 for c in compiled) and "rebuilt for 5 new shape(s)" in cell.detail, compiled


def test_the_decoder_generates_sixteen_tokens_with_its_cache_on_every_executor(result):
    cells = _cells(result, "gpt2_kv")
    for executor in EXECUTORS:
        cell = cells[(executor, "inference")]
        assert "16 tokens generated" in cell.detail
        assert cell.extra["greedy_steps_alike"] == "17 of 17", (executor, cell.extra)


def test_nonmaxsuppression_keeps_a_value_dependent_number_of_boxes():
    import numpy as np

    import deep500lite as d5
    from deep500lite.frameworks.tensorflow.zoo_graphs import build_graph

    model = build_graph("detection")
    kept = {fw: d5.executor(d5.load_model(model.proto), fw).inference(model.feeds[0])["boxes"].shape[0]
            for fw in EXECUTORS}
    assert len(set(kept.values())) == 1 and 0 < next(iter(kept.values())) < 10, kept  # fewer than the 10 allowed
    image = model.feeds[0][model.proto.graph.input[0].name]
    darker = d5.executor(d5.load_model(model.proto), "onnxruntime").inference(
        {model.proto.graph.input[0].name: np.zeros_like(image)})
    assert darker["boxes"].shape[0] != kept["onnxruntime"]
