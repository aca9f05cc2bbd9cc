"""Level 0 validation: an operator's forward pass, gradient and determinism, with an explicit verdict.

Every check returns a result object whose ``passed`` says whether the operator is correct within
tolerance and whose ``reason`` says why (naming the worst output, input or element when it fails):

- :func:`test_op_forward` compares ``op.forward`` with reference outputs;
- :func:`test_op_gradient` compares ``op.backward`` with a numerical gradient computed by
  vectorized central differences (a stacked batch per chunk of elements when the operator
  broadcasts over a leading axis; random-direction checks otherwise);
- :func:`test_op_determinism` reruns ``op.forward`` and checks the outputs are bit-identical;
- :func:`framework_op` turns one ONNX operator of a framework's executor into an
  :class:`~deep500lite.lv0.operator.Operator`, so framework operators are validated the same way.

See ``docs/validation.md`` for the method, the tolerances and measured timings.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
import time
from typing import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from deep500lite.lv0.operator import CustomOp, CustomPythonOp, Operator
from deep500lite.lv0.tensordesc import TensorDescriptor
from deep500lite.metrics.accuracy import MaxError, RelativeL2Error

__all__ = [
    "OpTestResult",
    "DeterminismResult",
    "FrameworkOp",
    "test_op_forward",
    "test_op_gradient",
    "test_op_determinism",
    "framework_op",
    "forward_tolerance",
    "gradient_tolerance",
]

_F16, _F32, _F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)

# (rtol, atol) per dtype. An element passes when |out - ref| <= atol * scale + rtol * |ref|, where
# scale = max(1, largest finite |ref| of that tensor).
_FORWARD_TOLERANCES = {_F16: (5e-3, 5e-3), _F32: (1e-5, 1e-6), _F64: (1e-10, 1e-12)}
# Keyed by the precision of the analytic gradient (the operator's own dtype).
_GRADIENT_TOLERANCES = {_F16: (1e-2, 1e-3), _F32: (1e-3, 1e-5), _F64: (1e-6, 1e-8)}

_GRADIENT_METHODS = ("auto", "batched", "directional", "elementwise")
# Bound on one output's rounding error, in units of its dtype's eps times |value|: allows for
# operators that accumulate in their own precision (sums, convolutions).
_ROUNDING_FACTOR = 8.0
# Directional checks: for a Rademacher v, <e, v> has standard deviation ||e||, so when every
# element's error e_j sits at its tolerance, |<e, s>| / ||s * tol|| has a root mean square of 1
# over directions. An input fails when that root mean square exceeds this bound.
_DIRECTIONAL_RMS = 1.6


# --------------------------------------------------------------------------------------- results
@dataclasses.dataclass
class OpTestResult:
    """The verdict of :func:`test_op_forward` or :func:`test_op_gradient`.

    Attributes:
        passed: whether every output (forward) or every input gradient (gradient) is within
            tolerance.
        metrics: tensor name -> metric name -> value. Forward: one entry per output with the
            given metrics (default ``MaxError`` and ``RelativeL2Error``). Gradient: one entry per
            differentiable input with ``max_abs_error`` and ``max_rel_error`` (and the given
            metrics where a full numerical gradient was computed).
        reason: why it passed or failed; a failure names the worst tensor and element (or
            direction) with the two values and the allowed error.
        kind: ``"forward"`` or ``"gradient"``.
        method: how the comparison was made: ``"compare"`` (forward), ``"batched"``,
            ``"directional"``, ``"directional+elementwise"`` or ``"elementwise"`` (gradient).
        forward_calls: how many times ``op.forward`` was called.
        tolerances: tensor name -> ``(rtol, atol)`` used.
        compute_dtype: the dtype the numerical gradient was computed in (``None`` for forward).
        details: tensor name -> extra facts (worst element, failing count, chunk size, number of
            elements that passed only by the one-sided rule at a kink, directions used); the
            key ``"_notes"`` holds notes on the method (for example why float64 was not used).
        numerical: input name -> numerical gradient (same shape as the input), where one was
            computed element by element (``None`` for directional-only checks).
        analytic: input name -> the gradient ``op.backward`` returned.
        elapsed_s: wall time of the whole check.
    """

    passed: bool
    metrics: dict
    reason: str
    kind: str
    method: str
    forward_calls: int
    tolerances: dict
    compute_dtype: str | None = None
    details: dict = dataclasses.field(default_factory=dict)
    numerical: dict = dataclasses.field(default_factory=dict, repr=False)
    analytic: dict = dataclasses.field(default_factory=dict, repr=False)
    elapsed_s: float = 0.0

    def summary(self) -> str:
        """A few lines: the verdict, the method, one line per tensor with its metrics, the reason."""
        what = "test_op_forward" if self.kind == "forward" else "test_op_gradient"
        how = self.method if self.kind == "forward" else f"{self.method}, {self.compute_dtype}"
        lines = [f"{what}: {'PASSED' if self.passed else 'FAILED'} ({how}, {self.forward_calls} forward "
                 f"calls, {self.elapsed_s:.3g} s)"]
        for name, values in self.metrics.items():
            vals = ", ".join(f"{k}={v:.3g}" for k, v in values.items())
            tol = self.tolerances.get(name)
            tol_text = f" [rtol={tol[0]:g}, atol={tol[1]:g}]" if tol else ""
            ok = self.details.get(name, {}).get("passed", True)
            lines.append(f"  {'ok  ' if ok else 'FAIL'} {name}: {vals}{tol_text}")
        lines.append(f"  {self.reason}")
        for note in self.details.get("_notes", []):
            lines.append(f"  note: {note}")
        return "\n".join(lines)

    def __bool__(self) -> bool:
        return self.passed


@dataclasses.dataclass
class DeterminismResult:
    """The verdict of :func:`test_op_determinism`.

    Attributes:
        deterministic: whether every rerun's outputs are bit-identical to the first run's.
        reruns: how many times ``op.forward`` ran (the first run included).
        differing_elements: output elements that differ (in their bytes) in at least one rerun.
        max_deviation: the largest ``|rerun - first|`` over all outputs (``inf`` where a value
            became NaN or infinite in one run only).
        variance: output name -> per-element variance over all runs (float64, the output's shape).
        outputs: output name -> ``{"elements", "differing_elements", "max_deviation"}``.
        heatmap: the path of the variance heatmap written, or ``None``.
        reason: a sentence on the verdict.
    """

    deterministic: bool
    reruns: int
    differing_elements: int
    max_deviation: float
    variance: dict = dataclasses.field(repr=False)
    outputs: dict
    heatmap: str | None
    reason: str

    @property
    def passed(self) -> bool:
        """Same as :attr:`deterministic`."""
        return self.deterministic

    def summary(self) -> str:
        """The verdict and one line per output."""
        lines = [f"test_op_determinism: {'DETERMINISTIC' if self.deterministic else 'NOT DETERMINISTIC'} "
                 f"({self.reruns} runs)"]
        for name, info in self.outputs.items():
            lines.append(f"  {name}: {info['differing_elements']} of {info['elements']} elements differ, "
                         f"max deviation {info['max_deviation']:.3g}")
        lines.append(f"  {self.reason}")
        if self.heatmap:
            lines.append(f"  variance heatmap: {self.heatmap}")
        return "\n".join(lines)

    def __bool__(self) -> bool:
        return self.deterministic


# ------------------------------------------------------------------------------------- helpers
def _as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


class _Counter:
    """Calls ``op.forward`` (bypassing descriptor checks, so float64 and batched inputs pass) and counts."""

    def __init__(self, op: Operator):
        self.op = op
        self.calls = 0

    def run(self, inputs) -> tuple:
        self.calls += 1
        return tuple(np.asarray(o) for o in _as_tuple(self.op.forward(*inputs)))


def _check_operator(op, fn: str) -> None:
    if not isinstance(op, Operator) and not (callable(getattr(op, "forward", None))):
        raise TypeError(f"{fn} expects a d5.Operator (with forward and backward). Received: {type(op).__name__}")


def _prepare_inputs(op, inputs, fn: str) -> list:
    if isinstance(inputs, np.ndarray):
        inputs = [inputs]
    if not isinstance(inputs, (list, tuple)):
        raise TypeError(f"{fn}: inputs must be a list of numpy arrays, one per operator input. "
                        f"Received: {type(inputs).__name__}")
    arrays = [np.asarray(x) for x in inputs]
    descs = getattr(op, "input_descriptors", None)
    if descs is not None:
        if len(arrays) != len(descs):
            raise ValueError(
                f"{fn}: {type(op).__name__} takes {len(descs)} inputs "
                f"({', '.join(str(d) for d in descs)}). Received: {len(arrays)} inputs")
        for i, (x, d) in enumerate(zip(arrays, descs)):
            if not d.matches(x):
                raise ValueError(f"{fn}: input {i} of {type(op).__name__} must be {d}. "
                                 f"Received: {x.dtype.name}{list(x.shape)}")
    return arrays


def _names(op, attr: str, prefix: str, n: int) -> list:
    names = getattr(op, attr, None)
    if isinstance(names, (list, tuple)) and len(names) == n and all(isinstance(s, str) for s in names):
        return list(names)
    return [f"{prefix}{i}" for i in range(n)]


def _index_text(flat: int, shape) -> str:
    if not shape:
        return "()"
    idx = np.unravel_index(int(flat), shape)
    return "(" + ", ".join(str(int(i)) for i in idx) + ("," if len(idx) == 1 else "") + ")"


def _tol_lookup(table: dict, dtype) -> tuple:
    dtype = np.dtype(dtype)
    if dtype.kind in "biu":
        return (0.0, 0.0)
    if dtype in table:
        return table[dtype]
    if dtype.kind == "c":
        return table[_F64 if dtype.itemsize >= 16 else _F32]
    return table[_F32]


def forward_tolerance(dtype) -> tuple:
    """The default ``(rtol, atol)`` of :func:`test_op_forward` for outputs of ``dtype``.

    float16: (5e-3, 5e-3); float32: (1e-5, 1e-6); float64: (1e-10, 1e-12); integers and booleans
    must match exactly. ``atol`` is multiplied by ``max(1, max |reference|)``.
    """
    return _tol_lookup(_FORWARD_TOLERANCES, dtype)


def gradient_tolerance(dtype) -> tuple:
    """The default ``(rtol, atol)`` of :func:`test_op_gradient` for an analytic gradient of ``dtype``.

    float16: (1e-2, 1e-3); float32: (1e-3, 1e-5); float64: (1e-6, 1e-8). ``atol`` is multiplied
    by ``max(1, max |numerical gradient|)`` of that input.
    """
    return _tol_lookup(_GRADIENT_TOLERANCES, dtype)


def _less_precise(*dtypes) -> np.dtype:
    floats = [np.dtype(d) for d in dtypes if np.dtype(d).kind in "fc"]
    if not floats:
        return np.dtype(dtypes[0])
    return max(floats, key=lambda d: np.finfo(d).eps)


def _metric_name(m) -> str:
    return getattr(m, "name", "") or type(m).__name__


def _elementwise_verdict(out: np.ndarray, ref: np.ndarray, rtol: float, atol: float):
    """Element-wise ``|out - ref| <= atol * scale + rtol * |ref|`` with NaN/inf matched by position.

    Returns (bad mask, err, allowed) as flat float64 arrays.
    """
    exact = out.dtype.kind in "biuSUO" or ref.dtype.kind in "biuSUO"
    if exact:
        bad = (out.ravel() != ref.ravel())
        err = bad.astype(np.float64)
        return bad, err, np.zeros_like(err)
    ctype = np.complex128 if "c" in (out.dtype.kind, ref.dtype.kind) else np.float64
    o = out.astype(ctype).ravel()
    r = ref.astype(ctype).ravel()
    finite = np.isfinite(r)
    scale = max(1.0, float(np.abs(r[finite]).max()) if finite.any() else 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(o - r)
        same_special = (np.isnan(o) & np.isnan(r)) | (np.isinf(o) & np.isinf(r) & (o == r))
        err = np.where(same_special, 0.0, err)
        err = np.where(np.isnan(err), np.inf, err)
        allowed = atol * scale + rtol * np.where(np.isfinite(r), np.abs(r), 0.0)
    return err > allowed, err, allowed


# -------------------------------------------------------------------------------------- forward
def test_op_forward(op, inputs, reference_outputs, metrics=None, rtol: float | None = None,
                    atol: float | None = None, verbose: bool = True, check_dtype: bool = True) -> OpTestResult:
    """Run ``op.forward`` on ``inputs`` and compare its outputs with ``reference_outputs``.

    An element passes when ``|out - ref| <= atol * max(1, max|ref|) + rtol * |ref|`` (NaN and
    infinities must appear at the same positions; integer and boolean outputs must match
    exactly). A shape, dtype or output-count mismatch is a failed result whose reason says so.

    Args:
        op: the :class:`~deep500lite.Operator` under test.
        inputs: one numpy array per operator input.
        reference_outputs: the expected output (an array) or outputs (a sequence, in order).
        metrics: ``TestMetric`` instances reported per output (default ``MaxError`` and
            ``RelativeL2Error``); they inform, the tolerances decide.
        rtol: relative tolerance (default by dtype, see :func:`forward_tolerance`).
        atol: absolute tolerance, scaled by ``max(1, max|ref|)`` (default by dtype).
        verbose: print :meth:`OpTestResult.summary`.
        check_dtype: fail when an output's dtype differs from its reference's.

    Returns:
        An :class:`OpTestResult` with ``passed``, per-output metric values and the reason.

    Raises:
        ValueError: the number of inputs (or an input's dtype/shape) does not match the
            operator's input descriptors.

    >>> import numpy as np, deep500lite as d5
    >>> class Square(d5.CustomPythonOp):
    ...     def forward(self, x): return x * x
    ...     def backward(self, grads, fwd_inputs, fwd_outputs): return 2 * fwd_inputs[0] * grads[0]
    >>> op = Square([d5.tensordesc(np.float32, [4])], [d5.tensordesc(np.float32, [4])])
    >>> x = np.arange(4, dtype=np.float32)
    >>> d5.test_op_forward(op, [x], x ** 2, verbose=False).passed
    True
    """
    start = time.perf_counter()
    _check_operator(op, "test_op_forward")
    xs = _prepare_inputs(op, inputs, "test_op_forward")
    counter = _Counter(op)
    outs = counter.run(xs)
    refs = tuple(np.asarray(r) for r in _as_tuple(reference_outputs))
    names = _names(op, "output_names", "output", max(len(outs), len(refs)))
    metric_objs = list(metrics) if metrics is not None else [MaxError(), RelativeL2Error()]
    values, tolerances, details, problems = {}, {}, {}, []
    if len(outs) != len(refs):
        problems.append((np.inf, f"the operator returned {len(outs)} outputs; the reference has {len(refs)}"))
    for name, out, ref in zip(names, outs, refs):
        info = details.setdefault(name, {"passed": True})
        if out.shape != ref.shape:
            info["passed"] = False
            problems.append((np.inf, f"output '{name}' has shape {list(out.shape)}; the reference has "
                                     f"{list(ref.shape)}"))
            continue
        dtype_ok = out.dtype == ref.dtype
        if check_dtype and not dtype_ok:
            info["passed"] = False
            problems.append((np.inf, f"output '{name}' has dtype {out.dtype.name}; the reference has "
                                     f"{ref.dtype.name} (pass check_dtype=False to compare values only)"))
        tol_dtype = _less_precise(out.dtype, ref.dtype)
        rt_default, at_default = forward_tolerance(tol_dtype)
        rt = rt_default if rtol is None else float(rtol)
        at = at_default if atol is None else float(atol)
        tolerances[name] = (rt, at)
        if out.dtype.kind in "fciub" and ref.dtype.kind in "fciub":
            values[name] = {_metric_name(m): float(m.measure(xs, out, ref)) for m in metric_objs}
        bad, err, allowed = _elementwise_verdict(out, ref, rt, at)
        info["failing_elements"] = int(bad.sum())
        if bad.any():
            info["passed"] = False
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(bad, np.where(allowed > 0, err / allowed, np.inf), -1.0)
            worst = int(np.argmax(ratio))
            info["worst_element"] = _index_text(worst, out.shape)
            problems.append((float(ratio[worst]),
                             f"output '{name}' element {_index_text(worst, out.shape)}: {out.ravel()[worst]!r} vs "
                             f"reference {ref.ravel()[worst]!r} (|error| {err[worst]:.3g} > allowed "
                             f"{allowed[worst]:.3g}); {int(bad.sum())} of {bad.size} elements out of tolerance"))
    passed = not problems
    if passed:
        reason = f"all {len(outs)} output(s) match the reference within tolerance"
    else:
        problems.sort(key=lambda p: -p[0])
        reason = "; ".join(p[1] for p in problems)
    result = OpTestResult(passed=passed, metrics=values, reason=reason, kind="forward", method="compare",
                          forward_calls=counter.calls, tolerances=tolerances, details=details,
                          elapsed_s=time.perf_counter() - start)
    if verbose:
        print(result.summary())
    return result


test_op_forward.__test__ = False  # a library function, not a pytest test


# ------------------------------------------------------------------------------------- gradient
def _output_grads(outs, grad_inputs, rng) -> list:
    if grad_inputs is None:
        return [rng.standard_normal(o.shape).astype(o.dtype) if o.dtype.kind == "f" else np.zeros_like(o)
                for o in outs]
    gs = [np.asarray(g) for g in _as_tuple(grad_inputs)]
    if len(gs) != len(outs):
        raise ValueError(f"test_op_gradient: grad_inputs must hold one gradient per output ({len(outs)}). "
                         f"Received: {len(gs)}")
    result = []
    for k, (g, o) in enumerate(zip(gs, outs)):
        if g.shape != o.shape:
            raise ValueError(f"test_op_gradient: grad_inputs[{k}] must have the output's shape {list(o.shape)}. "
                             f"Received: {list(g.shape)}")
        result.append(g.astype(o.dtype) if o.dtype.kind == "f" else np.zeros_like(o))
    return result


def _allows_float64(op) -> bool:
    fn = getattr(op, "supports_dtype", None)
    if callable(fn):
        return bool(fn(_F64))
    if isinstance(op, CustomPythonOp):
        return True
    if isinstance(op, CustomOp):
        return False  # e.g. a compiled C++ operator: only its declared dtypes are safe
    return True


def _close(a: np.ndarray, b: np.ndarray, rtol: float) -> bool:
    if a.shape != b.shape:
        return False
    if a.dtype.kind not in "fc" or b.dtype.kind not in "fc":
        return bool(np.array_equal(a, b))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    finite = np.isfinite(b64)
    scale = max(1.0, float(np.abs(b64[finite]).max()) if finite.any() else 0.0)
    with np.errstate(invalid="ignore"):
        same = (np.isnan(a64) & np.isnan(b64)) | (a64 == b64) | (np.abs(a64 - b64) <= rtol * scale)
    return bool(same.all())


def _choose_compute_dtype(op, counter, xs, outs, notes):
    """float64 inputs and outputs when the operator allows it (checked by one run), else its own."""
    float_ins = [i for i, x in enumerate(xs) if x.dtype.kind == "f"]
    if all(xs[i].dtype == _F64 for i in float_ins):
        return xs, outs, "float64"
    native = ", ".join(sorted({xs[i].dtype.name for i in float_ins}))
    if not _allows_float64(op):
        notes.append(f"the operator does not support float64; the numerical gradient is computed in {native}")
        return xs, outs, native
    xs64 = [x.astype(_F64) if x.dtype.kind == "f" else x for x in xs]
    try:
        outs64 = counter.run(xs64)
    except Exception as exc:  # noqa: BLE001 - a probe: any failure means "use the declared dtype"
        notes.append(f"forward in float64 raised {type(exc).__name__}: {exc}; computed in {native}")
        return xs, outs, native
    eps = max(np.finfo(xs[i].dtype).eps for i in float_ins)
    for k, (o64, o) in enumerate(zip(outs64, outs)):
        if len(outs64) != len(outs) or (o.dtype.kind == "f" and o64.dtype != _F64) or not _close(o64, o, 1e3 * eps):
            notes.append(f"forward on float64 inputs did not return float64 outputs that agree with the "
                         f"{native} ones (output {k}: {o64.dtype.name}{list(o64.shape)}); computed in {native}")
            return xs, outs, native
    return xs64, outs64, "float64"


def _second_sample(x: np.ndarray, rng) -> np.ndarray:
    if x.dtype.kind != "f" or x.size == 0:
        return x
    flat = x.ravel()[rng.permutation(x.size)].astype(np.float64)
    u = rng.uniform(-1.0, 1.0, x.size)
    return (flat * (1.0 + 0.05 * u) + (flat == 0) * 0.05 * u).astype(x.dtype).reshape(x.shape)


def _broadcasts(op, counter, xs, outs, rng) -> tuple:
    """Whether ``op.forward`` maps a stacked batch of two samples to the two single results."""
    if isinstance(op, CustomOp) and not isinstance(op, CustomPythonOp) and all(
            d.is_static for d in op.input_descriptors):
        return False, "a fixed-shape operator (static input descriptors)"
    x2 = [_second_sample(x, rng) for x in xs]
    try:
        outs2 = counter.run(x2)
        stacked = counter.run([np.stack([a, b]) for a, b in zip(xs, x2)])
    except Exception as exc:  # noqa: BLE001 - a probe: an operator that rejects the batch does not broadcast
        return False, f"forward on a stacked batch raised {type(exc).__name__}"
    if len(stacked) != len(outs):
        return False, "forward on a stacked batch returned a different number of outputs"
    for k, (s, a, b) in enumerate(zip(stacked, outs, outs2)):
        if s.shape != (2,) + a.shape or s.dtype != a.dtype:
            return False, (f"forward on a stacked batch returned output {k} as {s.dtype.name}{list(s.shape)}, "
                           f"not {a.dtype.name}{[2] + list(a.shape)}")
        eps = np.finfo(a.dtype).eps if a.dtype.kind == "f" else 0.0
        if not (_close(s[0], a, 1e3 * eps) and _close(s[1], b, 1e3 * eps)):
            return False, f"forward on a stacked batch gave output {k} values that differ from single calls"
    return True, "forward broadcasts over a leading batch axis (checked on a stacked batch of 2)"


def _steps(x: np.ndarray, base: float, direction=None):
    """Perturbed inputs x + h*v and x - h*v in x's dtype, and the steps actually taken (float64)."""
    x64 = x.astype(np.float64).ravel()
    h = base * np.maximum(1.0, np.abs(x64))
    if direction is not None:
        h = h * direction
    xp = (x64 + h).astype(x.dtype)
    xm = (x64 - h).astype(x.dtype)
    return xp, xm, xp.astype(np.float64) - x64, x64 - xm.astype(np.float64)


def _reduce_outputs(outs, base_outs, g64, chunk: int | None = None):
    """Sums over outputs of <g, F+ - F->, <g, F+ - F0>, <g, F0 - F-> and a bound on their rounding error.

    ``outs`` is either (F+, F-) for one perturbation or a stacked batch [F0, ``chunk`` F+ rows,
    ``chunk`` F- rows]. The rounding bound is the root sum of squares of ``2 * 8 * eps * |f0 * g|``
    over the outputs that changed (outputs that do not depend on the perturbed element are
    bit-identical and cancel exactly), or over every output when none changed: rounding errors of
    different outputs are independent, so they add in quadrature.
    """
    up = down = rounding = 0.0
    for k, g in enumerate(g64):
        if g is None:
            continue
        if chunk is None:
            fp = outs[0][k].astype(np.float64, copy=False).ravel()
            fm = outs[1][k].astype(np.float64, copy=False).ravel()
            f0 = base_outs[k].astype(np.float64, copy=False).ravel()
            eps = np.finfo(outs[0][k].dtype).eps
        else:
            c = chunk
            flat = outs[k].reshape(outs[k].shape[0], -1).astype(np.float64, copy=False)
            f0, fp, fm = flat[0], flat[1:c + 1], flat[c + 1:2 * c + 1]
            eps = np.finfo(outs[k].dtype).eps
        with np.errstate(invalid="ignore", over="ignore"):
            d_plus = fp - f0
            d_minus = f0 - fm
            # einsum, not @: a matrix-vector product in a multi-threaded BLAS can be 10x slower on a
            # busy machine, and these products are memory-bound anyway.
            up = up + np.einsum("...j,j->...", d_plus, g)
            down = down + np.einsum("...j,j->...", d_minus, g)
            changed = d_plus != 0
            changed |= d_minus != 0
            weight = np.square((2.0 * _ROUNDING_FACTOR * eps) * f0 * g)
            # Where no output changed, the step may have been lost to rounding: count them all.
            rounding = rounding + np.where(changed.any(axis=-1), np.einsum("...j,j->...", changed, weight),
                                           weight.sum())
    rounding = np.sqrt(rounding)
    return up + down, up, down, rounding


@dataclasses.dataclass
class _Differences:
    """Finite differences of L for a set of elements of one input (all float64, one entry per element)."""

    central: np.ndarray  # L(x + h e_j) - L(x - h e_j)
    up: np.ndarray  # L(x + h e_j) - L(x)
    down: np.ndarray  # L(x) - L(x - h e_j)
    rounding: np.ndarray  # bound on the rounding error of those differences
    sp: np.ndarray  # the + step actually taken
    sm: np.ndarray  # the - step actually taken

    @property
    def step(self) -> np.ndarray:
        return self.sp + self.sm


def _element_differences(counter, xs, i, base, g64, base_outs, batched: bool, indices: np.ndarray,
                         budget: int, n_out_elems: int) -> tuple:
    """Central and one-sided differences of L for the elements ``indices`` of input ``i``.

    Batched: the unperturbed input and the +h and -h perturbation of each element of a chunk are
    stacked into one batch (one forward call per chunk). Otherwise: two forward calls per element.
    Returns the differences and the chunk size (elements per call; 0 for the loop).
    """
    x = xs[i]
    xp, xm, sp, sm = _steps(x, base)
    m = len(indices)
    central, up, down, rounding = (np.zeros(m) for _ in range(4))
    if batched:
        row_bytes = sum(a.nbytes for a in xs) + 40 * n_out_elems
        chunk = int(max(1, min(m, budget // max(1, 2 * row_bytes))))
        for start in range(0, m, chunk):
            idx = indices[start:start + chunk]
            c = len(idx)
            rows = 2 * c + 1
            block = np.repeat(x.reshape(1, -1), rows, axis=0)
            block[1 + np.arange(c), idx] = xp[idx]
            block[1 + c + np.arange(c), idx] = xm[idx]
            batch = [block.reshape((rows,) + x.shape) if k == i else np.repeat(a[None], rows, axis=0)
                     for k, a in enumerate(xs)]
            outs = counter.run(batch)
            for k, o in enumerate(outs):
                if o.shape[:1] != (rows,):
                    raise RuntimeError(f"The operator broadcast over a batch of 2 but returned output {k} with "
                                       f"shape {list(o.shape)} for a batch of {rows}; use method='directional'.")
            sl = slice(start, start + c)
            central[sl], up[sl], down[sl], rounding[sl] = _reduce_outputs(outs, None, g64, chunk=c)
    else:
        chunk = 0
        flat = x.ravel()

        def perturbed(j, value):
            work = flat.copy()  # a fresh array per call: an output may alias its input
            work[j] = value
            return [work.reshape(x.shape) if k == i else a for k, a in enumerate(xs)]

        for pos, j in enumerate(indices):
            plus = counter.run(perturbed(j, xp[j]))
            minus = counter.run(perturbed(j, xm[j]))
            central[pos], up[pos], down[pos], rounding[pos] = _reduce_outputs((plus, minus), base_outs, g64)
    return _Differences(central, up, down, rounding, sp[indices], sm[indices]), chunk


def _richardson(d1, d2, h1, h2):
    """The one-sided derivative extrapolated to step 0 from slopes ``d1`` (step h1) and ``d2`` (step h2)."""
    return (h1 * d2 - h2 * d1) / (h1 - h2)


def _judge_elements(a, first: _Differences, refine, rt, at) -> dict:
    """Per-element verdict of the analytic gradient ``a`` against the numerical one.

    An element passes the central check when ``|a - n| <= atol * scale + rtol * |n| + rounding``.
    Elements that fail it are measured again with half the step (``refine(indices)``): they pass
    when the central check at half the step passes (a kink between half and the full step), or when
    ``a`` lies between the left and right derivatives, each extrapolated to step 0 from the two
    steps (Richardson). On a smooth function both equal the derivative to O(h^2); within half a step
    of a kink (relu near 0) the side without the kink is exact, and at the kink the two are the
    left and right derivatives, so any subgradient passes.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        num = first.central / first.step
        noise = first.rounding / first.step
        finite = np.isfinite(num) & np.isfinite(a)
        scale = max(1.0, float(np.abs(num[np.isfinite(num)]).max()) if np.isfinite(num).any() else 0.0)
        allowed = at * scale + rt * np.abs(num) + noise
        err = np.abs(a - num)
        ok = finite & (err <= allowed)
        effective = np.where(finite, err, np.inf)
        bad = np.flatnonzero(finite & ~ok)
        half_step = one_sided = 0
        if bad.size:
            second = refine(bad)
            ab = a[bad]
            num2 = second.central / second.step
            noise2 = second.rounding / second.step
            allowed2 = at * scale + rt * np.abs(num2) + noise2
            err2 = np.abs(ab - num2)
            ok_half = err2 <= allowed2
            sp1, sm1 = first.sp[bad], first.sm[bad]
            r_up = _richardson(first.up[bad] / sp1, second.up / second.sp, sp1, second.sp)
            r_down = _richardson(first.down[bad] / sm1, second.down / second.sm, sm1, second.sm)
            # Rounding of the extrapolated slopes (2 * D(h/2) - D(h), each one-sided slope carrying
            # twice the central bound per unit step).
            noise_one = 2.0 * noise[bad] + 4.0 * noise2
            err_one = np.maximum(0.0, np.maximum(np.minimum(r_up, r_down) - ab, ab - np.maximum(r_up, r_down)))
            # Only where the two sides really differ (a kink); on a smooth function they agree to O(h^2).
            kink = np.abs(r_up - r_down) > 2.0 * noise_one + allowed2
            ok_one = kink & (err_one <= allowed2 + noise_one)
            ok[bad] = ok_half | ok_one
            half_step = int(ok_half.sum())
            one_sided = int((ok_one & ~ok_half).sum())
            effective[bad] = np.where(ok_half, err2, np.where(ok_one, err_one, np.minimum(err[bad], err2)))
            num = num.copy()
            num[bad] = np.where(ok_half, num2, num[bad])
        ratio = np.where(ok, 0.0, np.where(allowed > 0, effective / allowed, np.inf))
        ratio = np.where(np.isnan(ratio), np.inf, ratio)
        significant = np.abs(num) >= 1e-3 * scale
        rel = effective[significant] / np.abs(num[significant])
    return {
        "num": num, "ok": ok, "half_step": half_step, "one_sided": one_sided, "ratio": ratio,
        "err": effective, "allowed": allowed, "scale": scale,
        "max_abs_error": float(effective.max()) if effective.size else 0.0,
        "max_rel_error": float(rel.max()) if rel.size else 0.0,
    }


def _direction_check(counter, xs, i, base, g64, base_outs, a, v, tol_vec):
    """One random-direction measurement: the central difference of L along h*v against <a, step>.

    Returns the error beyond the rounding bound (``excess``) and its scale ``sigma`` (the
    standard deviation of <e, v> when every element's error e_j equals its tolerance).
    """
    x = xs[i]
    xp, xm, sp, sm = _steps(x, base, v)
    plus = counter.run([xp.reshape(x.shape) if j == i else b for j, b in enumerate(xs)])
    minus = counter.run([xm.reshape(x.shape) if j == i else b for j, b in enumerate(xs)])
    central, up, down, rounding = (float(t) for t in _reduce_outputs((plus, minus), base_outs, g64))
    s = sp + sm
    with np.errstate(invalid="ignore", over="ignore"):
        predicted = float(a @ s)
        sigma = float(np.linalg.norm(s * tol_vec))
        err = abs(predicted - central)
    if not np.isfinite(err):
        err = np.inf
    return {"predicted": predicted, "central": central, "up": up, "down": down, "rounding": rounding,
            "sigma": sigma, "err": err, "excess": max(0.0, err - rounding), "s": s}


def _ratio(excess: float, sigma: float) -> float:
    if excess == 0:
        return 0.0
    return excess / sigma if sigma > 0 else np.inf


def _directional(counter, xs, i, base, g64, base_outs, a, k, seed, rt, at):
    """``k`` seeded Rademacher directions for input ``i``.

    Each direction gives ``r_d = (|<a, s> - dL| - rounding) / sigma_d``; the input passes when the
    root mean square of ``r_d`` is at most ``_DIRECTIONAL_RMS``. A direction with a large ``r_d`` is
    measured again at half the step and treated as a failing element is in :func:`_judge_elements`
    (the smaller error counts; at a kink, the one-sided rule).
    """
    x = xs[i]
    rng = np.random.default_rng([seed, i])
    finite_a = np.isfinite(a)
    scale = max(1.0, float(np.abs(a[finite_a]).max()) if finite_a.any() else 0.0)
    tol_vec = at * scale + rt * np.abs(a)
    ratios, worst = [], None
    max_abs = max_rel = 0.0
    half_step = one_sided = 0
    for d in range(k):
        v = rng.choice(np.array([-1.0, 1.0]), size=x.size)
        c1 = _direction_check(counter, xs, i, base, g64, base_outs, a, v, tol_vec)
        r, err = _ratio(c1["excess"], c1["sigma"]), c1["err"]
        kink_hint = False
        if r > _DIRECTIONAL_RMS and np.isfinite(c1["central"]) and np.isfinite(c1["predicted"]):
            c2 = _direction_check(counter, xs, i, base / 2.0, g64, base_outs, a, v, tol_vec)
            r2 = _ratio(c2["excess"], c2["sigma"])
            # One-sided slopes per unit of t (x + t*h*v), extrapolated to t = 0 from t = 1 and t = 1/2.
            r_up, r_down = 4.0 * c2["up"] - c1["up"], 4.0 * c2["down"] - c1["down"]
            half = c1["predicted"] / 2.0
            err_one = max(0.0, min(r_up, r_down) - half, half - max(r_up, r_down))
            noise_one = c1["rounding"] + 4.0 * c2["rounding"]
            excess_one = max(0.0, err_one - noise_one)
            # Only where the two sides really differ (a kink); on a smooth function they agree to O(h^2).
            kink = abs(r_up - r_down) > 2.0 * noise_one + _DIRECTIONAL_RMS * c1["sigma"] / 2.0
            if r2 <= _DIRECTIONAL_RMS:
                half_step += 1
                r, err = r2, c2["err"]
            elif kink and _ratio(excess_one, c1["sigma"] / 2.0) <= _DIRECTIONAL_RMS:
                one_sided += 1
                r, err = _ratio(excess_one, c1["sigma"] / 2.0), 2.0 * err_one
            else:
                kink_hint = kink
                if r2 < r:
                    r, err = r2, c2["err"]
        ratios.append(r)
        norm_s = float(np.linalg.norm(c1["s"])) or 1.0
        norm_as = float(np.linalg.norm(a * c1["s"]))
        max_abs = max(max_abs, err / norm_s)
        if norm_as > 0:
            max_rel = max(max_rel, err / norm_as)
        if worst is None or r > worst[0]:
            worst = (r, f"direction {d + 1} of {k}: <analytic gradient, step> = {c1['predicted']:.6g} vs finite "
                        f"difference {c1['central']:.6g} (|error| {c1['err']:.3g}; one standard deviation of the "
                        f"allowed error {c1['sigma']:.3g}, rounding bound {c1['rounding']:.3g})"
                        + ("; the one-sided differences disagree: if the operator has non-differentiable points "
                           "(relu at 0), keep the inputs more than a step away from them, let the operator run "
                           "in float64 (smaller steps) or use method='elementwise'" if kink_hint else ""))
    with np.errstate(over="ignore", invalid="ignore"):
        rms = float(np.sqrt(np.mean(np.square(ratios))))
    return {"rms": rms, "passed": bool(rms <= _DIRECTIONAL_RMS), "worst": worst, "max_abs_error": max_abs,
            "max_rel_error": max_rel, "half_step": half_step, "one_sided": one_sided,
            "failing_directions": int(sum(r > _DIRECTIONAL_RMS for r in ratios))}


def test_op_gradient(op, inputs, grad_inputs=None, eps: float | None = None, metrics=None,
                     rtol: float | None = None, atol: float | None = None, seed: int = 0, verbose: bool = True,
                     *, method: str = "auto", directions: int = 16, exact_limit: int = 256,
                     memory_limit: int = 64 * 2 ** 20) -> OpTestResult:
    """Compare ``op.backward`` with a numerical gradient computed by vectorized central differences.

    The scalar checked is ``L(x) = sum_k <grad_out_k, f_k(x)>``: ``op.backward(grad_out, x, f(x))``
    must return ``dL/dx_i`` for every floating-point input. The numerical side:

    - runs in float64 when the operator allows it (``op.supports_dtype(np.float64)`` if defined;
      Python operators do by default) and a float64 forward agrees with the native one;
      otherwise in the operator's own dtype;
    - steps each element by ``h = eps * max(1, |x|)`` with ``eps`` defaulting to the cube root of
      the compute dtype's machine epsilon, and divides by the step actually taken;
    - **batched** (when one trial shows ``forward`` broadcasts over an extra leading axis): all
      ``+h``/``-h`` perturbations of a chunk of elements (plus the unperturbed input) form one
      stacked batch, so one forward call per chunk gives the full per-element gradient;
    - **directional** (fixed-shape operators): ``directions`` seeded Rademacher vectors ``v`` per
      input, each compared as ``L(x + h*v) - L(x - h*v)`` against ``<analytic gradient, 2*h*v>``
      (2 forward calls per direction whatever the input size); when the differentiable inputs
      have at most ``exact_limit`` elements, an exact per-element loop runs as well and decides.

    An element passes when ``|a - n| <= atol * max(1, max|n|) + rtol * |n| + rounding``, where
    ``rounding`` bounds the forward's rounding error. An element that fails is measured again at
    half the step; it passes if the check passes there (``details[...]["half_step"]``), or if the
    left and right derivatives (extrapolated from both steps) clearly differ and ``a`` lies
    between them: a kink such as relu at 0 (``details[...]["one_sided"]``). An input checked by
    directions passes when the root mean square over directions of
    ``(|<a, step> - dL| - rounding) / ||step * tolerance||`` is at most 1.6 (1 when every element
    sits at its tolerance).

    Args:
        op: the :class:`~deep500lite.Operator` under test.
        inputs: one numpy array per operator input; non-floating inputs are not differentiated.
        grad_inputs: the output gradients (one per output); default seeded standard normal.
        eps: relative step (``h = eps * max(1, |x|)``); default ``finfo(dtype).eps ** (1/3)``.
        metrics: ``TestMetric`` instances comparing the analytic with the numerical gradient
            (default ``RelativeL2Error``), reported where a full numerical gradient exists.
        rtol: relative tolerance (default by the input's dtype, see :func:`gradient_tolerance`).
        atol: absolute tolerance, scaled by ``max(1, max|numerical gradient|)`` (default by dtype).
        seed: seed of the output gradients, the batch trial and the random directions.
        verbose: print :meth:`OpTestResult.summary`.
        method: ``"auto"`` (batched when the trial allows it, else directional), ``"batched"``,
            ``"directional"`` (without the exact loop) or ``"elementwise"`` (the plain per-element
            loop, 2 forward calls per element).
        directions: random directions per input in the directional method.
        exact_limit: largest total number of differentiable elements for which the directional
            method adds the exact per-element loop.
        memory_limit: bytes one batched forward call may use for inputs and outputs (bounds the
            chunk size).

    Returns:
        An :class:`OpTestResult`: ``passed``; per input ``max_abs_error`` and ``max_rel_error``
        (relative to ``|n|`` over elements with ``|n| >= 1e-3 * max|n|``; for directions, the
        error along the unit step and relative to ``||a * step||``); ``method`` and
        ``forward_calls``; ``numerical`` and ``analytic`` gradients.

    Raises:
        ValueError: wrong number or kind of inputs or output gradients, no floating-point input,
            an unknown method, or ``method="batched"`` for an operator that does not broadcast.
    """
    start = time.perf_counter()
    _check_operator(op, "test_op_gradient")
    if method not in _GRADIENT_METHODS:
        raise ValueError(f"test_op_gradient: method must be one of {', '.join(map(repr, _GRADIENT_METHODS))}. "
                         f"Received: {method!r}")
    if not isinstance(directions, (int, np.integer)) or directions < 1:
        raise ValueError(f"test_op_gradient: directions must be an integer >= 1. Received: {directions!r}")
    if eps is not None and not (0 < float(eps) < 1):
        raise ValueError(f"test_op_gradient: eps must be a relative step in (0, 1). Received: {eps!r}")
    xs = _prepare_inputs(op, inputs, "test_op_gradient")
    in_names = _names(op, "input_names", "input", len(xs))
    diff = [i for i, x in enumerate(xs) if x.dtype.kind == "f" and x.size > 0]
    if not diff:
        raise ValueError("test_op_gradient: the operator has no non-empty floating-point input to differentiate. "
                         f"Received inputs: {[f'{x.dtype.name}{list(x.shape)}' for x in xs]}")
    rng = np.random.default_rng(seed)
    counter = _Counter(op)
    outs = counter.run(xs)
    gs = _output_grads(outs, grad_inputs, rng)
    notes: list = []
    details: dict = {"_notes": notes}

    def finish(passed, reason, metrics_values, tolerances, method_name, compute, numerical=None, analytic=None):
        result = OpTestResult(passed=passed, metrics=metrics_values, reason=reason, kind="gradient",
                              method=method_name, forward_calls=counter.calls, tolerances=tolerances,
                              compute_dtype=compute, details=details, numerical=numerical or {},
                              analytic=analytic or {}, elapsed_s=time.perf_counter() - start)
        if verbose:
            print(result.summary())
        return result

    grads = _as_tuple(op.backward(list(gs), list(xs), list(outs)))
    if len(grads) != len(xs):
        return finish(False, f"backward returned {len(grads)} gradient(s); the operator has {len(xs)} inputs",
                      {}, {}, "none", None)
    analytic = {}
    for i in diff:
        gi = None if grads[i] is None else np.asarray(grads[i])
        if gi is None or gi.shape != xs[i].shape:
            got = "None" if gi is None else f"{gi.dtype.name}{list(gi.shape)}"
            return finish(False, f"backward returned the gradient of input '{in_names[i]}' as {got}; expected "
                                 f"the input's shape {list(xs[i].shape)}", {}, {}, "none", None)
        analytic[in_names[i]] = gi

    xs_c, outs_c, compute = _choose_compute_dtype(op, counter, xs, outs, notes)
    g64 = [g.astype(np.float64).ravel() if o.dtype.kind == "f" else None for g, o in zip(gs, outs_c)]
    n_out_elems = sum(o.size for o in outs_c)

    chosen = method
    if method in ("auto", "batched"):
        ok, why = _broadcasts(op, counter, xs_c, outs_c, np.random.default_rng([seed, 1]))
        notes.append(why)
        if method == "batched" and not ok:
            raise ValueError(f"test_op_gradient: method='batched' needs an operator whose forward broadcasts over "
                             f"an extra leading axis; this one is {why}. Use method='auto' or 'directional'.")
        chosen = "batched" if ok else "directional"
    total = sum(xs[i].size for i in diff)
    run_exact = chosen == "directional" and method == "auto" and total <= exact_limit
    method_name = "directional+elementwise" if run_exact else chosen
    metric_objs = list(metrics) if metrics is not None else [RelativeL2Error()]

    values, tolerances, numerical, problems = {}, {}, {}, []
    for i in diff:
        name = in_names[i]
        x = xs_c[i]
        base = float(eps) if eps is not None else float(np.finfo(x.dtype).eps) ** (1.0 / 3.0)
        tol_dtype = _less_precise(xs[i].dtype, *[o.dtype for o in outs if o.dtype.kind == "f"])
        rt_d, at_d = gradient_tolerance(tol_dtype)
        rt = rt_d if rtol is None else float(rtol)
        at = at_d if atol is None else float(atol)
        tolerances[name] = (rt, at)
        a = analytic[name].astype(np.float64).ravel()
        info = details.setdefault(name, {"passed": True})
        vals = values.setdefault(name, {})
        if chosen == "directional":
            res = _directional(counter, xs_c, i, base, g64, outs_c, a, int(directions), seed, rt, at)
            info["directions"] = int(directions)
            info["rms_error_ratio"] = res["rms"]
            info["failing_directions"] = res["failing_directions"]
            info["half_step_directions"] = res["half_step"]
            info["one_sided_directions"] = res["one_sided"]
            vals["max_abs_error"] = res["max_abs_error"]
            vals["max_rel_error"] = res["max_rel_error"]
            if not res["passed"] and run_exact:
                notes.append(f"input '{name}': the random-direction check fails (root mean square of |error| / "
                             f"allowed {res['rms']:.3g}) but the exact per-element check decides: directions "
                             "that cross several kinks (relu at 0) are not additive")
            elif not res["passed"]:
                info["passed"] = False
                problems.append((res["rms"] / _DIRECTIONAL_RMS,
                                 f"input '{name}': over {directions} random directions, the root mean square of "
                                 f"|error| / allowed is {res['rms']:.3g} (> {_DIRECTIONAL_RMS}); worst "
                                 f"{res['worst'][1]}"))
        judged = None
        if chosen in ("batched", "elementwise") or run_exact:
            batched = chosen == "batched"

            def measure(indices, step, i=i, batched=batched):
                return _element_differences(counter, xs_c, i, step, g64, outs_c, batched, indices, memory_limit,
                                            n_out_elems)

            first, chunk = measure(np.arange(xs[i].size), base)
            if batched:
                info["chunk"] = chunk
            judged = _judge_elements(a, first, lambda idx, measure=measure, base=base: measure(idx, base / 2)[0],
                                     rt, at)
        if judged is not None:
            numerical[name] = judged["num"].reshape(xs[i].shape)
            info["half_step"] = judged["half_step"]
            info["one_sided"] = judged["one_sided"]
            bad = ~judged["ok"]
            info["failing_elements"] = int(bad.sum())
            prefix = "elementwise_" if chosen == "directional" else ""
            vals[prefix + "max_abs_error"] = judged["max_abs_error"]
            vals[prefix + "max_rel_error"] = judged["max_rel_error"]
            if np.isfinite(judged["num"]).all():
                for m in metric_objs:
                    vals[_metric_name(m)] = float(m.measure(xs, analytic[name].astype(np.float64), numerical[name]))
            if bad.any():
                info["passed"] = False
                w = int(np.argmax(judged["ratio"]))
                info["worst_element"] = _index_text(w, xs[i].shape)
                num_w = judged["num"][w]
                what = ("the numerical gradient is not finite (does the forward produce NaN or inf near "
                        "this input?)" if not np.isfinite(num_w) else
                        f"|error| {judged['err'][w]:.3g} > allowed {judged['allowed'][w]:.3g}, also at half the step")
                problems.append((float(judged["ratio"][w]),
                                 f"input '{name}' element {_index_text(w, xs[i].shape)}: analytic {a[w]:.6g} vs "
                                 f"numerical {num_w:.6g} ({what}); {int(bad.sum())} of {bad.size} elements out "
                                 f"of tolerance"))
    method_text = {"batched": "batched central differences", "directional": "random-direction central differences",
                   "directional+elementwise": "random-direction and per-element central differences",
                   "elementwise": "per-element central differences"}[method_name]
    if problems:
        problems.sort(key=lambda p: -p[0])
        reason = problems[0][1] + (f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else "")
    else:
        reason = (f"the analytic gradient of every floating-point input agrees with {method_text} in "
                  f"{compute}")
    return finish(not problems, reason, values, tolerances, method_name, compute, numerical, analytic)


test_op_gradient.__test__ = False  # a library function, not a pytest test


# ---------------------------------------------------------------------------------- determinism
def _bits(a: np.ndarray) -> np.ndarray:
    """The elements of ``a`` as unsigned integers (or opaque bytes) of the same shape."""
    flat = np.ascontiguousarray(a).reshape(-1)
    if a.dtype.itemsize in (1, 2, 4, 8) and a.dtype.kind != "O":
        return flat.view(f"u{a.dtype.itemsize}").reshape(a.shape)
    return flat.view(np.dtype((np.void, a.dtype.itemsize))).reshape(a.shape)


def _as_2d(a: np.ndarray) -> np.ndarray:
    """A 2-D view for a heatmap: leading axes become rows; very long or flat shapes fold to a square."""
    a = np.asarray(a, np.float64)
    if a.ndim == 0:
        return a.reshape(1, 1)
    grid = a.reshape(1, -1) if a.ndim == 1 else a.reshape(-1, a.shape[-1])
    rows, cols = grid.shape
    if grid.size > 16 and max(rows, cols) > 16 * min(rows, cols):
        width = int(math.ceil(math.sqrt(a.size)))
        padded = np.full(width * int(math.ceil(a.size / width)), np.nan)
        padded[:a.size] = a.ravel()
        grid = padded.reshape(-1, width)
    return grid


def _write_heatmap(path, variances: dict, reruns: int) -> str:
    from matplotlib.figure import Figure  # lazy: plotting is optional

    from deep500lite.utils import atomic_write_bytes

    names = list(variances)
    fig = Figure(figsize=(5.5 * len(names), 4.5))
    for k, name in enumerate(names):
        ax = fig.add_subplot(1, len(names), k + 1)
        grid = np.ma.masked_invalid(_as_2d(variances[name]))
        image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis")
        fig.colorbar(image, ax=ax, label="variance")
        ax.set_title(f"'{name}' {list(np.shape(variances[name]))}: variance over {reruns} runs", fontsize=9)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    atomic_write_bytes(path, buffer.getvalue())
    return os.fspath(path)


def test_op_determinism(op, inputs, reruns: int = 10, heatmap=None) -> DeterminismResult:
    """Run ``op.forward`` ``reruns`` times on the same inputs and check the outputs are bit-identical.

    Outputs are compared by their bytes, so NaN equals NaN with the same bits and ``-0.0`` differs
    from ``0.0``. The inputs are copied before the first run; an operator that modifies its inputs
    is reported in the reason.

    Args:
        op: the :class:`~deep500lite.Operator` under test.
        inputs: one numpy array per operator input.
        reruns: total number of runs (at least 2).
        heatmap: a path; when the outputs are not identical, a PNG heatmap of the per-element
            variance of each differing output is written there (matplotlib, Agg).

    Returns:
        A :class:`DeterminismResult` with the verdict, the number of differing elements, the
        largest deviation and the per-element variance.

    Raises:
        ValueError: ``reruns`` < 2, or inputs that do not match the operator.
    """
    _check_operator(op, "test_op_determinism")
    if not isinstance(reruns, (int, np.integer)) or reruns < 2:
        raise ValueError(f"test_op_determinism: reruns must be an integer >= 2. Received: {reruns!r}")
    xs = _prepare_inputs(op, inputs, "test_op_determinism")
    originals = [x.copy() for x in xs]
    counter = _Counter(op)
    first = counter.run(xs)
    first_bits = [_bits(o) for o in first]
    names = _names(op, "output_names", "output", len(first))
    differs = [np.zeros(o.shape, bool) for o in first]
    deviation = [np.zeros(o.shape) for o in first]
    numeric = [o.dtype.kind in "fciub" for o in first]
    total = [o.astype(np.float64) if ok else None for o, ok in zip(first, numeric)]
    total_sq = [t * t if t is not None else None for t in total]
    for _ in range(reruns - 1):
        outs = counter.run(xs)
        if len(outs) != len(first) or any(o.shape != f.shape or o.dtype != f.dtype for o, f in zip(outs, first)):
            raise RuntimeError("test_op_determinism: reruns of forward returned outputs of different number, shape "
                               "or dtype than the first run")
        for k, (o, f) in enumerate(zip(outs, first)):
            differs[k] |= _bits(o) != first_bits[k]
            if numeric[k]:
                o64, f64 = o.astype(np.float64), f.astype(np.float64)
                with np.errstate(invalid="ignore", over="ignore"):
                    dev = np.abs(o64 - f64)
                    same_special = (np.isnan(o64) & np.isnan(f64)) | (np.isinf(o64) & (o64 == f64))
                    dev = np.where(same_special, 0.0, np.where(np.isnan(dev), np.inf, dev))
                    deviation[k] = np.maximum(deviation[k], dev)
                    total[k] = total[k] + o64
                    total_sq[k] = total_sq[k] + o64 * o64
    variance, outputs = {}, {}
    for k, name in enumerate(names):
        if numeric[k]:
            with np.errstate(invalid="ignore", over="ignore"):
                mean = total[k] / reruns
                var = np.maximum(total_sq[k] / reruns - mean * mean, 0.0)
            var = np.where(differs[k], var, 0.0)  # identical bits have exactly zero variance
        else:
            var = np.where(differs[k], np.nan, 0.0)
        variance[name] = var
        outputs[name] = {"elements": int(first[k].size), "differing_elements": int(differs[k].sum()),
                         "max_deviation": float(deviation[k].max()) if deviation[k].size else 0.0}
    n_diff = sum(v["differing_elements"] for v in outputs.values())
    max_dev = max((v["max_deviation"] for v in outputs.values()), default=0.0)
    deterministic = n_diff == 0
    modified = [i for i, (x, o) in enumerate(zip(xs, originals)) if not np.array_equal(_bits(x), _bits(o))]
    if deterministic:
        reason = f"all {reruns} runs returned bit-identical outputs"
    else:
        worst = max(outputs, key=lambda n: outputs[n]["differing_elements"])
        reason = (f"{n_diff} output element(s) differ between runs (most in '{worst}': "
                  f"{outputs[worst]['differing_elements']} of {outputs[worst]['elements']}); "
                  f"max deviation {max_dev:.3g}")
    if modified:
        reason += f"; the operator modified its input(s) {modified} in place"
    written = None
    if heatmap is not None and not deterministic:
        written = _write_heatmap(heatmap, {n: variance[n] for n in names if outputs[n]["differing_elements"]},
                                 reruns)
    return DeterminismResult(deterministic=deterministic, reruns=reruns, differing_elements=n_diff,
                             max_deviation=max_dev, variance=variance, outputs=outputs, heatmap=written,
                             reason=reason)


test_op_determinism.__test__ = False  # a library function, not a pytest test


# ---------------------------------------------------------------------------- framework operators
_LOSS = "d5_loss"
_OPSET = 17


def _io_names(params, count: int, what: str, op_type: str) -> list:
    names = []
    for idx in range(count):
        if idx < len(params):
            p = params[idx]
            variadic = p.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
            names.append(f"{p.name}{idx}" if variadic else p.name)
        elif params and params[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
            names.append(f"{params[-1].name}{idx}")
        else:
            raise ValueError(f"framework_op: {op_type} takes at most {len(params)} {what}s. Received: {count}")
    return names


def _value_info(name: str, desc: TensorDescriptor):
    shape = None if desc.shape is None else [d if d is not None else f"{name}_d{j}" for j, d in enumerate(desc.shape)]
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(desc.dtype), shape)


class FrameworkOp(CustomOp):
    """One ONNX operator run by a framework's graph executor, as a level-0 operator.

    ``forward`` runs a one-node graph with ``executor.inference``. ``backward`` runs a graph that
    adds ``loss = sum_k ReduceSum(Mul(y_k, g_k))`` (the output gradients ``g_k`` are graph inputs)
    with ``executor.inference_and_backprop(feeds, y=loss)``: executors return gradients of
    parameters, so the floating-point inputs of that graph are initializers, set with
    ``feed_tensor`` before each call, and their gradients are read with ``fetch_tensors``. Other
    inputs (integers, booleans) are graph inputs and get zero gradients. Graphs are built on first
    use (the backward graph once per set of input shapes). Float64 variants of the graphs are built
    when :meth:`supports_dtype` is asked about float64, so the numerical gradient can be exact.

    Make one with :func:`framework_op`.

    Attributes:
        framework: the framework key.
        op_type: the ONNX operator type.
        attributes: the node's attributes.
        input_names: the graph's input names (the ONNX schema's names for the operator).
        output_names: the graph's output names.
    """

    def __init__(self, framework: str, op_type: str, input_descs: Sequence[TensorDescriptor],
                 output_descs: Sequence[TensorDescriptor] | None = None, device=None, attributes=None,
                 opset: int = _OPSET):
        from deep500lite.registry import canonical_framework

        self.framework = canonical_framework(framework)
        self.op_type = op_type
        self.device = device
        self.attributes = dict(attributes or {})
        self.opset = opset
        try:
            schema = onnx.defs.get_schema(op_type, opset)
        except onnx.defs.SchemaError as exc:
            raise ValueError(f"framework_op: {op_type!r} is not an ONNX operator in opset {opset}.") from exc
        input_descs = list(input_descs)
        if not all(isinstance(d, TensorDescriptor) for d in input_descs):
            raise TypeError(f"framework_op: input_descs must be d5.tensordesc(...) values. Received: {input_descs!r}")
        if len(input_descs) < schema.min_input:
            raise ValueError(f"framework_op: {op_type} needs at least {schema.min_input} inputs "
                             f"({', '.join(p.name for p in schema.inputs)}). Received: {len(input_descs)}")
        self.input_names = _io_names(schema.inputs, len(input_descs), "input", op_type)
        n_out = len(output_descs) if output_descs is not None else schema.min_output
        self.output_names = _io_names(schema.outputs, n_out, "output", op_type)
        self._node = helper.make_node(op_type, self.input_names, self.output_names, **self.attributes)
        if output_descs is None:
            output_descs = self._infer_outputs(input_descs)
        super().__init__(input_descs, list(output_descs))
        self._forward_executors: dict = {}
        self._backward_executors: dict = {}
        self._float64: bool | None = None

    # ------------------------------------------------------------------ graphs
    def _model(self, input_descs, output_descs, initial=None, with_loss=False) -> onnx.ModelProto:
        initial = initial or {}
        nodes = [self._node]
        inputs = [_value_info(n, d) for n, d in zip(self.input_names, input_descs) if n not in initial]
        inits = [numpy_helper.from_array(v, n) for n, v in initial.items()]
        if with_loss:
            sums = []
            for k, (name, d) in enumerate(zip(self.output_names, output_descs)):
                if d.dtype.kind != "f":
                    continue
                g = f"d5_grad_{name}"
                inputs.append(_value_info(g, d))
                nodes.append(helper.make_node("Mul", [name, g], [f"d5_prod_{k}"]))
                nodes.append(helper.make_node("ReduceSum", [f"d5_prod_{k}"], [f"d5_sum_{k}"], keepdims=0))
                sums.append(f"d5_sum_{k}")
            nodes.append(helper.make_node("Sum", sums, [_LOSS]))
            dtype = next(d.dtype for d in output_descs if d.dtype.kind == "f")
            outputs = [helper.make_tensor_value_info(_LOSS, helper.np_dtype_to_tensor_dtype(dtype), [])]
        else:
            outputs = [_value_info(n, d) for n, d in zip(self.output_names, output_descs)]
        graph = helper.make_graph(nodes, f"d5_{self.op_type}", inputs, outputs, initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 8  # what opset 17 was released with; every supported runtime reads it
        return model

    def _infer_outputs(self, input_descs) -> list:
        model = self._model(input_descs, [TensorDescriptor(np.float32, None)] * len(self.output_names))
        del model.graph.output[:]
        model.graph.output.extend(helper.ValueInfoProto(name=n) for n in self.output_names)
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        except Exception as exc:  # noqa: BLE001 - reported with the fix
            raise ValueError(f"framework_op: cannot infer the outputs of {self.op_type} from the inputs "
                             f"({', '.join(map(str, input_descs))}): {str(exc).splitlines()[0]}. "
                             "Pass output_descs=[d5.tensordesc(dtype, shape), ...].") from exc
        found = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
        descs = []
        for name in self.output_names:
            vi = found.get(name)
            tt = vi.type.tensor_type if vi is not None else None
            if tt is None or tt.elem_type == 0:
                raise ValueError(f"framework_op: ONNX shape inference gives no type for output '{name}' of "
                                 f"{self.op_type}. Pass output_descs=[d5.tensordesc(dtype, shape), ...].")
            shape = None if not tt.HasField("shape") else tuple(
                d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
            descs.append(TensorDescriptor(helper.tensor_dtype_to_np_dtype(tt.elem_type), shape))
        return descs

    def _descs_for(self, float_dtype):
        def swap(d):
            return TensorDescriptor(float_dtype, d.shape) if d.dtype.kind == "f" else d
        if float_dtype is None:
            return self.input_descriptors, self.output_descriptors
        return [swap(d) for d in self.input_descriptors], [swap(d) for d in self.output_descriptors]

    def _variant(self, inputs) -> np.dtype | None:
        """None for the declared dtypes, float64 for the float64 variant."""
        if all(d.matches(x) for d, x in zip(self.input_descriptors, inputs)):
            return None
        if all((x.dtype == _F64) if d.dtype.kind == "f" else d.matches(x)
               for d, x in zip(self.input_descriptors, inputs)):
            return _F64
        got = ", ".join(f"{x.dtype.name}{list(x.shape)}" for x in inputs)
        want = ", ".join(map(str, self.input_descriptors))
        raise ValueError(f"{self.op_type} on {self.framework} takes inputs {want} (or their float64 variant). "
                         f"Received: {got}")

    def _executor(self, variant, shapes=None):
        from deep500lite.registry import executor

        if shapes is None:
            if variant not in self._forward_executors:
                ins, outs = self._descs_for(variant)
                self._forward_executors[variant] = executor(self._model(ins, outs), self.framework, device=self.device)
            return self._forward_executors[variant]
        key = (variant, shapes)
        if key not in self._backward_executors:
            ins, outs = self._descs_for(variant)
            initial = {n: np.zeros(s, d.dtype) for n, d, s in zip(self.input_names, ins, shapes) if s is not None}
            model = self._model(ins, outs, initial=initial, with_loss=True)
            self._backward_executors[key] = executor(model, self.framework, device=self.device)
        return self._backward_executors[key]

    # --------------------------------------------------------------- operator
    def supports_dtype(self, dtype) -> bool:
        """Whether the operator runs with floating-point inputs and outputs of ``dtype``.

        The declared dtype always works; for float64 a float64 variant of the graph is built once
        (a framework that cannot build it answers False).
        """
        dtype = np.dtype(dtype)
        if all(d.dtype == dtype for d in self.input_descriptors if d.dtype.kind == "f"):
            return True
        if dtype != _F64:
            return False
        if self._float64 is None:
            try:
                self._executor(_F64)
                self._float64 = True
            except Exception:  # noqa: BLE001 - any build failure means "not supported"
                self._float64 = False
        return self._float64

    def forward(self, *inputs):
        """Run the one-node graph on the framework (numpy in, numpy out)."""
        inputs = [np.asarray(x) for x in inputs]
        if len(inputs) != len(self.input_names):
            raise ValueError(f"{self.op_type} takes {len(self.input_names)} inputs ({', '.join(self.input_names)}). "
                             f"Received: {len(inputs)}")
        ex = self._executor(self._variant(inputs))
        results = ex.inference(dict(zip(self.input_names, inputs)))
        outs = tuple(np.asarray(results[n]) for n in self.output_names)
        return outs if len(outs) > 1 else outs[0]

    def backward(self, grads, fwd_inputs, fwd_outputs):
        """Gradients of every input from the framework's own backward pass (zeros for non-float inputs)."""
        inputs = [np.asarray(x) for x in fwd_inputs]
        variant = self._variant(inputs)
        shapes = tuple(x.shape if x.dtype.kind == "f" else None for x in inputs)
        ex = self._executor(variant, shapes)
        feeds = {}
        for name, x in zip(self.input_names, inputs):
            if x.dtype.kind == "f":
                ex.network.feed_tensor(name, x)
            else:
                feeds[name] = x
        _, outs = self._descs_for(variant)
        for name, g, d in zip(self.output_names, _as_tuple(grads), outs):
            if d.dtype.kind == "f":
                feeds[f"d5_grad_{name}"] = np.asarray(g, d.dtype)
        ex.inference_and_backprop(feeds, y=_LOSS)
        have = dict(ex.network.gradient(_LOSS))
        result = []
        for name, x in zip(self.input_names, inputs):
            if x.dtype.kind == "f" and name in have:
                result.append(np.asarray(ex.network.fetch_tensors([have[name]])[0], x.dtype).reshape(x.shape))
            else:
                result.append(np.zeros_like(x))
        return tuple(result) if len(result) > 1 else result[0]

    def __repr__(self) -> str:
        inputs = ", ".join(map(str, self.input_descriptors))
        return f"FrameworkOp({self.framework!r}, {self.op_type!r}, inputs=[{inputs}], attributes={self.attributes})"


def framework_op(framework: str, op_type: str, input_descs: Sequence[TensorDescriptor],
                 output_descs: Sequence[TensorDescriptor] | None = None, device=None, **attributes) -> FrameworkOp:
    """One ONNX operator of a framework's executor as an :class:`~deep500lite.Operator`.

    The operator is a one-node ONNX graph (opset 17) run with ``d5.executor(network, framework)``,
    so it can be checked with :func:`test_op_forward`, :func:`test_op_gradient` and
    :func:`test_op_determinism`, or compared with the same operator on another framework.

    Args:
        framework: ``reference``, ``torch``, ``tensorflow`` or ``onnxruntime`` (or an alias).
        op_type: the ONNX operator type (``"Conv"``, ``"Softmax"``, ...).
        input_descs: one ``d5.tensordesc`` per input, in the ONNX schema's order (optional
            inputs may be left off the end).
        output_descs: one descriptor per output; default from ONNX shape inference (the
            operator's required outputs).
        device: the executor's device (``"cpu"``, ``"gpu:0"``).
        **attributes: the node's ONNX attributes (``axis=1``, ``pads=[1, 1, 1, 1]``, ...).

    Returns:
        A :class:`FrameworkOp`.

    Raises:
        ValueError: unknown operator, too few or too many inputs, or outputs that cannot be
            inferred.
        deep500lite.UserError: unknown framework (the message lists the known ones).

    >>> import numpy as np, deep500lite as d5
    >>> sm = d5.framework_op("reference", "Softmax", [d5.tensordesc(np.float32, [2, 5])], axis=-1)
    >>> x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    >>> d5.test_op_gradient(sm, [x], verbose=False).passed
    True
    """
    return FrameworkOp(framework, op_type, input_descs, output_descs, device=device, attributes=attributes)
