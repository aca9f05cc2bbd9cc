"""From a results file or a benchmark's JSON to what the store keeps: one run and its series.

A *run* is one results document: a recipe run's ``results.json`` (``run``, ``compare``, every
rank of ``run -n`` and the job's aggregate) or the JSON of a ``bench ...`` or ``model ...``
command. A *series* is one benchmark's one metric in that run: its raw samples, their median
with the distribution-free 95% confidence interval (:func:`deep500lite.metrics.statistics.summarize`),
the unit and whether lower or higher is better. ``history``, ``regress`` and ``dashboard`` work
on series.

Recipe runs give the benchmark ``RECIPE/VARIANT`` (``digits_lenet/torch``, ``digits_lenet/torch:compile``;
``@DEVICE`` added off the CPU; `` [rank R of N]`` for a rank of ``run -n``, `` [N ranks]`` for the
job's aggregate) with the series ``step_time`` (the headline: every step after the warm-up),
``data_time``, ``forward_backward_time``, ``optimizer_time``, ``communication_time`` and
``compute_time`` (seconds), ``throughput`` (samples per second, per step), and single values:
``final_test_accuracy``, ``final_train_loss``, ``training_time``, ``compile_seconds``,
``peak_memory_bytes`` and each acceptable metric (``metric:NAME``). An aggregate keeps the
slowest rank's step-time summary (its raw samples are in that rank's run).

Benchmark JSON (``bench ...``/``model ... --json``) is read generically: every list of numbers
under a key that holds raw samples (``raw``, ``samples``, ``ratios``, ``cold``, ``forward``,
``backward``, ``step``, ``times`` or a key ending in ``_times``/``_samples``) is a series; its
benchmark is named by the identifying fields around it (framework, model, algorithm, bytes,
batch size, ...) and its metric by the keys that lead to it (``deep500lite``, ``native``,
``ratios``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time

from deep500lite.errors import UserError

__all__ = ["Series", "Record", "from_results", "from_payload", "identity", "canonical_json", "is_results_document"]

#: Step-record fields kept as series (seconds, lower is better); ``step_time`` is the headline.
STEP_PARTS = ("step_time", "data_time", "forward_backward_time", "optimizer_time", "communication_time",
              "compute_time")
#: Single values of ``summaries`` kept as series: key -> (unit, better).
SUMMARY_VALUES = {"final_test_accuracy": ("%", "higher"), "final_train_loss": ("loss", "lower"),
                  "training_time": ("s", "lower"), "peak_memory_bytes": ("bytes", "lower")}

_SAMPLE_KEYS = {"raw", "samples", "ratios", "cold", "forward", "backward", "step", "times"}
_ID_KEYS = ("framework", "variant", "executor_variant", "model", "network", "dataset", "algorithm", "op", "name", "kind", "layer",
            "mode", "scheme", "device", "dtype", "shape", "batch_size", "batch", "bytes", "elements", "ranks",
            "training", "suite")
_HIGHER = ("throughput", "bandwidth", "per_second", "flops", "accuracy", "speedup", "efficiency")


@dataclasses.dataclass
class Series:
    """One benchmark's one metric in one run.

    Attributes:
        benchmark: what was measured (``digits_lenet/torch``; a bench row's fields).
        metric: which figure (``step_time``, ``throughput``, ``deep500lite``).
        unit: ``s``, ``samples/s``, ``%``, ``ratio``, ...
        better: ``lower`` or ``higher``.
        headline: the metric ``regress`` and ``history`` take by default.
        values: the raw samples (empty when only a summary is known).
        n, median, ci_low, ci_high: the summary (median and its 95% confidence interval).
    """

    benchmark: str
    metric: str
    unit: str
    better: str
    headline: bool
    values: list
    n: int = 0
    median: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None

    def __post_init__(self):
        kept = [float(v) for v in self.values if _number(v) and math.isfinite(float(v))]
        self.values = kept
        if kept:
            from deep500lite.metrics.statistics import summarize

            s = summarize(kept)
            self.n, self.median, self.ci_low, self.ci_high = s.n, s.median, s.ci_low, s.ci_high


@dataclasses.dataclass
class Record:
    """One run as the store keeps it (see :mod:`deep500lite.results.schema` for the columns)."""

    key: str
    kind: str
    suite: str
    document: dict
    series: list
    command: str | None = None
    session: str | None = None
    framework: str | None = None
    variant: str | None = None
    device: str | None = None
    rank: int | None = None
    ranks: int | None = None
    label: str | None = None
    git_commit: str | None = None
    machine: str | None = None
    started: float | None = None
    recorded: float = dataclasses.field(default_factory=time.time)
    passed: bool | None = None
    path: str | None = None


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def canonical_json(document) -> str:
    """``document`` as compact JSON with sorted keys (the form the store keeps and digests)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False, default=str)


def _digest(*parts) -> str:
    return hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).hexdigest()


def is_results_document(document) -> bool:
    """Whether a JSON document is a recipe results file (``"format": "deep500lite-results"``)."""
    return isinstance(document, dict) and document.get("format") == "deep500lite-results"


