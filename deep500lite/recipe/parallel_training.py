"""The per-rank training of the model-parallel schemes (spatial, pipeline, tensor, hybrid) of a recipe.

:func:`train_parallel` is what :func:`deep500lite.recipe.running.train_recipe` runs when the
``distributed`` key names a model-parallel scheme; :mod:`deep500lite.recipe.parallelism` describes
the schemes, their options and the results each rank writes, and holds the checks and the
component helpers that :mod:`deep500lite.recipe.components` uses (so the two never import each other).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np

from deep500lite.errors import UserError
from deep500lite.recipe.parallelism import _COMM_PARTS, MODEL_SCHEMES, check_distributed, momentum_rule, scheme_of

__all__ = ["train_parallel", "describe_lines"]


def _strip_leading_flatten(network, data: str):
    """A network whose leading ``Flatten`` of the data input is removed (the host flattens the batch instead).

    Returns ``(network, flatten)``: ``flatten`` is True when the node was removed.
    """
    import onnx
    from onnx import helper

    from deep500lite.lv1.network import load_model

    model = network.to_onnx()
    nodes = list(model.graph.node)
    if not nodes or nodes[0].op_type != "Flatten" or nodes[0].input[0] != data:
        return network, False
    axis = next((helper.get_attribute_value(a) for a in nodes[0].attribute if a.name == "axis"), 1)
    if axis != 1 or sum(data in n.input for n in nodes) != 1:
        return network, False
    flat = nodes[0].output[0]
    vi = next(v for v in model.graph.input if v.name == data)
    dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    if not dims or any(d <= 0 for d in dims[1:]):
        return network, False
    del model.graph.node[0]
    for n in model.graph.node:
        for i, name in enumerate(n.input):
            if name == flat:
                n.input[i] = data
    vi.type.tensor_type.shape.ClearField("dim")
    new = helper.make_tensor_value_info(data, vi.type.tensor_type.elem_type, [dims[0], int(np.prod(dims[1:]))])
    vi.CopyFrom(new)
    del model.graph.value_info[:]
    return load_model(onnx.ModelProto.FromString(model.SerializeToString())), True


class _Pipeline:
    """Pipeline-parallel steps (one stage per rank)."""

    def __init__(self, comm, network, batch: int, framework: str, data: str, rule, options: dict):
        from deep500lite.lv3.pipeline import PipelineParallel, bubble_model

        self.comm = comm
        self.micro_batches = int(options.get("micro_batches", 1))
        self.pipe = PipelineParallel(comm, network, self.micro_batches, batch, options.get("schedule", "1f1b"),
                                     framework, options.get("cuts"), options.get("balance", "flops"), input=data,
                                     loss="loss", optimizer=rule)
        self.owner = {p: i for i, st in enumerate(self.pipe.stages) for p in st.parameters}
        self.bubble_model = bubble_model(comm.size, self.micro_batches)

    def step(self, feeds: dict) -> tuple[float, dict]:
        r = self.pipe.step(feeds, update=True)
        t = time.perf_counter()
        value = np.array([r.loss if r.loss is not None else 0.0], np.float64)
        loss = float(self.comm.broadcast(value, root=self.comm.size - 1)[0])
        done = time.perf_counter() - t
        return loss, {"compute": r.times["compute"] + r.times["optimizer"], "p2p": r.times["p2p"] + done,
                      "idle": r.times["idle"], "step": r.times["step"] + done}

    def parameters(self, initial: dict) -> dict:
        mine = self.pipe.parameter_values()
        out = {}
        for name, value in initial.items():
            if name in self.owner:
                src = mine[name] if self.owner[name] == self.comm.rank else np.zeros_like(value)
                out[name] = self.comm.broadcast(np.ascontiguousarray(src), root=self.owner[name])
            else:
                out[name] = value
        return out

    def describe(self) -> dict:
        p = self.pipe
        return {"micro_batches": self.micro_batches, "schedule": p.schedule,
                "cuts": [st.output for st in p.stages[:-1]], "stage": p.stage.index,
                "stage_parameters": list(p.stage.parameters), "bubble_model": self.bubble_model}


class _Tensor:
    """Tensor-parallel steps (the leading fully connected layers split, the head replicated)."""

    def __init__(self, comm, network, batch: int, framework: str, data: str, rule, options: dict):
        from deep500lite.lv3.tensor_parallel import TensorParallelMLP

        self.comm, self.rule = comm, rule
        self.mlp = TensorParallelMLP(comm, network, batch, framework, data, "loss")
        self._last = self._totals()

    def _totals(self) -> dict:
        compute = self.mlp.times["compute"] + sum(b.times["compute"] for b, _ in self.mlp.blocks)
        return {"compute": compute, "allreduce": sum(b.times["allreduce"] for b, _ in self.mlp.blocks)}

    def step(self, feeds: dict) -> tuple[float, dict]:
        start = time.perf_counter()
        loss, _ = self.mlp.step(feeds, self.rule)
        step = time.perf_counter() - start
        now = self._totals()
        times = {k: now[k] - self._last[k] for k in now}
        self._last = now
        times["step"] = step
        return loss, times

    def parameters(self, initial: dict) -> dict:
        from deep500lite.lv3.tensor_parallel import gather_shards

        out = dict(initial)
        for p in self.mlp.head.parameters:
            out[p] = self.mlp.head_network.fetch_tensor(p)
        for block, names in self.mlp.blocks:
            params = block.local.params
            for local, name, axis in zip(("w1", "b1", "w2"), names[:3], (0, 0, 1)):
                if name:
                    out[name] = gather_shards(self.comm, params[local], block.bounds, axis)
            if names[3]:
                src = params["b2"] if self.comm.rank == 0 else np.zeros_like(initial[names[3]])
                out[names[3]] = self.comm.broadcast(np.ascontiguousarray(src), root=0)
        return out

    def describe(self) -> dict:
        return {"blocks": [list(n) for _, n in self.mlp.blocks], "head_parameters": list(self.mlp.head.parameters)}


class _Spatial:
    """Spatially parallel steps (activations split along height/width, parameters whole on every rank)."""

    def __init__(self, comm, network, batch: int, framework: str, data: str, rule, options: dict):
        from deep500lite.lv3.spatial import SpatialParallelNetwork

        grid = options.get("grid")
        self.overlap = bool(options.get("overlap", True))
        self.spn = SpatialParallelNetwork(comm, network, data, framework, self.overlap,
                                          grid=None if grid is None else tuple(grid))
        self.rule = rule
        self.values = {p: network.fetch_tensor(p) for p in network.parameters}

    def step(self, feeds: dict) -> tuple[float, dict]:
        start = time.perf_counter()
        res = self.spn.forward_backward(feeds, "loss")
        t = time.perf_counter()
        new = {p: self.rule(g, self.values[p], p) for p, g in res.gradients.items() if p in self.values}
        self.values.update(new)
        # BatchNorm's running statistics (batch statistics in training) are kept for evaluation
        self.values.update({k: np.asarray(v) for k, v in res.running_stats.items()})
        self.spn.set_parameters(new)
        update = time.perf_counter() - t
        times = {k: res.times[k] for k in ("compute", "halo", "allreduce", "gather", "idle")}
        times["compute"] += update
        times["step"] = time.perf_counter() - start
        return float(np.asarray(res.outputs["loss"])), times

    def parameters(self, initial: dict) -> dict:
        return {**initial, **self.values}

    def describe(self) -> dict:
        return {"grid": list(self.spn.grid), "overlap": self.overlap}


class _Hybrid(_Spatial):
    """Data x spatial steps: groups of ``spatial_ranks`` ranks split each sample; the groups split the batch."""

    def __init__(self, comm, network, batch: int, framework: str, data: str, rule, options: dict):
        from deep500lite.lv3.mpi import MPICommunicator
        from deep500lite.lv3.spatial import SpatialParallelNetwork

        # One rank (the 1-rank baseline of run -n) is one group of one spatial rank.
        s = int(options["spatial_ranks"]) if comm.size > 1 else 1
        if not isinstance(comm, MPICommunicator) or comm.size % s:
            raise UserError(f"The 'hybrid' scheme needs the MPI communicator and a number of ranks that "
                            f"spatial_ranks={s} divides. Received: {type(comm).__name__} of {comm.size} ranks")
        self.groups = comm.size // s
        if batch % self.groups:
            raise UserError(f"The 'hybrid' scheme splits the batch of {batch} over {self.groups} groups equally; "
                            f"the batch size must be a multiple of the groups. Received: batch_size={batch}")
        self.group, self.batch = comm.rank // s, batch // self.groups
        self.spatial_comm = MPICommunicator(comm.comm.Split(self.group, comm.rank))
        self.data_comm = MPICommunicator(comm.comm.Split(comm.rank % s, comm.rank))
        self.overlap = bool(options.get("overlap", True))
        self.spn = SpatialParallelNetwork(self.spatial_comm, network, data, framework, self.overlap)
        self.rule, self.spatial_ranks = rule, s
        self.values = {p: network.fetch_tensor(p) for p in network.parameters}

    def bytes_sent(self) -> int:
        return self.spatial_comm.bytes_sent + self.data_comm.bytes_sent

    def step(self, feeds: dict) -> tuple[float, dict]:
        start = time.perf_counter()
        lo = self.group * self.batch
        shard = {k: np.ascontiguousarray(v[lo:lo + self.batch]) for k, v in feeds.items()}
        res = self.spn.forward_backward(shard, "loss")
        t = time.perf_counter()
        names = sorted(p for p in res.gradients if p in self.values)
        flat = np.concatenate([np.asarray(res.gradients[p], np.float32).ravel() for p in names]
                              + [np.asarray(res.outputs["loss"], np.float32).reshape(1)])
        flat = self.data_comm.allreduce(flat) / np.float32(self.groups) if self.groups > 1 else flat
        data_time = time.perf_counter() - t
        t, off, new = time.perf_counter(), 0, {}
        for p in names:
            n = self.values[p].size
            new[p] = self.rule(flat[off:off + n].reshape(self.values[p].shape), self.values[p], p)
            off += n
        self.values.update(new)
        # BatchNorm's running statistics (batch statistics in training) are kept for evaluation
        self.values.update({k: np.asarray(v) for k, v in res.running_stats.items()})
        self.spn.set_parameters(new)
        times = {k: res.times[k] for k in ("compute", "halo", "allreduce", "gather", "idle")}
        times["compute"] += time.perf_counter() - t
        times["allreduce"] += data_time
        times["step"] = time.perf_counter() - start
        return float(flat[-1]), times

    def describe(self) -> dict:
        return {"spatial_ranks": self.spatial_ranks, "groups": self.groups, "group": self.group,
                "overlap": self.overlap}


_RUNNERS = {"pipeline": _Pipeline, "tensor": _Tensor, "spatial": _Spatial, "hybrid": _Hybrid}


# ------------------------------------------------------------------------------ the training loop
class _NoUpdate:
    """The optimizer slot of the evaluation-only trainer (it never trains)."""

    def step(self, inputs):  # pragma: no cover - evaluate() never steps
        raise RuntimeError("evaluation only")


def _budget(events) -> int | None:
    from deep500lite.lv2.events import StepBudgetStop

    found = [e.steps for e in events if isinstance(e, StepBudgetStop)]
    return min(found) if found else None


def _share(batch: int, rank: int, size: int) -> int:
    return batch // size + (1 if rank < batch % size else 0)


def train_parallel(resolved, seed: int, *, events=(), progress: str | None = None, out=None):
    """Train a recipe whose ``distributed`` key names a model-parallel scheme, on this rank.

    Every rank of the job calls it (``deep500lite run RECIPE -n N``; a plain ``deep500lite run``
    is one rank). Of ``events``, only :class:`~deep500lite.lv2.events.StepBudgetStop` is honoured
    (the 1-rank baseline of ``run -n``).

    Args:
        resolved: the :class:`~deep500lite.recipe.resolution.ResolvedRecipe`.
        seed: the run seed.
        events: training events (see above).
        progress: ``None``/``"none"`` for silence, else one line per epoch on rank 0.
        out: the results folder (``OUT/rank<r>`` on ``P > 1`` ranks), or None.

    Returns:
        A :class:`~deep500lite.recipe.running.RecipeRun`.
    """
    from deep500lite.lv2.trainer import Trainer, TrainingStats
    from deep500lite.recipe import results as res
    from deep500lite.recipe.components import _build, _build_communicator
    from deep500lite.recipe.keys import _fresh
    from deep500lite.recipe.outcome import RecipeRun
    from deep500lite.recipe.verdicts import _judge

    cfg = resolved.config
    scheme = scheme_of(cfg)
    check_distributed(cfg)
    options = dict(cfg.get("distributed_kwargs") or {})
    rule = momentum_rule(resolved)
    started = time.time()
    # The single-process components: the same data order, network and evaluation as a plain run.
    parts = _build(resolved.with_config(distributed=None, distributed_kwargs=None), seed, with_optimizer=False)
    comm = _build_communicator(cfg)
    parts.communicator = comm
    if comm.size > 1 and out is not None:
        out = os.path.join(os.fspath(out), f"rank{comm.rank}")
    verbose = progress not in (None, "none") and comm.rank == 0
    net, data = parts.network, parts.input_node
    initial = {p: net.fetch_tensor(p) for p in net.parameters}
    batch_size = int(cfg["batch_size"])
    flatten = False
    if scheme == "tensor":
        net, flatten = _strip_leading_flatten(net, data)
    runner = _RUNNERS[scheme](comm, net, batch_size, str(cfg["executor"]), data, rule, options)
    evaluator = None
    if parts.validation_sampler is not None:
        evaluator = Trainer(parts.train_sampler, parts.validation_sampler, parts.executor, _NoUpdate(),
                            network_output=parts.output_node)
    sent = getattr(runner, "bytes_sent", lambda: comm.bytes_sent)
    budget = _budget(events)
    stats = TrainingStats()
    t0 = time.perf_counter()
    stats.start_time = t0
    sent0 = sent()
    for epoch in range(int(cfg["epochs"])):
        losses, first, e0 = [], len(stats.steps), time.perf_counter()
        for step, batch in enumerate(parts.train_sampler):
            feeds = dict(batch)
            if flatten:
                feeds[data] = np.ascontiguousarray(feeds[data]).reshape(len(feeds[data]), -1)
            before = sent()
            loss, times = runner.step(feeds)
            comm_time = sum(times.get(k, 0.0) for k in _COMM_PARTS)
            rec = {"epoch": epoch, "step": step, "global_step": len(stats.steps),
                   "samples": _share(len(next(iter(batch.values()))), comm.rank, comm.size), "loss": loss,
                   "step_time": times["step"], "compute_time": times.get("compute", 0.0),
                   "communication_time": comm_time, "idle_time": times.get("idle", 0.0),
                   **{f"{k}_time": times[k] for k in _COMM_PARTS if k in times},
                   "bytes_sent": sent() - before, "elapsed": time.perf_counter() - t0}
            stats.steps.append(rec)
            losses.append(loss)
            if not math.isfinite(loss):
                stats.stopped_by = stats.nonfinite = f"the loss became {loss} at step {rec['global_step']}"
                break
            if budget is not None and len(stats.steps) >= budget:
                stats.stopped_by = f"the step budget of {budget} steps is spent"
                break
        values = runner.parameters(initial)
        evaluation = {}
        if evaluator is not None and stats.nonfinite is None:
            for name, value in values.items():
                parts.network.feed_tensor(name, value)
            evaluation = evaluator.evaluate(events=[])
        stats.epochs.append({"epoch": epoch, "steps": len(stats.steps) - first,
                             "samples": sum(s["samples"] for s in stats.steps[first:]),
                             "train_loss": float(np.mean(losses)) if losses else math.nan,
                             "test_accuracy": evaluation.get("test_accuracy"),
                             "test_loss": evaluation.get("test_loss"),
                             "train_time": time.perf_counter() - e0, "elapsed": time.perf_counter() - t0,
                             "global_step_end": len(stats.steps), "complete": stats.stopped_by is None})
        if verbose:
            acc = evaluation.get("test_accuracy")
            print(f"epoch {epoch + 1}/{cfg['epochs']}  loss {stats.epochs[-1]['train_loss']:.4g}"
                  + (f"  test acc {acc:.2f}%" if acc is not None else "")
                  + f"  {stats.epochs[-1]['elapsed']:.1f} s", file=sys.stderr, flush=True)
        if stats.stopped_by:
            break
    stats.end_time = time.perf_counter()
    judged = [_fresh(a.metric) for a in resolved.metrics]
    measured = []
    for m in judged:
        try:
            measured.append(m.measure(None, stats, None))
        except Exception:  # noqa: BLE001 - a metric reading what only the trainer records is not measured here
            measured.append(None)
    verdicts = [_judge(a, v) for a, v in zip(resolved.metrics, measured)]
    error = stats.nonfinite
    passed = error is None and all(v.passed is not False for v in verdicts)
    results = _results(resolved, parts, stats, judged, measured, verdicts, passed, error, seed, started)
    split = {k: float(sum(s.get(f"{k}_time", 0.0) for s in stats.steps))
             for k in ("step", "compute", "communication", "idle", *_COMM_PARTS)}
    section = {"rank": comm.rank, "ranks": comm.size, "scheme": scheme, "options": options,
               "optimizer": f"{scheme} parallelism", "communicator": type(comm).__module__ + "." + type(comm).__name__,
               "bytes_sent": sent() - sent0, "bytes_received": comm.bytes_received,
               "communication_seconds": comm.seconds, "time_split": split, **runner.describe()}
    if scheme == "pipeline":
        section["bubble"] = split["idle"] / split["step"] if split["step"] > 0 else 0.0
    results["distributed"] = res.jsonable(section)
    path = None
    if out is not None:
        path = os.path.join(os.fspath(out), "results.json")
        res.write_results(path, results)
    return RecipeRun(passed, verdicts, measured, stats, results, error, path)


def _summary_keys(steps: list, warmup: int) -> dict:
    from deep500lite.recipe.results import summary_of

    keys = sorted({k for s in steps for k in s if k.endswith("_time") or k == "bytes_sent"})
    return {k: summary_of([s.get(k, math.nan) for s in steps[warmup:]]) for k in keys}


def _results(resolved, parts, stats, judged, measured, verdicts, passed, error, seed, started) -> dict:
    from deep500lite.recipe import results as res
    from deep500lite.recipe.verdicts import metric_name

    steps, epochs = stats.steps, stats.epochs
    warmup = 1 if len(steps) > 1 else 0
    last = epochs[-1] if epochs else {}
    step_summary = res.summary_of([s["step_time"] for s in steps[warmup:]])
    batch = int(resolved.config["batch_size"])
    summaries = {"warmup_steps": warmup, **_summary_keys(steps, warmup), "step_time": step_summary,
                 "throughput": {"samples_per_second": batch / step_summary["median"] if step_summary else None},
                 "final_test_accuracy": stats.test_accuracy, "final_train_accuracy": None,
                 "final_train_loss": last.get("train_loss"), "final_test_loss": last.get("test_loss"),
                 "training_time": (stats.end_time or 0.0) - (stats.start_time or 0.0),
                 "epochs_done": len(epochs), "steps_done": len(steps), "stopped_by": stats.stopped_by}
    finished = time.time()
    return res.jsonable({
        "format": res.RESULTS_FORMAT, "version": res.RESULTS_VERSION, "recipe": resolved.describe(),
        "framework": parts.info.get("framework"), "device": parts.info.get("device"),
        "executor_variant": parts.info.get("executor_variant"), "seeds": dict(parts.seeds),
        "components": dict(parts.info), "samples": {"steps": steps, "epochs": epochs}, "summaries": summaries,
        "metrics": [{"metric": metric_name(m), "value": v} for m, v in zip(judged, measured)],
        "verdicts": [v.to_dict() for v in verdicts], "passed": bool(passed), "error": error, "divergence": None,
        "environment": {"runtime_threads": res.runtime_threads(), "command": list(sys.argv)},
        "started": started, "finished": finished, "wall_time": finished - started})


def describe_lines(results: dict, path: str) -> list[str]:
    """Terminal lines for an aggregated results dict of a model-parallel job: each rank's time split (and bubble).

    Args:
        results: the aggregated results dict.
        path: where it was written (the rank files lie beside it).

    Returns an empty list for any other results (single process, data parallel).
    """
    d = results.get("distributed") or {}
    if d.get("scheme") not in MODEL_SCHEMES:
        return []
    files = d.get("rank_files") or []
    folder = os.path.dirname(os.fspath(path))
    lines = []
    for r, name in enumerate(files):
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            rank = json.load(f)["distributed"]
        split = rank.get("time_split") or {}
        step = split.get("step") or 0.0
        parts = ", ".join(f"{k} {100 * split[k] / step:.1f}%" for k in ("compute", *_COMM_PARTS, "idle")
                          if step > 0 and split.get(k))
        text = f"rank {r} ({d['scheme']}): {step:.3f} s in {len(results['samples']['steps'])} steps: {parts}"
        if rank.get("bubble") is not None:
            text += (f"; bubble {rank['bubble']:.3f} vs the model (P-1)/(M+P-1) = {rank['bubble_model']:.3f}")
        lines.append(text)
    return lines
