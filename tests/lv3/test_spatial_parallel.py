"""Spatial (halo) parallelism: outputs and every gradient equal the unsplit network, in real jobs.

Height split over P = 2, 3, 4 ranks, and height and width over a 2x2 grid.

Each job runs ``spatial_check.py`` on P ranks; it compares, per configuration, the loss and the
gradients of the input and of every parameter with the unsplit network run by the same
executor (the input made a parameter so the executor differentiates it). BatchNormalization trains
with batch statistics by default: the unsplit network is then the original model trained by the
executor (its own training-mode BatchNormalization), and the new running statistics and the
inference loss after the step are compared too; ``netrun`` checks ``batchnorm="running"``.
Tolerance: float32 round-off, ``|split - unsplit| <= 1e-5 * max|unsplit| + 1e-6`` per tensor
(sums of a few hundred float32 products, added in a different order).
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deep500lite.errors import UserError
from deep500lite.lv3.spatial_graph import HaloGeometry, plan_spatial, row_bounds
from support import mpirun, requires_mpi, run_cli

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "spatial_check.py")
GRID = 30  # k 1/3/5 x stride 1/2 x pad 0/1/2 x dilation 1/2, without k=1 with dilation 2
BN_STATS = {"mu", "var", "n1__eps"}  # not parameters of the expanded unsplit network of ``netrun``
NET, BN, NETRUN = 2, 1, 1  # cases per job: "net" (overlap and not), "bn", "netrun"


def _report(rc, out):
    assert rc == 0, out[-6000:]
    lines = [line for line in out.splitlines() if line.startswith("SPATIAL ")]
    assert len(lines) == 1, out[-6000:]
    return json.loads(lines[0][len("SPATIAL "):])


def _assert_equal_to_unsplit(report, expected_cases):
    assert len(report) == expected_cases, sorted(report)
    for case, entry in report.items():
        assert set(entry["missing"]) <= (BN_STATS if case.endswith("running-stats") else set()), (case, entry["missing"])
        if case.startswith("net ") and not case.endswith("running-stats") or case == "bn":
            assert any(k.startswith("new ") for k in entry["errors"]), case  # running statistics compared
        for name, err in entry["errors"].items():
            scale = entry["scale"].get(name, entry["scale"]["loss"])
            assert err <= 1e-5 * scale + 1e-6, (case, name, err, scale)


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("p", [2, 3, 4])
def test_conv_grid_and_network_equal_unsplit_under_mpi(p):
    # The grid at P = 4 runs on the 2x2 grid below (to keep the CI time); running statistics at P = 2.
    cases = {2: "grid,net,bn,netrun", 3: "grid,net,bn", 4: "net,bn"}[p]
    rc, out, _ = mpirun(p, CHECK, "mpi", "torch", cases, timeout=180)
    _assert_equal_to_unsplit(_report(rc, out), {2: GRID + NET + BN + NETRUN, 3: GRID + NET + BN, 4: NET + BN}[p])


@pytest.mark.mpi
@requires_mpi
def test_height_and_width_split_on_a_2x2_grid_equals_unsplit():
    """Corners of the halo come from the diagonal rank; every block is uneven in both axes."""
    rc, out, _ = mpirun(4, CHECK, "mpi", "torch", "grid,net,bn", "2x2", timeout=180)
    _assert_equal_to_unsplit(_report(rc, out), GRID + NET + BN)


@pytest.mark.mpi
@requires_mpi
def test_network_equals_unsplit_on_the_reference_executor():
    rc, out, _ = mpirun(3, CHECK, "mpi", "reference", "net,bn", timeout=180)
    _assert_equal_to_unsplit(_report(rc, out), NET + BN)


@pytest.mark.mpi
@requires_mpi
def test_network_equals_unsplit_over_torch_distributed():
    pytest.importorskip("torch")
    rc, out, _ = mpirun(2, CHECK, "torch", "torch", "net,bn", timeout=180)
    _assert_equal_to_unsplit(_report(rc, out), NET + BN)


# ------------------------------------------------------------ single process
def test_row_bounds_cover_every_row_once():
    assert row_bounds(11, 4) == [0, 2, 5, 8, 11]
    assert row_bounds(8, 2) == [0, 4, 8]


@pytest.mark.parametrize("k,s,p,d", [(3, 1, 1, 1), (5, 2, 2, 2), (1, 2, 0, 1), (3, 2, 0, 2)])
def test_halo_windows_match_an_explicit_padded_convolution(k, s, p, d):
    """Each output row's input window equals the rows numpy's explicit padding would read."""
    h = 13
    e = (k - 1) * d + 1
    geo = HaloGeometry(h, (h + 2 * p - e) // s + 1, e, s, p, p)
    rows = np.arange(h)
    padded = np.concatenate([np.full(p, -1), rows, np.full(p, -1)])
    for o in range(geo.h_out):
        lo, hi, pt, pb = geo.window(o, o + 1)
        expected = padded[o * s:o * s + e]
        got = np.concatenate([np.full(pt, -1), rows[lo:hi], np.full(pb, -1)])
        assert got.tolist() == expected.tolist()


def _one_conv(pads, auto_pad=None):
    attrs = {"kernel_shape": [3, 3]}
    if auto_pad:
        attrs["auto_pad"] = auto_pad
    else:
        attrs["pads"] = pads
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])],
                              [numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_unsupported_configurations_are_refused_with_their_reason():
    with pytest.raises(UserError, match="auto_pad. Allowed: NOTSET. Received: auto_pad='SAME_UPPER'"):
        plan_spatial(_one_conv(None, "SAME_UPPER"), "x", (1, 1, 6, 6), 2)
    with pytest.raises(UserError, match=r"needs at least 5 rows in and out .* Received: 6 rows in, 4 out"):
        plan_spatial(_one_conv([0, 0, 0, 0]), "x", (1, 1, 6, 6), 5)
    with pytest.raises(UserError, match="must be a graph input"):
        plan_spatial(_one_conv([1, 1, 1, 1]), "w", (1, 1, 6, 6), 2)
    with pytest.raises(UserError, match="along the columns needs at least 5 columns"):
        plan_spatial(_one_conv([0, 0, 0, 0]), "x", (1, 1, 6, 6), (1, 5))
    plan = plan_spatial(_one_conv([1, 0, 1, 2]), "x", (1, 1, 6, 6), 2)
    assert [n.op_type for n in plan.nodes] == ["Conv"] and plan.gathered == ["y"]
    assert plan.geometry[0] == (HaloGeometry(6, 6, 3, 1, 1, 1), HaloGeometry(6, 6, 3, 1, 0, 2))
    assert isinstance(plan.model, onnx.ModelProto)


@pytest.mark.mpi
@requires_mpi
def test_bench_spatial_runs_every_mode_on_the_same_loss():
    from deep500lite.bench.spatial import MODES, run_spatial_benchmark

    result = run_spatial_benchmark(ranks=(2,), batch=2, size=12, channels=3, width=4, layers=3, steps=1,
                                   threads=1, job_timeout=120)
    assert [(r["ranks"], r["mode"]) for r in result.rows] == [(2, m) for m in MODES]
    losses = [r["loss"] for r in result.rows]
    assert max(losses) - min(losses) <= 1e-5 * abs(losses[0]), losses
    for row in result.rows:
        assert row["step_s"] == max(row["steps"]) and row["activation_bytes"] > 0
    sample, spatial = result.rows[0], result.rows[1]
    assert sample["split"]["halo"] == 0 and spatial["split"]["halo"] > 0
    assert "spatial-no-overlap" in result.table()


def test_bench_spatial_cli_refuses_bad_rank_counts_and_batches():
    proc = run_cli("bench", "spatial", "-n", "1")
    assert proc.returncode == 2, proc.stderr
    assert "rank counts of at least 2. Received: [1]" in proc.stderr
    proc = run_cli("bench", "spatial", "-n", "2,x")
    assert proc.returncode == 2 and "element 2 of '2,x'" in proc.stderr, proc.stderr
    proc = run_cli("bench", "spatial", "-n", "4", "--batch", "2")
    assert proc.returncode == 2 and "Received: batch 2 with 4 ranks" in proc.stderr, proc.stderr


class _OneRank:
    """A one-rank communicator (no MPI in the pytest process)."""

    rank, size = 0, 1

    def allgather(self, x):
        return [np.array(x)]

    def allreduce(self, x, op="sum"):
        return np.array(x)

    def barrier(self):
        pass


def test_one_rank_forward_and_set_parameters_match_the_executor():
    import deep500lite as d5
    from deep500lite.lv3.spatial import SpatialParallelNetwork

    model = _one_conv([1, 1, 1, 1])
    x = np.random.default_rng(0).standard_normal((1, 1, 6, 6)).astype(np.float32)
    spn = SpatialParallelNetwork(_OneRank(), model, framework="reference")
    expected = d5.executor(d5.load_model(model), "reference").inference({"x": x})["y"]
    np.testing.assert_allclose(spn.forward({"x": x}).outputs["y"], expected, rtol=1e-6)
    spn.set_parameters({"w": np.full((1, 1, 3, 3), 2.0, np.float32)})
    np.testing.assert_allclose(spn.forward({"x": x}).outputs["y"], 2 * expected, rtol=1e-5)
    with pytest.raises(UserError, match=r"grid must be \(rows, columns\).*Received: grid=\(2, 2\)"):
        SpatialParallelNetwork(_OneRank(), model, grid=(2, 2))


def test_one_rank_batch_statistics_match_the_onnx_formula():
    """One rank, BatchNormalization on the input: numpy's ONNX training-mode formula, by hand."""
    from deep500lite.lv3.spatial import SpatialParallelNetwork

    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32) * 2 + 1
    r = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    scale, bias = np.array([1.0, 2.0, 0.5], np.float32), np.array([0.1, -0.2, 0.3], np.float32)
    mean0, var0 = np.array([0.5, 0.0, -1.0], np.float32), np.array([1.0, 2.0, 3.0], np.float32)
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3, momentum=0.7),
             helper.make_node("Mul", ["y", "r"], ["ry"]), helper.make_node("ReduceSum", ["ry"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                              [numpy_helper.from_array(v, k) for k, v in
                               {"s": scale, "b": bias, "m": mean0, "v": var0, "r": r}.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    spn = SpatialParallelNetwork(_OneRank(), model, framework="reference")
    res = spn.forward_backward({"x": x}, "loss")
    x64, r64 = x.astype(np.float64), r.astype(np.float64)
    mu, var = x64.mean(axis=(0, 2, 3)), x64.var(axis=(0, 2, 3))  # biased, as ONNX
    xhat = (x64 - mu[:, None, None]) / np.sqrt(var[:, None, None] + 1e-3)
    loss = np.sum((xhat * scale[:, None, None] + bias[:, None, None]) * r64)
    g = r64 * scale[:, None, None]
    dx = (g - g.mean(axis=(0, 2, 3))[:, None, None] - xhat * (g * xhat).mean(axis=(0, 2, 3))[:, None, None]) \
        / np.sqrt(var[:, None, None] + 1e-3)
    np.testing.assert_allclose(res.outputs["loss"], loss, rtol=1e-5)
    np.testing.assert_allclose(res.input_gradient, dx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(res.gradients["s"], (r64 * xhat).sum(axis=(0, 2, 3)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res.gradients["b"], r64.sum(axis=(0, 2, 3)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res.running_stats["m"], 0.7 * mean0 + 0.3 * mu, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(res.running_stats["v"], 0.7 * var0 + 0.3 * var, rtol=1e-6)
    # Kept: inference now normalizes with the new running statistics.
    new_hat = (x64 - res.running_stats["m"][:, None, None]) / np.sqrt(res.running_stats["v"][:, None, None] + 1e-3)
    expected = np.sum((new_hat * scale[:, None, None] + bias[:, None, None]) * r64)
    np.testing.assert_allclose(spn.forward({"x": x}).outputs["loss"], expected, rtol=1e-5)
    frozen = SpatialParallelNetwork(_OneRank(), model, framework="reference", batchnorm="running")
    assert frozen.forward_backward({"x": x}, "loss").running_stats == {}
    with pytest.raises(UserError, match="batchnorm must be one of batch, running. Received: 'train'"):
        SpatialParallelNetwork(_OneRank(), model, batchnorm="train")