def identity(document: dict) -> dict:
    """The label, git commit and machine a results document or benchmark JSON records.

    The commit is the working folder's (``environment.git_commit``), else the recipe folder's;
    the machine is ``environment.machine`` (the name recorded when it ran), else the CPU model
    and core count.
    """
    env = document.get("environment") if isinstance(document.get("environment"), dict) else {}
    commit = env.get("git_commit") or env.get("recipe_git_commit")
    machine = env.get("machine")
    if not machine:
        cpu = env.get("cpu") if isinstance(env.get("cpu"), dict) else {}
        machine = f"{cpu.get('model') or 'unknown CPU'} x{cpu.get('logical_cores') or '?'}" if cpu else None
    label = document.get("label")
    return {"label": label if isinstance(label, str) else None, "git_commit": commit if isinstance(commit, str)
            else None, "machine": machine if isinstance(machine, str) else None}


def _recipe_series(doc: dict, benchmark: str, role: str) -> list:
    summaries = doc.get("summaries") or {}
    out = []
    if role == "aggregate":
        agg = (doc.get("distributed") or {}).get("aggregate") or {}
        st = agg.get("step_time")
        if isinstance(st, dict) and _number(st.get("median")):
            s = Series(benchmark, "step_time", "s", "lower", True, [])
            s.n, s.median = int(st.get("n") or 0), st["median"]
            s.ci_low, s.ci_high = st.get("ci_low"), st.get("ci_high")
            out.append(s)
        for key, unit in (("samples_per_second", "samples/s"),):
            if _number(agg.get(key)):
                out.append(Series(benchmark, "throughput", unit, "higher", False, [agg[key]]))
        for key in ("speedup", "scaling_efficiency"):
            if _number((doc.get("distributed") or {}).get(key)):
                out.append(Series(benchmark, key, "ratio", "higher", False, [doc["distributed"][key]]))
        return out
    warmup = summaries.get("warmup_steps") or 0
    steps = [s for s in ((doc.get("samples") or {}).get("steps") or [])[int(warmup):] if isinstance(s, dict)]
    for part in STEP_PARTS:
        values = [s.get(part) for s in steps if _number(s.get(part))]
        if values:
            out.append(Series(benchmark, part, "s", "lower", part == "step_time", values))
    rates = [s["samples"] / s["step_time"] for s in steps
             if _number(s.get("samples")) and _number(s.get("step_time")) and s["step_time"] > 0]
    if rates:
        out.append(Series(benchmark, "throughput", "samples/s", "higher", False, rates))
    for key, (unit, better) in SUMMARY_VALUES.items():
        if _number(summaries.get(key)):
            out.append(Series(benchmark, key, unit, better, False, [summaries[key]]))
    if _number(doc.get("compile_seconds")) and doc["compile_seconds"] > 0:
        out.append(Series(benchmark, "compile_seconds", "s", "lower", False, [doc["compile_seconds"]]))
    directions = {v.get("metric"): v.get("direction") for v in doc.get("verdicts") or [] if isinstance(v, dict)}
    for m in doc.get("metrics") or []:
        if not isinstance(m, dict) or not isinstance(m.get("metric"), str):
            continue
        values = m.get("samples") if isinstance(m.get("samples"), list) else [m.get("value")]
        values = [v for v in values if _number(v)]
        if values:
            better = "higher" if directions.get(m["metric"]) == "higher" else "lower"
            out.append(Series(benchmark, f"metric:{m['metric']}", "", better, False, values))
    return out


def from_results(doc: dict, path: str | None = None, *, command: str | None = None, session: str | None = None,
                 label: str | None = None, machine: str | None = None) -> Record:
    """The :class:`Record` of a recipe results document.

    Args:
        doc: the parsed ``results.json`` (keys starting with ``_`` are left out).
        path: where the file is.
        command: the command that made it (``run``, ``compare``, ``db import``).
        session: the id shared by the runs of one command.
        label: overrides the document's label (and is written into the stored copy).
        machine: the machine when the document does not name one.

    Raises:
        UserError: not a results document.
    """
    if not is_results_document(doc):
        found = doc.get("format") if isinstance(doc, dict) else None
        raise UserError("Not a deep500lite results document (its \"format\" is not 'deep500lite-results'). "
                        f"Received: {type(doc).__name__} with format {found!r}")
    doc = {k: v for k, v in doc.items() if not k.startswith("_")}
    if label is not None:
        doc["label"] = label
    ident = identity(doc)
    machine = ident["machine"] if (doc.get("environment") or {}).get("machine") else (machine or ident["machine"])
    recipe = (doc.get("recipe") or {}).get("name") or "recipe"
    variant = doc.get("executor_variant") or doc.get("framework") or "?"
    dist = doc.get("distributed") if isinstance(doc.get("distributed"), dict) else {}
    ranks = dist.get("ranks") if isinstance(dist.get("ranks"), int) else None
    rank = dist.get("rank") if isinstance(dist.get("rank"), int) else None
    if "aggregate" in dist or "per_rank" in dist:
        role, suffix, rank = "aggregate", f" [{ranks or len(dist.get('per_rank') or [])} ranks]", None
    elif ranks and ranks > 1:
        role, suffix = "rank", f" [rank {rank} of {ranks}]"
    else:
        role, suffix = "single", ""
    device = doc.get("device")
    where = f"@{device}" if isinstance(device, str) and device and device != "cpu" else ""
    benchmark = f"{recipe}/{variant}{where}{suffix}"
    started = doc.get("started") if _number(doc.get("started")) else None
    key = _digest("run", role, recipe, variant, device, rank, ranks, repr(started), machine,
                  None if started is not None else canonical_json(doc))
    return Record(key=key, kind="run", suite=recipe, document=doc, series=_recipe_series(doc, benchmark, role),
                  command=command, session=session, framework=doc.get("framework"), variant=variant,
                  device=device if isinstance(device, str) else None, rank=rank, ranks=ranks, label=ident["label"],
                  git_commit=ident["git_commit"], machine=machine, started=started,
                  passed=doc.get("passed") if isinstance(doc.get("passed"), bool) else None, path=path)


