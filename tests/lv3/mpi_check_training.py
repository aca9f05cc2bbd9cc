"""Run on every rank: a few steps of distributed training on digits; each rank saves its parameters.

Usage: mpi_check_training.py KINDS OUT_DIR [STEPS]. KINDS is a comma-separated list; each kind
runs in turn on a fresh model, in one job (KIND:N runs N steps instead of STEPS): decentralized,
decentralized_ring, parameter_server, model_average, compressed_topk_all, compressed_sign,
elastic, neighbors, decentralized_torch, bucketed_topk_all_torch, async_ps, async_ps_sgd, async_ps_topk_all, ssp0, ssp2, ps_topk_all, ps_sign, bucketed_topk_all,
bucketed_sign, bad_input. Each rank writes OUT_DIR/KIND-rank{r}.npz (training_setup.py has the
model, data and base optimizer, shared with the single-rank reference in
test_distributed_training.py).
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deep500lite as d5  # noqa: E402
from deep500lite.lv3 import compression  # noqa: E402
from deep500lite.lv3 import distributed_optimizers as dopt  # noqa: E402
from training_setup import BUCKET_BYTES, GLOBAL_BATCH, base_kind, global_batch, make_optimizer  # noqa: E402

kinds, out_dir = sys.argv[1].split(","), sys.argv[2]
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
comm = d5.distributed.MPICommunicator(timeout=30)
p, r = comm.size, comm.rank


def build(kind):
    base = make_optimizer(base_kind(kind))
    if kind == "decentralized":
        return dopt.ConsistentDecentralized(base, comm)
    if kind == "decentralized_torch":  # torch's native optimizer: the exchange goes through gradient_modifier
        return dopt.ConsistentDecentralized(base, comm)
    if kind == "bucketed_topk_all_torch":
        return compression.CompressedDecentralized(base, comm, compression.TopK(1.0), bucket_bytes=BUCKET_BYTES)
    if kind == "decentralized_ring":
        return dopt.ConsistentDecentralized(base, comm, bucket_bytes=256, algorithm="ring")
    if kind == "parameter_server":
        return dopt.ConsistentParameterServer(base, comm, root=p - 1)
    if kind == "model_average":
        return dopt.ModelAverageDecentralized(base, comm, period=1)
    if kind == "compressed_topk_all":
        return compression.CompressedDecentralized(base, comm, compression.TopK(1.0))
    if kind == "compressed_sign":
        return compression.CompressedDecentralized(base, comm, compression.SignSGD())
    if kind == "elastic":
        return dopt.ElasticAveraging(base, comm, alpha=0.2)
    if kind == "neighbors":
        return dopt.ConsistentNeighbors(base, comm)
    if kind in ("async_ps", "async_ps_sgd"):
        return dopt.InconsistentParameterServer(base, comm, root=p - 1)
    if kind == "async_ps_serving":  # Deep500's import path: the root only serves the workers
        import deep500lite.frameworks.reference as d5ref

        return d5ref.InconsistentParameterServer(base, comm, root=p - 1)
    if kind == "async_ps_topk_all":
        return dopt.InconsistentParameterServer(base, comm, root=p - 1, compressor=compression.TopK(1.0))
    if kind == "ssp0":
        return dopt.StaleSynchronous(base, comm, staleness=0)
    if kind == "ssp2":
        return dopt.StaleSynchronous(base, comm, staleness=2)
    if kind == "ps_topk_all":
        return dopt.ConsistentParameterServer(base, comm, root=p - 1, compressor=compression.TopK(1.0))
    if kind == "ps_sign":
        return dopt.ConsistentParameterServer(base, comm, compressor=compression.SignSGD())
    if kind == "bucketed_topk_all":
        return compression.CompressedDecentralized(base, comm, compression.TopK(1.0), bucket_bytes=BUCKET_BYTES)
    if kind == "bucketed_sign":
        return compression.CompressedDecentralized(base, comm, compression.SignSGD(), bucket_bytes=BUCKET_BYTES)
    raise ValueError(f"unknown kind {kind!r}")


def bad_input():
    """Each bad argument's error message, one per line."""
    base = make_optimizer("sgd")
    tries = [lambda: dopt.StaleSynchronous(base, comm, staleness=-1),
             lambda: dopt.InconsistentParameterServer(base, comm, root=p),
             lambda: dopt.InconsistentParameterServer(base, comm, tag=32767),
             lambda: dopt.ConsistentParameterServer(base, comm, compressor="topk"),
             lambda: compression.CompressedDecentralized(base, comm, compression.SignSGD(), bucket_bytes=-5)]
    messages = []
    for attempt in tries:
        try:
            attempt()
        except (ValueError, TypeError) as e:
            messages.append(f"{type(e).__name__}: {e}")
        else:
            messages.append("no error")
    return "\n".join(messages)


local = GLOBAL_BATCH // p
for spec in kinds:
    kind, _, kind_steps = spec.partition(":")
    kind_steps = int(kind_steps) if kind_steps else steps
    if kind == "bad_input":
        np.savez(os.path.join(out_dir, f"{kind}-rank{r}.npz"), errors=np.array(bad_input()))
        continue
    opt = build(kind)
    byte_counts = []
    for k in range(kind_steps):
        if kind == "ssp2" and r == 0:
            time.sleep(0.3)  # a slow rank: the others run ahead, up to the staleness bound
        batch = global_batch(k)
        opt.step({name: value[r * local:(r + 1) * local] for name, value in batch.items()})
        byte_counts.append(opt.bytes_per_step)
    extra = {}
    if hasattr(opt, "finalize"):
        if kind.startswith("async_ps"):  # the root's parameters before finalize (the others' are older)
            extra.update({f"before:{n}": v for n, v in zip(*opt._parameters())})
        opt.finalize()
    for attr in ("staleness", "served_ranks", "observed_staleness", "updates"):
        if isinstance(getattr(opt, attr, None), (list, int)):
            extra[attr] = np.array(getattr(opt, attr))
    names, params = opt._parameters()
    saved = dict(zip(names, params))
    for name, value in (getattr(opt, "center", None) or {}).items():
        saved[f"center:{name}"] = value
    np.savez(os.path.join(out_dir, f"{kind}-rank{r}.npz"), bytes=np.array(byte_counts), total=opt.bytes_sent,
             **saved, **extra)
    comm.barrier()
print(f"rank {r} of {p}: done", flush=True)
