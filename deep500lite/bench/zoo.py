"""``deep500lite bench zoo``: real architectures from public model libraries on every executor.

Each zoo model is built by a *producer* framework from a public model library with random
weights (``frameworks/torch/zoo.py``: transformers configs and torch.nn layers, exported by
torch's TorchScript and dynamo exporters; ``frameworks/tensorflow/zoo.py``: keras.applications
through tf2onnx), with the producer's own float64 answers (:class:`~deep500lite.bench.zoo_model.ZooModel`).
Every executor then runs the exported ONNX model and is checked against them with the one rule
of :mod:`deep500lite.lv1.verify.rule`, which ``deep500lite verify`` applies too:

- **inference**: the largest error of the logits relative to their scale (``max |y - y64| /
  max |y64|``, ``y64`` the producer's float64 logits);
- **training**: on the export without constant folding where the producer offers one (torch's
  exporters otherwise fold eval-mode BatchNorm into the convolutions, and the folded parameters'
  gradients could not be compared), the mean softmax cross-entropy of the logits is added as
  docs/training.md says, ``inference_and_backprop`` runs, and every parameter's gradient is
  compared with the producer's float64 autograd, relative to its scale ``max(max |g64|, 1e-3 *
  G)`` (``G`` the largest gradient entry of the whole model);
- the verdict: within ``max(BASE, 10 x floor)``, BASE 1e-4 (inference) or 1e-3 (gradients), the
  floor the reference executor's own float32 error on the same cell. The reference executor's
  own cells (which check its autodiff against the producer's) use the producer's own float32
  error as their floor, and for gradients the exported graph's own float32 error where that is
  larger (the reference in float32 against itself in float64: a graph can be worse conditioned in
  float32 than the framework that wrote it). Well-conditioned models have floors of 1e-7..1e-5, so the base decides;
  where training-mode batch normalization over two samples and a few pixels makes float32 itself
  far from float64, an executor passes within 10 times the reference executor's error there.

Cells that fail for a cause outside deep500lite are listed in :data:`KNOWN_FAILURES` with the
cause; they are shown as ``known`` and do not fail the run, and
``tests/bench/test_zoo_known_failures.py`` checks each cause is still there (so the list cannot go
stale).
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import time
from typing import Callable, Iterable, Sequence

import numpy as np

from deep500lite.bench.zoo_cell import Cell, one_line as _one_line
from deep500lite.bench.zoo_model import ZooModel
from deep500lite.errors import ModelExportError, UserError, format_choices
from deep500lite.lv1.verify.rule import (FLOOR_FACTOR, GRADIENT_FLOOR, GRADIENT_TOLERANCE, INFERENCE_TOLERANCE,
                                         gradient_errors, gradient_scales, tensor_error, tolerance)
from deep500lite.registry import FrameworkNames

__all__ = [
    "PRODUCERS", "EXECUTORS", "INFERENCE_TOLERANCE", "GRADIENT_TOLERANCE", "GRADIENT_FLOOR", "PRODUCER_FACTOR",
    "CI_SLICE", "gradient_tolerance", "KNOWN_FAILURES", "ZooCase", "Cell", "ZooResult", "list_cases", "run_zoo",
    "check_inference", "check_training", "format_matrix", "verify_input",
]

#: Frameworks whose ``zoo`` module builds models, in the order their cases are listed.
#: Frameworks that export the zoo's models (a ``zoo`` role module, and a ``zoo_graphs`` one for the
#: graphs beyond classifiers; from the specs).
PRODUCERS = FrameworkNames(zoo_export=True)
#: Frameworks that run the zoo's cells by default.
EXECUTORS = FrameworkNames(inference=True, zoo_cells=True)
#: the floor factor of the shared rule (:data:`deep500lite.lv1.verify.rule.FLOOR_FACTOR`), under its older name
PRODUCER_FACTOR = FLOOR_FACTOR
LABEL = "zoo_label"
LOSS = "zoo_loss"

#: (model, exporter) pairs run in CI (``--slice ci``): one of each kind of architecture and exporter.
CI_SLICE: tuple[tuple[str, str], ...] = (
    ("resnet", "torchscript"),
    ("mobilenet_v2", "dynamo"),
    ("vit", "torchscript"),
    ("bert", "dynamo"),
    ("gpt2", "torchscript"),
    ("lstm", "torchscript"),
    ("keras_mobilenet_v2", "tf2onnx"),
)

#: (model, exporter or "*", executor or "*", check) -> the cause, outside deep500lite, of a failing cell.
KNOWN_FAILURES: dict[tuple[str, str, str, str], str] = {
    ("bit", "*", "*", "training"):
        "a max-pooling window of BiT's stem holds two values 2e-6 apart (18.032515 and 18.032513), within "
        "float32 round-off: the gradient goes to the larger, so float32 executors may route it elsewhere than "
        "float64 torch (which one does depends on their summation order; seen on the reference and on torch "
        "on a GPU); the function is not differentiable there",
}


@dataclasses.dataclass(frozen=True)
class ZooCase:
    """One model with one exporter, built by ``producer``."""

    name: str
    exporter: str
    producer: str
    source: str
    #: ``"classifier"`` (a :class:`ZooModel`) or ``"graph"`` (a :class:`~deep500lite.bench.zoo_model.GraphModel`)
    kind: str = "classifier"

    @property
    def key(self) -> str:
        return f"{self.name}/{self.exporter}"


@dataclasses.dataclass
class ZooResult:
    """Every cell of a zoo run, with the cases, how long each build took and the operators of each
    case's graphs (``domain::op`` outside the default domain)."""

    cases: list[ZooCase]
    executors: list[str]
    checks: list[str]
    cells: list[Cell] = dataclasses.field(default_factory=list)
    build_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    notes: dict[str, str] = dataclasses.field(default_factory=dict)
    op_types: dict[str, list] = dataclasses.field(default_factory=dict)

    @property
    def failures(self) -> list[Cell]:
        return [c for c in self.cells if not c.ok]

    def to_dict(self) -> dict:
        return {
            "cases": [dataclasses.asdict(c) for c in self.cases],
            "executors": self.executors,
            "checks": self.checks,
            "tolerances": {"inference": INFERENCE_TOLERANCE, "gradient": GRADIENT_TOLERANCE,
                           "gradient_floor": GRADIENT_FLOOR, "floor_factor": FLOOR_FACTOR},
            "cells": [dataclasses.asdict(c) for c in self.cells],
            "build_seconds": self.build_seconds,
            "notes": self.notes,
            "op_types": self.op_types,
        }


