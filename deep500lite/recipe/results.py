"""Results files: one JSON document per recipe run, written atomically.

Layout (``"format": "deep500lite-results"``, ``"version": 1``)::

    recipe        the resolved recipe: name, file, SHA-256 of the file, every key's value
                  (callables as qualified names), which keys were fixed / mutable / overridden,
                  and the acceptable metrics (threshold, required value, direction, unit)
    framework     the executor's framework key; device: its device
    executor_variant  the executor's spelling (``torch:compile``, ``onnxruntime:O0``; the
                  framework key for a plain one); comparisons group runs by it
    executor_options  ``executor.options``: the options it was built with that change how it runs
    compile_seconds   ``executor.compile_seconds`` at the end of the run: all its tracing and
                  compilation (left out of every step_time; see each step's compile_time)
    seeds         every seed used: run, model, executor, samplers, transformations
    components    what was built: sample counts, classes, sample shape, parameter count, classes
                  of executor, samplers and optimizer, steps per epoch
    samples       every raw sample: steps (one record per training step: loss, accuracy,
                  data_time, step_time, forward_backward_time, optimizer_time, elapsed, ...) and
                  epochs (train/test loss and accuracy, times, ...)
    summaries     medians with exact 95% confidence intervals of the step-time parts (after
                  warmup_steps), throughput, final accuracies and losses, time to accuracy
                  (seconds without compilation; wall_seconds with it; compile_seconds until
                  then), peak memory, total training time
    metrics       each acceptable metric's measured value and raw samples
    verdicts      one per acceptable metric: measured, required, direction, passed
    passed        every acceptable metric held; error: what stopped training, or null
    divergence    first-step output and gradient differences from the reference executor, or null
    distributed   only for a recipe with a ``distributed`` component: this rank, the ranks, the
                  optimizer and communicator, bytes sent and received, seconds inside
                  communication, per-operation counts; each step record then also has
                  communication_time, compute_time and bytes_sent (summarized in summaries).
                  The aggregate of a ``run -n N`` job adds per_rank, aggregate, baseline,
                  speedup and scaling_efficiency (:mod:`deep500lite.recipe.distributed`)
    environment   collect_environment() (packages, frameworks, CPU and GPU model, thread
                  variables, MPI library, git commit of the working folder), the git commit of
                  the recipe's folder, the thread counts the frameworks use, the command line
    started, finished, wall_time   Unix times and seconds

Non-finite numbers are written as ``null``. MLPerf log lines (``:::MLLOG {...}``) are written by
:class:`deep500lite.recipe.mlperf.MLLogEvent`.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np

from deep500lite.errors import UserError
from deep500lite.recipe.results_schema import check_results, check_sections
from deep500lite.recipe.staging import is_staging_name, recover, restore_aside
from deep500lite.recipe.verdicts import metric_name
from deep500lite.utils import atomic_write_text

__all__ = ["RESULTS_FORMAT", "RESULTS_VERSION", "build_results", "write_results", "read_results", "find_results",
           "jsonable", "summary_of", "runtime_threads", "step_times"]

RESULTS_FORMAT = "deep500lite-results"
RESULTS_VERSION = 1
RESULTS_FILE = "results.json"


def jsonable(value):
    """``value`` as JSON-ready data: numpy scalars and arrays to Python, NaN and infinities to None."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if hasattr(value, "to_dict"):
        return jsonable(value.to_dict())
    return repr(value)


def runtime_threads() -> dict:
    """Thread counts of the frameworks imported in this process, and the usable CPU cores."""
    out = {}
    try:
        out["usable_cores"] = len(os.sched_getaffinity(0))
    except AttributeError:
        out["usable_cores"] = os.cpu_count()
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        out["torch_intra_op"] = torch.get_num_threads()
        out["torch_inter_op"] = torch.get_num_interop_threads()
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        try:
            out["tensorflow_intra_op"] = tf.config.threading.get_intra_op_parallelism_threads()
            out["tensorflow_inter_op"] = tf.config.threading.get_inter_op_parallelism_threads()
        except AttributeError:  # a partially imported tensorflow
            pass
    return out


def summary_of(values) -> dict | None:
    """The :func:`~deep500lite.metrics.statistics.summarize` dict of the finite values, or None if there are none."""
    from deep500lite.metrics.statistics import summarize

    kept = [float(v) for v in values if v is not None and math.isfinite(v)]
    return summarize(kept).to_dict() if kept else None


