"""Projection (random-direction) gradient checking: the default above 1,024 elements, and its detection power."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

import deep500lite as d5
from deep500lite.lv0 import validation as v
from deep500lite.lv0.validation.common import gradient_tolerance
from deep500lite.lv0.validation.gradient import PROJECTION_DIRECTIONS, projection_miss_probability


class _Tanh(d5.CustomPythonOp):
    """Elementwise tanh whose backward adds ``error`` to element ``at`` (a single wrong element)."""

    def __init__(self, n, dtype, at=None, error=0.0):
        super().__init__([d5.tensordesc(dtype, [n])], [d5.tensordesc(dtype, [n])])
        self.at, self.error = at, error

    def forward(self, x):
        return np.tanh(x)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g = (grads[0] * (1 - fwd_outputs[0] ** 2)).astype(np.float64)
        if self.at is not None:
            g[self.at] += self.error
        return g.astype(fwd_inputs[0].dtype)


def _inputs(n, dtype, seed):
    # |x| <= 1: every element gets the same step, so the miss probability is exactly the formula's.
    return np.random.default_rng(seed).uniform(-1, 1, n).astype(dtype)


def _tolerance_norm(a, dtype):
    """||tol||_2 with tol_j = atol * max(1, max|a|) + rtol * |a_j|, computed here from the documented rule."""
    rt, at = gradient_tolerance(dtype)
    a = np.asarray(a, np.float64)
    return float(np.linalg.norm(at * max(1.0, np.abs(a).max()) + rt * np.abs(a)))


def test_miss_probability_formula():
    assert projection_miss_probability(1.25) < 2e-4
    assert projection_miss_probability(1.25, 16) == pytest.approx(math.erf(0.8 / math.sqrt(2)) ** 16)
    assert projection_miss_probability(0.0) == 1.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_correct_gradient_of_1e5_elements_passes_by_projection(seed):
    n = 100_000
    res = v.test_op_gradient(_Tanh(n, np.float32), [_inputs(n, np.float32, seed)], seed=seed, verbose=False)
    assert res.passed, res.reason
    assert res.method == "projection" and res.compute_dtype == "float64"
    # base run, float64 probe, 2 calls per direction (no half-step retries on a smooth function)
    assert res.forward_calls == 2 + 2 * PROJECTION_DIRECTIONS
    assert res.details["input0"]["failing_directions"] == 0


@pytest.mark.parametrize("seed, at", [(0, 123), (1, 99_999), (2, 50_000), (3, 0)])
def test_one_wrong_element_of_1e5_is_caught(seed, at):
    n = 100_000
    x = _inputs(n, np.float32, seed)
    exact = (1 - np.tanh(x.astype(np.float64)) ** 2)
    # grad_inputs of ones: the analytic gradient is tanh'(x); the stated power holds from 1.25 ||tol||.
    error = 1.25 * _tolerance_norm(exact, np.float32)
    res = v.test_op_gradient(_Tanh(n, np.float32, at=at, error=error), [x], grad_inputs=np.ones(n, np.float32),
                             seed=seed, verbose=False)
    assert not res.passed
    assert res.method == "projection" and "random directions out of tolerance" in res.reason
    # the error is about 0.4 of the root mean square gradient element
    assert error < 0.5 * np.sqrt(np.mean(exact ** 2))


def test_miss_rate_matches_the_stated_probability():
    """At ||e|| = ||tol|| with 4 directions, misses follow erf(1/sqrt(2))**4 = 0.217 (binomial test)."""
    n, k, trials = 2000, 4, 120
    misses = 0
    for seed in range(trials):
        x = _inputs(n, np.float64, seed)
        g = np.ones(n)
        a = 1 - np.tanh(x) ** 2
        at = seed % n
        # tol is computed from the analytic gradient the check sees (the one holding the error).
        wrong = a.copy()
        error = 1.0
        for _ in range(3):  # fixed point: error = ||tol(a + error * e_at)||
            wrong[at] = a[at] + error
            error = _tolerance_norm(wrong, np.float64)
        res = v.test_op_gradient(_Tanh(n, np.float64, at=at, error=error), [x], grad_inputs=g, seed=seed,
                                 verbose=False, method="projection", projections=k)
        misses += res.passed
    p = projection_miss_probability(1.0, k)
    assert 0.2 < p < 0.23
    assert scipy.stats.binomtest(misses, trials, p).pvalue > 1e-3, misses


def test_auto_threshold_and_full_mode():
    x = _inputs(1500, np.float64, 0)
    auto = v.test_op_gradient(_Tanh(1500, np.float64), [x], verbose=False)
    assert auto.passed and auto.method == "projection" and auto.numerical == {}
    high = v.test_op_gradient(_Tanh(1500, np.float64), [x], verbose=False, projection_limit=2000)
    full = v.test_op_gradient(_Tanh(1500, np.float64), [x], grad_inputs=np.ones(1500), verbose=False,
                              method="full")
    assert high.method == "batched" and full.method == "batched" and full.passed
    np.testing.assert_allclose(full.numerical["input0"], 1 - np.tanh(x) ** 2, rtol=1e-7, atol=1e-9)
    wrong = v.test_op_gradient(_Tanh(1500, np.float64, at=7, error=0.01), [x], verbose=False, method="full")
    assert not wrong.passed and wrong.details["input0"]["worst_element"] == "(7,)"


def test_projection_accepts_relu_kinks_crossed_by_the_step():
    class Relu(d5.CustomPythonOp):
        def __init__(self, n):
            super().__init__([d5.tensordesc(np.float32, [n])], [d5.tensordesc(np.float32, [n])])

        def forward(self, x):
            return np.maximum(x, 0)

        def backward(self, grads, fwd_inputs, fwd_outputs):
            return (grads[0] * (fwd_inputs[0] > 0)).astype(np.float32)

    n = 20_000
    x = _inputs(n, np.float32, 5)
    x[:8] = np.float32(1e-6) * np.array([-5, -4, -3, -2, 2, 3, 4, 5])  # within a step (6e-6 |v|) of the kink
    res = v.test_op_gradient(Relu(n), [x], verbose=False)
    assert res.passed and res.method == "projection", res.reason


def test_projection_arguments_are_checked():
    x = _inputs(10, np.float64, 0)
    with pytest.raises(ValueError, match="projections must be an integer >= 1"):
        v.test_op_gradient(_Tanh(10, np.float64), [x], verbose=False, projections=0)
    with pytest.raises(ValueError, match="method must be one of"):
        v.test_op_gradient(_Tanh(10, np.float64), [x], verbose=False, method="fast")
