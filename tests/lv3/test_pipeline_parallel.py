"""Pipeline parallelism (deep500lite.lv3.pipeline): gradients and training equal the unsplit
network on 2, 3 and 4 real ranks (pipeline_check.py), and the schedules, partitioner and
bubble model without MPI."""

from __future__ import annotations

import itertools
import json
import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from support import mpirun, requires_mpi

import deep500lite as d5
from deep500lite.errors import UserError
from deep500lite.lv3.pipeline import (
    MomentumSGD,
    bubble_model,
    partition_network,
    pipeline_schedule,
)

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(p, comm, executor):
    rc, out, _ = mpirun(p, os.path.join(HERE, "pipeline_check.py"), comm, executor, timeout=120)
    assert rc == 0, out[-6000:]
    line = [x for x in out.splitlines() if x.startswith("RESULT ")]
    assert len(line) == 1, out[-6000:]
    ranks = json.loads(line[0][len("RESULT "):])
    assert sorted(r["rank"] for r in ranks) == list(range(p))
    return ranks


def _check(ranks, p):
    configs = ranks[0]["results"].keys()
    for r in ranks:
        res = r["results"]["run_pipeline/gpipe/M4"]
        assert res["err"] <= 1.0 and res["n_steps"] == 3 and res["split_ok"] and res["bubble_in_range"], res
        assert res["model"] == pytest.approx((p - 1) / (4 + p - 1))
    for key in configs:
        if key.startswith(("schedule", "run_pipeline")):
            continue
        owned = [name for r in ranks for name in r["results"][key]["params"]]
        # every parameter of the network is checked, on exactly one rank
        n_params = 10 if key.startswith(("mlp", "train")) else 8
        assert len(owned) == len(set(owned)) == n_params, (key, owned)
        for r in ranks:
            res = r["results"][key]
            assert res["err"] <= 1.0, (key, r["rank"], res)
            if "peak" in res:
                assert res["peak"] == res["expected_peak"], (key, r["rank"], res)
    assert len([k for k in configs if not k.startswith(("schedule", "run_pipeline"))]) == 9


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("p", [2, 3, 4])
def test_pipeline_equals_single_process_mpi_torch(p):
    """GPipe and 1F1B, M = 1 and 4, MLP and CNN, on the torch executor over MPI: the loss, the
    outputs, every parameter gradient and the input gradient equal the single-process network on
    the reference executor (|a - b| <= 1e-5 + 1e-4 |b|); 3 steps of momentum SGD equal the
    reference MomentumOptimizer's."""
    _check(_run(p, "mpi", "torch"), p)


@pytest.mark.mpi
@requires_mpi
def test_pipeline_equals_single_process_torch_distributed_reference():
    pytest.importorskip("torch")
    _check(_run(3, "torch", "reference"), 3)


# ------------------------------------------------------------------ without MPI
def test_schedules_run_every_micro_batch_once_in_a_valid_order():
    for schedule in ("gpipe", "1f1b"):
        for p in (1, 2, 3, 4):
            for m in (1, 2, 4, 8):
                for s in range(p):
                    ops = pipeline_schedule(schedule, s, p, m)
                    assert sorted(ops) == sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
                    assert all(ops.index(("F", i)) < ops.index(("B", i)) for i in range(m))
                    held = peak = 0
                    for kind, _ in ops:
                        held += 1 if kind == "F" else -1
                        peak = max(peak, held)
                    assert peak == (m if schedule == "gpipe" else min(m, p - s))
    assert pipeline_schedule("1f1b", 1, 3, 4) == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("F", 3),
                                                  ("B", 2), ("B", 3)]
    with pytest.raises(UserError, match=r"Allowed values are 'gpipe', '1f1b'.*Received: schedule='zb'"):
        pipeline_schedule("zb", 0, 2, 2)


def test_bubble_model_and_optimizer_rule():
    assert bubble_model(4, 8) == pytest.approx(3 / 11)
    assert bubble_model(1, 4) == 0.0
    opt = MomentumSGD(0.5, 0.9)
    w, g = np.float32([1.0, 2.0]), np.float32([0.2, -0.4])
    w1 = opt(g, w, "w")
    w2 = opt(g, w1, "w")
    np.testing.assert_allclose(w1, w - 0.5 * g)
    np.testing.assert_allclose(w2, w1 + 0.9 * (-0.5 * g) - 0.5 * g, rtol=1e-6)


def _chain(widths, batch=4, tied=False):
    rng = np.random.default_rng(0)
    nodes, inits, h = [], [], "x"
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        w = "w0" if tied and a == b and i else f"w{i}"
        if w not in {t.name for t in inits}:
            inits.append(numpy_helper.from_array(rng.standard_normal((b, a)).astype(np.float32), w))
        nodes += [helper.make_node("Gemm", [h, w], [f"g{i}"], transB=1), helper.make_node("Relu", [f"g{i}"], [f"r{i}"])]
        h = f"r{i}"
    nodes.append(helper.make_node("ReduceMean", [h], ["loss"], keepdims=0))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                                             [batch, widths[0]])],
                              [helper.make_tensor_value_info("loss", onnx.TensorProto.FLOAT, [])], inits)
    return d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_automatic_cuts_balance_the_flops_and_given_cuts_are_checked():
    # layer FLOPs proportional to 64*8, 8*8, 8*8, 8*64: two stages balance at the middle
    net = _chain([64, 8, 8, 8, 64])
    stages = partition_network(net, 2)
    assert [s.parameters for s in stages] == [["w0", "w1"], ["w2", "w3"]]
    assert stages[1].input == "r1" and stages[0].output == "r1" and stages[1].output == "loss"
    by_params = partition_network(net, 3, balance="params")
    assert [s.parameters for s in by_params] == [["w0"], ["w1", "w2"], ["w3"]]
    given = partition_network(net, 3, cuts=["g0", "r2"])
    assert [s.parameters for s in given] == [["w0"], ["w1", "w2"], ["w3"]]
    assert [len(s.nodes) for s in given] == [1, 5, 3]
    with pytest.raises(UserError, match=r"A cut must be a tensor where exactly one float tensor crosses.*"
                                        r"Received: 'w1'"):
        partition_network(net, 2, cuts=["w1"])
    with pytest.raises(UserError, match=r"cuts must name stages - 1 = 1 tensors"):
        partition_network(net, 2, cuts=["r0", "r1"])
    with pytest.raises(UserError, match=r"cuts must be distinct and in graph order"):
        partition_network(net, 3, cuts=["r2", "r0"])
    with pytest.raises(UserError, match=r"has 8 valid cut points.*Received: stages=10"):
        partition_network(net, 10)


def test_shared_parameters_and_batchnorm_are_refused():
    tied = _chain([8, 8, 8], tied=True)
    with pytest.raises(UserError, match=r"Parameter 'w0' is read by stages 0 and 1"):
        partition_network(tied, 2, cuts=["r0"])
    model = _chain([8, 8]).to_onnx()
    model.graph.node.insert(0, helper.make_node("Dropout", ["x"], ["xd"]))
    model.graph.node[1].input[0] = "xd"
    with pytest.raises(UserError, match=r"cannot be pipelined.*Received: a network with \['Dropout'\]"):
        partition_network(d5.load_model(model), 2)
