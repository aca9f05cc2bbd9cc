"""Run by tests/lv3/test_microbatch_data_parallel.py on P real ranks: gradient accumulation under
data parallelism (``d5.transforms.microbatch`` inside a Level 3 distributed optimizer).

Usage: ``microbatch_dp_check.py COMM EXECUTOR`` (COMM ``mpi`` or ``torch``; EXECUTOR the framework
of the reference optimizers' executor). For each distributed optimizer and base optimizer, the
same three steps run twice from the same weights on this rank's shard of 10 digits: without
micro-batching and with 4 micro-batches (3, 3, 3 and 1 samples). Rank 0 also trains one process
on the global batch (10 P samples) with the plain optimizer, the independent reference. Rank 0
prints one line ``RESULT {json}``: per configuration and rank, the largest loss and parameter
differences (absolute and relative to the value), the bytes sent per step in both runs, and the
largest parameter difference to the one-process run.
"""

import json
import sys

import numpy as np

import deep500lite as d5
from deep500lite import networks
from deep500lite.datasets import dataset_loss, load_dataset
from deep500lite.frameworks import reference as d5ref
from deep500lite.lv3.distributed_optimizers import ConsistentDecentralized, ConsistentParameterServer

COMM, EXECUTOR = sys.argv[1], sys.argv[2]
comm = (d5.distributed.MPICommunicator(timeout=60) if COMM == "mpi"
        else d5.distributed.TorchDistributedCommunicator(timeout=60))
P, R = comm.size, comm.rank
PER_RANK, STEPS, MICRO = 10, 3, 4
train, _ = load_dataset("digits", "input", "label")


def batch(step, lo, hi):
    return train[np.arange(step * PER_RANK * P + lo, step * PER_RANK * P + hi)]


def base_optimizer(kind, framework):
    net, _, out = networks.create_model("mlp", None, classes=10, shape=(1, 8, 8), seed=3, hidden=(16,))
    net.add_operation(dataset_loss("digits")([out, "label"], "loss"))
    if kind == "torch_momentum":
        from deep500lite.frameworks import torch as d5torch

        return d5torch.MomentumOptimizer(d5torch.from_model(net), learning_rate=0.3, momentum=0.9)
    ex = d5.executor(net, framework)
    if kind == "sgd":
        return d5ref.GradientDescent(ex, learning_rate=0.5)
    return d5ref.MomentumOptimizer(ex, learning_rate=0.3, momentum=0.9)


def train_run(wrapper, kind, n):
    base = base_optimizer(kind, EXECUTOR)
    if n > 1:
        base = d5.transforms.microbatch(base, n)
    opt = wrapper(base, comm)
    losses, sent = [], []
    for step in range(STEPS):
        out = opt.step(batch(step, R * PER_RANK, (R + 1) * PER_RANK))
        losses.append(float(np.asarray(out["loss"])))
        sent.append(int(opt.bytes_per_step))
    names = sorted(p for p, _ in opt.network.gradient("loss"))
    params = dict(zip(names, opt.network.fetch_tensors(names)))
    return losses, params, sent, (list(base.last_sizes) if n > 1 else None)


def single_process(kind):
    opt = base_optimizer(kind, "reference" if kind != "torch_momentum" else "torch")
    for step in range(STEPS):
        opt.step(batch(step, 0, PER_RANK * P))
    names = sorted(p for p, _ in opt.network.gradient("loss"))
    return dict(zip(names, opt.network.fetch_tensors(names)))


def diff(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b))), float(np.max(np.abs(a - b) / (np.abs(b) + 1e-30)))


configs = [("decentralized", ConsistentDecentralized, "momentum"),
           ("decentralized", ConsistentDecentralized, "sgd"),
           ("parameter_server", ConsistentParameterServer, "momentum")]
if EXECUTOR == "torch":
    configs.append(("decentralized", ConsistentDecentralized, "torch_momentum"))
results = {}
for name, wrapper, kind in configs:
    plain_l, plain_p, plain_b, _ = train_run(wrapper, kind, 1)
    micro_l, micro_p, micro_b, sizes = train_run(wrapper, kind, MICRO)
    loss_abs, _ = diff(micro_l, plain_l)
    param_abs = max(diff(micro_p[k], plain_p[k])[0] for k in plain_p)
    one = single_process(kind) if R == 0 else None
    row = {"loss_abs": loss_abs, "param_abs": param_abs,
           "param_scale": max(float(np.max(np.abs(v))) for v in plain_p.values()),
           "bytes_plain": plain_b, "bytes_micro": micro_b, "sizes": sizes,
           "single_abs": None if one is None else max(diff(micro_p[k], one[k])[0] for k in one),
           "single_plain_abs": None if one is None else max(diff(plain_p[k], one[k])[0] for k in one)}
    gathered = comm.allgather(np.array([row["loss_abs"], row["param_abs"]]))
    row["per_rank"] = [list(map(float, g)) for g in gathered]
    results[f"{name}/{kind}"] = row
if R == 0:
    print("RESULT " + json.dumps({"ranks": P, "comm": COMM, "executor": EXECUTOR, "configs": results}), flush=True)
comm.barrier()
