"""Run on every rank by test_overlap.py: overlapped bucketed allreduce against the exchange after the backward pass.

Usage: mpi_check_overlap.py OUT_DIR. For each configuration of :data:`CONFIGS` (base optimizer,
communicator, bucket bytes) it trains the mlp of training_setup.py twice from the same weights with
``ConsistentDecentralized``, ``overlap=True`` then ``overlap=False``, on this rank's share of the
same global batches. Each rank writes OUT_DIR/NAME-rank{r}.npz: the parameters after the last step
and the exchanged gradients of every step of both runs (``on:`` and ``off:`` prefixes), the buckets
started during each overlapped backward pass and the bytes sent per step.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deep500lite as d5  # noqa: E402
from deep500lite.lv3 import ConsistentDecentralized  # noqa: E402
from training_setup import GLOBAL_BATCH, global_batch, make_optimizer  # noqa: E402

STEPS = 3
#: name -> (base optimizer kind, communicator, bucket bytes). The mlp's gradients are 4096, 64, 640 and 40 bytes.
CONFIGS = {
    "torch_each": ("torch_momentum", "mpi", 0),
    "torch_800": ("torch_momentum", "mpi", 800),
    "torch_default": ("torch_momentum", "mpi", None),
    "torch_gloo_800": ("torch_momentum", "torch", 800),
    "torch_reference_800": ("torch_reference_momentum", "mpi", 800),
    "reference_800": ("momentum", "mpi", 800),
}

out_dir = sys.argv[1]
comms = {"mpi": d5.distributed.MPICommunicator(timeout=60)}
comms["torch"] = d5.distributed.TorchDistributedCommunicator(timeout=60)
p, r = comms["mpi"].size, comms["mpi"].rank
local = GLOBAL_BATCH // p


def train(kind, comm, bucket, overlap):
    base = make_optimizer(kind)
    kwargs = {} if bucket is None else {"bucket_bytes": bucket}
    opt = ConsistentDecentralized(base, comm, overlap=overlap, **kwargs)
    names = [n for n, _ in opt.network.gradient(opt.loss)]
    seen = []
    if kind != "torch_momentum":  # the exchanged gradient reaches the user's modifier (three-step bases)
        opt.gradient_modifier = lambda name, param, grad: (seen.append((name, np.array(grad))), grad)[1]
    grads, overlapped, sent = [], [], []
    for k in range(STEPS):
        batch = global_batch(k)
        opt.step({name: value[r * local:(r + 1) * local] for name, value in batch.items()})
        if kind == "torch_momentum":  # torch's optimizer reads .grad, which holds the averages
            grads.append([opt.executor.fetch_tensor(f"{n}_grad") for n in names])
        else:
            step = dict(seen[-len(names):])
            grads.append([step[n] for n in names])
        overlapped.append(opt.overlapped_buckets)
        sent.append(opt.bytes_per_step)
    _, params = opt._parameters()
    out = {f"param:{n}": v for n, v in zip(names, params)}
    out.update({f"grad{k}:{n}": g for k, step in enumerate(grads) for n, g in zip(names, step)})
    out["overlapped"] = np.array(overlapped)
    out["bytes"] = np.array(sent)
    out["buckets"] = np.array(len(opt.bucket_layout) if overlap else 0)
    return out


for name, (kind, comm_name, bucket) in CONFIGS.items():
    saved = {}
    for overlap, prefix in ((True, "on"), (False, "off")):
        saved.update({f"{prefix}:{k}": v for k, v in train(kind, comms[comm_name], bucket, overlap).items()})
    np.savez(os.path.join(out_dir, f"{name}-rank{r}.npz"), **saved)
    comms["mpi"].barrier()
comms["torch"].close()
print(f"rank {r} of {p}: done", flush=True)
