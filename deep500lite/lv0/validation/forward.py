"""Level 0: :func:`test_op_forward`, an operator's outputs against reference outputs."""

from __future__ import annotations

import time

import numpy as np

from deep500lite.lv0.validation.common import (ForwardCounter, as_tuple, check_operator, forward_tolerance,
                                              index_text, less_precise, metric_name, prepare_inputs, tensor_names)
from deep500lite.lv0.validation.native import run_with_metrics
from deep500lite.lv0.validation.results import OpTestResult
from deep500lite.metrics.accuracy import MaxError, RelativeL2Error

__all__ = ["test_op_forward"]


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


def _scalar(value):
    """A metric value for the summary: a float, or the median of a list (a timing metric's samples)."""
    if isinstance(value, (list, tuple)) and value:
        return float(np.median(np.asarray(value, dtype=np.float64)))
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


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
        UserError: the number of inputs (or an input's dtype/shape) does not match the
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
    check_operator(op, "test_op_forward")
    xs = prepare_inputs(op, inputs, "test_op_forward")
    counter = ForwardCounter(op)
    metric_objs = list(metrics) if metrics is not None else [MaxError(), RelativeL2Error()]
    if metrics is None:
        outs = counter.run(xs)
    else:
        # Deep500's protocol: timing metrics (WallclockTime(reruns, ...)) time their reruns.
        outs = run_with_metrics(lambda: counter.run(xs), metric_objs, xs)
    refs = tuple(np.asarray(r) for r in as_tuple(reference_outputs))
    names = tensor_names(op, "output_names", "output", max(len(outs), len(refs)))
    values, tolerances, details, problems = {}, {}, {}, []
    ordered = []
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
        tol_dtype = less_precise(out.dtype, ref.dtype)
        rt_default, at_default = forward_tolerance(tol_dtype)
        rt = rt_default if rtol is None else float(rtol)
        at = at_default if atol is None else float(atol)
        tolerances[name] = (rt, at)
        if out.dtype.kind in "fciub" and ref.dtype.kind in "fciub":
            measured = [m.measure(xs, out, ref) for m in metric_objs]
            ordered.extend(measured)
            values[name] = {metric_name(m): _scalar(v) for m, v in zip(metric_objs, measured)}
        bad, err, allowed = _elementwise_verdict(out, ref, rt, at)
        info["failing_elements"] = int(bad.sum())
        if bad.any():
            info["passed"] = False
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(bad, np.where(allowed > 0, err / allowed, np.inf), -1.0)
            worst = int(np.argmax(ratio))
            info["worst_element"] = index_text(worst, out.shape)
            problems.append((float(ratio[worst]),
                             f"output '{name}' element {index_text(worst, out.shape)}: {out.ravel()[worst]!r} vs "
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
                          elapsed_s=time.perf_counter() - start, values=ordered)
    if verbose:
        print(result.summary())
    return result


test_op_forward.__test__ = False  # a library function, not a pytest test
