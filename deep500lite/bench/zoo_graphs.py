"""The zoo's graphs beyond classifiers, checked on every executor against the reference executor in float64.

A graph case (:class:`~deep500lite.bench.zoo_model.GraphModel`: control flow, data-dependent
shapes, dynamic axes, a decoder with a key/value cache) has no producer's float64 answers to
compare with; its ground truth is the reference executor in float64, as ``deep500lite verify``'s
is (:class:`deep500lite.lv1.verify.GroundTruth`), and every executor is judged by the same rule.

- **inference**: one executor runs every set of feeds in turn (a model exported with dynamic axes
  has several shapes); every output of every set must hold. The compile time each set adds is
  recorded (``Cell.extra["compile_seconds"]``): 0 where the framework runs a new shape without
  rebuilding, the rebuild cost where it does not (JAX compiles per shape; torch.compile and XLA
  may too).
- **generation** (a decoder, ``GraphModel.generate``): the prompt, then one token per step, each
  step feeding the previous step's ``present`` as ``past``. The tokens are the ground truth's
  greedy ones (teacher forcing, so one near-tie cannot derail the comparison); every step's logits
  must hold, and how many greedy tokens the executor would have chosen alike is recorded. It is
  part of the inference cell.
- **training** (``GraphModel.train``): the loss's parameter gradients on the first set of feeds.
"""

from __future__ import annotations

import time

import numpy as np

from deep500lite.bench.zoo_cell import Cell, one_line as _one_line
from deep500lite.bench.zoo_model import GraphModel

__all__ = ["GraphTruth", "graph_truth", "check_graph_inference", "check_graph_training"]


class GraphTruth:
    """The ground truth of a graph case: one :class:`GroundTruth` per set of feeds and the decoder's steps."""

    def __init__(self, model: GraphModel):
        from deep500lite.lv1.verify import GroundTruth

        self.model = model
        self.sets = [GroundTruth(model.proto, feeds, train=(i == 0 and model.train), loss=model.loss)
                     for i, feeds in enumerate(model.feeds)]
        self.tokens = self.steps64 = self.floors = None
        if model.generate:
            self._decode_truth()

    def _decode_truth(self) -> None:
        from deep500lite.lv1.verify import build_executor, feeds_as_float64, tensor_error, to_float64

        model = self.model
        ex64 = build_executor(to_float64(model.proto), "reference")
        prompt = dict(model.feeds[0])
        feeds, tokens, steps = feeds_as_float64(prompt), [], []
        for _ in range(model.generate + 1):
            out = ex64.inference(feeds)
            logits = np.asarray(out["logits"])[:, -1]
            steps.append(logits)
            tokens.append(logits.argmax(-1).astype(np.int64))
            feeds = {"input_ids": tokens[-1][:, None], "past": out["present"]}
        self.tokens, self.steps64 = tokens, steps
        got32 = decode(build_executor(model.proto, "reference"), model, tokens)
        self.floors = [tensor_error(g, w) for g, w in zip(got32, steps)]


def graph_truth(model: GraphModel) -> GraphTruth:
    """The ground truth of ``model`` (the reference executor in float64 and float32)."""
    return GraphTruth(model)


def decode(ex, model: GraphModel, tokens: list) -> list:
    """The last position's logits of the prompt step and of each generated step, feeding ``tokens``."""
    feeds = dict(model.feeds[0])
    out_logits = []
    for step in range(model.generate + 1):
        out = ex.inference(feeds)
        out_logits.append(np.asarray(out["logits"])[:, -1])
        if step < model.generate:
            feeds = {"input_ids": tokens[step][:, None], "past": np.asarray(out["present"])}
    return out_logits


