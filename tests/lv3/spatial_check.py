"""Run on every rank by test_spatial_parallel.py: spatially split networks against the unsplit one.

Usage: ``mpiexec -n P python -m mpi4py spatial_check.py COMM FRAMEWORK CASES [RxC]``, COMM ``mpi``
or ``torch``, CASES a comma list of ``grid`` (single convolutions), ``net`` (the network, training-mode
BatchNormalization), ``bn`` (three BatchNormalizations, one on the input, uneven blocks) and
``netrun`` (the network with ``batchnorm="running"``), RxC the grid of ranks (default Px1: height
split only; 2x2 splits height and width). Rank 0 prints one JSON line: per case, the
largest absolute error of the outputs and of every gradient (inputs and parameters, the input's
gathered from every rank) against the unsplit network run by the same executor, and the scale of
the values compared. With batch statistics the unsplit network is the original model trained by the
executor (its own training-mode BatchNormalization: batch mean and biased variance, running
statistics updated by ONNX's rule); the new running statistics and the inference loss after the
step are compared too.
"""

from __future__ import annotations

import itertools
import json
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import deep500lite as d5
from deep500lite.lv3.spatial import SpatialParallelNetwork, expand_batchnorm, row_bounds


def _model(nodes, x_shape, inits, extra_inputs=()):
    graph = helper.make_graph(
        nodes, "spatial_check",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape)), *extra_inputs],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(v.astype(np.float32) if v.dtype == np.float64 else v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def conv_case(rng, k, s, p, d, h, w=9):
    """One Conv (+ Relu) with a linear tail: loss = sum(relu(conv(x)) * R)."""
    x_shape = (2, 2, h, w)
    weight = rng.standard_normal((3, 2, k, k)) * 0.3
    b = rng.standard_normal(3) * 0.1
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k], strides=[s, s],
                            pads=[p, p, p, p], dilations=[d, d])
    e = (k - 1) * d + 1
    ho = (h + 2 * p - e) // s + 1
    wo = (w + 2 * p - e) // s + 1
    r = rng.standard_normal((2, 3, ho, wo))
    nodes = [conv, helper.make_node("Relu", ["y"], ["z"]), helper.make_node("Mul", ["z", "r"], ["m"]),
             helper.make_node("ReduceSum", ["m"], ["loss"], keepdims=0)]
    return _model(nodes, x_shape, {"w": weight, "b": b, "r": r}), {"x": rng.standard_normal(x_shape).astype(np.float32)}


def net_case(rng, h=13):
    """Conv/BN/Relu/MaxPool/residual Add/dilated Conv/AveragePool, then Flatten/Gemm/cross-entropy."""
    x_shape = (2, 3, h, 6)
    c = 4
    ho = (h - 2) // 2 + 1
    wo = (6 - 2) // 2 + 1
    inits = {"w1": rng.standard_normal((c, 3, 3, 3)) * 0.3, "b1": rng.standard_normal(c) * 0.1,
             "s": 1 + rng.standard_normal(c) * 0.1, "bb": rng.standard_normal(c) * 0.1,
             "mu": rng.standard_normal(c) * 0.1, "var": 1 + rng.random(c),
             "w2": rng.standard_normal((c, c, 3, 3)) * 0.3, "b2": rng.standard_normal(c) * 0.1,
             "bias3": rng.standard_normal((c, 1, 1)) * 0.1,
             "w3": rng.standard_normal((c, c, 5, 5)) * 0.2,
             "g": rng.standard_normal((3, c * ho * (wo - 1))) * 0.3, "gb": rng.standard_normal(3) * 0.1}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s", "bb", "mu", "var"], ["n1"], epsilon=1e-3),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "p1"], ["a2"]),
        helper.make_node("Add", ["a2", "bias3"], ["a3"]),
        helper.make_node("Tanh", ["a3"], ["t3"]),
        helper.make_node("Conv", ["t3", "w3"], ["c3"], pads=[4, 2, 4, 2], dilations=[2, 1]),
        helper.make_node("AveragePool", ["c3"], ["q3"], kernel_shape=[3, 2], strides=[1, 1], pads=[1, 0, 1, 0],
                         count_include_pad=0),
        helper.make_node("Flatten", ["q3"], ["f"]),
        helper.make_node("Gemm", ["f", "g", "gb"], ["logits"], transB=1),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "label"], ["loss"]),
    ]
    label = helper.make_tensor_value_info("label", TensorProto.INT64, [2])
    model = _model(nodes, x_shape, inits, [label])
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32), "label": np.array([0, 2], np.int64)}
    return model, feeds


