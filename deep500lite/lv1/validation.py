"""Level 1 validation: one executor's outputs against another's (or against given outputs)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from deep500lite.errors import FeedError, UserError, UserKeyError
from deep500lite.metrics.accuracy import L2Error, MaxError, RelativeL2Error
from deep500lite.utils import check_allocation

__all__ = ["ExecutorComparison", "InferenceResults", "test_executor_inference", "test_executor_backprop"]


@dataclasses.dataclass
class ExecutorComparison:
    """The verdict of :func:`test_executor_inference` (and :func:`test_executor_backprop`).

    Attributes:
        passed: whether every output is within ``atol * scale + rtol * |reference|`` element-wise.
        metrics: output name -> metric name -> value.
        rtol: relative tolerance used.
        atol: absolute tolerance used, as a fraction of each output's scale.
        worst: output name -> largest ``|out - ref| - rtol * |ref|`` (it fails where this exceeds
            ``atol * scale``).
        scales: output name -> the output's scale: its largest finite ``|reference|`` value (1.0
            for every output where ``atol`` is absolute, as in :func:`test_executor_backprop`).
    """

    passed: bool
    metrics: dict
    rtol: float
    atol: float
    worst: dict
    scales: dict = dataclasses.field(default_factory=dict)

    def summary(self) -> str:
        """One line per output with the metric values, and the verdict."""
        lines = []
        for name, values in self.metrics.items():
            vals = ", ".join(f"{k}={v:.3g}" for k, v in values.items())
            scale = self.scales.get(name, 1.0)
            ok = self.worst[name] <= self.atol * scale
            shown = f" (scale {scale:.3g})" if self.scales else ""
            lines.append(f"{'ok  ' if ok else 'FAIL'} {name}: {vals}{shown}")
        unit = " x the output's scale" if self.scales else ""
        lines.append(f"{'PASSED' if self.passed else 'FAILED'} (rtol={self.rtol:g}, atol={self.atol:g}{unit})")
        return "\n".join(lines)

    def __bool__(self) -> bool:
        return self.passed


def test_executor_inference(executor, inputs: dict | None = None, reference=None, metrics=None, rtol: float = 1e-4,
                            atol: float = 1e-4, verbose: bool = False, *, reference_outputs: dict | None = None):
    """Run ``executor`` and compare its outputs with a reference, within tolerances relative to each output's scale.

    Two forms. **With** ``reference`` (deep500lite's form): an element passes when
    ``|out - ref| <= atol * scale + rtol * |ref|``, where ``scale`` is the output's largest finite
    ``|ref|`` value. The absolute part thus scales with the output: an output whose values are
    ~1e-9 is judged at 1e-13, so an all-zero result fails against it (a fixed absolute tolerance
    of 1e-4 would pass it), while the small elements of an output of scale 1000 may differ by
    0.1, the rounding its large elements bring. An all-zero reference (scale 0) demands exact
    zeros. NaN must match NaN. Returns an :class:`ExecutorComparison`.

    **Without** ``reference`` (Deep500's form, ``test_executor_inference(executor, inputs=None,
    reference_outputs=None, metrics=[WallclockTime()])``): inputs not given are filled with
    ``np.random.rand`` values of each input's declared shape (open dimensions: 1) and type;
    metrics with ``reruns == 0`` measure the one run, the others ``reruns`` more runs each; every
    metric is measured per output and printed as ``"<Metric> on inference for output '<name>':
    <summary>"``. Returns the list of metric results (output by output, metric by metric), an
    :class:`InferenceResults` that also carries the outputs and, when ``reference_outputs`` is
    given, the :class:`ExecutorComparison` with them.

    Args:
        executor: the :class:`~deep500lite.GraphExecutor` under test.
        inputs: feeds (required with ``reference``; optional in Deep500's form).
        reference: another executor (run on the same inputs) or a dict of expected outputs.
        metrics: ``TestMetric`` instances; default max, L2 and relative L2 error with
            ``reference``, ``[WallclockTime()]`` in Deep500's form.
        rtol: relative tolerance of each element (a fraction of its ``|ref|``).
        atol: absolute tolerance, as a fraction of the output's scale (its largest ``|ref|``).
        verbose: print the summary (deep500lite's form).
        reference_outputs: Deep500's keyword: a dict of expected outputs (Deep500's form).

    Returns:
        An :class:`ExecutorComparison` (deep500lite's form) or an :class:`InferenceResults`.

    Raises:
        UserKeyError: the executor does not return an output the reference has.
        UserError: an output's shape differs from the reference's, both ``reference`` and
            ``reference_outputs`` are given, or an error metric has no reference to compare with.
        FeedError: an input has no declared type or shape to make random values from.
    """
    if reference is not None and reference_outputs is not None:
        raise UserError("Give reference (deep500lite) or reference_outputs (Deep500), not both. "
                        "Received: both")
    if reference is None:
        return _deep500_inference(executor, inputs, reference_outputs, metrics)
    if inputs is None:
        inputs = _random_inputs(executor, {})
    outputs = executor.inference(inputs)
    expected = reference.inference(inputs) if hasattr(reference, "inference") else dict(reference)
    result = _compare(inputs, outputs, expected, metrics, rtol, atol)
    if verbose:
        print(result.summary())
    return result


def _compare(inputs, outputs, expected, metrics, rtol, atol) -> ExecutorComparison:
    missing = [k for k in expected if k not in outputs]
    if missing:
        raise UserKeyError(f"The executor did not return the reference outputs {missing}; the reference's outputs "
                           f"must be among the executor's. Received: outputs {list(outputs)}")
    metrics = list(metrics) if metrics is not None else [MaxError(), L2Error(), RelativeL2Error()]
    values, worst, scales = {}, {}, {}
    for name, ref in expected.items():
        out, ref = np.asarray(outputs[name]), np.asarray(ref)
        if out.shape != ref.shape:
            raise UserError(f"Output '{name}' must have the reference's shape {list(ref.shape)}. "
                            f"Received: {list(out.shape)}")
        values[name] = {(m.name or type(m).__name__): m.measure(inputs, out, ref) for m in metrics}
        o64, r64 = out.astype(np.float64), ref.astype(np.float64)
        finite = np.abs(r64[np.isfinite(r64)])
        scales[name] = float(finite.max()) if finite.size else 0.0
        with np.errstate(invalid="ignore"):  # inf - inf where both are infinite
            excess = np.abs(o64 - r64) - rtol * np.abs(r64)
        infinite = np.isinf(r64) | np.isinf(o64)  # an infinity passes only where both have the same one
        excess = np.where(infinite, np.where(o64 == r64, -np.inf, np.inf), excess)
        worst[name] = float(np.nanmax(excess)) if excess.size and not np.isnan(excess).all() else 0.0
        if np.isnan(o64).any() or np.isnan(r64).any():
            same_nan = np.array_equal(np.isnan(o64), np.isnan(r64))
            worst[name] = worst[name] if same_nan else np.inf
    passed = all(w <= atol * scales[name] for name, w in worst.items())
    return ExecutorComparison(passed=passed, metrics=values, rtol=rtol, atol=atol, worst=worst, scales=scales)


class InferenceResults(list):
    """The metric results of Deep500's ``test_executor_inference`` form (a list, as Deep500 returned).

    Attributes:
        inputs: the feeds of every run (the given inputs and the random ones made for the rest).
        outputs: the executor's outputs of the last run.
        comparison: the :class:`ExecutorComparison` with ``reference_outputs``, or ``None``.
        passed: ``comparison.passed`` (``None`` without reference outputs).
    """

    def __init__(self, results, inputs: dict, outputs: dict, comparison: ExecutorComparison | None):
        super().__init__(results)
        self.inputs = inputs
        self.outputs = outputs
        self.comparison = comparison
        self.passed = None if comparison is None else comparison.passed


def _random_inputs(executor, given: dict) -> dict:
    network = executor.network
    descriptors = network.input_descriptors()
    feeds = dict(given)
    for name in network.inputs:
        if name in feeds:
            continue
        desc = descriptors.get(name)
        if desc is None or desc.shape is None:
            raise FeedError(f"Input '{name}' declares no {'type' if desc is None else 'shape'}, so no random value "
                            f"can be made for it; pass it in inputs. Received: inputs for {sorted(given)}")
        shape = [1 if d is None else d for d in desc.shape]
        check_allocation(math.prod(shape) * (8 + desc.dtype.itemsize), f"A random input for '{name}' of shape {shape}",
                         error=FeedError)
        feeds[name] = np.asarray(np.random.rand(*shape)).astype(desc.dtype)
    return feeds


def _deep500_inference(executor, inputs, reference_outputs, metrics) -> InferenceResults:
    from deep500lite.metrics.accuracy import _ErrorMetric
    from deep500lite.metrics.timing import WallclockTime

    metrics = [WallclockTime()] if metrics is None else list(metrics)
    if reference_outputs is None:
        needing = [type(m).__name__ for m in metrics if isinstance(m, _ErrorMetric)]
        if needing:
            raise UserError(f"The metrics {needing} compare with reference outputs; pass reference_outputs={{...}}. "
                            "Received: reference_outputs=None")
    feeds = _random_inputs(executor, inputs or {})
    once = [m for m in metrics if getattr(m, "reruns", 0) == 0]
    rerun = [m for m in metrics if getattr(m, "reruns", 0) > 0]
    for m in once:
        m.begin(feeds)
    outputs = executor.inference(feeds)
    for m in once:
        m.end(outputs)
    for m in rerun:
        for _ in range(m.reruns):
            m.begin(feeds)
            outputs = executor.inference(feeds)
            m.end(outputs)
    comparison = None
    if reference_outputs is not None:
        comparison = _compare(feeds, outputs, dict(reference_outputs), None, 1e-4, 1e-4)
    results = []
    for name, out in outputs.items():
        ref = None if reference_outputs is None else reference_outputs.get(name)
        for m in metrics:
            if ref is None and isinstance(m, _ErrorMetric):
                continue  # an output the reference does not list: nothing to compare it with
            results.append(m.measure(feeds, out, ref))
            print(f"{type(m).__name__} on inference for output '{name}': {m.measure_summary(feeds, out, ref)}")
    return InferenceResults(results, feeds, outputs, comparison)


test_executor_inference.__test__ = False  # a library function, not a pytest test


def test_executor_backprop(executor, inputs: dict, reference, y: str = "loss", rtol: float = 1e-4,
                           verbose: bool = False) -> ExecutorComparison:
    """Run ``inference_and_backprop`` on two executors and compare every parameter gradient.

    Args:
        executor: the executor under test.
        inputs: feeds for both.
        reference: another executor of the same network (its gradients are the yardstick).
        y: the scalar to differentiate.
        rtol: largest relative L2 error ``||g - g_ref|| / ||g_ref||`` allowed per gradient.
        verbose: print the summary.

    Returns:
        An :class:`ExecutorComparison` whose metrics map each gradient name (and ``y``) to its
        ``RelativeL2Error`` and ``MaxError``; ``worst`` holds each relative error minus ``rtol``.
    """
    executor.inference_and_backprop(inputs, y)
    reference.inference_and_backprop(inputs, y)
    values, worst = {}, {}
    names = [g for _, g in reference.network.gradient(y)]
    mine = dict(zip(names, executor.network.fetch_tensors(names)))
    theirs = dict(zip(names, reference.network.fetch_tensors(names)))
    for name in names:
        rel = RelativeL2Error().measure(inputs, mine[name], theirs[name])
        values[name] = {"RelativeL2Error": rel, "MaxError": MaxError().measure(inputs, mine[name], theirs[name])}
        worst[name] = rel - rtol
    passed = all(w <= 0 for w in worst.values())
    result = ExecutorComparison(passed=passed, metrics=values, rtol=rtol, atol=0.0, worst=worst)
    if verbose:
        print(result.summary())
    return result


test_executor_backprop.__test__ = False  # a library function, not a pytest test
