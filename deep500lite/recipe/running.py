"""Running a recipe: build, train, measure, judge and write the results file.

:func:`train_recipe` runs a resolved recipe once and returns a :class:`RecipeRun` (verdicts,
measured values, training statistics, the results dict); :func:`run_recipe` is Deep500's entry
point (the three objects in, True or False out). :class:`EpochLines` prints one line per epoch.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from typing import Sequence

import numpy as np

from deep500lite.errors import UserError
from deep500lite.lv1.compile_progress import report_compiling_to
from deep500lite.recipe import results as res
from deep500lite.recipe.components import _build
from deep500lite.recipe.divergence import first_step_divergence
from deep500lite.recipe.keys import _fresh, _qualified
from deep500lite.recipe.loading import Recipe
from deep500lite.recipe.outcome import RecipeRun
from deep500lite.recipe.resolution import resolve_recipe
from deep500lite.recipe.verdicts import _judge

__all__ = ["train_recipe", "run_recipe", "RecipeRun", "EpochLines"]


# ================================================================================ progress
class EpochLines:
    """A training event printing one line per epoch (for logs and pipes, where a bar would not redraw).

    Args:
        stream: where to write (default ``sys.stdout`` at the time of writing).
        prefix: text before every line.
    """

    def __init__(self, stream=None, prefix: str = ""):
        self._stream, self.prefix = stream, prefix

    def _write(self, text: str) -> None:
        stream = self._stream if self._stream is not None else sys.stdout
        stream.write(self.prefix + text + "\n")
        stream.flush()

    def before_training(self, trainer, stats):
        self._write(f"training: {trainer.total_epochs} epochs x {trainer.steps_per_epoch} steps")

    def before_epoch(self, trainer, stats, epoch):
        first = stats.initial_test
        if epoch == 0 and not stats.epochs and first and first.get("test_accuracy") is not None:
            self._write(f"before training  test acc {first['test_accuracy']:.2f}%")

    def after_epoch(self, trainer, stats, epoch):
        rec = stats.epochs[-1]
        parts = [f"epoch {epoch + 1}/{trainer.total_epochs}", f"loss {rec['train_loss']:.4g}"]
        if rec.get("train_accuracy") is not None:
            parts.append(f"train acc {rec['train_accuracy']:.2f}%")
        if rec.get("test_accuracy") is not None:
            parts.append(f"test acc {rec['test_accuracy']:.2f}%")
        parts.append(f"{rec['elapsed']:.1f} s")
        self._write("  ".join(parts))

    def after_training(self, trainer, stats):
        if stats.stopped_by:
            self._write(f"training stopped: {stats.stopped_by}")


def _compile_stream(progress: str | None):
    """Where compile lines go for a ``progress`` setting: the stream its lines go to (None: nowhere)."""
    if progress in (None, "none"):
        return None
    if progress == "lines":
        return sys.stdout
    return sys.stderr


def _progress_events(progress: str | None) -> list:
    if progress in (None, "none"):
        return []
    if progress == "lines":
        return [EpochLines()]
    from deep500lite.lv2.events import TerminalBarEvent

    if progress == "bar":
        return [TerminalBarEvent(enabled=True)]
    if progress == "auto":
        return [TerminalBarEvent()] if sys.stderr.isatty() else [EpochLines(stream=sys.stderr)]
    raise UserError(f"progress must be one of 'auto', 'bar', 'lines', 'none'. Received: {progress!r}")


# ================================================================================== training
class _DistributedSteps:
    """Adds the distributed optimizer's figures of each step to its record in ``stats.steps``:
    ``communication_time`` and ``compute_time`` (= ``step_time`` - ``communication_time``),
    seconds, and ``bytes_sent`` by this rank."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def after_training_batch(self, trainer, stats, batch, outputs):
        rec = stats.steps[-1]
        comm = float(getattr(self.optimizer, "communication_seconds", math.nan))
        rec["communication_time"] = comm
        rec["compute_time"] = rec["step_time"] - comm
        rec["bytes_sent"] = int(getattr(self.optimizer, "bytes_per_step", 0))