def _ids(node: dict) -> list:
    out = []
    for k in _ID_KEYS:
        v = node.get(k)
        if isinstance(v, str) and v:
            out.append(v)
        elif isinstance(v, bool):
            out.append(f"{k}={str(v).lower()}")
        elif _number(v):
            out.append(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}")
        elif isinstance(v, list) and v and all(_number(x) for x in v) and len(v) <= 8:
            out.append(f"{k}={'x'.join(str(x) for x in v)}")
    return out


def _is_samples(key: str, value) -> bool:
    return ((key in _SAMPLE_KEYS or key.endswith("_times") or key.endswith("_samples"))
            and isinstance(value, list) and len(value) > 0 and all(_number(v) for v in value))


def _walk(node, ids: list, path: list, out: list, base: str) -> None:
    if isinstance(node, dict):
        own = ids + [i for i in _ids(node) if i not in ids]
        for key, value in node.items():
            if key in ("environment", "config", "command"):
                continue
            if _is_samples(key, value):
                metric = ".".join(path if key == "raw" and path else path + [key]) or key
                unit = node.get("unit") if isinstance(node.get("unit"), str) else (
                    "ratio" if "ratio" in metric else "s")
                better = "higher" if any(w in metric.lower() for w in _HIGHER) else "lower"
                out.append(Series(" ".join(own) or base, metric, unit, better, True, value))
            elif isinstance(value, dict):
                _walk(value, own, path + [key] if not _ids(value) else path, out, base)
            elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                named = all(_ids(v) for v in value)
                for i, v in enumerate(value):
                    _walk(v, own if named else own + [f"{key}[{i}]"], path, out, base)


def _framework_names(node, out: set) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "framework" and isinstance(value, str):
                out.add(value)
            elif key not in ("environment", "config"):
                _framework_names(value, out)
    elif isinstance(node, list):
        for value in node:
            _framework_names(value, out)


def from_payload(payload: dict, command: str, path: str | None = None, *, session: str | None = None,
                 label: str | None = None, machine: str | None = None, recorded: float | None = None) -> Record:
    """The :class:`Record` of a ``bench ...`` or ``model ...`` JSON document.

    Args:
        payload: the parsed JSON (an object).
        command: the command that wrote it (``bench overhead``, ``model layers``); the suite.
        path: where the file is.
        session, label, machine: as for :func:`from_results`.
        recorded: when it was written (Unix time; default now).

    Raises:
        UserError: not a JSON object.
    """
    if not isinstance(payload, dict):
        raise UserError(f"A benchmark's JSON must be an object (what `deep500lite bench ... --json` writes). "
                        f"Received: a JSON {type(payload).__name__}")
    doc = dict(payload)
    if label is not None:
        doc["label"] = label
    ident = identity(doc)
    machine = ident["machine"] if (doc.get("environment") or {}).get("machine") else (machine or ident["machine"])
    bench = doc.get("benchmark")
    if isinstance(bench, str) and bench.split(" ")[0] == command.split(" ")[-1] and bench != command.split(" ")[-1]:
        command = f"{command} {bench.split(' ', 1)[1]}"  # bench overhead --op: a suite of its own
    series: list = []
    _walk({k: v for k, v in doc.items() if k not in ("label", "benchmark")}, [], [], series, command)
    frameworks = set()
    _framework_names(doc, frameworks)
    when = recorded if recorded is not None else time.time()
    key = _digest("payload", command, canonical_json({k: v for k, v in doc.items() if k != "label"}))
    kind = command.split(" ")[0] if command.split(" ")[0] in ("bench", "model") else "bench"
    return Record(key=key, kind=kind, suite=command, document=doc, series=series, command=command, session=session,
                  framework=next(iter(frameworks)) if len(frameworks) == 1 else None, label=ident["label"],
                  git_commit=ident["git_commit"], machine=machine, started=when, recorded=when, path=path)