def _zoo_module(producer: str):
    from deep500lite.registry import spec

    return spec(producer).role("zoo")


def _graphs_module(producer: str):
    from deep500lite.registry import spec

    return spec(producer).role("zoo_graphs")


def _split(value: str | Sequence[str] | None) -> list[str] | None:
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    return [v.strip() for v in items if v.strip()]


def list_cases(models: str | Sequence[str] | None = None, exporters: str | Sequence[str] | None = None,
               subset: str | None = None) -> list[ZooCase]:
    """The zoo's cases on this machine (producers that are not installed contribute none).

    Args:
        models: model names to keep (default all).
        exporters: exporters to keep (``torchscript``, ``dynamo``, ``tf2onnx``; default all).
        subset: ``"ci"`` keeps :data:`CI_SLICE` only.

    Raises:
        UserError: an unknown model, exporter or slice.
    """
    from deep500lite.registry import is_framework_available

    cases = []
    for producer in PRODUCERS:
        if not is_framework_available(producer):
            continue
        module = _zoo_module(producer)
        for name in module.model_names():
            for exporter in module.EXPORTERS:
                cases.append(ZooCase(name, exporter, producer, module.model_source(name)))
        for name, (_, source, exporter) in _graphs_module(producer).GRAPH_MODELS.items():
            cases.append(ZooCase(name, exporter, producer, source, kind="graph"))
    known_models = list(dict.fromkeys(c.name for c in cases))
    known_exporters = list(dict.fromkeys(c.exporter for c in cases))
    wanted_models, wanted_exporters = _split(models), _split(exporters)
    for wanted, known, what in ((wanted_models, known_models, "model"), (wanted_exporters, known_exporters,
                                                                         "exporter")):
        unknown = [w for w in wanted or () if w not in known]
        if unknown:
            raise UserError(f"Unknown zoo {what}(s) {', '.join(unknown)}. Known on this machine: "
                            f"{format_choices(known)}. Received: {','.join(wanted)}")
    if subset not in (None, "ci"):
        raise UserError(f"Unknown zoo slice. Allowed: 'ci'. Received: {subset!r}")
    return [c for c in cases
            if (wanted_models is None or c.name in wanted_models)
            and (wanted_exporters is None or c.exporter in wanted_exporters)
            and (subset is None or (c.name, c.exporter) in CI_SLICE)]


