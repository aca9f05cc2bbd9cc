"""Measure the pipeline bubble (not run by the tests; its figures are in the docs).

Usage: ``OMP_NUM_THREADS=1 mpiexec -n P python -m mpi4py tests/lv3/pipeline_check_bubble.py
[MICRO_BATCHES ...]``. A balanced MLP (12 Gemm+Relu layers of width 512, cut into P equal stages,
micro-batch 32 samples) runs a warm-up step and then 3 timed steps per schedule and M; rank 0
prints one JSON line per configuration: the measured bubble (idle / step time, the median over
the steps; its mean and largest over ranks), the busy fraction's complement ``1 - compute / step`` and the model
``(P - 1) / (M + P - 1)``.
"""

import json
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

import deep500lite as d5
from deep500lite.lv3.mpi import import_mpi
from deep500lite.lv3.pipeline import PipelineParallel, bubble_model

comm = d5.distributed.MPICommunicator(timeout=120)
MPI = import_mpi()
P, LAYERS, WIDTH, MICRO = comm.size, 12, 512, 32
ms = [int(a) for a in sys.argv[1:]] or [1, 2, 4, 8]


def balanced_mlp(batch):
    rng = np.random.default_rng(0)
    nodes, inits, h = [], [], "x"
    for i in range(LAYERS):
        inits.append(numpy_helper.from_array((rng.standard_normal((WIDTH, WIDTH)) / 16).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("Gemm", [h, f"w{i}"], [f"g{i}"], transB=1),
                  helper.make_node("Relu", [f"g{i}"], [f"r{i}"])]
        h = f"r{i}"
    nodes.append(helper.make_node("ReduceMean", [h], ["loss"], keepdims=0))
    graph = helper.make_graph(nodes, "balanced", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                                                [batch, WIDTH])],
                              [helper.make_tensor_value_info("loss", onnx.TensorProto.FLOAT, [])], inits)
    return d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


per = LAYERS // P
cuts = [f"r{per * (s + 1) - 1}" for s in range(P - 1)]
for schedule in ("gpipe", "1f1b"):
    for m in ms:
        batch = m * MICRO
        net = balanced_mlp(batch)
        feeds = {"x": np.random.default_rng(1).standard_normal((batch, WIDTH)).astype(np.float32)}
        pipe = PipelineParallel(comm, net, m, batch, schedule, "torch", cuts=cuts)
        pipe.step(feeds, update=False)
        comm.barrier()
        steps = [pipe.step(feeds, update=False) for _ in range(5)]
        # medians over the steps, which resist the odd step slowed by other processes
        mine = np.array([np.median([s.times["idle"] / s.times["step"] for s in steps]),
                         np.median([1 - s.times["compute"] / s.times["step"] for s in steps]),
                         np.median([s.times["p2p"] / s.times["step"] for s in steps]),
                         np.median([s.times["step"] for s in steps])], np.float64)
        rows = MPI.COMM_WORLD.gather(mine, root=0)
        if comm.rank == 0:
            rows = np.array(rows)
            print(json.dumps({"P": P, "M": m, "schedule": schedule, "bubble_mean": round(rows[:, 0].mean(), 3),
                              "bubble_max": round(rows[:, 0].max(), 3),
                              "not_computing_mean": round(rows[:, 1].mean(), 3),
                              "p2p_mean": round(rows[:, 2].mean(), 4),
                              "step_ms": round(1000 * rows[:, 3].mean(), 2),
                              "model": round(bubble_model(P, m), 3)}), flush=True)
