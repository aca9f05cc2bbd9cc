"""``deep500lite bench overhead --all``: every speed target of the executors measured in one run.

Each :class:`TargetRow` is one target: what was measured, its median with a 95% CI, the target
and whether it is met. The rows, and what each one times:

- **inference** (torch, TensorFlow, ONNX Runtime; LeNet): ``executor.inference``
  against the framework's own call, timed in alternation (:func:`~deep500lite.bench.overhead.run_overhead`);
  ratio deep500lite/native, target 1.02.
- **training** (every executor with a training step, each model of ``models``): the executor's
  step with its native momentum optimizer against the framework's own training loop, alternated;
  target 1.03. torch: the exported module on the torch executor against the module with
  ``torch.optim.SGD`` (``run_overhead("torch", ..., training=True)``); TensorFlow: against a
  Keras ``GradientTape`` loop; JAX: against ``jax.jit`` of ``value_and_grad`` with
  ``optax.sgd``; ONNX Runtime: the ``onnxruntime`` package has no training loop of its own
  (``onnxruntime-training`` is not a dependency), so its step is timed against the torch
  loop on the same architecture (:func:`_against_torch_native`).
- **ONNX Runtime against the torch executor** (ResNet-20): the ONNX Runtime executor's training
  step (whatever ``frameworks/onnxruntime/bench.py``'s ``training_pair`` runs) against the torch
  executor's step with torch's native ``MomentumOptimizer`` on the same zoo graph, in
  alternation; target 1.3.
- **reference training** (LeNet): the reference executor's step (``frameworks/reference/bench.py``)
  against the same torch step; target 5.
- **gradient check** (4,096 elements): the seconds :func:`deep500lite.test_op_gradient` takes
  with its default method on a numpy Swish operator; target 0.020 s.

A row is ``meets`` when the CI's upper end is within the target, ``likely`` when only the
median is, ``misses`` otherwise. Timing needs a quiet machine; the ratios, taken in alternation,
are what to compare across runs.
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np

from deep500lite.errors import UserError, format_choices

__all__ = ["TargetRow", "TARGETS", "TRAINING_ROWS", "run_all_targets", "GRADIENT_CHECK_ELEMENTS"]

#: target name -> (the limit, its unit: "ratio" or "s")
TARGETS = {
    "inference": (1.02, "ratio"),
    "training": (1.03, "ratio"),
    "onnxruntime-training": (1.3, "ratio"),
    "reference-training": (5.0, "ratio"),
    "gradient-check": (0.020, "s"),
}
#: The executors whose training step has a row against a native loop, in the table's order, and the
#: loop each is compared with.
TRAINING_ROWS = (("torch", "torch.optim.SGD"), ("tensorflow", "Keras"), ("jax", "optax"),
                 ("onnxruntime", "the torch.optim.SGD loop"))
GRADIENT_CHECK_ELEMENTS = 4096


@dataclasses.dataclass
class TargetRow:
    """One measured target.

    Attributes:
        target: a key of :data:`TARGETS`.
        what: what was measured, in words (framework, model, the two sides).
        median: the ratio (or seconds, for the gradient check).
        ci_low: lower end of the median's 95% CI.
        ci_high: upper end of the median's 95% CI.
        limit: the target's limit.
        unit: ``"ratio"`` or ``"s"``.
        runs: timed pairs (or runs).
        note: anything else the row needs (an error, the two sides' medians).
    """

    target: str
    what: str
    median: float | None
    ci_low: float | None
    ci_high: float | None
    limit: float
    unit: str
    runs: int = 0
    note: str = ""

    @property
    def verdict(self) -> str:
        """``meets``, ``likely`` (median within, CI not), ``misses``, or ``error`` when not measured."""
        if self.median is None:
            return "error"
        if self.ci_high <= self.limit:
            return "meets"
        return "likely" if self.median <= self.limit else "misses"

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {**dataclasses.asdict(self), "verdict": self.verdict}


def _ratio_row(target, what, paired, note="") -> TargetRow:
    limit, unit = TARGETS[target]
    r = paired.ratio
    a, b = paired.a.summary, paired.b.summary
    sides = f"{paired.a.label} {a.median * 1e3:.4g} ms, {paired.b.label} {b.median * 1e3:.4g} ms"
    return TargetRow(target, what, r.median, r.ci_low, r.ci_high, limit, unit, r.n,
                     sides + (f"; {note}" if note else ""))


def _failed_row(target, what, exc) -> TargetRow:
    limit, unit = TARGETS[target]
    return TargetRow(target, what, None, None, None, limit, unit, 0, f"not measured: {type(exc).__name__}: {exc}")


def _torch_zoo_step(model, batch, rng):
    """The torch executor's training step on the zoo graph, with torch's native momentum optimizer."""
    from deep500lite.bench.overhead import d5_training_step
    from deep500lite.registry import spec

    optimizer = spec("torch").role("optimizers").MomentumOptimizer
    return d5_training_step("torch", model, batch, rng, optimizer)


def _against_torch(framework, model, batch, max_time, seed):
    """Time ``framework``'s bench training step against the torch executor's, in alternation."""
    from deep500lite.metrics.timing import time_paired
    from deep500lite.registry import spec

    bench = spec(framework).role("bench")
    bench.set_seed(seed)
    call, _, ex = bench.training_pair(model, batch, np.random.default_rng(seed))
    torch_call, _, torch_ex = _torch_zoo_step(model, batch, np.random.default_rng(seed))
    call(), torch_call()  # builds the training graphs and sessions before timing

    def sync():
        ex.synchronize()
        torch_ex.synchronize()

    return time_paired(call, torch_call, label_a=framework, label_b="torch", sync=sync, max_time=max_time,
                       warmup=2, min_pairs=5)


def _against_torch_native(framework, model, batch, max_time, seed):
    """Time ``framework``'s bench training step against torch's own loop (``torch.optim.SGD`` on the
    ``torch.nn.Module`` of the same architecture), in alternation: for an executor whose framework
    has no training loop of its own."""
    from deep500lite.metrics.timing import time_paired
    from deep500lite.registry import spec

    bench = spec(framework).role("bench")
    bench.set_seed(seed)
    call, _, ex = bench.training_pair(model, batch, np.random.default_rng(seed))
    torch_bench = spec("torch").role("bench")
    torch_bench.set_seed(seed)
    _, native, _ = torch_bench.training_pair(model, batch, np.random.default_rng(seed))
    call(), native()  # builds the training graph and session before timing
    return time_paired(call, native, label_a=framework, label_b="torch loop", sync=ex.synchronize,
                       max_time=max_time, warmup=2, min_pairs=5)


def _gradient_check_row(max_time) -> TargetRow:
    from deep500lite.bench.op_overhead import swish_op
    from deep500lite.lv0.validation.gradient import test_op_gradient
    from deep500lite.metrics.timing import time_function

    n = GRADIENT_CHECK_ELEMENTS
    op = swish_op("python", n)
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    outcome = {}

    def check():
        outcome["passed"] = test_op_gradient(op, [x], verbose=False).passed

    m = time_function(check, label="test_op_gradient", warmup=1, min_runs=5, max_time=max_time)
    s = m.summary
    limit, unit = TARGETS["gradient-check"]
    return TargetRow("gradient-check", f"test_op_gradient, Swish (numpy), {n} float32 elements, default method",
                     s.median, s.ci_low, s.ci_high, limit, unit, s.n,
                     f"the check {'passed' if outcome.get('passed') else 'FAILED'}")


def _framework_threads(framework: str, threads: int | None, notes: list):
    """``frameworks/<fw>/bench.py``'s ``op_threads(threads)`` block, or nothing when ``threads`` is None.

    ONNX Runtime sets threads per session, and the benchmark's sessions keep their default: its
    rows say so instead of claiming a setting.
    """
    if threads is None:
        return contextlib.nullcontext()
    if framework == "onnxruntime":
        notes.append("ONNX Runtime's default threads (--threads not applied)")
        return contextlib.nullcontext()
    from deep500lite.lv1.device import as_device
    from deep500lite.registry import spec

    @contextlib.contextmanager
    def block():
        with spec(framework).role("bench").op_threads(threads, as_device("cpu")) as described:
            notes.append(described)
            yield

    return block()


def run_all_targets(batch_size: int = 64, max_time: float = 10.0, models=("lenet", "resnet20"), seed: int = 0,
                    progress=None, threads: int | None = None) -> list[TargetRow]:
    """Measure every target (see the module doc); a row that cannot be measured says why.

    Args:
        batch_size: samples per call or step.
        max_time: seconds of timed work per row.
        models: the models of the training rows (``lenet``, ``resnet20``); the inference rows are
            LeNet always. Leaving ResNet-20 out shortens the run most.
        seed: seed of inputs and weights.
        progress: optional ``callable(str)`` told what is being measured.
        threads: intra-op threads for the rows that compare a framework with itself (inference,
            the torch, TensorFlow and JAX training rows), set through each framework's
            ``op_threads`` (torch: ``set_num_threads``; TensorFlow: only before it initializes;
            JAX: fixed when JAX starts, the row says so; ONNX Runtime: not set, the row says so).
            None keeps each framework's default. On a shared machine, 1 keeps torch's thread pool
            from being descheduled mid-call.

    Returns:
        The rows, in the order of the module doc.
    """
    from deep500lite.bench.overhead import MODELS, run_overhead
    from deep500lite.errors import Deep500Error
    from deep500lite.registry import canonical_framework, is_framework_available

    unknown = [m for m in models if m not in MODELS]
    if unknown or not models:
        raise UserError(f"bench overhead --all: --models must name some of {format_choices(MODELS)}. "
                        f"Received: {format_choices(models) if models else 'none'}")
    say = progress or (lambda msg: None)
    listed: dict[tuple, list[TargetRow]] = {}  # the module doc's order -> the rows measured for it

    def guarded(order, target, what, measure):
        try:
            listed[order] = measure()
        except (Deep500Error, ImportError, RuntimeError, ValueError, MemoryError) as exc:
            listed[order] = [_failed_row(target, what, exc)]

    def native_rows(order, target, fw, what, training, model):
        if not is_framework_available(fw):
            listed[order] = [_failed_row(target, what, UserError(f"{fw} is not installed. Received: {fw!r}"))]
            return

        def measure():
            notes: list = []
            with _framework_threads(fw, threads, notes):
                results = run_overhead(canonical_framework(fw), [model], batch_size, max_time, seed, say,
                                       training=training)
            return [_ratio_row(target, what, r.paired, "; ".join(notes)) for r in results]

        guarded(order, target, what, measure)

    def torch_rows(order, target, fw, model, against, what, torch_threads=False):
        absent = [f for f in (fw, "torch") if not is_framework_available(f)]
        if absent:
            listed[order] = [_failed_row(target, what, UserError(
                f"{' and '.join(absent)} not installed. Received: {fw!r} against 'torch'"))]
            return

        def measure():
            say(f"{what}: timing (up to {max_time:g} s)")
            notes: list = []
            # Against torch's own loop, torch gets --threads as in torch's own row; the executor's
            # side keeps its framework's default (ONNX Runtime sets threads per session).
            with _framework_threads("torch", threads if torch_threads else None, notes):
                paired = against(fw, model, batch_size, max_time, seed)
            return [_ratio_row(target, what, paired, "; ".join(f"torch loop: {n}" for n in notes))]

        guarded(order, target, what, measure)

    # Everything that times torch runs before TensorFlow starts: once TensorFlow has started, its
    # idle thread pools slowed torch's ResNet-20 step twenty-fold in one run on this 2-core
    # machine. The rows are still listed in the documented order.
    loops = dict(TRAINING_ROWS)
    native_rows((0, 0), "inference", "torch", "torch LeNet inference vs native", False, "lenet")
    for m, model in enumerate(models):
        native_rows((1, m, 0), "training", "torch", f"torch {model} training step vs {loops['torch']}", True, model)
        torch_rows((1, m, 3), "training", "onnxruntime", model, _against_torch_native,
                   f"onnxruntime {model} training step vs {loops['onnxruntime']}", torch_threads=True)
        native_rows((1, m, 2), "training", "jax", f"jax {model} training step vs {loops['jax']}", True, model)
    if "resnet20" in models:
        torch_rows((2,), "onnxruntime-training", "onnxruntime", "resnet20", _against_torch,
                   "onnxruntime resnet20 training step vs the torch executor's")
    if "lenet" in models:
        torch_rows((3,), "reference-training", "reference", "lenet", _against_torch,
                   "reference lenet training step vs the torch executor's")
    for i, fw in enumerate(("tensorflow", "onnxruntime"), start=1):
        native_rows((0, i), "inference", fw, f"{fw} LeNet inference vs native", False, "lenet")
    for m, model in enumerate(models):
        native_rows((1, m, 1), "training", "tensorflow", f"tensorflow {model} training step vs {loops['tensorflow']}",
                    True, model)
    say(f"test_op_gradient on {GRADIENT_CHECK_ELEMENTS} elements: timing (up to {max_time:g} s)")
    guarded((4,), "gradient-check", "test_op_gradient", lambda: [_gradient_check_row(max_time)])
    return [row for order in sorted(listed) for row in listed[order]]
