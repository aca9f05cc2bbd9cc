"""Paired timing of ONNX Runtime training steps against the torch executor.

``python scripts/onnxruntime_training_bench.py`` times one training step of a zoo
network (ResNet-20 at batch 64 by default) on two sides in alternation, with
:func:`deep500lite.metrics.time_paired`, and prints the median ratio of the per-pair times with
its 95% CI:

- ``--against torch`` (default): the fused ONNX Runtime step (one session run with the momentum
  update in the graph, state in OrtValues) against the torch executor with its native
  ``MomentumOptimizer`` on the same ONNX graph;
- ``--against host``: the fused step against the host path of the same executor
  (``fused_training = False``: gradients fetched, update in numpy, parameters fed back).

``--no-rewrites`` runs the ONNX Runtime side on the autodiff's graph as it is, without the
gradient rewrites of :mod:`deep500lite.frameworks.onnxruntime.grad_rewrite` (the before/after of
the ONNX Runtime training row).

Both sides start from the same zoo weights (seed 0) and take the same minibatch; learning rate
0.01 and momentum 0.9 as in ``deep500lite bench overhead --training``.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from deep500lite.bench.contract import LEARNING_RATE, MOMENTUM, random_labels, with_loss
from deep500lite.errors import UserError, format_choices

__all__ = ["training_step", "compare_training", "main", "MODEL_ARGS"]

#: bench name -> (zoo model, sample shape, zoo options)
MODEL_ARGS = {
    "lenet": ("lenet", (1, 28, 28), {}),
    "resnet20": ("resnet", (3, 32, 32), {"depth": 20}),
    "mobilenet_v2": ("mobilenet_v2", None, {}),
    "bn_cnn": ("bn_cnn", None, {}),
    "bert_tiny": ("bert", (128,), {"hidden": 128, "layers": 2, "heads": 2, "intermediate": 512}),
}


def training_step(framework: str, model: str, batch: int, fused: bool = True, seed: int = 0,
                  threads: int | None = None, rewrites=None):
    """One zoo model's training step on ``framework``, as a call returning the loss.

    Args:
        framework: ``"onnxruntime"`` or ``"torch"`` (or any executor with a ``MomentumOptimizer``).
        model: a key of :data:`MODEL_ARGS`.
        batch: samples per step.
        fused: for ONNX Runtime, whether the fused path runs (False: the host path).
        seed: seed of the weights and the minibatch.
        threads: ONNX Runtime's ``intra_op_num_threads`` (for torch, ``torch.set_num_threads``,
            set by :func:`compare_training`); None: each framework's default.
        rewrites: for ONNX Runtime, the gradient rewrites of
            :mod:`~deep500lite.frameworks.onnxruntime.grad_rewrite` (``()``: none); None: the default.

    Returns:
        ``(step, executor)``.
    """
    import importlib

    from deep500lite.networks import create_model, default_shape
    from deep500lite.registry import executor, import_framework

    if model not in MODEL_ARGS:
        raise UserError(f"Unknown model for the training bench: allowed {format_choices(MODEL_ARGS)}. "
                        f"Received: {model!r}")
    name, shape, options = MODEL_ARGS[model]
    shape = shape or default_shape(name)
    net = with_loss(create_model(name, batch, classes=10, shape=shape, seed=seed, **options)[0])
    ex = (executor(net, framework, intra_op_num_threads=threads) if framework == "onnxruntime" and threads
          else executor(net, framework))
    if framework == "onnxruntime":
        ex.fused_training = fused
        if rewrites is not None:
            ex.grad_rewrites = tuple(rewrites)
    optimizers = importlib.import_module(f"{import_framework(framework).__name__}.optimizers")
    opt = optimizers.MomentumOptimizer(ex, learning_rate=LEARNING_RATE, momentum=MOMENTUM)
    rng = np.random.default_rng(seed)
    samples = (rng.integers(0, 1000, (batch, *shape)) if name == "bert"  # token ids
               else rng.standard_normal((batch, *shape)).astype(np.float32))
    feeds = {"input": samples, "label": random_labels(rng, batch)}
    return (lambda: opt.step(feeds)["loss"]), ex


def compare_training(model: str = "resnet20", batch: int = 64, against: str = "torch", max_time: float = 60.0,
                     min_pairs: int = 10, threads: int | None = None, rewrites=None):
    """Time the fused ONNX Runtime step against ``against`` in alternation.

    ``threads`` caps both sides' intra-operator threads (on a machine shared with other work,
    where spinning thread pools slow each other down); None keeps each framework's default.
    ``rewrites`` sets the ONNX Runtime side's gradient rewrites (``()``: none; None: the default).

    Returns:
        A dict: model, batch, against, the median per-pair ratio (ONNX Runtime / other) with its
        95% CI, each side's median seconds, the number of pairs and the first losses of both.
    """
    from deep500lite.metrics import time_paired

    if against not in ("torch", "host"):
        raise UserError(f"against must be 'torch' or 'host'. Received: {against!r}")
    if threads and against == "torch":
        import torch

        torch.set_num_threads(threads)
    fused, ex = training_step("onnxruntime", model, batch, fused=True, threads=threads, rewrites=rewrites)
    other, other_ex = (training_step("onnxruntime", model, batch, fused=False, threads=threads, rewrites=rewrites)
                       if against == "host"
                       else training_step("torch", model, batch))
    first = (float(np.asarray(fused())), float(np.asarray(other())))
    timed = time_paired(fused, other, label_a="onnxruntime_fused", label_b=against, sync=other_ex.synchronize,
                        warmup=1, min_pairs=min_pairs, max_time=max_time)
    ratio = timed.ratio
    return {"model": model, "batch": batch, "against": against, "first_losses": first,
            "ratio_median": float(ratio.median), "ratio_ci95": [float(ratio.ci_low), float(ratio.ci_high)],
            "fused_seconds": float(timed.a.median), f"{against}_seconds": float(timed.b.median),
            "pairs": len(timed.a.raw_times), "threads": threads,
            "rewrites": dict(ex._fused.rewrites) if getattr(ex, "_fused", None) is not None else None}


def main(argv=None) -> int:
    """Command line: ``python scripts/onnxruntime_training_bench.py [--model M] ...``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet20", help=f"one of {', '.join(MODEL_ARGS)}")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--against", default="torch", choices=["torch", "host"])
    parser.add_argument("--max-time", type=float, default=60.0, help="seconds of timed work")
    parser.add_argument("--min-pairs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads of both sides")
    parser.add_argument("--no-rewrites", action="store_true",
                        help="run the autodiff's graph as it is (no ONNX Runtime gradient rewrites)")
    args = parser.parse_args(argv)
    print(json.dumps(compare_training(args.model, args.batch_size, args.against, args.max_time, args.min_pairs,
                                      args.threads, () if args.no_rewrites else None)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