def _distributed_section(parts) -> dict:
    comm, opt = parts.communicator, parts.optimizer
    bound = getattr(opt, "staleness", None)  # StaleSynchronous's bound (a list of values elsewhere)
    return {"rank": comm.rank, "ranks": comm.size, "optimizer": _qualified(type(opt)),
            "communicator": _qualified(type(comm)), "bytes_sent": comm.bytes_sent,
            "bytes_received": comm.bytes_received, "communication_seconds": comm.seconds,
            "operations": {k: dict(v) for k, v in comm.stats.items()},
            # Asynchronous optimizers: every served / applied gradient's staleness, and the bound if any.
            "staleness": _staleness(opt),
            "staleness_bound": bound if isinstance(bound, int) else None}


def _staleness(opt) -> list | None:
    for name in ("observed_staleness", "staleness"):
        value = getattr(opt, name, None)
        if isinstance(value, (list, tuple)):
            return list(value)
    return None


class _ParameterDigest:
    """Records a SHA-256 of all parameters after every step (for the determinism check)."""

    def __init__(self):
        self.digests: list[str] = []

    def after_training_batch(self, trainer, stats, batch, outputs):
        net = trainer.executor.network
        h = hashlib.sha256()
        for value in net.fetch_tensors(net.parameters):
            h.update(np.ascontiguousarray(value).tobytes())
        self.digests.append(h.hexdigest())


