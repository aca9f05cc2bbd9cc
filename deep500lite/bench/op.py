"""``deep500lite bench op``: operator benchmarks (GEMM, convolution, custom operators), roofline style.

What is timed, per case and framework (numpy inputs are made once per case, seeded, and moved to
the framework's tensors and device before timing; nothing is copied inside the timed region):

- **torch**: ``torch.matmul(A, B)`` / ``torch.nn.functional.conv2d(X, W, stride, padding)`` under
  ``torch.inference_mode()``, ``torch.set_num_threads(T)``. On a GPU the tensors live
  on the device and every run ends with ``torch.cuda.synchronize()``.
- **tensorflow**: ``tf.linalg.matmul`` / ``tf.nn.conv2d`` inside a ``tf.function``, intra-op
  threads T. Convolution runs in NHWC (input) and HWIO (filter), TensorFlow's native
  layout (its CPU kernels do not take NCHW): the inputs are transposed once, before timing. Each
  run ends by fetching the result with ``.numpy()`` (on the CPU this waits for the result without
  copying it); on a GPU ``tf.test.experimental.sync_devices()`` waits instead, so no device-to-host
  copy is timed.
- **onnxruntime**: a one-node ONNX model (``MatMul`` / ``Conv``) in an ``InferenceSession`` with
  ``intra_op_num_threads = T``, run with **I/O binding**: both inputs are bound once
  as ``OrtValue``s on the device and the output is bound to the device, allocated by ONNX Runtime
  on each run (as the other frameworks allocate theirs). Both operands are graph inputs, not
  initializers, so ONNX Runtime does not pre-pack the weights, like the other frameworks, which
  also receive both operands on every call.
- **reference**: ``numpy.matmul`` (numpy's BLAS, limited to T threads with threadpoolctl) for GEMM; the deep500lite
  reference executor (``onnx.reference``) on the same one-node ONNX ``Conv`` for convolution.
  CPU only.
- **jax**: ``jax.jit(jnp.matmul)`` / ``jax.jit(jax.lax.conv_general_dilated)`` (NCHW, OIHW) on
  device arrays, compiled before timing, each run waiting with ``block_until_ready``. XLA sizes
  its CPU thread pool when JAX starts: T is not applied (the setup records this).
- **op** (suite ``custom``): the operator's own ``forward`` on numpy arrays (a Python operator
  runs its numpy code; a compiled C++ operator its C++ code).

T is the ``threads`` argument (``--threads``), by default the cores this process may use. The
code of each framework is ``op_runner`` and ``op_threads`` in ``frameworks/<fw>/bench.py``,
reached through the framework's spec (``spec.role("bench")``) when the benchmark runs.

Method: one untimed call whose output is compared with the reference result (``max |err|``
relative to ``max |reference|``), one probing call, then
:func:`deep500lite.metrics.time_function`: warm-up, device synchronization in the timed region,
repeats until the 95% CI of the median is within 5% of it or ``max_time`` seconds of timed work
are spent (10 runs at least; 3 for calls longer than a tenth of ``max_time``). Cases run one after
the other, each on every framework in turn, so that a burst of other load on a shared machine
hits the frameworks of one case alike.

Reported per case and framework: the median with its 95% CI, GFLOP/s = FLOP / median, and its
place under the roofline of this machine's *measured* peak (:mod:`deep500lite.perfmodel.peak`).

FLOP and bytes, float32 (4 bytes per element), inputs read once and outputs written once:

- GEMM ``C[M,N] = A[M,K] B[K,N]``: ``2 M N K`` FLOP, ``4 (M K + K N + M N)`` bytes.
- convolution ``X[N,C,H,W] * W[K,C,R,S] -> Y[N,K,P,Q]`` with ``P = (H + 2 pad - R) // stride + 1``
  (Q likewise): ``2 N K C R S P Q`` FLOP, ``4 (N C H W + K C R S + N K P Q)`` bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Callable, Sequence

import numpy as np

from deep500lite.bench.contract import OpRunner
from deep500lite.bench.op_cases import (CUSTOM_FRAMEWORK, DEFAULT_SUITES, SIZES, SKINNY_BATCHES, SUITES, ConvCase,
                                        CustomCase, GemmCase, SaxpyOp, check_size, conv_cases, custom_case,
                                        custom_example_cases, gemm_cases, load_custom_cases, skinny_cases)
from deep500lite.bench.op_plots import plot_results
from deep500lite.errors import DeviceError, UserError, format_choices
from deep500lite.registry import FrameworkNames

__all__ = [
    "SUITES", "SKINNY_BATCHES", "DEFAULT_SUITES", "SIZES", "OP_FRAMEWORKS", "CUSTOM_FRAMEWORK", "GemmCase",
    "ConvCase", "CustomCase", "custom_case", "SaxpyOp", "gemm_cases", "conv_cases", "skinny_cases",
    "custom_example_cases", "load_custom_cases", "OpRunner", "OpResult", "OpBenchmark", "run_op_benchmark",
    "parse_suites", "parse_frameworks", "check_size",
    "TABLE_HEADERS", "plot_results",
]

#: Frameworks whose ``bench`` module runs ``bench op`` cases (from the specs: ``"op" in spec.bench``).
OP_FRAMEWORKS = FrameworkNames(bench="op")
_REL_ERROR_WARN = 1e-3


# --------------------------------------------------------------------------------------------- checks


def _split(value) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v).strip() for v in value]


def parse_suites(value) -> tuple:
    """``"gemm,conv"`` (or a sequence) -> a tuple of suite names, in :data:`SUITES` order.

    Raises:
        UserError: an unknown or no suite.
    """
    names = _split(value)
    bad = [n for n in names if n not in SUITES]
    if bad or not names:
        raise UserError(f"--suite takes a comma-separated list of {format_choices(SUITES)}. Received: {value!r}"
                        + (f" (unknown: {', '.join(map(repr, bad))})" if bad else ""))
    return tuple(s for s in SUITES if s in names)


def parse_frameworks(value) -> tuple:
    """``"torch,reference"`` (or a sequence; aliases such as ``pytorch`` accepted) -> framework keys.

    Raises:
        UserError: an unknown or no framework.
    """
    from deep500lite.registry import FRAMEWORK_ALIASES

    names = [FRAMEWORK_ALIASES.get(n.lower(), n.lower()) for n in _split(value)]
    bad = [n for n in names if n not in OP_FRAMEWORKS]
    if bad or not names:
        raise UserError(f"--frameworks takes a comma-separated list of {format_choices(OP_FRAMEWORKS)}. "
                        f"Received: {value!r}" + (f" (unknown: {', '.join(map(repr, bad))})" if bad else ""))
    return tuple(dict.fromkeys(names))


# --------------------------------------------------------------------------------------------- runners


def _custom_runner(case, device) -> OpRunner:
    if device.is_gpu:
        raise DeviceError("custom operators are timed through forward() on numpy arrays, on the CPU; use --device "
                          f"cpu. Received: --device {device}")
    op, inputs = case.op, case.inputs

    def call():
        return op.forward(*inputs)

    def fetch():
        out = call()
        return np.asarray(out[0] if isinstance(out, (tuple, list)) else out)

    return OpRunner(call, None, fetch, f"{type(op).__name__}.forward on numpy arrays")


# --------------------------------------------------------------------------------------------- results


@dataclasses.dataclass
class OpResult:
    """One case timed on one framework.

    Attributes:
        case: the :class:`GemmCase`, :class:`ConvCase` or :class:`CustomCase`.
        framework: the framework key (``op`` for custom operators).
        measurement: the :class:`~deep500lite.Measurement` with every raw sample.
        roofline: the :class:`~deep500lite.perfmodel.peak.Roofline` of the median.
        max_rel_error: ``max |y - reference| / max |reference|`` of one call (None without a reference).
        how: what was called.
    """

    case: object
    framework: str
    measurement: object
    roofline: object
    max_rel_error: float | None
    how: str

    @property
    def gflops(self) -> float:
        """GFLOP/s at the median time."""
        return self.case.flops / self.measurement.median / 1e9

    def row(self) -> list:
        """The table row (see :data:`TABLE_HEADERS`)."""
        from deep500lite.metrics.tables import format_ci

        s, r = self.measurement.summary, self.roofline
        return [self.case.suite, self.case.name, self.case.shape, self.framework,
                format_ci(s.median, s.ci_low, s.ci_high), s.n, f"{self.gflops:.4g}", f"{r.intensity:.3g}", r.bound,
                f"{100 * r.fraction_of_attainable:.1f}", f"{100 * r.fraction_of_peak:.1f}"]

    def to_dict(self) -> dict:
        """JSON-ready form with every raw sample."""
        s = self.measurement.summary
        return {"suite": self.case.suite, "case": self.case.to_dict(), "framework": self.framework, "how": self.how,
                "flops": self.case.flops, "bytes_moved": self.case.bytes_moved, "median_s": s.median,
                "ci_low_s": s.ci_low, "ci_high_s": s.ci_high, "gflops": self.gflops,
                "roofline": self.roofline.to_dict(), "max_rel_error": self.max_rel_error,
                "measurement": self.measurement.to_dict()}


TABLE_HEADERS = ["suite", "case", "shape", "framework", "median [95% CI]", "runs", "GFLOP/s", "FLOP/B", "bound",
                 "% attainable", "% peak"]


@dataclasses.dataclass
class OpBenchmark:
    """Everything one ``bench op`` run measured.

    Attributes:
        device: ``"cpu"`` or ``"gpu:N"``.
        threads: CPU threads given to each framework (and to the peak's kernels).
        peak: the machine's :class:`~deep500lite.perfmodel.peak.Peak`.
        results: one :class:`OpResult` per case and framework, in suite, case, framework order.
        skipped: ``{"framework", "case", "reason"}`` for what could not run (``case`` None: all).
        notes: warnings (noisy measurements, outputs that disagree).
        framework_setup: framework -> its thread settings and version.
        settings: the arguments of the run.
    """

    device: str
    threads: int
    peak: object
    results: list
    skipped: list
    notes: list
    framework_setup: dict
    settings: dict

    def table(self, fmt: str = "table") -> str:
        """The results as ``table``, ``markdown`` or ``csv`` (:func:`deep500lite.metrics.tables.format_table`)."""
        from deep500lite.metrics.tables import format_table

        return format_table(TABLE_HEADERS, [r.row() for r in self.results], fmt)

    def skip_lines(self) -> list[str]:
        """One line per skipped framework (or framework and case)."""
        lines = []
        for s in self.skipped:
            what = s["framework"] if s["case"] is None else f"{s['framework']} on {s['case']}"
            lines.append(f"skipped {what}: {s['reason']}")
        return lines

    def to_dict(self) -> dict:
        """JSON-ready form: settings, peak, every result with its raw samples, skips and notes."""
        return {"benchmark": "op", "settings": self.settings, "device": self.device, "threads": self.threads,
                "framework_setup": self.framework_setup, "peak": self.peak.to_dict(),
                "results": [r.to_dict() for r in self.results], "skipped": self.skipped, "notes": self.notes}


def _time(runner: OpRunner, label: str, max_time: float):
    from deep500lite.metrics.timing import time_function

    t0 = time.perf_counter()
    runner.fn()
    if runner.sync is not None:
        runner.sync()
    probe = time.perf_counter() - t0
    long_call = probe > max_time / 10
    return time_function(runner.fn, label=label, sync=runner.sync, warmup=0 if long_call else 2,
                         min_runs=3 if long_call else 10, max_time=max_time)


def _rel_error(y, expected) -> float:
    y = np.asarray(y, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if y.shape != expected.shape:
        return float("inf")
    scale = float(np.max(np.abs(expected))) or 1.0
    return float(np.max(np.abs(y - expected))) / scale


def run_op_benchmark(suites=DEFAULT_SUITES, frameworks=OP_FRAMEWORKS, size: str = "default", max_time: float = 2.0,
                     device="cpu", custom_cases: Sequence[CustomCase] | None = None, seed: int = 0,
                     progress: Callable[[str], None] | None = None, peak=None,
                     threads: int | None = None) -> OpBenchmark:
    """Run the operator benchmarks (see the module doc for the method).

    Args:
        suites: names from :data:`SUITES` (a list or ``"gemm,conv"``).
        frameworks: names from :data:`OP_FRAMEWORKS`; those not installed are skipped with a note.
        size: ``small`` (seconds, for tests), ``default`` or ``large``.
        max_time: seconds of timed work per case and framework at most (> 0).
        device: ``"cpu"`` or ``"gpu:N"`` (needs torch with CUDA).
        custom_cases: the cases of the ``custom`` suite (default: :func:`custom_example_cases`).
        seed: seed of the inputs.
        progress: optional ``callable(str)`` told what is being measured.
        peak: a :class:`~deep500lite.perfmodel.peak.Peak` to place the results under (default: measured
            here with :func:`~deep500lite.perfmodel.peak.measure_peak`, before and after the cases;
            each kernel's faster measurement counts).
        threads: CPU threads for every framework and for the peak (default: the usable cores).

    Returns:
        An :class:`OpBenchmark`.

    Raises:
        UserError: a bad suite, framework, size, time or device (DeviceError without the GPU).
    """
    from deep500lite.perfmodel.peak import measure_peak, require_torch_gpu, roofline, usable_cores
    from deep500lite.lv1.device import as_device
    from deep500lite.registry import FRAMEWORKS, framework_version, is_framework_available, spec

    suites, frameworks, size = parse_suites(suites), parse_frameworks(frameworks), check_size(size)
    if not isinstance(max_time, (int, float)) or not max_time > 0:
        raise UserError(f"--max-time must be a positive number of seconds. Received: {max_time!r}")
    dev = as_device(device)
    if dev.is_gpu:
        require_torch_gpu(dev.index)
    if threads is None:
        threads = usable_cores()
    elif isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise UserError(f"--threads must be a positive integer. Received: {threads!r}")
    say = progress or (lambda msg: None)
    cases = []
    if "gemm" in suites:
        cases += gemm_cases(size)
    if "conv" in suites:
        cases += conv_cases(size)
    if "skinny" in suites:
        cases += skinny_cases(size)
    if "custom" in suites:
        cases += list(custom_cases) if custom_cases is not None else custom_example_cases(size)

    measure = peak is None
    if measure:
        say(f"measuring the peak of {dev} (GEMM and STREAM kernels)")
        measure_peak(dev, threads)
    results, skipped, notes, setup = [], [], [], {}
    expected: dict[int, np.ndarray] = {}
    rng_inputs: dict[int, tuple] = {}

    def inputs_of(i, case):
        if i not in rng_inputs:
            rng_inputs[i] = case.make_inputs(np.random.default_rng(seed + i))
        return rng_inputs[i]

    def expected_of(i, case):
        if i not in expected:
            expected[i] = case.expected(inputs_of(i, case))
        return expected[i]

    def record(i, case, framework, runner):
        y = runner.fetch()
        err = _rel_error(y, expected_of(i, case)) if hasattr(case, "expected") else None
        say(f"{framework} {case.suite} {case.name}: timing (up to {max_time:g} s)")
        m = _time(runner, f"{framework} {case.suite} {case.name}", max_time)
        results.append(OpResult(case, framework, m, None, err, runner.how))
        if err is not None and err > _REL_ERROR_WARN:
            notes.append(f"{framework} {case.name}: output differs from the reference by {err:.2g} "
                         "(max |err| / max |reference|)")
        warning = m.warning()
        if warning:
            notes.append(warning)

    standard = [(i, c) for i, c in enumerate(cases) if c.suite != "custom"]
    active = []
    for framework in frameworks if standard else ():
        if not is_framework_available(framework):
            skipped.append({"framework": framework, "case": None,
                            "reason": f"not installed ({FRAMEWORKS[framework].install})"})
        elif dev.is_gpu and "gpu" not in FRAMEWORKS[framework].devices:
            skipped.append({"framework": framework, "case": None, "reason": "runs on the CPU only"})
        else:
            active.append(framework)
    with contextlib.ExitStack() as stack:
        for framework in active:
            say(f"{framework}: setting up")
            how_threads = stack.enter_context(spec(framework).role("bench").op_threads(threads, dev))
            setup[framework] = {"version": framework_version(framework), "threads": how_threads}
        # Case by case, every framework in turn: a burst of other load on the machine then hits
        # the frameworks of one case alike instead of all the cases of one framework.
        for i, case in standard:
            for framework in list(active):
                try:
                    runner = spec(framework).role("bench").op_runner(case, inputs_of(i, case), dev, threads)
                except DeviceError as exc:
                    skipped.append({"framework": framework, "case": None, "reason": str(exc)})
                    active.remove(framework)
                    continue
                record(i, case, framework, runner)
                del runner
            rng_inputs.pop(i, None)
            expected.pop(i, None)
    for i, case in enumerate(cases):
        if case.suite != "custom":
            continue
        try:
            runner = _custom_runner(case, dev)
        except DeviceError as exc:
            skipped.append({"framework": CUSTOM_FRAMEWORK, "case": case.name, "reason": str(exc)})
            continue
        setup.setdefault(CUSTOM_FRAMEWORK, {"version": None, "threads": "as the operator uses them"})
        record(i, case, CUSTOM_FRAMEWORK, runner)

    if measure:
        say(f"measuring the peak of {dev} again (the faster measurement of each kernel counts)")
        peak = measure_peak(dev, threads, refresh=True)
    for r in results:
        r.roofline = roofline(r.case.flops, r.case.bytes_moved, r.measurement.median, peak)
    order = {fw: j for j, fw in enumerate((*frameworks, CUSTOM_FRAMEWORK))}
    position = {id(c): j for j, c in enumerate(cases)}
    results.sort(key=lambda r: (position[id(r.case)], order[r.framework]))
    settings = {"suites": list(suites), "frameworks": list(frameworks), "size": size, "max_time": max_time,
                "device": str(dev), "seed": seed, "threads": threads}
    return OpBenchmark(str(dev), threads, peak, results, skipped, notes, setup, settings)