def check_graph_inference(model: GraphModel, truth: GraphTruth, executor: str, device=None):
    """Run every set of feeds (and the decoder's steps) on one executor; the zoo's inference cell."""
    from deep500lite.lv1.verify import build_executor, passes, tensor_error

    case = f"{model.name}/{model.exporter}"
    start = time.perf_counter()
    compile_per_set, worst, worst_floor, failures, extra = [], 0.0, 0.0, [], {}
    try:
        ex = build_executor(model.proto, executor, device)
        for feeds, gt in zip(model.feeds, truth.sets):
            before = ex.compile_seconds
            errors, ok = gt.check_outputs(ex.inference(dict(feeds)))
            compile_per_set.append(round(ex.compile_seconds - before, 3))
            name = max(errors, key=errors.get)
            if errors[name] >= worst:
                worst, worst_floor = errors[name], gt.floors[name]
            if not ok:
                shapes = ", ".join(f"{k} {list(np.shape(v))}" for k, v in feeds.items())
                failures.append(f"{name} at {shapes}: {errors[name]:.2g} of its scale")
        if model.generate:
            before = ex.compile_seconds
            got = decode(ex, model, truth.tokens)
            extra["generation_compile_seconds"] = round(ex.compile_seconds - before, 3)
            step_errors = [tensor_error(g, w) for g, w in zip(got, truth.steps64)]
            bad = [i for i, (e, f) in enumerate(zip(step_errors, truth.floors)) if not passes(e, "inference", f)]
            worst_step = int(np.argmax(step_errors))
            if step_errors[worst_step] >= worst:
                worst, worst_floor = step_errors[worst_step], truth.floors[worst_step]
            if bad:
                failures.append(f"the logits of generation step {bad[0]}: {step_errors[bad[0]]:.2g} of their scale")
            same = sum(int(np.array_equal(g.argmax(-1), t)) for g, t in zip(got, truth.tokens))
            extra["greedy_steps_alike"] = f"{same} of {len(got)}"
    except Exception as exc:  # noqa: BLE001 - every failure becomes the cell's reason
        return Cell(case, executor, "inference", "error", detail=_one_line(exc), seconds=time.perf_counter() - start)
    extra["compile_seconds"] = compile_per_set
    if ex.options.get("eager"):
        extra["eager"] = ex.options["eager"]  # the jax executor ran this graph op by op (see frameworks/jax)
    seconds = time.perf_counter() - start
    detail = _sets_text(model, compile_per_set, extra)
    if failures:
        return Cell(case, executor, "inference", "fail", worst, None, "; ".join(failures) + detail, seconds,
                    floor=worst_floor, compile_seconds=float(ex.compile_seconds), extra=extra)
    return Cell(case, executor, "inference", "pass", worst, None, detail.lstrip("; "), seconds, floor=worst_floor,
                compile_seconds=float(ex.compile_seconds), extra=extra)


def _sets_text(model: GraphModel, compile_per_set: list, extra: dict) -> str:
    parts = []
    if len(model.feeds) > 1:
        rebuilt = [c for c in compile_per_set[1:] if c > 0.05]
        parts.append(f"{len(model.feeds)} input shapes on one executor; "
                     + ("no rebuild" if not rebuilt else f"rebuilt for {len(rebuilt)} new shape(s), "
                        f"{sum(rebuilt):.1f} s compiling"))
    if model.generate:
        parts.append(f"{model.generate} tokens generated with the key/value cache")
    if extra.get("generation_compile_seconds", 0) > 0.05:
        parts.append(f"{extra['generation_compile_seconds']:.1f} s compiling a step for each new cache length")
    if extra.get("eager"):
        parts.append("run op by op, without XLA: " + extra["eager"])
    return "".join(f"; {p}" for p in parts)


def check_graph_training(model: GraphModel, truth: GraphTruth, executor: str, device=None):
    """The loss's parameter gradients on the first set of feeds; the zoo's training cell."""
    from deep500lite.lv1.verify import build_executor, tolerance

    case = f"{model.name}/{model.exporter}"
    if not model.train:
        return Cell(case, executor, "training", "skip", detail=model.no_training)
    gt = truth.sets[0]
    start = time.perf_counter()
    try:
        ex = build_executor(gt.train_model, executor, device)
        errors, ok = gt.check_gradients(ex)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the cell's reason
        return Cell(case, executor, "training", "error", detail=_one_line(exc), seconds=time.perf_counter() - start)
    worst = max(errors, key=errors.get) if errors else ""
    err = errors.get(worst, 0.0)
    seconds = time.perf_counter() - start
    if ok:
        return Cell(case, executor, "training", "pass", err, None, f"loss: {gt.loss_text}", seconds,
                    floor=gt.floor_gradients, compile_seconds=float(ex.compile_seconds))
    return Cell(case, executor, "training", "fail", err, None,
                f"gradient of {worst}: {err:.2g} of its scale (tolerance {tolerance('gradient', gt.floor_gradients):.2g};"
                f" the reference executor's float32 error {gt.floor_gradients or 0:.2g})", seconds,
                floor=gt.floor_gradients, compile_seconds=float(ex.compile_seconds))
