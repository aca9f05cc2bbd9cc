"""The OpenVINO plugin (plugins/deep500lite-openvino), installed as its own distribution, seen through
deep500lite alone: found by the entry point, listed, inferring, training and compared like a
built-in framework. Skipped when the plugin is not installed."""

import json
import os

import numpy as np
import pytest

pytest.importorskip("deep500lite_openvino",
                    reason="needs the OpenVINO plugin: pip install -e plugins/deep500lite-openvino")
pytest.importorskip("openvino", reason="needs openvino")

import deep500lite as d5  # noqa: E402
from deep500lite import datasets, networks, registry  # noqa: E402
from deep500lite.frameworks import reference as d5ref  # noqa: E402
from support import REPO, run_cli  # noqa: E402


def test_the_entry_point_registers_it_from_its_own_distribution():
    spec = registry.spec("ov")
    assert spec.name == "openvino" and spec.module == "deep500lite_openvino"
    headers, rows = registry.capability_table()
    row = dict(zip(headers, next(r for r in rows if r[0].startswith("openvino"))))
    assert row["distribution"] == "deep500lite-openvino"
    assert row["training"] == "yes" and row["gradients"] == "autodiff" and row["custom_ops"] == "-"
    assert "openvino" in registry.frameworks_with(training=True, gradients="autodiff")
    assert "openvino" not in registry.frameworks_with(devices="gpu")


def test_deep500lite_list_shows_it():
    out = run_cli("list", "frameworks")
    assert out.returncode == 0, out.stderr
    assert any(line.strip().startswith("openvino (alias: ov): installed (") for line in out.stdout.splitlines())


def _lenet(batch=4, seed=0):
    net, inp, out = networks.create_model("lenet", batch, classes=10, shape=(1, 28, 28), seed=seed)
    return net, inp, out


def test_inference_matches_the_reference_executor():
    net, inp, out = _lenet()
    x = np.random.default_rng(1).standard_normal((4, 1, 28, 28)).astype(np.float32)
    got = d5.executor(net, "openvino").inference({inp: x})[out]
    ref_net, _, _ = _lenet()
    want = d5.executor(ref_net, "reference").inference({inp: x})[out]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_changed_parameter_is_used_by_the_next_call():
    net, inp, out = _lenet()
    ex = d5.executor(net, "openvino")
    x = np.ones((4, 1, 28, 28), np.float32)
    before = ex.inference({inp: x})[out]
    bias = [p for p in net.parameters if p.endswith("bias")][-1]
    value = net.fetch_tensors([bias])[0]
    net.feed_tensor(bias, value + 1.0)
    after = ex.inference({inp: x})[out]
    np.testing.assert_allclose(after, before + 1.0, rtol=1e-5, atol=1e-5)


def test_training_follows_the_reference_executor_step_for_step():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 12)).astype(np.float32)
    label = rng.integers(0, 10, size=8).astype(np.int64)
    runs = []
    for framework in ("openvino", "reference"):
        net, name, _ = networks.create_model("mlp", 8, classes=10, shape=(12,), seed=3)
        net.add_operation(datasets.dataset_loss("digits")(["output", "label"], "loss"))
        opt = d5ref.MomentumOptimizer(d5.executor(net, framework), learning_rate=0.05, momentum=0.9)
        runs.append([float(opt.step({name: x, "label": label})["loss"]) for _ in range(10)])
    ov_losses, ref_losses = runs
    np.testing.assert_allclose(ov_losses, ref_losses, rtol=1e-4, atol=1e-5)
    assert ov_losses[-1] < 0.5 * ov_losses[0]


def test_a_gpu_is_refused_with_the_reason():
    net, _, _ = _lenet()
    with pytest.raises(d5.DeviceError, match="runs on the CPU only"):
        d5.executor(net, "openvino", device="gpu:0")


def test_an_operator_it_cannot_read_is_named():
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Det", ["x"], ["y"])], "det",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(d5.UserError, match="Det"):
        d5.executor(model, "openvino")


def test_infer_run_and_compare_from_the_command_line(tmp_path):
    net, _, _ = _lenet()
    import onnx

    path = tmp_path / "lenet.onnx"
    onnx.save(net.to_onnx(), str(path))
    out = run_cli("infer", path, "--frameworks", "reference,openvino", "--max-time", "0.2")
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("openvino"))
    assert float(row.split()[2]) < 1e-4  # max |err| against the reference

    recipe = os.path.join(REPO, "recipes", "digits_lenet.py")
    out = run_cli("run", recipe, "--set", "executor=openvino", "--out", tmp_path / "run", timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["framework"] == "openvino" and results["passed"] is True

    out = run_cli("compare", recipe, "--frameworks", "reference,openvino", "--out", tmp_path / "cmp", timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    table = [line.split() for line in out.stdout.splitlines() if line.startswith(("reference ", "openvino "))]
    assert [r[0] for r in table] == ["reference", "openvino"] and all("pass" in r for r in table)


def test_bench_overhead_and_op_rows(tmp_path):
    out = run_cli("bench", "overhead", "--framework", "openvino", "--models", "lenet", "--max-time", "0.5",
                  "--json", tmp_path / "o.json", timeout=600)
    assert out.returncode == 0, out.stderr
    rows = json.loads((tmp_path / "o.json").read_text())
    rows = rows["results"] if isinstance(rows, dict) else rows
    assert rows and rows[0]["framework"] == "openvino" and rows[0]["max_abs_error"] < 1e-4
    out = run_cli("bench", "op", "--frameworks", "openvino", "--size", "small", "--suite", "gemm", "--max-time", "0.05",
                  timeout=600)
    assert out.returncode == 0, out.stderr
    assert any(" openvino " in line for line in out.stdout.splitlines())
