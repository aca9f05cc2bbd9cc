"""Run on every rank by test_spatial_parallel.py: spatially split networks against the unsplit one.

Usage: ``mpiexec -n P python -m mpi4py spatial_check.py COMM FRAMEWORK CASES [RxC]``, COMM ``mpi``
or ``torch``, CASES ``grid``, ``net`` or ``grid,net``, RxC the grid of ranks (default Px1: height
split only; 2x2 splits height and width). Rank 0 prints one JSON line: per case, the
largest absolute error of the outputs and of every gradient (inputs and parameters, the input's
gathered from every rank) against the unsplit network run by the same executor, and the scale of
the values compared.
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


def reference(model, feeds, framework):
    """The unsplit network's loss and gradients (the input made a parameter), run by ``framework``."""
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
    return out["loss"], dict(zip(names, net.fetch_tensors([n + "_grad" for n in names])))


def compare(comm, model, feeds, framework, overlap, grid):
    ref_loss, ref_grads = reference(expand_batchnorm(model), feeds, framework)
    spn = SpatialParallelNetwork(comm, model, "x", framework, overlap=overlap, grid=grid)
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
              "loss_forward": float(abs(fwd.outputs["loss"] - ref_loss)),
              "x": float(np.max(np.abs(dx - ref_grads["x"])))}
    scale = {"loss": float(abs(ref_loss)), "x": float(np.max(np.abs(ref_grads["x"])))}
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
    if "net" in cases:
        model, feeds = net_case(rng)
        report["net overlap"] = compare(comm, model, feeds, framework, True, grid)
        report["net no-overlap"] = compare(comm, model, feeds, framework, False, grid)
    if comm.rank == 0:
        print("SPATIAL " + json.dumps(report), flush=True)
    if kind == "torch":
        comm.barrier()
        comm.close()  # destroy the gloo process group before exit (else its threads may abort the job)


if __name__ == "__main__":
    main()
