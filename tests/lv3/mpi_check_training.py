"""Run on every rank: a few steps of distributed training on digits; each rank saves its parameters.

Usage: mpi_check_training.py KIND OUT_DIR [STEPS]. KIND is decentralized, decentralized_ring,
parameter_server, model_average, compressed_topk_all, compressed_sign,
elastic or neighbors (training_setup.py has the model, data and base
optimizer, shared with the single-rank reference in test_distributed_training.py).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deep500lite as d5  # noqa: E402
from deep500lite.lv3 import compression  # noqa: E402
from deep500lite.lv3 import distributed_optimizers as dopt  # noqa: E402
from training_setup import GLOBAL_BATCH, global_batch, make_optimizer  # noqa: E402

kind, out_dir = sys.argv[1], sys.argv[2]
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
comm = d5.distributed.MPICommunicator(timeout=30)
p, r = comm.size, comm.rank
base = make_optimizer("momentum" if kind in ("parameter_server", "decentralized_ring") else "sgd")
if kind == "decentralized":
    opt = dopt.ConsistentDecentralized(base, comm)
elif kind == "decentralized_ring":
    opt = dopt.ConsistentDecentralized(base, comm, bucket_bytes=256, algorithm="ring")
elif kind == "parameter_server":
    opt = dopt.ConsistentParameterServer(base, comm, root=p - 1)
elif kind == "model_average":
    opt = dopt.ModelAverageDecentralized(base, comm, period=1)
elif kind == "compressed_topk_all":
    opt = compression.CompressedDecentralized(base, comm, compression.TopK(1.0))
elif kind == "compressed_sign":
    opt = compression.CompressedDecentralized(base, comm, compression.SignSGD())
elif kind == "elastic":
    opt = dopt.ElasticAveraging(base, comm, alpha=0.2)
elif kind == "neighbors":
    opt = dopt.ConsistentNeighbors(base, comm)
else:
    raise ValueError(f"unknown kind {kind!r}")
local = GLOBAL_BATCH // p
byte_counts = []
for k in range(steps):
    batch = global_batch(k)
    opt.step({name: value[r * local:(r + 1) * local] for name, value in batch.items()})
    byte_counts.append(opt.bytes_per_step)
names, params = opt._parameters()
saved = dict(zip(names, params))
for name, value in (getattr(opt, "center", None) or {}).items():
    saved[f"center:{name}"] = value
np.savez(os.path.join(out_dir, f"rank{r}.npz"), bytes=np.array(byte_counts), total=opt.bytes_sent, **saved)
print(f"rank {r} of {p}: done", flush=True)
