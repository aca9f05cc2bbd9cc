"""Level 0: :func:`test_op_gradient`, an operator's backward pass against vectorized finite differences.

The numerical gradient is computed with central differences: along 16 random normal directions
(projection) when an input has more than 1,024 elements, else a stacked batch per chunk of
elements when the operator broadcasts over a leading axis, random-direction checks otherwise
(with a per-element check for small inputs). :func:`projection_miss_probability` gives the
projection check's chance of missing a wrong gradient. See ``docs/validation.md`` for the method.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from deep500lite.errors import UserError, format_choices
from deep500lite.lv0.operator import CustomOp, CustomPythonOp
from deep500lite.lv0.validation.common import (F64, ForwardCounter, as_tuple, check_operator, gradient_tolerance,
                                              index_text, less_precise, metric_name, prepare_inputs, tensor_names)
from deep500lite.lv0.validation.results import OpTestResult
from deep500lite.metrics.accuracy import RelativeL2Error

__all__ = ["test_op_gradient", "projection_miss_probability", "PROJECTION_DIRECTIONS", "PROJECTION_LIMIT"]

_GRADIENT_METHODS = ("auto", "full", "projection", "batched", "directional", "elementwise")
# Projection checking (the default above PROJECTION_LIMIT elements in one input): k standard-normal
# directions. With k = 16 an error ||e|| >= 1.25 ||tol|| is missed with probability < 2e-4.
PROJECTION_DIRECTIONS = 16
PROJECTION_LIMIT = 1024
# Bound on one output's rounding error, in units of its dtype's eps times |value|: allows for
# operators that accumulate in their own precision (sums, convolutions).
_ROUNDING_FACTOR = 8.0
# Directional checks: for a Rademacher v, <e, v> has standard deviation ||e||, so when every
# element's error e_j sits at its tolerance, |<e, s>| / ||s * tol|| has a root mean square of 1
# over directions. An input fails when that root mean square exceeds this bound.
_DIRECTIONAL_RMS = 1.6


def _output_grads(outs, grad_inputs, rng) -> list:
    if grad_inputs is None:
        return [rng.standard_normal(o.shape).astype(o.dtype) if o.dtype.kind == "f" else np.zeros_like(o)
                for o in outs]
    gs = [np.asarray(g) for g in as_tuple(grad_inputs)]
    if len(gs) != len(outs):
        raise UserError(f"test_op_gradient: grad_inputs must hold one gradient per output ({len(outs)}). "
                        f"Received: {len(gs)}")
    result = []
    for k, (g, o) in enumerate(zip(gs, outs)):
        if g.shape != o.shape:
            raise UserError(f"test_op_gradient: grad_inputs[{k}] must have the output's shape {list(o.shape)}. "
                            f"Received: {list(g.shape)}")
        result.append(g.astype(o.dtype) if o.dtype.kind == "f" else np.zeros_like(o))
    return result


def _allows_float64(op) -> bool:
    fn = getattr(op, "supports_dtype", None)
    if callable(fn):
        return bool(fn(F64))
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
    if all(xs[i].dtype == F64 for i in float_ins):
        return xs, outs, "float64"
    native = ", ".join(sorted({xs[i].dtype.name for i in float_ins}))
    if not _allows_float64(op):
        notes.append(f"the operator does not support float64; the numerical gradient is computed in {native}")
        return xs, outs, native
    xs64 = [x.astype(F64) if x.dtype.kind == "f" else x for x in xs]
    try:
        outs64 = counter.run(xs64)
    except Exception as exc:  # noqa: BLE001 - a probe: any failure means "use the declared dtype"
        notes.append(f"forward in float64 raised {type(exc).__name__}: {exc}; computed in {native}")
        return xs, outs, native
    eps = max(np.finfo(xs[i].dtype).eps for i in float_ins)
    for k, (o64, o) in enumerate(zip(outs64, outs)):
        if len(outs64) != len(outs) or (o.dtype.kind == "f" and o64.dtype != F64) or not _close(o64, o, 1e3 * eps):
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
                    raise UserError(f"The operator broadcast over a batch of 2 but not over a batch of {rows}: its "
                                    f"output {k} must have {rows} rows; use method='directional'. "
                                    f"Received: output {k} with shape {list(o.shape)}")
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


def _record_directions(info: dict, values: dict, res: dict, directions) -> None:
    """What the projection and the directional checks both report for one input: into its details
    (``info``) and its error values (``values``)."""
    info["directions"] = int(directions)
    info["failing_directions"] = res["failing_directions"]
    info["half_step_directions"] = res["half_step"]
    info["one_sided_directions"] = res["one_sided"]
    values["max_abs_error"] = res["max_abs_error"]
    values["max_rel_error"] = res["max_rel_error"]


def _projection(counter, xs, i, base, g64, base_outs, a, k, seed, rt, at):
    """``k`` seeded standard-normal directions for input ``i``; the input fails if any one fails.

    Along a direction ``v`` the step is ``s = h * v`` (``h_j = base * max(1, |x_j|)``, taken both
    ways), and the check is ``|<a, s> - (L(x + s) - L(x - s))| - rounding <= T`` with
    ``T = ||2h * tol||_2`` (``tol_j = atol * scale + rtol * |a_j|``), which does not depend on
    ``v``. An error ``e`` in the analytic gradient adds ``<e, 2h * v>``, a normal variable with
    standard deviation ``||2h * e||``: it is missed in one direction with probability
    ``erf(T / (||2h * e|| * sqrt(2)))``, in all ``k`` with that to the power ``k``
    (see :func:`projection_miss_probability`). A failing direction is measured again at half the
    step and accepted as :func:`_directional` does (a kink crossed by the step), then at a
    quarter, an eighth and a sixteenth of the step (several kinks crossed).
    """
    x = xs[i]
    rng = np.random.default_rng([seed, i, 17])
    finite_a = np.isfinite(a)
    scale = max(1.0, float(np.abs(a[finite_a]).max()) if finite_a.any() else 0.0)
    tol_vec = at * scale + rt * np.abs(a)
    h = base * np.maximum(1.0, np.abs(x.astype(np.float64).ravel()))
    with np.errstate(over="ignore", invalid="ignore"):
        limit = float(np.linalg.norm(2.0 * h * tol_vec))
    ratios, worst = [], None
    max_abs = max_rel = 0.0
    half_step = one_sided = 0
    for d in range(k):
        v = rng.standard_normal(x.size)
        c1 = _direction_check(counter, xs, i, base, g64, base_outs, a, v, tol_vec)
        r, err = _ratio(c1["excess"], limit), c1["err"]
        if r > 1.0 and np.isfinite(c1["central"]) and np.isfinite(c1["predicted"]):
            c2 = _direction_check(counter, xs, i, base / 2.0, g64, base_outs, a, v, tol_vec)
            r2 = _ratio(c2["excess"], limit / 2.0)
            r_up, r_down = 4.0 * c2["up"] - c1["up"], 4.0 * c2["down"] - c1["down"]
            half = c1["predicted"] / 2.0
            err_one = max(0.0, min(r_up, r_down) - half, half - max(r_up, r_down))
            noise_one = c1["rounding"] + 4.0 * c2["rounding"]
            r_one = _ratio(max(0.0, err_one - noise_one), limit / 2.0)
            kink = abs(r_up - r_down) > 2.0 * noise_one + limit / 2.0
            if r2 <= 1.0:
                half_step += 1
                r, err = r2, c2["err"]
            elif kink and r_one <= 1.0:
                one_sided += 1
                r, err = r_one, 2.0 * err_one
            else:
                if r2 < r:
                    r, err = r2, c2["err"]
                # Kinks crossed by the step vanish at smaller steps; a wrong gradient's error term
                # shrinks with the step exactly as the tolerance does, so this costs no power.
                for shrink in (4.0, 8.0, 16.0):
                    c3 = _direction_check(counter, xs, i, base / shrink, g64, base_outs, a, v, tol_vec)
                    r3 = _ratio(c3["excess"], limit / shrink)
                    if r3 < r:
                        r, err = r3, c3["err"] * shrink
                    if r3 <= 1.0:
                        half_step += 1
                        break
        ratios.append(r)
        norm_s = float(np.linalg.norm(c1["s"])) or 1.0
        norm_as = float(np.linalg.norm(a * c1["s"]))
        max_abs = max(max_abs, err / norm_s)
        if norm_as > 0:
            max_rel = max(max_rel, err / norm_as)
        if worst is None or r > worst[0]:
            worst = (r, f"direction {d + 1} of {k}: <analytic gradient, step> = {c1['predicted']:.6g} vs finite "
                        f"difference {c1['central']:.6g} (|error| {c1['err']:.3g} > allowed {limit:.3g} + "
                        f"rounding bound {c1['rounding']:.3g})")
    return {"max_ratio": float(max(ratios)), "passed": bool(max(ratios) <= 1.0), "worst": worst,
            "max_abs_error": max_abs, "max_rel_error": max_rel, "half_step": half_step, "one_sided": one_sided,
            "failing_directions": int(sum(r > 1.0 for r in ratios)), "allowed": limit}


def projection_miss_probability(error_ratio: float, directions: int = PROJECTION_DIRECTIONS) -> float:
    """Probability that the projection check misses a wrong gradient.

    Args:
        error_ratio: ``||2h * e|| / ||2h * tol||``: the size of the gradient error ``e`` against
            the tolerance vector (with equal steps ``h``, ``||e|| / ||tol||``). One wrong element
            ``i`` of ``n`` gives ``|e_i| / ||tol||``.
        directions: number of random directions ``k``.

    Returns:
        ``erf(1 / (error_ratio * sqrt(2))) ** k``: the chance that every direction's error term,
        a normal variable, stays within the tolerance (rounding and truncation of the finite
        differences neglected; they only add to the error).
    """
    if error_ratio <= 0:
        return 1.0
    return float(math.erf(1.0 / (error_ratio * math.sqrt(2.0))) ** int(directions))


def test_op_gradient(op, inputs, grad_inputs=None, eps: float | None = None, metrics=None,
                     rtol: float | None = None, atol: float | None = None, seed: int = 0, verbose: bool = True,
                     *, method: str = "auto", directions: int = 16, exact_limit: int = 256,
                     memory_limit: int = 64 * 2 ** 20, projections: int = PROJECTION_DIRECTIONS,
                     projection_limit: int = PROJECTION_LIMIT) -> OpTestResult:
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
      have at most ``exact_limit`` elements, an exact per-element loop runs as well and decides;
    - **projection** (the default when an input has more than ``projection_limit`` = 1,024
      elements): ``projections`` = 16 seeded standard-normal directions ``v`` per input; the
      directional derivative ``<a, 2h*v>`` of the analytic gradient ``a`` is compared with the
      central difference of ``L`` along ``h*v`` (2 forward calls per direction), and the input
      fails when any direction's error, beyond the rounding bound, exceeds
      ``||2h * tol||_2`` (``tol_j = atol * scale + rtol * |a_j|``). Detection power: an error
      ``e`` in the analytic gradient is missed with probability
      ``erf(||tol|| / (||e|| sqrt(2))) ** 16`` (equal steps; :func:`projection_miss_probability`),
      below 2e-4 once ``||e|| >= 1.25 ||tol||``: one wrong element of 10^5 with float32 default
      tolerances and O(1) gradients is caught when its error exceeds about 0.4 times the root
      mean square gradient element.

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
        method: ``"auto"`` (projection when an input has more than ``projection_limit``
            elements; otherwise batched when the trial allows it, else directional),
            ``"full"`` (the full per-element gradient: batched when the trial allows it, else
            elementwise), ``"projection"``, ``"batched"``, ``"directional"`` (Rademacher
            directions judged by their root mean square, without the exact loop) or
            ``"elementwise"`` (the plain per-element loop, 2 forward calls per element).
        directions: random directions per input in the directional method.
        exact_limit: largest total number of differentiable elements for which the directional
            method adds the exact per-element loop.
        memory_limit: bytes one batched forward call may use for inputs and outputs (bounds the
            chunk size).
        projections: random directions per input in the projection method.
        projection_limit: in ``method="auto"``, inputs above this many elements select the
            projection method.

    Returns:
        An :class:`OpTestResult`: ``passed``; per input ``max_abs_error`` and ``max_rel_error``
        (relative to ``|n|`` over elements with ``|n| >= 1e-3 * max|n|``; for directions, the
        error along the unit step and relative to ``||a * step||``); ``method`` and
        ``forward_calls``; ``numerical`` and ``analytic`` gradients.

    Raises:
        UserError: wrong number or kind of inputs or output gradients, no floating-point input,
            an unknown method, ``method="batched"`` for an operator that does not broadcast, or an
            operator that broadcasts over some batch sizes only.
    """
    start = time.perf_counter()
    check_operator(op, "test_op_gradient")
    if method not in _GRADIENT_METHODS:
        raise UserError(f"test_op_gradient: method must be one of {format_choices(_GRADIENT_METHODS)}. "
                        f"Received: {method!r}")
    for arg, value in (("directions", directions), ("projections", projections),
                       ("projection_limit", projection_limit)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise UserError(f"test_op_gradient: {arg} must be an integer >= 1. Received: {value!r}")
    if eps is not None and not (0 < float(eps) < 1):
        raise UserError(f"test_op_gradient: eps must be a relative step in (0, 1). Received: {eps!r}")
    xs = prepare_inputs(op, inputs, "test_op_gradient")
    in_names = tensor_names(op, "input_names", "input", len(xs))
    diff = [i for i, x in enumerate(xs) if x.dtype.kind == "f" and x.size > 0]
    if not diff:
        raise UserError("test_op_gradient: the operator has no non-empty floating-point input to differentiate; "
                        "give at least one non-empty float16/32/64 input. "
                        f"Received: inputs {[f'{x.dtype.name}{list(x.shape)}' for x in xs]}")
    rng = np.random.default_rng(seed)
    counter = ForwardCounter(op)
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

    grads = as_tuple(op.backward(list(gs), list(xs), list(outs)))
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
    if method == "auto" and max(xs[i].size for i in diff) > projection_limit:
        chosen = "projection"
        notes.append(f"an input has more than {projection_limit} elements: checked along {projections} random "
                     "directions (method='full' gives the per-element gradient)")
    elif method in ("auto", "batched", "full"):
        ok, why = _broadcasts(op, counter, xs_c, outs_c, np.random.default_rng([seed, 1]))
        notes.append(why)
        if method == "batched" and not ok:
            raise UserError(f"test_op_gradient: method='batched' needs an operator whose forward broadcasts over "
                            f"an extra leading axis; this one is {why}. Use method='auto' or 'directional'. "
                            "Received: method='batched'")
        chosen = "batched" if ok else ("elementwise" if method == "full" else "directional")
    total = sum(xs[i].size for i in diff)
    run_exact = chosen == "directional" and method == "auto" and total <= exact_limit
    method_name = "directional+elementwise" if run_exact else chosen
    metric_objs = list(metrics) if metrics is not None else [RelativeL2Error()]

    values, tolerances, numerical, problems = {}, {}, {}, []
    for i in diff:
        name = in_names[i]
        x = xs_c[i]
        base = float(eps) if eps is not None else float(np.finfo(x.dtype).eps) ** (1.0 / 3.0)
        tol_dtype = less_precise(xs[i].dtype, *[o.dtype for o in outs if o.dtype.kind == "f"])
        rt_d, at_d = gradient_tolerance(tol_dtype)
        rt = rt_d if rtol is None else float(rtol)
        at = at_d if atol is None else float(atol)
        tolerances[name] = (rt, at)
        a = analytic[name].astype(np.float64).ravel()
        info = details.setdefault(name, {"passed": True})
        vals = values.setdefault(name, {})
        if chosen == "projection":
            res = _projection(counter, xs_c, i, base, g64, outs_c, a, int(projections), seed, rt, at)
            _record_directions(info, vals, res, projections)
            info["max_error_ratio"] = res["max_ratio"]
            info["allowed"] = res["allowed"]
            if not res["passed"]:
                info["passed"] = False
                problems.append((res["max_ratio"], f"input '{name}': {res['failing_directions']} of {projections} "
                                 f"random directions out of tolerance; worst {res['worst'][1]}"))
        elif chosen == "directional":
            res = _directional(counter, xs_c, i, base, g64, outs_c, a, int(directions), seed, rt, at)
            _record_directions(info, vals, res, directions)
            info["rms_error_ratio"] = res["rms"]
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
                    vals[metric_name(m)] = float(m.measure(xs, analytic[name].astype(np.float64), numerical[name]))
            if bad.any():
                info["passed"] = False
                w = int(np.argmax(judged["ratio"]))
                info["worst_element"] = index_text(w, xs[i].shape)
                num_w = judged["num"][w]
                what = ("the numerical gradient is not finite (does the forward produce NaN or inf near "
                        "this input?)" if not np.isfinite(num_w) else
                        f"|error| {judged['err'][w]:.3g} > allowed {judged['allowed'][w]:.3g}, also at half the step")
                problems.append((float(judged["ratio"][w]),
                                 f"input '{name}' element {index_text(w, xs[i].shape)}: analytic {a[w]:.6g} vs "
                                 f"numerical {num_w:.6g} ({what}); {int(bad.sum())} of {bad.size} elements out "
                                 f"of tolerance"))
    method_text = {"batched": "batched central differences",
                   "projection": f"central differences along {projections} random normal directions", "directional": "random-direction central differences",
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
