"""Speed checks of the reference framework: its LeNet training step against torch's, and the gradient check.

Run as ``python scripts/reference_perf.py`` (``--help`` for the options). Two
measurements, each printed with the machine's load and CPU model:

- ``training``: deep500lite's training step on the reference executor (ONNX autodiff graph,
  numpy ``MomentumOptimizer``) against torch's own step (``torch.optim.SGD`` on the same LeNet,
  the native side of ``deep500lite bench overhead --training --framework torch``), timed in
  alternation with :func:`deep500lite.metrics.timing.time_paired`; the ratio is the median of
  the per-pair ratios with its 95% confidence interval.
- ``gradcheck``: :func:`deep500lite.lv0.validation.test_op_gradient` on an elementwise operator
  of 4,096 float32 elements, in its default (projection) mode and in ``method="full"``; the
  median of repeated runs.

These are benchmarks, not tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import time

import numpy as np

from deep500lite.bench.contract import d5_training_step
from deep500lite.bench.contract import blas_threads
from deep500lite.frameworks.reference.optimizers import MomentumOptimizer
from deep500lite.registry import framework_module

__all__ = ["training_ratio", "gradcheck_times", "machine_text", "main"]


def machine_text() -> str:
    """The CPU model and the 1-minute load average, for printing beside a figure."""
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{model}, {os.cpu_count()} logical CPUs, load average {load:.2f}"


def training_ratio(model: str = "lenet", batch: int = 64, max_time: float = 20.0, seed: int = 0,
                   threads: int | None = None) -> dict:
    """The reference executor's training step against torch's native step, timed in alternation.

    Args:
        model: ``"lenet"`` or ``"resnet20"``.
        batch: samples per step.
        max_time: seconds of timed work at most.
        seed: seed of the inputs and labels.
        threads: when given, numpy's BLAS and torch both limited to this many threads.

    Returns:
        A dict with ``reference_ms`` and ``torch_ms`` (medians), ``ratio`` (median of per-pair
        ratios) and its ``ratio_ci`` (95%), ``pairs`` and ``machine``.
    """
    from deep500lite.metrics.timing import time_paired

    reference, _, _ = d5_training_step("reference", model, batch, np.random.default_rng(seed), MomentumOptimizer)
    _, native, _ = framework_module("torch", "bench").training_pair(model, batch, np.random.default_rng(seed))
    import torch  # the baseline's framework, imported only for this measurement

    before = torch.get_num_threads()
    limit = blas_threads(threads) if threads else contextlib.nullcontext()
    try:
        if threads:
            torch.set_num_threads(threads)
        with limit:
            timed = time_paired(reference, native, label_a="reference", label_b="torch", warmup=3, min_pairs=10,
                                max_time=max_time, target_rel_ci=0.02)
    finally:
        torch.set_num_threads(before)
    r = timed.ratio
    return {"model": model, "batch": batch, "threads": threads or f"default (torch {before})", "reference_ms": 1e3 * timed.a.median, "torch_ms": 1e3 * timed.b.median,
            "ratio": r.median, "ratio_ci": (r.ci_low, r.ci_high), "pairs": len(timed.ratios),
            "machine": machine_text()}


def gradcheck_times(n: int = 4096, repeats: int = 20, full_repeats: int = 3) -> dict:
    """Median seconds of ``test_op_gradient`` on an ``n``-element float32 tanh, by projection and in full.

    Returns:
        A dict with ``projection_ms``, ``full_ms``, the methods used and ``machine``.
    """
    from deep500lite.lv0.operator import CustomPythonOp
    from deep500lite.lv0.tensordesc import tensordesc
    from deep500lite.lv0.validation import test_op_gradient

    class Tanh(CustomPythonOp):
        def __init__(self):
            super().__init__([tensordesc(np.float32, [n])], [tensordesc(np.float32, [n])])

        def forward(self, x):
            return np.tanh(x)

        def backward(self, grads, fwd_inputs, fwd_outputs):
            return (grads[0] * (1 - fwd_outputs[0] ** 2)).astype(np.float32)

    x = np.random.default_rng(0).uniform(-2, 2, n).astype(np.float32)
    out = {"elements": n, "machine": machine_text()}
    for method, reps in (("auto", repeats), ("full", full_repeats)):
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            res = test_op_gradient(Tanh(), [x], verbose=False, method=method)
            times.append(time.perf_counter() - t0)
        key = "projection" if method == "auto" else "full"
        out[f"{key}_ms"] = 1e3 * statistics.median(times)
        out[f"{key}_method"] = res.method
        out[f"{key}_passed"] = res.passed
    return out


def main(argv=None) -> int:
    """Command line: ``python scripts/reference_perf.py [training|gradcheck|all]``."""
    parser = argparse.ArgumentParser(prog="python scripts/reference_perf.py",
                                     description="Reference executor training step vs torch; gradient check time.")
    parser.add_argument("what", nargs="?", default="all", choices=["training", "gradcheck", "all"])
    parser.add_argument("--model", default="lenet", choices=["lenet", "resnet20"])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--max-time", type=float, default=20.0)
    parser.add_argument("--threads", type=int, default=None, help="limit numpy's BLAS and torch to this many threads")
    args = parser.parse_args(argv)
    print(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "|", machine_text())
    if args.what in ("gradcheck", "all"):
        g = gradcheck_times()
        print(f"test_op_gradient, {g['elements']} float32 elements: default ({g['projection_method']}) "
              f"{g['projection_ms']:.2f} ms; method='full' ({g['full_method']}) {g['full_ms']:.1f} ms")
    if args.what in ("training", "all"):
        t = training_ratio(args.model, args.batch, args.max_time, threads=args.threads)
        lo, hi = t["ratio_ci"]
        print(f"{t['model']} batch {t['batch']} training step, threads {t['threads']}: reference {t['reference_ms']:.2f} ms, torch "
              f"{t['torch_ms']:.2f} ms, ratio {t['ratio']:.2f} [{lo:.2f}, {hi:.2f}] over {t['pairs']} pairs "
              f"| {t['machine']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
