"""Run by tests/lv3/test_pipeline_parallel.py on P real ranks (mpiexec): pipeline-parallel
gradients and training equal the single-process network.

Usage: ``pipeline_check.py COMM EXECUTOR`` with COMM ``mpi`` or ``torch`` (torch.distributed,
gloo) and EXECUTOR the framework that runs the stages. Every rank also runs the whole network in
one process on the reference executor (onnx.reference; the independent computation) and prints
(rank 0, for all ranks) one line ``RESULT [json per rank]`` with, per configuration, the largest error relative to the
tolerance (``|a - b| <= 1e-5 + 1e-4 |b|``: a ratio <= 1 passes).
"""

import itertools
import json
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

import deep500lite as d5
from deep500lite.lv3.mpi import import_mpi
from deep500lite.lv3.pipeline import (
    MomentumSGD,
    PipelineParallel,
    partition_network,
    pipeline_schedule,
    run_pipeline,
)

COMM, EXECUTOR = sys.argv[1], sys.argv[2]
if COMM == "mpi":
    comm = d5.distributed.MPICommunicator(timeout=60)
else:
    comm = d5.distributed.TorchDistributedCommunicator(timeout=60)
P = comm.size
MPI = import_mpi()
BATCH = 8


def _param(rng, name, shape, scale=0.5):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def mlp(seed=0):
    """x[B,6] -> 4 x (Gemm, activation) -> Gemm to 5 classes -> cross-entropy (mean)."""
    rng = np.random.default_rng(seed)
    widths = [6, 12, 10, 9, 8, 5]
    nodes, inits, h = [], [], "x"
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        inits += [_param(rng, f"w{i}", (b, a)), _param(rng, f"b{i}", (b,), 0.1)]
        nodes.append(helper.make_node("Gemm", [h, f"w{i}", f"b{i}"], [f"g{i}"], transB=1))
        h = f"g{i}"
        if i < len(widths) - 2:
            nodes.append(helper.make_node("Tanh" if i % 2 else "Relu", [h], [f"a{i}"]))
            h = f"a{i}"
    nodes.append(helper.make_node("SoftmaxCrossEntropyLoss", [h, "label"], ["loss"], reduction="mean"))
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [BATCH, 6]),
                                             helper.make_tensor_value_info("label", onnx.TensorProto.INT64, [BATCH])],
                              [helper.make_tensor_value_info("loss", onnx.TensorProto.FLOAT, []),
                               helper.make_tensor_value_info(h, onnx.TensorProto.FLOAT, [BATCH, 5])], inits)
    return d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])), 5, (6,)


def cnn(seed=1):
    """x[B,2,8,8] -> Conv 3x3 -> Relu -> MaxPool 2 -> Conv 3x3 -> Relu -> Flatten -> Gemm -> Relu -> Gemm -> loss."""
    rng = np.random.default_rng(seed)
    inits = [_param(rng, "c1", (4, 2, 3, 3)), _param(rng, "c1b", (4,), 0.1), _param(rng, "c2", (3, 4, 3, 3)),
             _param(rng, "c2b", (3,), 0.1), _param(rng, "f1", (7, 12)), _param(rng, "f1b", (7,), 0.1),
             _param(rng, "f2", (4, 7)), _param(rng, "f2b", (4,), 0.1)]
    nodes = [helper.make_node("Conv", ["x", "c1", "c1b"], ["y1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["y1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "c2", "c2b"], ["y2"], strides=[2, 2], pads=[1, 1, 0, 0]),
             helper.make_node("Relu", ["y2"], ["r2"]),
             helper.make_node("Flatten", ["r2"], ["fl"]),
             helper.make_node("Gemm", ["fl", "f1", "f1b"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["hr"]),
             helper.make_node("Gemm", ["hr", "f2", "f2b"], ["logits"], transB=1),
             helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "label"], ["loss"], reduction="mean")]
    graph = helper.make_graph(nodes, "cnn",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [BATCH, 2, 8, 8]),
                               helper.make_tensor_value_info("label", onnx.TensorProto.INT64, [BATCH])],
                              [helper.make_tensor_value_info("loss", onnx.TensorProto.FLOAT, []),
                               helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [BATCH, 4])], inits)
    return d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])), 4, (2, 8, 8)


def batch(classes, shape, seed):
    rng = np.random.default_rng(100 + seed)
    return {"x": rng.standard_normal((BATCH, *shape)).astype(np.float32),
            "label": rng.integers(0, classes, BATCH).astype(np.int64)}