def _known(case: ZooCase, executor: str, check: str) -> str | None:
    for key in ((case.name, case.exporter, executor, check), (case.name, "*", executor, check),
                (case.name, case.exporter, "*", check), (case.name, "*", "*", check)):
        if key in KNOWN_FAILURES:
            return KNOWN_FAILURES[key]
    return None


def _floor_text(cell_floor: float | None, producer_error: float | None, graph_floor: float | None = None) -> str:
    if graph_floor is not None:
        return (f"the producer's own float32 error {producer_error or 0:.2g}; the exported graph's float32 error "
                f"on the reference executor {graph_floor:.2g}")
    if cell_floor is None:
        return f"the producer's own float32 error {producer_error or 0:.2g}"
    return f"the reference executor's float32 error {cell_floor:.2g}; the producer's {producer_error or 0:.2g}"


def check_inference(model: ZooModel, executor: str, device=None, floor: float | None = None) -> Cell:
    """Run ``model`` forward on ``executor`` and compare its logits with the producer's float64 ones.

    Args:
        floor: the reference executor's float32 error on this cell (the rule's floor); None: the
            producer's own float32 error is the floor (the reference executor's own cell).
    """
    from deep500lite.lv1.network import load_model
    from deep500lite.registry import executor as make_executor

    case = f"{model.name}/{model.exporter}"
    want = np.asarray(model.logits64, dtype=np.float64)
    producer_error = tensor_error(np.asarray(model.logits32), want)
    start = time.perf_counter()
    try:
        ex = make_executor(load_model(model.proto), executor, device=device)
        got = np.asarray(ex.inference(dict(model.feeds))[model.output])
    except Exception as exc:  # noqa: BLE001 - every failure becomes the cell's reason
        return Cell(case, executor, "inference", "error", producer_error=producer_error, detail=_one_line(exc),
                    seconds=time.perf_counter() - start)
    err = tensor_error(got, want)
    seconds = time.perf_counter() - start
    used = producer_error if floor is None else floor
    limit = tolerance("inference", used)
    compiled = float(getattr(ex, "compile_seconds", 0.0) or 0.0)
    if err <= limit:
        return Cell(case, executor, "inference", "pass", err, producer_error, seconds=seconds, floor=floor,
                    compile_seconds=compiled)
    detail = (f"output shape {list(got.shape)}, expected {list(want.shape)}" if got.shape != want.shape else
              f"max |y - y64| = {err:.2g} of the output's scale (tolerance {limit:.2g}; "
              f"{_floor_text(floor, producer_error)})")
    return Cell(case, executor, "inference", "fail", err, producer_error, detail, seconds, floor=floor,
                compile_seconds=compiled)


