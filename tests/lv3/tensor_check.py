"""Run by tests/lv3/test_tensor_parallel.py on P real ranks (mpiexec): column-, row-split and
Megatron-paired fully connected layers give the unsplit layer's outputs and gradients.

Usage: ``tensor_check.py COMM EXECUTOR`` (COMM ``mpi`` or ``torch``). The independent computation
is numpy in float64 on the whole weights; shards are gathered before comparing. Rank 0 prints
one line ``RESULT {json}``: per layer and rank, the largest error relative to the tolerance
``|a - b| <= 1e-5 + 1e-4 |b|`` (<= 1 passes), and the bytes sent per pass with the formula's.
"""

import json
import sys

import numpy as np
import onnx
from deep500lite.frameworks.reference import MomentumOptimizer
from onnx import helper, numpy_helper

import deep500lite as d5
from deep500lite.lv3.mpi import import_mpi
from deep500lite.lv3.pipeline import MomentumSGD
from deep500lite.lv3.tensor_parallel import (
    ColumnParallelLinear,
    ParallelMLP,
    RowParallelLinear,
    allreduce_bytes,
    gather_shards,
    run_tensor_parallel,
)

COMM, EXECUTOR = sys.argv[1], sys.argv[2]
comm = (d5.distributed.MPICommunicator(timeout=60) if COMM == "mpi"
        else d5.distributed.TorchDistributedCommunicator(timeout=60))
P, R = comm.size, comm.rank
MPI = import_mpi()
B = 5
rng = np.random.default_rng(42)  # the same numbers on every rank


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def ratio(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.max(np.abs(got - want) / (1e-5 + 1e-4 * np.abs(want))))


def f64(a):
    return np.asarray(a, np.float64)


results = {}

# column split: W (7, 5); rank r computes output features bounds[r]
x, w, b, dy = rand(B, 5), rand(7, 5), rand(7), rand(B, 7)
layer = ColumnParallelLinear(comm, w, b, executor=EXECUTOR)
lo, hi = layer.bounds[R]
y = gather_shards(comm, layer.forward(x), layer.bounds, axis=1)
dx = layer.backward(np.ascontiguousarray(dy[:, lo:hi]))
dw = gather_shards(comm, layer.gradients["weight"], layer.bounds, axis=0)
db = gather_shards(comm, layer.gradients["bias"], layer.bounds, axis=0)
results["column"] = {"err": max(ratio(y, f64(x) @ f64(w).T + b), ratio(dx, f64(dy) @ f64(w)),
                                ratio(dw, f64(dy).T @ f64(x)), ratio(db, f64(dy).sum(0))),
                     "bytes": layer.bytes, "formula": {"forward": 0, "backward": allreduce_bytes(B * 5 * 4, P)},
                     "shard": [lo, hi]}

# row split: W (6, 9); rank r holds input features bounds[r]
x, w, b, dy = rand(B, 9), rand(6, 9), rand(6), rand(B, 6)
layer = RowParallelLinear(comm, w, b, executor=EXECUTOR)
lo, hi = layer.bounds[R]
y = layer.forward(np.ascontiguousarray(x[:, lo:hi]))
dx = gather_shards(comm, layer.backward(dy), layer.bounds, axis=1)
dw = gather_shards(comm, layer.gradients["weight"], layer.bounds, axis=1)
errs = [ratio(y, f64(x) @ f64(w).T + b), ratio(dx, f64(dy) @ f64(w)), ratio(dw, f64(dy).T @ f64(x))]
if R == 0:
    errs.append(ratio(layer.gradients["bias"], f64(dy).sum(0)))
results["row"] = {"err": max(errs), "bias_here": "bias" in layer.gradients, "bytes": layer.bytes,
                  "formula": {"forward": allreduce_bytes(B * 6 * 4, P), "backward": 0}, "shard": [lo, hi]}

