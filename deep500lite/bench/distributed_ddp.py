"""The ``ddp`` row of ``deep500lite bench distributed``: run on every rank of one MPI job.

``python -m mpi4py -m deep500lite.bench.distributed_ddp CONFIG`` (started by
:func:`deep500lite.bench.distributed.run_distributed_benchmark`). Every rank builds both sides with
the torch framework's ``data_parallel_pair`` (``frameworks/torch/bench_data_parallel.py``): a
deep500lite data-parallel step (the torch executor, torch's momentum SGD,
``ConsistentDecentralized`` with overlapped gradient buckets, over MPI or torch.distributed) and a
torch ``DistributedDataParallel`` step over gloo, on the same network, local batch, bucket size and
optimizer, from the same weights. Then:

1. **check**: one step of each from the same weights; the averaged gradients deep500lite's optimizer
   applied must equal the ones DDP left in ``.grad`` (float32 tolerances: the two sides convert
   and sum differently), and so must the losses;
2. **warm-up**: ``warmup`` steps of deep500lite, then ``warmup`` of DDP;
3. **pairs**: one step of each, in an order that alternates from pair to pair, each step started
   after an MPI barrier; a step's time is the slowest rank's (an allreduce of the times after the
   clocks stopped). Every rank holds the same times, so all stop together: at ``max_time``
   seconds of timed steps (after ``min_pairs`` pairs), or when the ratio's CI is within 1% of its
   median.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from deep500lite.bench.distributed import worker_result
from deep500lite.errors import UserError
from deep500lite.metrics.statistics import summarize

__all__ = ["worker_main", "DEFAULTS", "MODELS", "COMMUNICATORS"]

#: The row's options and their defaults (``bench distributed`` passes those given on the command line).
DEFAULTS = {"model": "lenet", "batch_size": 64, "bucket_mb": 25.0, "communicator": "mpi", "max_time": 20.0,
            "min_pairs": 20, "warmup": 5, "seed": 0}
MODELS = ("lenet", "resnet20")
#: deep500lite's communicator: ``mpi`` (what ``run -n P`` recipes use by default) or ``torch`` (gloo, as DDP).
COMMUNICATORS = ("mpi", "torch")
_MAX_PAIRS = 100_000
_TARGET_REL_CI = 0.01
#: Tolerances of the first-step gradients (float32; the sides sum in different orders).
RTOL, ATOL = 1e-4, 1e-6


def check_config(config: dict) -> dict:
    """``config`` with the defaults filled in, checked (the launching process calls this before starting MPI).

    Raises:
        UserError: an unknown model or communicator, or a value out of range.
    """
    cfg = {**DEFAULTS, **{k: v for k, v in config.items() if v is not None}}
    if cfg["model"] not in MODELS:
        raise UserError(f"The ddp row trains {', '.join(MODELS)}. Received: --model {cfg['model']!r}")
    if cfg["communicator"] not in COMMUNICATORS:
        raise UserError(f"The ddp row's deep500lite side communicates over {', '.join(COMMUNICATORS)}. "
                        f"Received: --communicator {cfg['communicator']!r}")
    for key in ("bucket_mb", "batch_size", "min_pairs", "warmup", "max_time", "seed"):
        if isinstance(cfg[key], bool) or not isinstance(cfg[key], (int, float)):
            raise UserError(f"The ddp row's {key} must be a number. Received: {key}={cfg[key]!r}")
    if not 0 <= float(cfg["bucket_mb"]) <= 1 << 20:
        raise UserError(f"--bucket-mb must be from 0 to {1 << 20} MiB. Received: {cfg['bucket_mb']!r}")
    for key in ("batch_size", "min_pairs"):
        if int(cfg[key]) < 1:
            raise UserError(f"{key} must be at least 1. Received: {cfg[key]!r}")
    if int(cfg["warmup"]) < 0 or float(cfg["max_time"]) <= 0:
        raise UserError(f"warmup must be >= 0 and max_time > 0. Received: warmup={cfg['warmup']!r}, "
                        f"max_time={cfg['max_time']!r}")
    return cfg


def _compare(d5: dict, native: dict) -> tuple[bool, float, float]:
    """(all close, largest absolute difference, largest difference relative to the largest gradient)."""
    ok, worst, rel = True, 0.0, 0.0
    for name, g in native.items():
        diff = float(np.max(np.abs(d5[name] - g))) if g.size else 0.0
        scale = float(np.max(np.abs(g))) if g.size else 0.0
        worst, rel = max(worst, diff), max(rel, diff / scale if scale else diff)
        ok = ok and bool(np.allclose(d5[name], g, rtol=RTOL, atol=ATOL))
    return ok, worst, rel


def worker_main(config_path: str) -> int:
    """Body of the MPI job on every rank (see the module doc); rank 0 writes the result JSON."""
    from deep500lite.lv3.mpi import MPICommunicator
    from deep500lite.registry import spec

    with open(config_path) as f:
        raw = json.load(f)
    cfg = check_config({k: v for k, v in raw.items() if k != "output"})
    mpi = MPICommunicator()
    rank = mpi.rank
    bench = spec("torch").role("bench")
    group, torch_comm = bench.gloo_group()
    comm = mpi if cfg["communicator"] == "mpi" else torch_comm
    bench.set_seed(cfg["seed"])  # the same weights on every rank
    rng = np.random.default_rng([cfg["seed"], rank])  # this rank's share of the global batch
    bucket_bytes = int(round(float(cfg["bucket_mb"]) * (1 << 20)))
    pair = bench.data_parallel_pair(cfg["model"], int(cfg["batch_size"]), rng, comm, group, bucket_bytes)

    # 1. The first step of each, from the same weights: the same averaged gradients and loss.
    d5_loss = pair.d5_step()
    native_loss = pair.native_step()
    ok, worst, rel = _compare(pair.d5_gradients(), pair.native_gradients())
    ok = ok and abs(d5_loss - native_loss) <= 1e-4 * max(1.0, abs(native_loss))
    every = bool(mpi.allreduce(np.array([0 if ok else 1], np.int64), "sum")[0] == 0)
    worst = float(mpi.allreduce(np.array([worst]), "max")[0])
    rel = float(mpi.allreduce(np.array([rel]), "max")[0])
    check = (f"first-step averaged gradients {'equal' if every else 'DIFFER'} on every rank (max |diff| "
             f"{worst:.2g}, {rel:.2g} of the largest gradient; losses {d5_loss:.6g} vs {native_loss:.6g})")

    # 2. Each side's own warm-up.
    for step in (pair.d5_step, pair.native_step):
        for _ in range(int(cfg["warmup"])):
            step()

    # 3. Alternating pairs; each time is the slowest rank's.
    def timed(step) -> float:
        mpi.barrier()
        start = time.perf_counter()
        step()
        return time.perf_counter() - start

    ta, tb, spent, stopped_by = [], [], 0.0, "max_pairs"
    while len(ta) < _MAX_PAIRS:
        order = (pair.d5_step, pair.native_step) if len(ta) % 2 == 0 else (pair.native_step, pair.d5_step)
        first, second = timed(order[0]), timed(order[1])
        a, b = (first, second) if len(ta) % 2 == 0 else (second, first)
        a, b = mpi.allreduce(np.array([a, b]), "max")
        ta.append(float(a))
        tb.append(float(b))
        spent += a + b
        n = len(ta)
        if n >= int(cfg["min_pairs"]) and n % max(1, n // 10) == 0:
            if summarize([x / y for x, y in zip(ta, tb)]).ci_relative_width <= _TARGET_REL_CI:
                stopped_by = "ci"
                break
        if n >= int(cfg["min_pairs"]) and spent >= float(cfg["max_time"]):
            stopped_by = "max_time"
            break

    opt = pair.optimizer
    overlapped = int(mpi.allreduce(np.array([opt.overlapped_buckets], np.int64), "min")[0])
    buckets = len(opt.bucket_layout)
    detail = (f"{cfg['model']}, batch {cfg['batch_size']}/rank, {cfg['bucket_mb']:g} MiB buckets ({buckets} on "
              f"deep500lite, {overlapped} started during backward), deep500lite over {cfg['communicator']}")
    if rank == 0:
        result = worker_result(ta, tb, int(cfg["warmup"]), stopped_by, every, check, detail,
                               config=cfg, buckets=buckets, overlapped_buckets=overlapped,
                               bytes_per_step=int(opt.bytes_per_step), losses=[d5_loss, native_loss])
        with open(raw["output"], "w") as f:
            json.dump(result, f)
    mpi.barrier()
    torch_comm.close()
    return 0


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1]))
