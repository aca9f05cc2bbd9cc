"""Count what one torch training step does, through the torch executor and in torch's own loop.

Timings on a shared machine move by 10% from one run to the next; counts do not. For the LeNet
(or ResNet-20) step of ``deep500lite bench overhead --training --framework torch`` this prints,
per step, for the executor's step (``MomentumOptimizer.step``), its ``inference_and_backprop``
alone, and the native step (``torch.optim.SGD`` on the ``torch.nn.Module``):

- Python function calls (``cProfile``), and how many of them are in deep500lite's own files;
- aten operators (``torch.profiler``), copies among them (``copy_``, ``clone``, ``_to_copy``),
  and every operator whose count differs between the two sides;
- minor page faults (``resource.getrusage``), which the allocator's state decides, not the code;
- parameters whose memory is not 64-byte aligned;
- the CPU time of the calling thread (``time.thread_time``), medians of alternated blocks: on a
  loaded machine these are the least reliable lines.

Usage::

    .venv/bin/python scripts/training_step_profile.py --model lenet --threads 1 --steps 50
    .venv/bin/python scripts/training_step_profile.py --json profile.json

The findings are in docs/results/training-step/README.md.
"""

from __future__ import annotations

import argparse
import cProfile
import collections
import json
import pstats
import resource
import time

import numpy as np
import torch

from deep500lite.registry import spec

COPIES = ("aten::copy_", "aten::clone", "aten::_to_copy")


def _python_calls(fn, steps: int) -> tuple[float, float]:
    """Python function calls per call of ``fn``: all of them, and those in deep500lite's files."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        fn()
    profiler.disable()
    stats = pstats.Stats(profiler).stats
    total = sum(calls for (_, _, _), (_, calls, *_) in stats.items())
    ours = sum(calls for (path, _, _), (_, calls, *_) in stats.items()
               if "deep500lite" in path or "/frameworks/" in path or path.startswith("<deep500lite"))
    return total / steps, ours / steps


def _aten_ops(fn, steps: int) -> collections.Counter:
    """aten operators per call of ``fn`` (torch.profiler's counts)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            fn()
    return collections.Counter({e.key: e.count / steps for e in prof.key_averages() if e.key.startswith("aten::")})


def _faults(fn, steps: int) -> float:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(steps):
        fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / steps


def _thread_seconds(sides: dict, blocks: int, per_block: int) -> dict:
    """Median CPU seconds of the calling thread per call, blocks of each side alternated."""
    samples = {k: [] for k in sides}
    for _ in range(blocks):
        for name, fn in sides.items():
            start = time.thread_time()
            for _ in range(per_block):
                fn()
            samples[name].append((time.thread_time() - start) / per_block)
    return {k: float(np.median(v)) for k, v in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="lenet", choices=("lenet", "resnet20"))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument("--steps", type=int, default=50, help="steps counted per side (default 50)")
    parser.add_argument("--json", default=None, help="write the counts here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    bench = spec("torch").role("bench")
    bench.set_seed(0)
    rng = np.random.default_rng(0)
    step, native, ex = bench.training_pair(args.model, args.batch_size, rng)
    feeds = {"input": rng.standard_normal((args.batch_size, *bench.MODEL_SHAPES[args.model])).astype(np.float32),
             "label": rng.integers(0, 10, args.batch_size).astype(np.int64)}

    def backprop():
        return ex.inference_and_backprop(feeds, "loss")

    sides = {"executor step": step, "inference_and_backprop": backprop, "native step": native}
    for _ in range(5):
        for fn in sides.values():
            fn()
    report = {"model": args.model, "batch_size": args.batch_size, "threads": args.threads, "sides": {}}
    ops = {}
    for name, fn in sides.items():
        calls, ours = _python_calls(fn, args.steps)
        ops[name] = _aten_ops(fn, args.steps)
        report["sides"][name] = {
            "python_calls": calls, "python_calls_in_deep500lite": ours,
            "aten_ops": sum(ops[name].values()), "copies": {k: ops[name].get(k, 0.0) for k in COPIES}}
    # After the profilers (whose teardown frees memory), alternated: the median of five rounds per side.
    faults = {name: [] for name in sides}
    for _ in range(5):
        for name, fn in sides.items():
            faults[name].append(_faults(fn, max(1, args.steps // 5)))
    for name in sides:
        report["sides"][name]["minor_page_faults"] = float(np.median(faults[name]))
    params = [ex.torch_tensor(n) for n in ex.network.parameters]
    report["unaligned_parameters"] = f"{sum(t.data_ptr() % 64 != 0 for t in params)} of {len(params)}"
    a, b = ops["executor step"], ops["native step"]
    report["aten_ops_differing"] = {k: [a.get(k, 0.0), b.get(k, 0.0)] for k in sorted(set(a) | set(b))
                                    if abs(a.get(k, 0.0) - b.get(k, 0.0)) > 1e-9}
    report["thread_cpu_seconds"] = _thread_seconds(sides, blocks=15, per_block=max(1, args.steps // 10))

    print(f"torch {args.model}, batch {args.batch_size}, {args.threads} thread(s), per step:")
    for name, row in report["sides"].items():
        copies = ", ".join(f"{k[6:]} {v:g}" for k, v in row["copies"].items())
        print(f"  {name:24s} python calls {row['python_calls']:7.1f} ({row['python_calls_in_deep500lite']:.1f} "
              f"in deep500lite)  aten ops {row['aten_ops']:6.1f}  copies: {copies}  "
              f"page faults {row['minor_page_faults']:.1f}  thread CPU "
              f"{report['thread_cpu_seconds'][name] * 1e3:.3f} ms")
    print(f"  parameters not 64-byte aligned: {report['unaligned_parameters']}")
    print("  aten ops whose count differs (executor step, native step): "
          + (", ".join(f"{k} {v[0]:g}/{v[1]:g}" for k, v in report["aten_ops_differing"].items()) or "none"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