def step_times(results: dict, part: str = "step_time", warmup: int | None = None) -> list[float]:
    """The raw per-step times of a results dict after its warm-up steps.

    Args:
        results: a results dict.
        part: ``step_time``, ``data_time``, ``forward_backward_time`` or ``optimizer_time``.
        warmup: steps left out at the start (default: the file's ``summaries.warmup_steps``).
    """
    if warmup is None:
        warmup = (results.get("summaries") or {}).get("warmup_steps", 1)
    steps = (results.get("samples") or {}).get("steps") or []
    return [s[part] for s in steps[warmup:] if s.get(part) is not None and math.isfinite(s[part])]


def build_results(recipe, parts, stats, judged, values, verdicts, internal, passed, error, seed, started, finished,
                  divergence=None, environment: bool = True) -> dict:
    """The results dict of one run (used by :func:`deep500lite.recipe.train_recipe`)."""
    breakdown = internal["breakdown"]
    warmup = breakdown.warmup
    steps = list(stats.steps)
    epochs = list(stats.epochs)
    last = epochs[-1] if epochs else {}
    tta = internal.get("time_to_accuracy")
    memory = internal["memory"]
    throughput = internal["throughput"]
    summaries = {
        "warmup_steps": warmup,
        "step_time": summary_of([s["step_time"] for s in steps[warmup:]]),
        "data_time": summary_of([s["data_time"] for s in steps[warmup:]]),
        "forward_backward_time": summary_of([s["forward_backward_time"] for s in steps[warmup:]]),
        "optimizer_time": summary_of([s["optimizer_time"] for s in steps[warmup:]]),
        **{key: summary_of([s[key] for s in steps[warmup:]]) for key in ("communication_time", "compute_time",
                                                                         "bytes_sent") if steps and key in steps[0]},
        "throughput": {"samples_per_second": throughput.measure(None, stats, None),
                       "per_step": summary_of(throughput.samples[warmup:])},
        "final_test_accuracy": stats.test_accuracy,
        "final_train_accuracy": stats.train_accuracy,
        "final_train_loss": last.get("train_loss"),
        "final_test_loss": last.get("test_loss"),
        "time_to_accuracy": ({"target": tta.target, "seconds": tta.seconds, "epoch": tta.epoch,
                              "wall_seconds": tta.wall_seconds, "compile_seconds": tta.compile_seconds}
                             if tta is not None else None),
        "peak_memory_bytes": memory.measure(None, stats, None),
        "host_peak_memory_bytes": memory.host_peak_bytes,
        "device_peak_memory_bytes": memory.device_peak_bytes,
        "training_time": stats.total_time,
        "epochs_done": len(epochs),
        "steps_done": len(steps),
        "stopped_by": stats.stopped_by,
    }
    metrics = []
    for m, v in zip(judged, values):
        entry = {"metric": metric_name(m), "value": v}
        if hasattr(m, "samples"):
            entry["samples"] = list(m.samples)
        metrics.append(entry)
    env = {}
    if environment:
        from deep500lite.environment import collect_environment, git_commit

        folder = os.path.dirname(recipe.path) if recipe.path else None
        env = collect_environment(folder=None)
        env["recipe_git_commit"] = git_commit(folder) if folder else None
    env["runtime_threads"] = runtime_threads()
    env["command"] = list(sys.argv)
    framework = parts.info.get("framework")
    results = {
        "format": RESULTS_FORMAT, "version": RESULTS_VERSION,
        "recipe": recipe.describe(),
        "framework": framework, "device": parts.info.get("device"),
        "executor_variant": parts.info.get("executor_variant") or framework,
        "executor_options": dict(getattr(parts.executor, "options", None) or {}),
        "compile_seconds": float(getattr(parts.executor, "compile_seconds", 0.0) or 0.0),
        "seeds": dict(parts.seeds),
        "components": dict(parts.info),
        "samples": {"steps": steps, "epochs": epochs},
        "summaries": summaries,
        "metrics": metrics,
        "verdicts": [v.to_dict() for v in verdicts],
        "passed": bool(passed),
        "error": error,
        "divergence": divergence,
        "environment": env,
        "started": started, "finished": finished, "wall_time": finished - started,
    }
    return jsonable(results)


