"""``verify``: one ONNX model on every executor, against the reference executor in float64.

:func:`verify_model` runs a model (a user's file, a zoo model) on every installed executor and
executor variant, and compares each answer with the ground truth, the same model run by the
reference executor in float64 (:mod:`deep500lite.lv1.verify.float64`):

1. the reference executor runs the float64 twin (the ground truth) and the model itself in
   float32: the model's float32 **noise floor**, its error against the ground truth;
2. every executor runs the model; every output's error relative to its scale, and with
   ``train`` every parameter gradient's (of a loss added to the model), is judged by the rule
   of :mod:`deep500lite.lv1.verify.rule` against the floor;
3. for an executor that fails, :func:`~deep500lite.lv1.verify.localize.localize` names the
   first node whose output (or, for gradients, whose backward pass) diverges.

The loss (``train``): ``"cross_entropy"`` (softmax cross-entropy of an output ``[N, C, ...]``
against seeded labels), ``"mse"`` (half the mean squared difference of an output from a seeded
normal target), either followed by ``:OUTPUT`` to choose the output (default: the first float
output), or the name of a scalar tensor the model computes itself. The default is
``cross_entropy`` when the first float output has two or more axes and ``mse`` otherwise.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Sequence

import numpy as np
import onnx
from onnx import helper

from deep500lite.errors import Deep500Error, UserError, format_choices
from deep500lite.lv1.verify.float64 import feeds_as_float64, to_float64
from deep500lite.lv1.verify.localize import Divergence, localize
from deep500lite.lv1.verify.rule import gradient_errors, gradient_scales, passes, tensor_error, tolerance

__all__ = ["LOSSES", "ExecutorReport", "VerifyResult", "GroundTruth", "verify_model", "default_executors",
           "format_report", "build_executor", "LABELS", "TARGET", "LOSS"]

#: the loss kinds ``verify`` can add
LOSSES = ("cross_entropy", "mse")
#: names of the tensors ``verify`` adds for its loss
LABELS, TARGET, LOSS = "verify_labels", "verify_target", "verify_loss"
#: samples along an open batch axis of random feeds
BATCH = 2


@dataclasses.dataclass
class ExecutorReport:
    """One executor's answers against the ground truth.

    Attributes:
        executor: the spelling (``torch``, ``torch:compile``, ``reference``).
        status: ``pass``, ``fail`` (ran, outside the rule) or ``error`` (raised).
        outputs: output name -> error relative to its scale.
        gradients: parameter -> gradient error relative to its scale (``train``).
        loss_error: the loss value's error (``train``).
        inference_ok / gradients_ok: the verdicts (None where not checked).
        seconds: wall time of its runs; compile_seconds: the part the executor spent compiling.
        error: the one-line error (status ``error``).
        divergence: where it first diverges (status ``fail``, when localized).
    """

    executor: str
    status: str = "pass"
    outputs: dict = dataclasses.field(default_factory=dict)
    gradients: dict = dataclasses.field(default_factory=dict)
    loss_error: float | None = None
    inference_ok: bool | None = None
    gradients_ok: bool | None = None
    seconds: float = 0.0
    compile_seconds: float = 0.0
    error: str = ""
    divergence: Divergence | None = None

    @property
    def worst_output(self) -> tuple[str, float]:
        """``(name, error)`` of the output furthest from the ground truth."""
        return max(self.outputs.items(), key=lambda kv: kv[1], default=("", 0.0))

    @property
    def worst_gradient(self) -> tuple[str, float]:
        """``(parameter, error)`` of the gradient furthest from the ground truth."""
        return max(self.gradients.items(), key=lambda kv: kv[1], default=("", 0.0))


@dataclasses.dataclass
class VerifyResult:
    """What :func:`verify_model` found.

    Attributes:
        model: where the model came from.
        feeds: input name -> ``dtype[shape]`` of the feeds used.
        train: whether gradients were checked.
        loss: the loss (``train``): its kind and output, or the model's own tensor.
        floor_outputs: output name -> the reference executor's float32 error (the floor).
        floor_gradients: the largest float32 gradient error of the reference executor (``train``).
        floor_gradient_parameter: the parameter it belongs to.
        reports: one per executor, in the order run.
    """

    model: str
    feeds: dict
    train: bool
    loss: str
    floor_outputs: dict
    floor_gradients: float | None
    floor_gradient_parameter: str
    reports: list

    @property
    def passed(self) -> bool:
        """Whether every executor passed."""
        return all(r.status == "pass" for r in self.reports)

    def to_dict(self) -> dict:
        """A JSON-ready dict (non-finite errors as strings)."""
        def clean(x):
            if isinstance(x, float) and not np.isfinite(x):
                return str(x)
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, list):
                return [clean(v) for v in x]
            return x
        from deep500lite.lv1.verify import rule

        data = dataclasses.asdict(self)
        data["passed"] = self.passed
        data["rule"] = {"inference_tolerance": rule.INFERENCE_TOLERANCE, "gradient_tolerance": rule.GRADIENT_TOLERANCE,
                        "gradient_floor": rule.GRADIENT_FLOOR, "floor_factor": rule.FLOOR_FACTOR}
        for report, raw in zip(self.reports, data["reports"]):
            raw["divergence_text"] = report.divergence.describe() if report.divergence else ""
        return clean(data)


def default_executors() -> list[str]:
    """Every installed framework and every variant of one (``torch:compile``, ``tensorflow:xla``, ...)."""
    from deep500lite.registry import EXECUTOR_VARIANTS, FRAMEWORKS, is_framework_available

    out = [k for k in FRAMEWORKS if is_framework_available(k)]
    out += [s for s, (key, _) in EXECUTOR_VARIANTS.items() if key in out]
    return out


def _one_line(exc: BaseException, limit: int = 500) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = text if isinstance(exc, Deep500Error) else f"{type(exc).__name__}: {text}"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _as_model(model) -> tuple[onnx.ModelProto, str]:
    from deep500lite.lv1.network import Network, load_model

    if isinstance(model, Network):
        return model.to_onnx(), model.source or "a Network"
    if isinstance(model, onnx.ModelProto):
        return load_model(model).to_onnx(), "a ModelProto"
    net = load_model(model)
    return net.to_onnx(), str(model)


def _float_outputs(model: onnx.ModelProto) -> list[str]:
    return [o.name for o in model.graph.output
            if o.type.HasField("tensor_type") and o.type.tensor_type.elem_type in (
                onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)]


def _parse_loss(loss: str | None, model: onnx.ModelProto, outputs64: dict) -> tuple[str, str]:
    """``(kind, tensor)``: kind one of :data:`LOSSES` or ``"tensor"`` (the model's own scalar)."""
    floats = [o for o in _float_outputs(model) if o in outputs64]
    if loss is None or loss in LOSSES or (":" in loss and loss.split(":", 1)[0] in LOSSES):
        kind, _, out = (loss or "").partition(":")
        if out and out not in floats:
            raise UserError(f"The loss's output must be a float output of the model: "
                            f"{format_choices(floats) if floats else 'the model has none'}. Received: {loss!r}")
        if not out:
            if not floats:
                raise UserError("The model has no float output to put a loss on; name a scalar tensor of the model "
                                f"with --loss. Received: outputs {[o.name for o in model.graph.output]}")
            out = floats[0]
        if not kind:
            kind = "cross_entropy" if np.ndim(outputs64[out]) >= 2 else "mse"
        if kind == "cross_entropy" and np.ndim(outputs64[out]) < 2:
            raise UserError(f"cross_entropy needs an output of two or more axes [N, C, ...]; '{out}' has shape "
                            f"{list(np.shape(outputs64[out]))}. Use mse. Received: {loss or 'the default'}")
        return kind, out
    produced = {o for n in model.graph.node for o in n.output}
    if loss not in produced:
        raise UserError(f"Unknown loss {loss!r}: give one of {format_choices(LOSSES)} (optionally ':OUTPUT'), or the "
                        f"name of a scalar tensor the model computes. Received: {loss!r}")
    return "tensor", loss


def _with_loss(model: onnx.ModelProto, kind: str, tensor: str, outputs64: dict, seed: int) -> tuple[
        onnx.ModelProto, dict, str]:
    """``(model with the loss, extra feeds, loss tensor)``."""
    if kind == "tensor":
        return model, {}, tensor
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    value = np.asarray(outputs64[tensor])
    elem = next(o.type.tensor_type.elem_type for o in graph.output if o.name == tensor)
    rng = np.random.default_rng(seed + 15485863)
    if kind == "cross_entropy":
        classes = value.shape[1]
        labels = rng.integers(0, max(classes, 1), size=(value.shape[0],) + value.shape[2:], dtype=np.int64)
        graph.input.append(helper.make_tensor_value_info(LABELS, onnx.TensorProto.INT64, list(labels.shape)))
        graph.node.append(helper.make_node("SoftmaxCrossEntropyLoss", [tensor, LABELS], [LOSS], name="verify_loss",
                                           reduction="mean"))
        extra = {LABELS: labels}
    else:
        target = rng.standard_normal(value.shape).astype(helper.tensor_dtype_to_np_dtype(elem))
        graph.input.append(helper.make_tensor_value_info(TARGET, elem, list(target.shape)))
        half = helper.make_tensor("verify_half", elem, [], [0.5])
        graph.node.extend([
            helper.make_node("Sub", [tensor, TARGET], ["verify_diff"], name="verify_diff"),
            helper.make_node("Mul", ["verify_diff", "verify_diff"], ["verify_square"], name="verify_square"),
            helper.make_node("ReduceMean", ["verify_square"], ["verify_mean"], name="verify_mean", keepdims=0),
            helper.make_node("Constant", [], ["verify_half"], name="verify_half", value=half),
            helper.make_node("Mul", ["verify_mean", "verify_half"], [LOSS], name="verify_loss"),
        ])
        extra = {TARGET: target}
    graph.output.append(helper.make_tensor_value_info(LOSS, elem, []))
    return out, extra, LOSS


class _Reference:
    """The reference executor's runs in float64 (the ground truth) and float32 (the floor)."""

    def __init__(self, device=None):
        self.device = device

    def run(self, model: onnx.ModelProto, feeds: dict, train: bool, loss: str | None, gradients: Sequence[str],
            dtype64: bool) -> dict:
        from deep500lite.lv1.network import load_model
        from deep500lite.registry import executor

        net = load_model(to_float64(model) if dtype64 else model)
        ex = executor(net, "reference")
        feeds = feeds_as_float64(feeds) if dtype64 else dict(feeds)
        if not train:
            return dict(ex.inference(feeds))
        values = dict(ex.inference_and_backprop(feeds, loss))
        have = dict(ex.network.gradient(loss))
        for param, grad in have.items():
            if not gradients or grad in gradients:
                values[grad] = ex.network.fetch_tensor(grad)
        return values

    def both(self, model, feeds, train, loss, gradients) -> tuple[dict, dict]:
        return (self.run(model, feeds, train, loss, gradients, True),
                self.run(model, feeds, train, loss, gradients, False))


def _grad_names(model: onnx.ModelProto, loss: str) -> dict[str, str]:
    """parameter -> gradient name for every parameter the loss depends on."""
    from deep500lite.lv1.network import load_model

    return dict(load_model(model).gradient(loss))


def build_executor(model: onnx.ModelProto, spelling: str, device=None):
    """``d5.executor`` of a fresh Network of ``model`` (the reference always on the CPU)."""
    from deep500lite.lv1.network import load_model
    from deep500lite.registry import executor

    return executor(load_model(model), spelling, device=None if spelling == "reference" else device)


class GroundTruth:
    """The reference executor's float64 answers and float32 floors for one model and one set of feeds.

    Built once, it judges any number of executors (:meth:`check_outputs`, :meth:`check_gradients`,
    :meth:`report`); ``verify_model`` and the zoo's graph cases use it.

    Args:
        proto: the float32 model.
        feeds: checked feeds, one per model input.
        train: also compute the loss's gradients.
        loss: the loss (see the module docs).
        seed: seeds the loss's labels or target.

    Attributes:
        outputs: the model's output names.
        want: output name -> float64 value; floors: output name -> the float32 floor.
        train_model, train_feeds, loss_name, loss_text: the model with its loss (``train``).
        grad_names: parameter -> gradient name; want_grads: parameter -> float64 gradient.
        floor_gradients, floor_parameter: the float32 gradient floor and its parameter.
    """

    def __init__(self, proto: onnx.ModelProto, feeds: dict, train: bool = False, loss: str | None = None,
                 seed: int = 0):
        self.proto, self.feeds, self.train = proto, feeds, train
        self.reference = _Reference()
        self.outputs = [o.name for o in proto.graph.output]
        self.want = self.reference.run(proto, feeds, False, None, (), True)
        floor_values = self.reference.run(proto, feeds, False, None, (), False)
        self.floors = {o: tensor_error(floor_values[o], self.want[o]) for o in self.outputs}
        self.train_model, self.train_feeds, self.loss_name, self.loss_text = None, {}, "", ""
        self.grad_names, self.want_grads, self.scales = {}, {}, {}
        self.floor_gradients, self.floor_parameter = None, ""
        if train:
            self._gradients(loss, seed)

    def _gradients(self, loss, seed) -> None:
        kind, tensor = _parse_loss(loss, self.proto, self.want)
        self.train_model, extra, self.loss_name = _with_loss(self.proto, kind, tensor, self.want, seed)
        self.train_feeds = {**self.feeds, **extra}
        self.loss_text = f"{kind} of '{tensor}'" if kind != "tensor" else f"the model's tensor '{tensor}'"
        self.grad_names = _grad_names(self.train_model, self.loss_name)
        if not self.grad_names:
            raise UserError(f"The loss {self.loss_text} depends on no parameter (float initializer) of the model: "
                            f"there is no gradient to check. Received: --loss {loss or 'default'}")
        names = list(self.grad_names.values())
        values64 = self.reference.run(self.train_model, self.train_feeds, True, self.loss_name, names, True)
        values32 = self.reference.run(self.train_model, self.train_feeds, True, self.loss_name, names, False)
        self.want_grads = {p: values64[g] for p, g in self.grad_names.items()}
        self.scales = gradient_scales(self.want_grads)
        floor_errors = gradient_errors({p: values32[g] for p, g in self.grad_names.items()}, self.want_grads,
                                       self.scales)
        self.floor_parameter, self.floor_gradients = max(floor_errors.items(), key=lambda kv: kv[1])
        self.floors[self.loss_name] = tensor_error(values32[self.loss_name], values64[self.loss_name])

    def check_outputs(self, got: dict) -> tuple[dict, bool]:
        """``(output -> error, verdict)`` of an executor's outputs for these feeds."""
        errors = {o: tensor_error(got[o], self.want[o]) if o in got else float("inf") for o in self.outputs}
        return errors, all(passes(e, "inference", self.floors[o]) for o, e in errors.items())

    def check_gradients(self, executor) -> tuple[dict, bool]:
        """Run ``executor`` (built on :attr:`train_model`) forward and backward; ``(parameter -> error, verdict)``."""
        executor.inference_and_backprop(dict(self.train_feeds), self.loss_name)
        net = executor.network
        have = dict(net.gradient(self.loss_name))
        got = {p: net.fetch_tensor(have[p]) for p in self.grad_names if p in have}
        errors = gradient_errors(got, self.want_grads, self.scales)
        worst = max(errors.values(), default=0.0)
        return errors, passes(worst, "gradient", self.floor_gradients)

    def report(self, spelling: str, make: Callable, device=None, localize_failures: bool = True) -> ExecutorReport:
        """The :class:`ExecutorReport` of one executor: its outputs, gradients (``train``) and verdicts."""
        report = ExecutorReport(spelling)
        start = time.perf_counter()
        try:
            ex = make(self.proto, spelling, device)
            report.outputs, report.inference_ok = self.check_outputs(ex.inference(dict(self.feeds)))
            compile_seconds = ex.compile_seconds
            if self.train:
                tex = make(self.train_model, spelling, device)
                report.gradients, report.gradients_ok = self.check_gradients(tex)
                compile_seconds += tex.compile_seconds
            report.compile_seconds = compile_seconds
            if not report.inference_ok or report.gradients_ok is False:
                report.status = "fail"
        except Exception as exc:  # noqa: BLE001 - one executor failing must not lose the others' rows
            report.status, report.error = "error", _one_line(exc)
        report.seconds = time.perf_counter() - start
        if report.status == "fail" and localize_failures:
            report.divergence = _localize(report, self, spelling, device, make)
        return report


def verify_model(model, frameworks: Sequence[str] | None = None, feeds: dict | None = None, train: bool = False,
                 loss: str | None = None, seed: int = 0, device=None, localize_failures: bool = True,
                 progress: Callable[[str], None] | None = None, make_executor: Callable | None = None
                 ) -> VerifyResult:
    """Run ``model`` on every executor and judge each against the reference executor in float64.

    Args:
        model: an ONNX file path, an ``onnx.ModelProto`` or a :class:`~deep500lite.Network`.
        frameworks: executor spellings (``torch``, ``torch:compile``, ``onnxruntime:O0``, ...);
            default :func:`default_executors`. The floor is always computed by the reference
            executor in float32; ``reference`` in the list adds its row.
        feeds: one array per model input; default: seeded random feeds (normal floats, zero
            integers, open axes of size :data:`BATCH` for the first axis and 1 elsewhere).
        train: also add a loss and compare every parameter gradient.
        loss: the loss (see the module docs); default by the first float output's rank.
        seed: seeds the random feeds and the loss's labels or target.
        device: the executors' device (the reference runs on the CPU).
        localize_failures: name the first diverging node of each failing executor.
        progress: called with a line per executor.
        make_executor: ``make_executor(model, spelling, device) -> GraphExecutor``, to build
            the executors some other way (tests plant faults this way); default ``d5.executor``.

    Returns:
        The :class:`VerifyResult`.

    Raises:
        UserError: an unknown executor, a bad loss, or feeds that do not fit the model.
        ExecutionError: the reference executor itself cannot run the model (in float64 or float32).
    """
    from deep500lite.lv1.network import load_model
    from deep500lite.registry import canonical_executor_spelling

    proto, source = _as_model(model)
    spellings = list(dict.fromkeys(canonical_executor_spelling(f) for f in (frameworks or default_executors())))
    if not spellings:
        raise UserError(f"verify needs at least one executor. Known: {format_choices(default_executors())}. "
                        f"Received: {frameworks!r}")
    net = load_model(proto)
    if feeds is None:
        feeds = net.random_feeds(BATCH, seed)
    feeds = net.check_feeds({k: np.asarray(v) for k, v in feeds.items()})
    truth = GroundTruth(proto, feeds, train, loss, seed)
    reports = []
    for spelling in spellings:
        reports.append(truth.report(spelling, make_executor or build_executor, device, localize_failures))
        if progress:
            progress(f"{spelling}: {reports[-1].status}")
    return VerifyResult(model=source, feeds={k: f"{np.asarray(v).dtype.name}{list(np.shape(v))}"
                                             for k, v in feeds.items()},
                        train=train, loss=truth.loss_text, floor_outputs=truth.floors,
                        floor_gradients=truth.floor_gradients, floor_gradient_parameter=truth.floor_parameter,
                        reports=reports)


def _localize(report, truth: GroundTruth, spelling, device, make) -> Divergence:
    """Where the executor of ``report`` first diverges (a note when that cannot be found)."""
    training = report.inference_ok is not False
    try:
        return localize(truth.train_model if training else truth.proto, truth.train_feeds if training else truth.feeds,
                        lambda m: make(m, spelling, device), truth.reference.both, training,
                        truth.loss_name if training else None)
    except Exception as exc:  # noqa: BLE001 - the verdict stands without the node
        return Divergence("training forward" if training else "forward",
                          note=f"the diverging node could not be localized: {_one_line(exc, 300)}")


def _e(x) -> str:
    if x is None:
        return "-"
    return "inf" if not np.isfinite(x) else f"{x:.1e}"


def format_report(result: VerifyResult) -> str:
    """The table (one row per executor and output, and per executor for the gradients) and the verdicts."""
    from deep500lite.metrics.tables import format_table

    rows = []
    for r in result.reports:
        if r.status == "error":
            rows.append([r.executor, "-", "-", "-", "-", "ERROR"])
            continue
        for name, err in r.outputs.items():
            floor = result.floor_outputs.get(name)
            rows.append([r.executor, f"output {name}", _e(err), _e(floor), _e(tolerance("inference", floor)),
                         "ok" if passes(err, "inference", floor) else "FAIL"])
        if result.train and r.gradients:
            name, err = r.worst_gradient
            rows.append([r.executor, f"gradients ({len(r.gradients)}; worst {name})", _e(err),
                         _e(result.floor_gradients), _e(tolerance("gradient", result.floor_gradients)),
                         "ok" if r.gradients_ok else "FAIL"])
    lines = [f"model: {result.model}", "inputs: " + ", ".join(f"{k} {v}" for k, v in result.feeds.items())]
    if result.train:
        lines.append(f"loss: {result.loss}; gradient floor from {result.floor_gradient_parameter or '-'}")
    lines.append("ground truth: the reference executor in float64; floor: the reference executor in float32")
    lines.append("")
    lines.append(format_table(["executor", "checked", "error", "floor", "tolerance", "verdict"], rows))
    notes = []
    for r in result.reports:
        timing = f"{r.seconds:.1f} s" + (f", {r.compile_seconds:.1f} s compiling" if r.compile_seconds else "")
        if r.status == "error":
            notes.append(f"{r.executor}: ERROR ({timing}): {r.error}")
        elif r.status == "fail":
            where = r.divergence.describe() if r.divergence else "not localized"
            notes.append(f"{r.executor}: FAIL ({timing}); first divergence: {where}")
        else:
            notes.append(f"{r.executor}: pass ({timing})")
    lines.append("")
    lines.extend(notes)
    failed = [r.executor for r in result.reports if r.status != "pass"]
    lines.append("")
    lines.append(f"verdict: {len(result.reports) - len(failed)} of {len(result.reports)} executors pass"
                 + (f"; failing: {', '.join(failed)}" if failed else ""))
    return "\n".join(lines)