# Megatron pairing: (10, 8) then (6, 10), tanh between; uneven hidden shards for P = 3, 4
x, w1, b1, w2, b2, dy = rand(B, 8), rand(10, 8), rand(10), rand(6, 10), rand(6), rand(B, 6)
for activation in ("Tanh", "Relu"):
    mlp = ParallelMLP(comm, w1, b1, w2, b2, activation=activation, executor=EXECUTOR)
    y = mlp.forward(x)
    dx = mlp.backward(dy)
    h = f64(x) @ f64(w1).T + b1
    a, da_dh = (np.tanh(h), 1 - np.tanh(h) ** 2) if activation == "Tanh" else (np.maximum(h, 0), (h > 0) * 1.0)
    dh = (f64(dy) @ f64(w2)) * da_dh
    errs = [ratio(y, a @ f64(w2).T + b2), ratio(dx, dh @ f64(w1)),
            ratio(gather_shards(comm, mlp.gradients["w1"], mlp.bounds, 0), dh.T @ f64(x)),
            ratio(gather_shards(comm, mlp.gradients["b1"], mlp.bounds, 0), dh.sum(0)),
            ratio(gather_shards(comm, mlp.gradients["w2"], mlp.bounds, 1), f64(dy).T @ a)]
    if R == 0:
        errs.append(ratio(mlp.gradients["b2"], f64(dy).sum(0)))
    results[f"mlp_{activation}"] = {
        "err": max(errs), "n_checked": len(errs), "bytes": mlp.bytes, "shard": list(mlp.bounds[R]),
        "allreduce_calls": comm.stats["allreduce"]["calls"],
        "formula": {"forward": allreduce_bytes(B * 6 * 4, P), "backward": allreduce_bytes(B * 8 * 4, P)}}

# a network's MLP (5 Gemm layers: 2 Megatron blocks and a replicated head with the 5th layer and the loss),
# against the single-process network on the reference executor: gradients, then 3 momentum-SGD steps
widths, acts = [8, 10, 9, 7, 6, 4], ["Tanh", "Relu", "Relu", "Sigmoid", None]
nodes, inits, h = [], [], "x"
for i, act in enumerate(acts):
    inits += [numpy_helper.from_array(rand(widths[i + 1], widths[i]) * 0.5, f"w{i}"),
              numpy_helper.from_array(rand(widths[i + 1]) * 0.1, f"b{i}")]
    nodes.append(helper.make_node("Gemm", [h, f"w{i}", f"b{i}"], [f"g{i}"], transB=1))
    h = f"g{i}"
    if act:
        nodes.append(helper.make_node(act, [h], [f"a{i}"]))
        h = f"a{i}"
nodes.append(helper.make_node("SoftmaxCrossEntropyLoss", [h, "label"], ["loss"]))
graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [B, 8]),
                                         helper.make_tensor_value_info("label", onnx.TensorProto.INT64, [B])],
                          [helper.make_tensor_value_info("loss", onnx.TensorProto.FLOAT, [])], inits)
net = d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
batches = [{"x": rand(B, 8), "label": rng.integers(0, 4, B).astype(np.int64)} for _ in range(3)]
ref = net.copy()
ref_ex = d5.executor(ref, "reference")
ref_ex.inference_and_backprop(batches[0], "loss")
want = dict(zip(ref.parameters, ref.fetch_tensors([p + "_grad" for p in ref.parameters])))
run = run_tensor_parallel(comm, net, batches[:1], executor=EXECUTOR)
errs = []
for name, owner in run.owners.items():
    g = run.gradients.get(name)
    if owner is not None:
        errs.append(ratio(gather_shards(comm, g, owner[1], owner[0]), want[name]))
    elif g is not None:
        errs.append(ratio(g, want[name]))
opt = MomentumOptimizer(d5.executor(ref.copy(), "reference"), learning_rate=0.1, momentum=0.9)
ref_losses = [float(opt.step(f)["loss"]) for f in batches]
trained = run_tensor_parallel(comm, net, batches, executor=EXECUTOR, optimizer=MomentumSGD(0.1, 0.9))
errs.append(ratio(trained.losses, ref_losses))
results["network"] = {"err": max(errs), "n_checked": len(errs), "owners": sorted(run.owners),
                      "held": sorted(run.gradients), "times": sorted(trained.times)}

everything = MPI.COMM_WORLD.gather({"rank": R, "size": P, "results": results}, root=0)
if R == 0:
    print("RESULT " + json.dumps(everything), flush=True)
if COMM == "torch":
    # destroy the process group before exit (gloo's threads abort the process when torn down at exit)
    comm.close()
MPI.COMM_WORLD.Barrier()