def write_results(path, results: dict) -> str:
    """Write a results dict as JSON, atomically (NaN and infinities as null). Returns the path.

    The run's label (``DEEP500LITE_LABEL``) and machine are added to ``results`` first, and the
    file is recorded in the results database when ``DEEP500LITE_DB`` names one
    (:mod:`deep500lite.results.hook`; the CLI sets it).
    """
    from deep500lite.recipe.staging import published_path
    from deep500lite.results.hook import record_results, stamp

    text = json.dumps(jsonable(stamp(results)), indent=1, allow_nan=False)
    atomic_write_text(path, text + "\n")
    record_results(published_path(path), text)
    return os.fspath(path)


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number; results files write non-finite numbers as null")


def read_results(path) -> dict:
    """Read one results file (or ``DIR/results.json``).

    The file is checked against :data:`deep500lite.recipe.results_schema.RESULTS_SCHEMA` (jsonschema)
    before anything reads it.

    Raises:
        UserError: the file is missing, not JSON, not a deep500lite results file, of a newer
            version, or not of the shape of a results file (the field and the value are named).
    """
    path = given = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, RESULTS_FILE)
    if not os.path.isfile(path):
        raise UserError(f"Results file '{path}' does not exist. Give results.json files written by "
                        "`deep500lite run` or `deep500lite compare` (or the folders holding them). "
                        f"Received: {given!r}")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f, parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise UserError(f"Results file '{path}' is not UTF-8 text (byte {exc.start}); a results file is JSON. Give a "
                        f"results.json written by `deep500lite run` or `deep500lite compare`. Received: {given!r}"
                        ) from exc
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, an over-long integer, too deep nesting
        reason = str(exc) if not isinstance(exc, RecursionError) else "nested too deeply"
        raise UserError(f"Results file '{path}' is not valid JSON ({reason}); it may be truncated. Give a "
                        f"results.json written by `deep500lite run` or `deep500lite compare`. Received: {given!r}"
                        ) from exc
    except OSError as exc:
        raise UserError(f"Results file '{path}' cannot be read ({exc.strerror or exc}); give a readable results.json. "
                        f"Received: {given!r}") from exc
    if not isinstance(data, dict) or data.get("format") != RESULTS_FORMAT:
        found = f"format {data.get('format')!r}" if isinstance(data, dict) else f"a JSON {type(data).__name__}"
        raise UserError(f"'{path}' is not a deep500lite results file (its \"format\" is not '{RESULTS_FORMAT}'). "
                        f"Received: {found}")
    check_sections(data, path)
    version = data.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise UserError(f"Results file '{path}' has no valid \"version\": it must be an integer from 1 to "
                        f"{RESULTS_VERSION}. Received: version {version!r}")
    if version > RESULTS_VERSION:
        raise UserError(f"Results file '{path}' has version {version}; this deep500lite reads up to "
                        f"version {RESULTS_VERSION}. Upgrade deep500lite. Received: version {version}")
    check_results(data, path)
    data["_path"] = path
    return data


def find_results(paths) -> list[str]:
    """Expand files and folders into results files (folders are searched recursively, sorted).

    Raises:
        UserError: a path that does not exist, or a folder without results files.
    """
    found = []
    for p in paths:
        p = os.fspath(p)
        if not os.path.exists(p):
            recover(p, delete=False)  # a run killed between its two renames left the old set aside
        if os.path.isfile(p):
            found.append(p)
        elif os.path.isdir(p):
            inside = []
            for root, dirs, files in os.walk(p):
                # Staging folders of running or killed runs hold partial outputs (deep500lite.recipe.staging).
                if any(is_staging_name(d) for d in dirs):
                    restore_aside(root)
                    dirs[:] = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))
                                     and not is_staging_name(d))
                if RESULTS_FILE in files:
                    inside.append(os.path.join(root, RESULTS_FILE))
            inside.sort()
            if not inside:
                raise UserError(f"Folder '{p}' holds no {RESULTS_FILE} (searched recursively); give results files "
                                "written by `deep500lite run` or `deep500lite compare`, or folders holding them. "
                                f"Received: {p!r}")
            found.extend(inside)
        else:
            raise UserError(f"Results path '{p}' does not exist; give results files or folders holding them. "
                            f"Received: {p!r}")
    return found
