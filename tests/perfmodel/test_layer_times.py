"""``model layers``: one-node sub-networks equal the layers of the full network; the measurement's JSON."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import deep500lite as d5
from deep500lite.perfmodel import layers as lt
from deep500lite.cli import main
from deep500lite.errors import UserError


def _lenet():
    import deep500lite.networks as networks

    net, _, _ = networks.create_model("lenet", None, classes=10, shape=(1, 8, 8))
    return net.to_onnx()


def _full_values(model, batch, names):
    """The values of tensors ``names`` inside the full network at ``batch`` (onnx.reference, input seeded)."""
    inferred = lt.with_batch(model, batch)
    m = onnx.ModelProto.FromString(inferred.SerializeToString())
    for vi in inferred.graph.value_info:
        if vi.name in names:
            m.graph.output.append(vi)
    x = np.random.default_rng(7).standard_normal((batch, 1, 8, 8)).astype(np.float32)
    out = ReferenceEvaluator(m).run(list(names), {m.graph.input[0].name: x})
    return dict(zip(names, out)), x


@pytest.mark.parametrize("index", [3, 5, 7])  # conv2, maxpool1, fc1
def test_subnetwork_forward_equals_the_layer_in_the_full_network(index):
    model = _lenet()
    inferred = lt.with_batch(model, 3)
    node = inferred.graph.node[index]
    values, _ = _full_values(model, 3, [node.input[0], node.output[0]])
    sub, feeds, shape = lt.layer_subnetwork(inferred, index)
    assert feeds == {} and shape == values[node.output[0]].shape
    for i, t in enumerate(sub.graph.initializer):  # the activation initializer takes the full network's value
        if t.name == node.input[0]:
            sub.graph.initializer[i].CopyFrom(numpy_helper.from_array(values[node.input[0]], t.name))
    loss = d5.executor(d5.Network(sub), "reference").inference({})["loss"]
    np.testing.assert_allclose(loss, values[node.output[0]].sum(dtype=np.float64), rtol=1e-4, atol=1e-4)


def test_the_activation_gets_a_gradient_and_the_network_input_stays_fed():
    model = _lenet()
    inferred = lt.with_batch(model, 2)
    first, feeds, _ = lt.layer_subnetwork(inferred, 0)  # conv1 reads the network's input
    assert [i.name for i in first.graph.input] == [model.graph.input[0].name]
    assert feeds[model.graph.input[0].name].shape == (2, 1, 8, 8)
    relu = 1  # Relu reads conv1's output: an initializer whose gradient is d sum(relu(x)) / dx = (x > 0)
    sub, feeds, _ = lt.layer_subnetwork(inferred, relu)
    name = inferred.graph.node[relu].input[0]
    x = numpy_helper.to_array(next(t for t in sub.graph.initializer if t.name == name))
    ex = d5.executor(d5.Network(sub), "reference")
    ex.inference_and_backprop(feeds, "loss")
    grads = dict(ex.network.gradient("loss"))
    np.testing.assert_array_equal(ex.network.fetch_tensor(grads[name]), (x > 0).astype(np.float32))


def test_a_node_with_a_non_float_output_is_skipped_with_its_reason():
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.INT64, [2])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["y"])],
                              "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sub, reason, _ = lt.layer_subnetwork(lt.with_batch(model, 2), 1)
    assert sub is None and "'y' is not a float tensor" in reason


def test_measure_layers_writes_a_document_the_schema_accepts(tmp_path):
    model = _lenet()
    data = lt.measure_layers(model, [2, 1], "reference", max_time=0.01, name="lenet", optimizer="sgd")
    data = json.loads(json.dumps(data))
    lt.check_layer_times(data, "test")
    assert data["batches"] == [1, 2]
    assert [la["name"] for la in data["layers"]] == [lt.layer_label(n, i) for i, n in enumerate(model.graph.node)]
    assert all(la["status"] == "measured" and len(la["forward"]) == 2 and min(la["forward"]) >= 0
               for la in data["layers"])
    assert all(len(s["forward"]) >= 5 for la in data["layers"] for s in la["samples"])
    assert len(data["network"]["step"]) == 2 and data["network"]["step"][1] > 0
    assert len(data["network"]["update"]) == 2 and data["network"]["optimizer"] == "sgd"
    assert all(len(s["optimizer_step"]) >= 5 for s in data["network"]["samples"])
    assert data["environment"]["python"]
    headers, rows = lt.summary_rows(data)
    assert headers[:4] == ["layer", "op", "fwd b=1", "fwd b=2"] and rows[-2][0] == "whole network (measured)"
    assert rows[-1][0] == "update (sgd, measured)"


def test_a_document_with_a_wrong_field_is_refused_naming_it():
    data = {"format": lt.LAYER_TIMES_FORMAT, "model": "m", "framework": "torch", "device": "cpu", "batches": [1, 2],
            "overhead": {"forward": 0.0, "backward": 0.0}, "network": {"forward": [1.0, 2.0], "step": [1.0, 2.0]},
            "layers": [{"name": "a", "op_type": "Relu", "status": "measured", "forward": [1.0, "x"],
                        "backward": [1.0, 1.0]}]}
    with pytest.raises(UserError, match=r"field 'layers\[0\].forward\[1\]'.*Received: 'x'"):
        lt.check_layer_times(data, "f.json")
    data["layers"][0]["forward"] = [1.0]
    with pytest.raises(UserError, match="one entry per batch"):
        lt.check_layer_times(data, "f.json")


@pytest.mark.parametrize("argv, expected", [
    (["--batches", "0,4"], "--batches must be comma-separated integers from 1 to 1,048,576"),
    (["--batches", "four"], "--batches must be comma-separated integers from 1 to 1,048,576"),
    (["--max-time", "0"], "--max-time: must be a finite number of seconds > 0"),
    (["--format", "pdf"], "--format: must be one of 'table'"),
    (["--optimizer", "lbfgs"], "--optimizer: must be one of 'momentum'"),
])
def test_model_layers_bad_input_is_one_line_with_exit_2(argv, expected, capsys):
    rc = main(["model", "layers", "lenet", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert expected in err and "Received:" in err, err


def test_model_layers_cli_writes_the_json(tmp_path, capsys):
    out = tmp_path / "layers.json"
    rc = main(["model", "layers", "mlp", "--framework", "reference", "--batches", "2", "--max-time", "0.01",
               "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "whole network (measured)" in text and "per-call overhead" in text
    data = lt.check_layer_times(json.loads(out.read_text()), "out")
    assert data["model"] == "mlp" and data["framework"] == "reference" and data["batches"] == [2]