def train_recipe(recipe, seed: int | None = None, *, events: Sequence = (), progress: str | None = None,
                 out: str | os.PathLike | None = None, mllog: str | os.PathLike | None = None,
                 divergence: bool = False, environment: bool = True, _digest: _ParameterDigest | None = None,
                 mlperf: dict | None = None) -> RecipeRun:
    """Build every component of a recipe, train, measure and judge.

    Args:
        recipe: a :class:`ResolvedRecipe` (or a :class:`Recipe`, resolved without overrides).
        seed: the run seed (default 0; see the module documentation).
        events: more training events.
        progress: ``"auto"`` (a bar on a terminal, else a line per epoch on stderr), ``"bar"``,
            ``"lines"`` (stdout), or None/``"none"``.
        out: a folder for ``results.json`` (and ``epochs.csv``, ``steps.csv``); None writes nothing.
        mllog: a file for an MLPerf training log (``:::MLLOG`` lines, :mod:`deep500lite.recipe.mlperf`), or
            None. A compiled executor then compiles before ``run_start``, as MLPerf rules it.
        divergence: also measure the first step's largest output and gradient differences from
            the reference executor (:func:`first_step_divergence`; recorded in the results).
        environment: record the environment (:func:`deep500lite.environment.collect_environment`).
        mlperf: the MLPerf log's submission fields (:func:`deep500lite.recipe.mlperf.submission_fields`).

    Returns:
        A :class:`RecipeRun`.

    Raises:
        UserError: a component cannot be built (unknown name, missing dataset file, bad argument).
    """
    from deep500lite.lv2.trainer import NonFiniteLossError, test_training
    from deep500lite.metrics.training import (PeakMemory, StepTimeBreakdown, TestAccuracy, Throughput,
                                              TimeToAccuracy, TrainingAccuracy)

    if isinstance(recipe, Recipe):
        recipe = recipe.resolve()
    seed = 0 if seed is None else seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UserError(f"seed must be an integer >= 0. Received: {seed!r}")
    seed = int(seed)
    from deep500lite.recipe.parallel_training import train_parallel
    from deep500lite.recipe.parallelism import scheme_of

    if scheme_of(recipe.config) is not None:  # spatial / pipeline / tensor parallelism
        return train_parallel(recipe, seed, events=events, progress=progress, out=out)
    started = time.time()
    div = None
    if divergence:
        try:
            div = first_step_divergence(recipe, seed)
        except Exception as exc:  # noqa: BLE001 - the run itself may still work; the error is recorded
            div = {"reference": "reference", "error": f"{type(exc).__name__}: {exc}", "outputs": None,
                   "gradients": None}
    writer = None
    if mllog is not None:
        from deep500lite.recipe.mlperf import MLLogEvent, precompile_parts, submission_fields

        writer = MLLogEvent(mllog, recipe, seed, mlperf or submission_fields(recipe_name=recipe.name))
        writer.init_start()
    parts = _build(recipe, seed)
    if writer is not None:
        writer.describe(parts)
        with report_compiling_to(_compile_stream(progress)):
            writer.init_stop(precompile_parts(parts, recipe))
    comm = parts.communicator
    if comm is not None and comm.size > 1:
        if comm.rank != 0:
            progress = None  # one progress display per job
        if out is not None:
            out = os.path.join(os.fspath(out), f"rank{comm.rank}")
    judged = [_fresh(a.metric) for a in recipe.metrics]
    target = recipe.accuracy_target()
    internal = {"test_accuracy": TestAccuracy(), "train_accuracy": TrainingAccuracy(), "throughput": Throughput(),
                "breakdown": StepTimeBreakdown(warmup=1), "memory": PeakMemory()}
    if target is not None:
        internal["time_to_accuracy"] = TimeToAccuracy(target)
    # a recipe that asks for Deep500's TerminalBarEvent already shows progress: no second display
    from deep500lite.lv2.events import TerminalBarEvent

    shown = any(isinstance(e, TerminalBarEvent) for e in parts.events)
    run_events = list(parts.events) + ([] if shown else _progress_events(progress)) + list(events)
    if writer is not None:
        run_events.insert(0, writer)
    if _digest is not None:
        run_events.append(_digest)
    if comm is not None:
        run_events.insert(0, _DistributedSteps(parts.optimizer))
    if out is not None:
        from deep500lite.lv2.events import CSVSummaryWriter

        run_events.append(CSVSummaryWriter(out))
    metrics = judged + list(internal.values())
    error = None
    cfg = recipe.config
    compiled_before = float(getattr(parts.executor, "compile_seconds", 0.0) or 0.0)
    try:
        with report_compiling_to(_compile_stream(progress)):
            values = test_training(parts.executor, parts.train_sampler, parts.validation_sampler, parts.optimizer,
                                   int(cfg["epochs"]), int(cfg["batch_size"]), parts.output_node, metrics=metrics,
                                   events=run_events, verbose=False)
        stats = values.stats
    except NonFiniteLossError as exc:
        error, stats = str(exc), exc.stats
        values = [m.measure(None, stats, None) for m in metrics]
    if comm is not None and hasattr(parts.optimizer, "finalize"):
        parts.optimizer.finalize()  # collective: asynchronous optimizers settle their messages
    user_values = list(values[:len(judged)])
    verdicts = [_judge(a, v) for a, v in zip(recipe.metrics, user_values)]
    passed = error is None and all(v.passed is not False for v in verdicts)
    finished = time.time()
    results = res.build_results(recipe, parts, stats, judged, user_values, verdicts, internal, passed, error,
                                seed, started, finished, divergence=div, environment=environment)
    if comm is not None:
        results["distributed"] = res.jsonable(_distributed_section(parts))
    if writer is not None:
        writer.run_stop(passed, float(getattr(parts.executor, "compile_seconds", 0.0) or 0.0) - compiled_before)
    path = None
    if out is not None:
        path = os.path.join(os.fspath(out), "results.json")
        res.write_results(path, results)
    return RecipeRun(passed, verdicts, user_values, stats, results, error, path)


def run_recipe(fixed: dict, mutable: dict, metrics: Sequence, *, seed: int | None = None,
               out: str | os.PathLike | None = None, events: Sequence = (), verbose: bool = True) -> bool:
    """Run a recipe (Deep500's ``run_recipe``): build, train, and check the acceptable metrics.

    Args:
        fixed: the fixed components (see the module documentation for the keys).
        mutable: the mutable components.
        metrics: the acceptable metrics: ``(metric, threshold)`` or ``(metric, threshold,
            'higher'|'lower')``.
        seed: the run seed (default 0).
        out: a folder to write ``results.json`` to (None: no file).
        events: more training events.
        verbose: print progress (a bar on a terminal) and one line per metric.

    Returns:
        True when every acceptable metric holds.

    Raises:
        UserError: a bad recipe (overlapping or unknown keys, bad values) or a component that
            cannot be built.

    >>> d5.run_recipe(FIXED, MUTABLE, METRICS) or exit(1)  # doctest: +SKIP
    """
    resolved = resolve_recipe(fixed, mutable, metrics)
    run = train_recipe(resolved, seed, events=events, progress="auto" if verbose else None, out=out)
    if verbose:
        for line in run.lines():
            print(line)
    return run.passed
