"""``deep500lite infer --frameworks``: a framework that fails is an error row on one line, the others
still run (the reference included), errors are measured against the first framework that ran when
the reference fails, and the exit status is 2 when any framework failed."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support import run_cli

import deep500lite as d5

ALL = "reference,torch,tensorflow,onnxruntime"
pytestmark = pytest.mark.requires("torch", "tensorflow", "onnxruntime")


def pad_model(mode):
    """One Pad node whose pads are fed: a (2, 4) input padded by ``p``."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    p = helper.make_tensor_value_info("p", TensorProto.INT64, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])
    node = helper.make_node("Pad", ["x", "p"], ["y"], mode=mode, name=f"pad_{mode}")
    return helper.make_model(helper.make_graph([node], "pad", [x, p], [y]), opset_imports=[helper.make_opsetid("", 17)])


def _write(tmp_path, mode, pads):
    model, inputs = tmp_path / f"{mode}.onnx", tmp_path / f"{mode}.npz"
    onnx.save(pad_model(mode), model)
    np.savez(inputs, x=np.arange(8, dtype=np.float32).reshape(2, 4), p=np.array(pads, np.int64))
    return model, inputs


def _rows(stdout):
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("framework "))
    header = lines[start]
    rows = {line.split()[0]: line for line in lines[start + 2:] if line and not line.startswith("note:")}
    notes = [line for line in lines[start + 2:] if line.startswith("note:")]
    return header, rows, notes


def _fails_only_on(model, feeds, expected):
    """Precondition: which frameworks fail on this model (so the CLI test means what it says)."""
    failed = set()
    for fw in ALL.split(","):
        try:
            d5.executor(model, fw).inference(feeds)
        except d5.ExecutionError:
            failed.add(fw)
    assert failed == expected, f"the model no longer fails only on {expected} (fails on {failed}): pick another"


def test_one_failing_framework_is_an_error_row_and_the_others_run(tmp_path):
    # Reflect padding wider than the input: ONNX Runtime refuses it, the others reflect again.
    model, inputs = _write(tmp_path, "reflect", [0, 5, 0, 5])
    _fails_only_on(pad_model("reflect"), dict(np.load(inputs)), {"onnxruntime"})
    proc = run_cli("infer", model, "--inputs", inputs, "--frameworks", ALL, "--max-time", "0.05")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    header, rows, notes = _rows(proc.stdout)
    assert "max |err| vs reference" in header and not notes
    assert list(rows) == ["reference", "torch", "tensorflow", "onnxruntime"]
    for fw in ("reference", "torch", "tensorflow"):
        cells = rows[fw].split()
        assert cells[1] == "cpu" and cells[2] != "error" and float(cells[2]) >= 0.0, rows[fw]
    error = rows["onnxruntime"]
    assert error.split()[1:3] == ["cpu", "error:"], error
    # The whole ExecutionError message, cause included, on the row's line.
    assert ("The onnxruntime executor failed in node 'pad_reflect' (Pad) with input shapes [2, 4], [4]: "
            in error), error
    assert "Traceback" not in error and len(error) > 150


def test_a_failing_reference_compares_against_the_first_framework_that_ran(tmp_path):
    # Negative pads crop (ONNX allows them); the reference executor's numpy kernel refuses them.
    model, inputs = _write(tmp_path, "constant", [0, -1, 0, -1])
    _fails_only_on(pad_model("constant"), dict(np.load(inputs)), {"reference"})
    proc = run_cli("infer", model, "--inputs", inputs, "--frameworks", ALL, "--max-time", "0.05")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    header, rows, notes = _rows(proc.stdout)
    ran = [fw for fw in ("torch", "tensorflow", "onnxruntime") if "error:" not in rows[fw]]
    assert ran, proc.stdout
    assert f"max |err| vs {ran[0]}" in header
    assert "The reference executor failed in node 'pad_constant' (Pad)" in rows["reference"]
    assert notes == [f"note: the reference executor failed, so max |err| is measured against {ran[0]}, the first "
                     "framework that ran."]
    # The first framework that ran is compared with itself; the others crop the same way.
    assert float(rows[ran[0]].split()[2]) == 0.0
    assert all(float(rows[fw].split()[2]) == 0.0 for fw in ran)


def test_a_failing_unlisted_reference_is_said_under_the_table(tmp_path):
    model, inputs = _write(tmp_path, "constant", [0, -1, 0, -1])
    proc = run_cli("infer", model, "--inputs", inputs, "--frameworks", "torch,onnxruntime", "--max-time", "0.05")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    header, rows, notes = _rows(proc.stdout)
    assert "max |err| vs torch" in header and list(rows) == ["torch", "onnxruntime"]
    assert len(notes) == 1 and notes[0].startswith(
        "note: the reference executor failed, so max |err| is measured against torch, the first framework that "
        "ran. Reference: The reference executor failed in node 'pad_constant' (Pad)")


def test_every_framework_running_exits_0(tmp_path):
    model, inputs = _write(tmp_path, "constant", [0, 1, 0, 1])
    proc = run_cli("infer", model, "--inputs", inputs, "--frameworks", ALL, "--max-time", "0.05")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    header, rows, notes = _rows(proc.stdout)
    assert "max |err| vs reference" in header and not notes
    assert all(float(rows[fw].split()[2]) == 0.0 for fw in ALL.split(",")), proc.stdout