def with_input_as_parameter(net, feeds):
    """The same network with x held as a parameter, so the reference autodiff also gives dL/dx."""
    model = net.to_onnx()
    keep = [vi for vi in model.graph.input if vi.name != "x"]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    model.graph.initializer.append(numpy_helper.from_array(feeds["x"], "x"))
    return d5.load_model(model)


def ratio(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return float("inf")
    return float(np.max(np.abs(got - want) / (1e-5 + 1e-4 * np.abs(want)))) if got.size else 0.0


def single_process_gradients(net, feeds):
    full = with_input_as_parameter(net, feeds)
    ex = d5.executor(full, "reference")
    outs = ex.inference_and_backprop({"label": feeds["label"]}, "loss")
    names = [p for p, _ in full.gradient("loss")]
    grads = dict(zip(names, full.fetch_tensors([p + "_grad" for p in names])))
    return outs, grads


results = {}
for name, builder in (("mlp", mlp), ("cnn", cnn)):
    net, classes, shape = builder()
    feeds = batch(classes, shape, 0)
    want_outs, want_grads = single_process_gradients(net, feeds)
    stages = partition_network(net, P, micro_batch=2)
    # every node in exactly one stage (Constant nodes aside), in order
    assert sum(len(s.nodes) for s in stages) == len(net.graph.node), [len(s.nodes) for s in stages]
    for schedule in ("gpipe", "1f1b"):
        for m in (1, 4):
            pipe = PipelineParallel(comm, net, m, BATCH, schedule, EXECUTOR)
            res = pipe.step(feeds, update=False)
            errs = [ratio(res.gradients[p], want_grads[p]) for p in pipe.parameters]
            if pipe.first:
                errs.append(ratio(res.input_gradient, want_grads["x"]))
            if pipe.last:
                errs.append(ratio(res.loss, want_outs["loss"]))
                for o, v in res.outputs.items():
                    errs.append(ratio(v, want_outs[o]))
            expected_peak = m if schedule == "gpipe" else min(m, P - comm.rank)
            results[f"{name}/{schedule}/M{m}"] = {"err": max(errs, default=0.0), "n_checked": len(errs),
                                                  "params": pipe.parameters, "peak": res.stashed_peak,
                                                  "expected_peak": expected_peak,
                                                  "bytes_sent": res.bytes_sent}

# training: 3 steps of momentum SGD pipelined (1f1b, M=2, explicit cuts for the MLP) against the reference optimizer
from deep500lite.frameworks.reference import MomentumOptimizer

net, classes, shape = mlp(seed=3)
cuts = ["a0", "a1", "a2"][:P - 1] if P < 4 else ["a0", "a1", "a2"]
steps = [batch(classes, shape, s) for s in range(3)]
ref_net = net.copy()
ref_opt = MomentumOptimizer(d5.executor(ref_net, "reference"), learning_rate=0.1, momentum=0.9)
ref_losses = [float(ref_opt.step(f)["loss"]) for f in steps]
pipe = PipelineParallel(comm, net, 2, BATCH, "1f1b", EXECUTOR, cuts=cuts, optimizer=MomentumSGD(0.1, 0.9))
losses = [pipe.step(f).loss for f in steps]
final = pipe.parameter_values()
errs = [ratio(final[p], ref_net.fetch_tensor(p)) for p in pipe.parameters]
if pipe.last:
    errs.append(ratio(losses, ref_losses))
results["train/1f1b/M2"] = {"err": max(errs, default=0.0), "n_checked": len(errs), "params": pipe.parameters,
                            "cuts": [s.input for s in pipe.stages[1:]]}
# the entry point: GPipe, M=4, automatic cuts, the same 3 steps; the loss is broadcast to every rank
run = run_pipeline(comm, net, steps, 4, "gpipe", EXECUTOR, optimizer=MomentumSGD(0.1, 0.9))
t = run.times
results["run_pipeline/gpipe/M4"] = {
    "err": ratio(run.losses, ref_losses), "params": [], "n_steps": len(run.steps),
    "split_ok": abs(t["compute"] + t["p2p"] + t["idle"] + t["optimizer"] + t["other"] - t["step"]) < 1e-6,
    "model": run.bubble_model, "bubble_in_range": 0.0 <= run.bubble < 1.0}
results["schedule_1f1b_P4_M4_stage0"] = pipeline_schedule("1f1b", 0, 4, 4)
# one line from rank 0 (lines printed by several ranks could interleave)
everything = MPI.COMM_WORLD.gather({"rank": comm.rank, "size": P, "results": results}, root=0)
if comm.rank == 0:
    print("RESULT " + json.dumps(everything), flush=True)
if COMM == "torch":
    # destroy the process group before exit (gloo's threads abort the process when torn down at exit)
    comm.close()
MPI.COMM_WORLD.Barrier()