def _gradient_errors(grads: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> tuple[float, str]:
    """The worst per-parameter relative gradient error and the parameter it belongs to."""
    errors = gradient_errors(grads, want, gradient_scales(want))
    if not errors:
        return 0.0, ""
    worst = max(errors, key=errors.get)
    return errors[worst], worst


def check_training(model: ZooModel, executor: str, device=None, floor: float | None = None) -> Cell:
    """Add the loss, run ``inference_and_backprop`` on ``executor`` and compare every parameter gradient.

    Args:
        floor: the reference executor's float32 gradient error on this cell (the rule's floor);
            None: the producer's own float32 error is the floor (the reference executor's own cell).
    """
    case = f"{model.name}/{model.exporter}"
    if model.gradients64 is None:
        return Cell(case, executor, "training", "skip", detail="the producer gives no gradients for this model")
    want = {p: model.gradients64[p] for p in model.parameters}
    producer_error = None
    if model.gradients32 is not None:
        producer_error, _ = _gradient_errors({p: model.gradients32[p] for p in want}, want)
    start = time.perf_counter()
    graph_floor = None
    try:
        ex, grads = _gradients(model, model.proto, executor, device, want)
        if floor is None and executor == "reference":
            # the graph's own float32 noise: the reference in float32 against itself in float64
            from deep500lite.lv1.verify.float64 import to_float64

            _, grads64 = _gradients(model, to_float64(model.proto), "reference", None, want, float64=True)
            graph_floor, _ = _gradient_errors(grads, grads64)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the cell's reason
        return Cell(case, executor, "training", "error", producer_error=producer_error, detail=_one_line(exc),
                    seconds=time.perf_counter() - start)
    seconds = time.perf_counter() - start
    compiled = float(getattr(ex, "compile_seconds", 0.0) or 0.0)
    err, worst = _gradient_errors(grads, want)
    if graph_floor is not None:
        # the reference's own cell: as far from the producer's float64 as float32 allows, on the
        # producer's side (its float32) or on the exported graph's (its float32 against float64)
        floor = max(producer_error or 0.0, graph_floor)
    limit = tolerance("gradient", producer_error if floor is None else floor)
    note = f"; {len(model.unmapped)} parameter(s) folded by the exporter not compared" if model.unmapped else ""
    if err <= limit:
        return Cell(case, executor, "training", "pass", err, producer_error, note.lstrip("; "), seconds, floor=floor,
                    compile_seconds=compiled)
    return Cell(case, executor, "training", "fail", err, producer_error,
                f"gradient of {worst}: max |g - g64| = {err:.2g} of its scale (tolerance {limit:.2g}; "
                f"{_floor_text(floor, producer_error, graph_floor)})" + note, seconds, floor=floor,
                compile_seconds=compiled)


def _gradients(model: ZooModel, proto, executor: str, device, want: dict, float64: bool = False):
    """``(executor, producer parameter -> gradient)``: the mean cross-entropy's gradients on ``proto``."""
    from deep500lite.datasets import SoftmaxCrossEntropy
    from deep500lite.lv1.network import load_model
    from deep500lite.registry import executor as make_executor

    net = load_model(proto)
    net.add_operation(SoftmaxCrossEntropy()([model.output, LABEL], LOSS))
    ex = make_executor(net, executor, device=device)
    feeds = {k: (np.asarray(v, np.float64) if float64 and np.asarray(v).dtype.kind == "f" else v)
             for k, v in model.feeds.items()}
    ex.inference_and_backprop({**feeds, LABEL: np.asarray(model.labels, dtype=np.int64)}, LOSS)
    have = dict(net.gradient(LOSS))
    grads = {}
    for pname, places in model.parameters.items():
        total = np.zeros(np.shape(want[pname]), dtype=np.float64)
        for init, perm in places:
            if init in have:
                g = np.asarray(net.fetch_tensor(have[init]), dtype=np.float64)
                total = total + g.transpose(np.argsort(perm))
        grads[pname] = total
    return ex, grads


def gradient_tolerance(floor: float | None) -> float:
    """The training check's tolerance for a float32 noise floor ``floor``: the shared rule's
    ``max(GRADIENT_TOLERANCE, FLOOR_FACTOR * floor)`` (:func:`deep500lite.lv1.verify.rule.tolerance`)."""
    return tolerance("gradient", floor)


def run_zoo(cases: Iterable[ZooCase], executors: Sequence[str] = EXECUTORS, training: bool = True,
            device=None, progress: Callable[[str], None] | None = None) -> ZooResult:
    """Build every case and check it on every executor.

    Args:
        cases: from :func:`list_cases`.
        executors: the executors to check (default all four).
        training: also check gradients.
        device: the device of the executors (``None``: the CPU); the reference stays on the CPU.
        progress: called with a line per case.
    """
    from deep500lite.registry import canonical_framework, is_framework_available

    cases = list(cases)
    executors = [canonical_framework(e) for e in executors]
    checks = ["inference", "training"] if training else ["inference"]
    result = ZooResult(cases, executors, checks)
    for case in cases:
        if case.kind == "graph":
            _run_graph_case(case, executors, checks, device, result, progress)
            continue
        start = time.perf_counter()
        build = _zoo_module(case.producer).build
        try:
            model = build(case.name, case.exporter)
            train_model = model
            if training and "fold_constants" in inspect.signature(build).parameters:
                # Exporters fold eval-mode BatchNorm into convolutions and constant lookups of
                # embeddings into constants: the training check uses the export that keeps every
                # parameter, as one exports a model to train it.
                train_model = build(case.name, case.exporter, fold_constants=False)
        except Exception as exc:  # noqa: BLE001 - a model that cannot be built fails its row, not the run
            status = "export" if isinstance(exc, ModelExportError) else "error"
            for ex in executors:
                for check in checks:
                    result.cells.append(Cell(case.key, ex, check, status, detail=_one_line(exc)))
            if progress:
                progress(f"{case.key}: {status}: {_one_line(exc, 200)}")
            continue
        result.build_seconds[case.key] = time.perf_counter() - start
        result.op_types[case.key] = sorted({n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
                                            for m in (model, train_model) for n in m.proto.graph.node})
        if model.notes:
            result.notes[case.key] = model.notes
        # the reference executor's own cells first: their errors are the other executors' floors
        reference = [check_inference(model, "reference")]
        if training:
            reference.append(check_training(train_model, "reference"))
        floors = {c.check: (c.error if c.status in ("pass", "fail") else None) for c in reference}
        for ex in executors:
            if not is_framework_available(ex):
                for check in checks:
                    result.cells.append(Cell(case.key, ex, check, "error", detail=f"{ex} is not installed"))
                continue
            ex_device = None if ex == "reference" else device
            if ex == "reference":
                cells = reference
            else:
                cells = [check_inference(model, ex, ex_device, floor=floors["inference"])]
                if training:
                    cells.append(check_training(train_model, ex, ex_device, floor=floors["training"]))
            for cell in cells:
                reason = _known(case, ex, cell.check)
                if reason and cell.status in ("fail", "error"):
                    cell.status, cell.detail = "known", f"{reason} ({cell.detail})"
            result.cells.extend(cells)
        del model, train_model
        gc.collect()
        if progress:
            row = ", ".join(f"{c.executor} {c.check[:5]} {c.status}" for c in result.cells if c.case == case.key)
            progress(f"{case.key} ({result.build_seconds[case.key]:.1f} s to build): {row}")
    return result


def _run_graph_case(case: ZooCase, executors, checks, device, result: ZooResult, progress) -> None:
    """Build a graph case and its ground truth (the reference executor in float64), then check every executor."""
    from deep500lite.bench.zoo_graphs import check_graph_inference, check_graph_training, graph_truth
    from deep500lite.registry import is_framework_available

    start = time.perf_counter()
    try:
        model = _graphs_module(case.producer).build_graph(case.name)
        truth = graph_truth(model)
    except Exception as exc:  # noqa: BLE001 - a model that cannot be built fails its row, not the run
        status = "export" if isinstance(exc, ModelExportError) else "error"
        result.cells.extend(Cell(case.key, ex, check, status, detail=_one_line(exc))
                            for ex in executors for check in checks)
        if progress:
            progress(f"{case.key}: {status}: {_one_line(exc, 200)}")
        return
    result.build_seconds[case.key] = time.perf_counter() - start
    result.op_types[case.key] = sorted({n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
                                        for n in model.proto.graph.node})
    result.notes[case.key] = model.notes
    for ex in executors:
        if not is_framework_available(ex):
            result.cells.extend(Cell(case.key, ex, check, "error", detail=f"{ex} is not installed") for check in checks)
            continue
        ex_device = None if ex == "reference" else device
        result.cells.append(check_graph_inference(model, truth, ex, ex_device))
        if "training" in checks:
            result.cells.append(check_graph_training(model, truth, ex, ex_device))
    if progress:
        row = ", ".join(f"{c.executor} {c.check[:5]} {c.status}" for c in result.cells if c.case == case.key)
        progress(f"{case.key} ({result.build_seconds[case.key]:.1f} s to build): {row}")


_MARK = {"pass": "ok", "fail": "FAIL", "error": "ERROR", "known": "known", "export": "no export", "skip": "-"}


def format_matrix(result: ZooResult, fmt: str = "table") -> str:
    """The matrix (one row per model and exporter, a column per executor and check) with footnotes.

    Each cell shows ``ok`` with the relative error, or the status with a footnote number; the
    footnotes under the table give each failing cell's reason.
    """
    from deep500lite.metrics.tables import format_table

    headers = ["model", "source", "exporter"] + [f"{ex} {check[:5]}" for ex in result.executors
                                                 for check in result.checks]
    cells = {(c.case, c.executor, c.check): c for c in result.cells}
    rows, notes = [], []
    for case in result.cases:
        row = [case.name, case.source, case.exporter]
        for ex in result.executors:
            for check in result.checks:
                c = cells.get((case.key, ex, check))
                if c is None:
                    row.append("")
                elif c.status == "pass":
                    row.append(f"ok {c.error:.0e}")
                elif c.status == "skip":
                    row.append("-")
                else:
                    notes.append(f"[{len(notes) + 1}] {case.key} on {ex}, {check}: {c.detail}")
                    row.append(f"{_MARK[c.status]} [{len(notes)}]")
        rows.append(row)
    text = format_table(headers, rows, fmt)
    return text + ("\n\n" + "\n".join(notes) if notes else "")


def verify_input(spec: str, training: bool = False):
    """The ONNX model, feeds and loss of the zoo case ``NAME[/EXPORTER]``, for ``deep500lite verify zoo:...``.

    Args:
        spec: a model of :func:`list_cases`, optionally with its exporter (default: the first
            one the model has, e.g. ``torchscript``); a graph case (``loop``, ``detection``, ...)
            too.
        training: the export that keeps every parameter (no constant folding) where the producer
            has one, as the zoo's training check uses.

    Returns:
        ``(onnx.ModelProto, feeds, loss)``: ``loss`` is the graph case's own loss in ``verify``'s
        spelling (None for a classifier: ``verify``'s default); a graph case exported with
        dynamic axes gives its first set of feeds.

    Raises:
        UserError: an unknown model or exporter, or ``training`` for a graph case the zoo does not
            train (the message says why).
    """
    name, _, exporter = spec.partition("/")
    cases = [c for c in list_cases(name or None, exporter or None) if c.name == name]
    if not name or not cases:
        raise UserError(f"zoo: takes NAME or NAME/EXPORTER of 'deep500lite bench zoo --list'. Received: {spec!r}")
    case = cases[0]
    if case.kind == "graph":
        graph = _graphs_module(case.producer).build_graph(case.name)
        if training and not graph.train:
            raise UserError(f"The zoo's graph {case.key} is checked for inference only: {graph.no_training}. "
                            f"Run it without --train and --loss. Received: zoo:{spec}")
        return graph.proto, dict(graph.feeds[0]), graph.loss
    build = _zoo_module(case.producer).build
    extra = {"fold_constants": False} if training and "fold_constants" in inspect.signature(build).parameters else {}
    model = build(case.name, case.exporter, **extra)
    return model.proto, dict(model.feeds), None