def bn_case(rng, h=11, w=7):
    """BatchNormalization on the input, after a Conv and after a strided Conv (momentum 0.8), a linear loss."""
    x_shape = (2, 3, h, w)
    c = 4
    ho, wo = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    inits = {"s0": 1 + rng.standard_normal(3) * 0.1, "b0": rng.standard_normal(3) * 0.1,
             "m0": rng.standard_normal(3) * 0.1, "v0": 1 + rng.random(3),
             "w1": rng.standard_normal((c, 3, 3, 3)) * 0.3,
             "s1": 1 + rng.standard_normal(c) * 0.1, "b1": rng.standard_normal(c) * 0.1,
             "m1": rng.standard_normal(c) * 0.1, "v1": 1 + rng.random(c),
             "w2": rng.standard_normal((c, c, 3, 3)) * 0.3,
             "s2": 1 + rng.standard_normal(c) * 0.1, "b2": rng.standard_normal(c) * 0.1,
             "m2": rng.standard_normal(c) * 0.1, "v2": 1 + rng.random(c),
             "r": rng.standard_normal((2, c, ho, wo))}
    nodes = [
        helper.make_node("BatchNormalization", ["x", "s0", "b0", "m0", "v0"], ["n0"]),
        helper.make_node("Conv", ["n0", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s1", "b1", "m1", "v1"], ["n1"], epsilon=1e-3),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c2", "s2", "b2", "m2", "v2"], ["n2"], epsilon=1e-4,
                         momentum=0.8),
        helper.make_node("Mul", ["n2", "r"], ["m"]),
        helper.make_node("ReduceSum", ["m"], ["loss"], keepdims=0),
    ]
    return _model(nodes, x_shape, inits), {"x": (rng.standard_normal(x_shape) * 2 + 0.5).astype(np.float32)}


def running_statistics(model):
    """The running mean and variance initializers of every BatchNormalization in ``model``."""
    return [t for n in model.graph.node if n.op_type == "BatchNormalization" for t in n.input[3:5]]


def reference(model, feeds, framework):
    """The unsplit network's loss and gradients (the input made a parameter), run by ``framework``;
    also its running statistics after the step and its inference loss then."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    kept = [i for i in m.graph.input if i.name != "x"]
    del m.graph.input[:]
    m.graph.input.extend(kept)
    m.graph.initializer.append(numpy_helper.from_array(feeds["x"], "x"))
    net = d5.load_model(m)
    ex = d5.executor(net, framework)
    out = ex.inference_and_backprop({k: v for k, v in feeds.items() if k != "x"}, "loss")
    names = [p for p, _ in net.gradient("loss")]
    grads = dict(zip(names, net.fetch_tensors([n + "_grad" for n in names])))
    stats = {t: np.array(net.fetch_tensor(t)) for t in running_statistics(model)}
    after = ex.inference({k: v for k, v in feeds.items() if k != "x"})["loss"]
    return out["loss"], grads, stats, after


def compare(comm, model, feeds, framework, overlap, grid, batchnorm="batch"):
    unsplit = model if batchnorm == "batch" else expand_batchnorm(model)
    ref_loss, ref_grads, ref_stats, ref_after = reference(unsplit, feeds, framework)
    spn = SpatialParallelNetwork(comm, model, "x", framework, overlap=overlap, grid=grid, batchnorm=batchnorm)
    res = spn.forward_backward(feeds, "loss")
    fwd = spn.forward(feeds)
    # The input's gradient, gathered by hand from every rank's block (row_bounds per axis).
    rows, cols = row_bounds(feeds["x"].shape[2], grid[0]), row_bounds(feeds["x"].shape[3], grid[1])
    pad = np.zeros(res.input_gradient.shape[:2] + (rows[1] + 1, cols[1] + 1), np.float32)
    pad[:, :, :res.input_gradient.shape[2], :res.input_gradient.shape[3]] = res.input_gradient
    parts = comm.allgather(pad)
    dx = np.concatenate([np.concatenate([parts[qh * grid[1] + qw][:, :, :rows[qh + 1] - rows[qh], :cols[qw + 1] - cols[qw]]
                                         for qw in range(grid[1])], axis=3) for qh in range(grid[0])], axis=2)
    errors = {"loss": float(abs(res.outputs["loss"] - ref_loss)),
              "loss_forward": float(abs(fwd.outputs["loss"] - (ref_after if batchnorm == "batch" else ref_loss))),
              "x": float(np.max(np.abs(dx - ref_grads["x"])))}
    scale = {"loss": float(abs(ref_loss)), "loss_forward": float(abs(ref_after)),
             "x": float(np.max(np.abs(ref_grads["x"])))}
    if batchnorm == "batch":
        # New running statistics: returned, equal to the unsplit executor's, and kept by the network.
        if set(res.running_stats) != set(ref_stats):
            errors["running_stats_names"] = float("inf")
        for name, value in ref_stats.items():
            got = res.running_stats.get(name, np.full_like(value, np.inf))
            errors["new " + name] = float(np.max(np.abs(got - value)))
            scale["new " + name] = float(np.max(np.abs(value)))
    missing = sorted(set(ref_grads) - {"x"} - set(res.gradients))
    for name, g in res.gradients.items():
        r = ref_grads[name].reshape(g.shape)
        errors[name] = float(np.max(np.abs(g - r)))
        scale[name] = float(np.max(np.abs(r)))
    return {"errors": errors, "scale": scale, "missing": missing, "halo_calls": res.times["halo"] >= 0}


def main():
    kind, framework, cases = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    if kind == "mpi":
        comm = d5.distributed.MPICommunicator()
    else:
        from deep500lite.lv3 import TorchDistributedCommunicator

        comm = TorchDistributedCommunicator()
    grid = tuple(int(v) for v in sys.argv[4].split("x")) if len(sys.argv) > 4 else (comm.size, 1)
    rng = np.random.default_rng(1234)
    report = {}
    if "grid" in cases:
        for k, s, p, d in itertools.product((1, 3, 5), (1, 2), (0, 1, 2), (1, 2)):
            if k == 1 and d == 2:
                continue
            model, feeds = conv_case(rng, k, s, p, d, h=9 + 2 * grid[0], w=7 + 2 * grid[1])
            report[f"conv k{k} s{s} p{p} d{d}"] = compare(comm, model, feeds, framework, (k + p) % 2 == 0, grid)
    if "net" in cases or "netrun" in cases:
        model, feeds = net_case(rng)
        if "net" in cases:
            report["net overlap"] = compare(comm, model, feeds, framework, True, grid)
            report["net no-overlap"] = compare(comm, model, feeds, framework, False, grid)
        if "netrun" in cases:
            report["net running-stats"] = compare(comm, model, feeds, framework, True, grid, "running")
    if "bn" in cases:
        model, feeds = bn_case(rng)
        report["bn"] = compare(comm, model, feeds, framework, True, grid)
    if comm.rank == 0:
        print("SPATIAL " + json.dumps(report), flush=True)
    if kind == "torch":
        comm.barrier()
        comm.close()  # destroy the gloo process group before exit (else its threads may abort the job)


if __name__ == "__main__":
    main()
