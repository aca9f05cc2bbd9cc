"""Operator validation: forward, gradient (vectorized finite differences), determinism.

Framework operators (``deep500lite.lv1.framework_op``) are checked in tests/lv1/test_framework_op.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

import deep500lite as d5
from deep500lite.lv0 import validation as v
from deep500lite.lv0.validation.determinism import _as_2d


# ------------------------------------------------------------------------------------ test operators
def _descs(dtype, *shapes):
    return [d5.tensordesc(dtype, s) for s in shapes]


class Tanh(d5.CustomPythonOp):
    """Elementwise tanh; ``scale`` and ``flip`` make its backward deliberately wrong."""

    def __init__(self, shape, dtype, scale=1.0, flip=()):
        super().__init__(_descs(dtype, shape), _descs(dtype, shape))
        self.scale, self.flip = scale, list(flip)

    def forward(self, x):
        return np.tanh(x)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g = grads[0] * (1 - fwd_outputs[0] ** 2) * self.scale
        g.reshape(-1)[self.flip] *= -1
        return g.astype(fwd_inputs[0].dtype)


class FixedSinMul(d5.CustomOp):
    """y = sin(x) * w, accepting only its declared shapes and dtype, like a compiled C++ operator."""

    def __init__(self, n, dtype=np.float32, scale=1.0):
        super().__init__(_descs(dtype, [n], [n]), _descs(dtype, [n]))
        self.n, self.dtype, self.scale = n, np.dtype(dtype), scale

    def forward(self, x, w):
        if x.shape != (self.n,) or w.shape != (self.n,) or x.dtype != self.dtype or w.dtype != self.dtype:
            raise ValueError("fixed-shape operator called with other shapes or dtypes")
        return (np.sin(x) * w).astype(self.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, w = fwd_inputs
        g = grads[0]
        return (g * np.cos(x) * w * self.scale).astype(self.dtype), (g * np.sin(x)).astype(self.dtype)


class Relu(d5.CustomPythonOp):
    def __init__(self, n, dtype, at_zero=0.0):
        super().__init__(_descs(dtype, [n]), _descs(dtype, [n]))
        self.at_zero = at_zero

    def forward(self, x):
        return np.maximum(x, 0)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = fwd_inputs[0]
        slope = np.where(x > 0, 1.0, np.where(x == 0, self.at_zero, 0.0))
        return (grads[0] * slope).astype(x.dtype)


class SinCos(d5.CustomPythonOp):
    """Two outputs; ``wrong_second`` drops the second output's contribution to the gradient."""

    def __init__(self, n, wrong_second=False):
        super().__init__(_descs(np.float64, [n]), _descs(np.float64, [n], [n]))
        self.wrong_second = wrong_second

    def forward(self, x):
        return np.sin(x), np.cos(x)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = fwd_inputs[0]
        return grads[0] * np.cos(x) - (0.0 if self.wrong_second else grads[1] * np.sin(x))


class SoftmaxAll(d5.CustomPythonOp):
    """Softmax over every element: a stacked batch would be normalized across samples."""

    def forward(self, x):
        e = np.exp(x - x.max())
        return e / e.sum()

    def backward(self, grads, fwd_inputs, fwd_outputs):
        y, g = fwd_outputs[0], grads[0]
        return y * (g - (g * y).sum())


class ScaleByIndex(d5.CustomPythonOp):
    """y = x * k with an integer input k, which is not differentiated."""

    def forward(self, x, k):
        return x * k

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, k = fwd_inputs
        return (grads[0] * k).astype(x.dtype), np.zeros_like(k)


class TanhFloat32Only(Tanh):
    def supports_dtype(self, dtype):
        return np.dtype(dtype) == np.float32


class TanhCastsToFloat32(Tanh):
    def forward(self, x):
        return np.tanh(x).astype(np.float32)


def _normal(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# --------------------------------------------------------------------------------------- forward
def test_forward_passes_and_reports_metrics_computed_independently():
    x = _normal(64, np.float32)
    reference = np.tanh(x.astype(np.float64)).astype(np.float32)
    reference[3] += np.float32(2e-6)
    res = v.test_op_forward(Tanh([64], np.float32), [x], reference, verbose=False)
    out = np.tanh(x)
    assert res.passed and res.kind == "forward" and res.forward_calls == 1
    expected_max = float(np.abs(out.astype(np.float64) - reference.astype(np.float64)).max())
    assert res.metrics["output0"]["MaxError"] == pytest.approx(expected_max)
    diff = out.astype(np.float64) - reference.astype(np.float64)
    expected_rel = float(np.linalg.norm(diff) / np.linalg.norm(reference.astype(np.float64)))
    assert res.metrics["output0"]["RelativeL2Error"] == pytest.approx(expected_rel)


def test_forward_fails_and_names_the_worst_element():
    x = _normal(32, np.float32)
    reference = np.tanh(x)
    reference[5] += np.float32(0.01)
    reference[9] += np.float32(0.001)
    res = v.test_op_forward(Tanh([32], np.float32), [x], reference, verbose=False)
    assert not res.passed
    assert res.details["output0"]["worst_element"] == "(5,)"
    assert res.details["output0"]["failing_elements"] == 2
    assert "element (5,)" in res.reason and "2 of 32" in res.reason
    assert "FAILED" in res.summary()


def test_forward_shape_dtype_and_count_mismatches_fail_with_a_reason():
    op = Tanh([8], np.float32)
    x = _normal(8, np.float32)
    wrong_shape = v.test_op_forward(op, [x], np.tanh(x)[:7], verbose=False)
    assert not wrong_shape.passed and "shape [8]" in wrong_shape.reason and "[7]" in wrong_shape.reason
    wrong_dtype = v.test_op_forward(op, [x], np.tanh(x.astype(np.float64)), verbose=False)
    assert not wrong_dtype.passed and "dtype float32" in wrong_dtype.reason
    assert v.test_op_forward(op, [x], np.tanh(x.astype(np.float64)), verbose=False, check_dtype=False).passed
    two_refs = v.test_op_forward(op, [x], (np.tanh(x), np.tanh(x)), verbose=False)
    assert not two_refs.passed and "returned 1 outputs" in two_refs.reason


def test_forward_nan_at_the_same_positions_is_equal():
    class Log(d5.CustomPythonOp):
        def forward(self, x):
            with np.errstate(invalid="ignore"):
                return np.log(x)

        def backward(self, grads, fwd_inputs, fwd_outputs):
            return grads[0] / fwd_inputs[0]

    op = Log(_descs(np.float64, [4]), _descs(np.float64, [4]))
    x = np.array([1.0, -1.0, 2.0, 3.0])
    ref = np.array([0.0, np.nan, np.log(2.0), np.log(3.0)])
    assert v.test_op_forward(op, [x], ref, verbose=False).passed
    ref[2] = np.nan
    res = v.test_op_forward(op, [x], ref, verbose=False)
    assert not res.passed and res.details["output0"]["worst_element"] == "(2,)"


def test_wrong_number_of_inputs_is_a_clear_error():
    op = Tanh([8], np.float32)
    x = _normal(8, np.float32)
    with pytest.raises(ValueError, match=r"takes 1 inputs .*Received: 2 inputs"):
        v.test_op_forward(op, [x, x], np.tanh(x), verbose=False)
    with pytest.raises(ValueError, match=r"takes 1 inputs .*Received: 2 inputs"):
        v.test_op_gradient(op, [x, x], verbose=False)
    with pytest.raises(ValueError, match=r"input 0 .* must be float32\[8\]. Received: float32\[9\]"):
        v.test_op_gradient(op, [_normal(9, np.float32)], verbose=False)


def test_verbose_prints_the_summary(capsys):
    x = _normal(8, np.float64)
    v.test_op_forward(Tanh([8], np.float64), [x], np.tanh(x))
    assert "test_op_forward: PASSED" in capsys.readouterr().out


# -------------------------------------------------------------------------------------- gradient
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradient_batched_elementwise_op_is_correct_and_uses_few_forward_calls(dtype):
    n = 1024
    x = _normal(n, dtype)
    g = _normal(n, dtype, seed=1)
    res = v.test_op_gradient(Tanh([n], dtype), [x], grad_inputs=g, verbose=False)
    assert res.passed, res.reason
    assert res.method == "batched" and res.compute_dtype == "float64"
    chunk = res.details["input0"]["chunk"]
    # base run, float64 probe, 2 trial runs, then one stacked call per chunk of elements
    assert res.forward_calls <= 4 + math.ceil(n / chunk) and chunk >= 256
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    exact = g64 * (1 - np.tanh(x64) ** 2)
    np.testing.assert_allclose(res.numerical["input0"], exact, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("method", ["auto", "directional"])
def test_gradient_off_by_ten_percent_fails(dtype, method):
    x = _normal(1024, dtype)
    res = v.test_op_gradient(Tanh([1024], dtype, scale=1.1), [x], verbose=False, method=method)
    assert not res.passed
    assert "input 'input0'" in res.reason
    if method == "auto":
        assert res.details["input0"]["failing_elements"] == 1024


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradient_wrong_sign_on_some_elements_fails_and_names_one(dtype):
    flip = [7, 300, 901]
    x = _normal(1024, dtype)
    res = v.test_op_gradient(Tanh([1024], dtype, flip=flip), [x], verbose=False)
    assert not res.passed
    assert res.details["input0"]["failing_elements"] == len(flip)
    assert res.details["input0"]["worst_element"] in {f"({i},)" for i in flip}
    directional = v.test_op_gradient(Tanh([1024], dtype, flip=flip), [x], verbose=False, method="directional")
    assert not directional.passed


def test_elementwise_loop_agrees_with_batched_numerical_gradient():
    x = _normal((6, 7), np.float64)
    batched = v.test_op_gradient(Tanh([6, 7], np.float64), [x], verbose=False)
    loop = v.test_op_gradient(Tanh([6, 7], np.float64), [x], verbose=False, method="elementwise")
    assert batched.passed and loop.passed and loop.method == "elementwise"
    assert loop.forward_calls == 1 + 2 * x.size  # base run (inputs already float64: no probe), 2 per element
    np.testing.assert_allclose(loop.numerical["input0"], batched.numerical["input0"], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("n, exact", [(40, True), (1000, False)])
def test_fixed_shape_op_uses_random_directions(n, exact):
    x, w = _normal(n, np.float32), _normal(n, np.float32, seed=2)
    res = v.test_op_gradient(FixedSinMul(n), [x, w], verbose=False, directions=8)
    assert res.passed, res.reason
    assert res.compute_dtype == "float32"  # a non-Python CustomOp keeps its declared dtype
    assert res.method == ("directional+elementwise" if exact else "directional")
    expected_calls = 1 + 2 * 8 * 2 + (2 * 2 * n if exact else 0)
    assert res.forward_calls == expected_calls
    wrong = v.test_op_gradient(FixedSinMul(n, scale=1.1), [x, w], verbose=False, directions=8)
    assert not wrong.passed and "input 'input0'" in wrong.reason
    assert wrong.details["input1"]["passed"]  # the other input's gradient is right


def test_op_that_does_not_broadcast_is_detected_and_checked_by_directions():
    op = SoftmaxAll(_descs(np.float64, [300]), _descs(np.float64, [300]))
    x = _normal(300, np.float64)
    res = v.test_op_gradient(op, [x], verbose=False)
    assert res.passed, res.reason
    assert res.method == "directional"
    assert any("differ from single calls" in n for n in res.details["_notes"])
    with pytest.raises(ValueError, match="method='batched' needs an operator whose forward broadcasts"):
        v.test_op_gradient(op, [x], verbose=False, method="batched")


@pytest.mark.parametrize("at_zero", [0.0, 1.0, 0.5])
def test_relu_at_zero_accepts_any_subgradient(at_zero):
    x = _normal(500, np.float64)
    zeros = np.arange(0, 500, 50)
    x[zeros] = 0.0
    res = v.test_op_gradient(Relu(500, np.float64, at_zero), [x], verbose=False)
    assert res.passed, res.reason
    # The central difference at 0 is exactly the mean of both sides, so 0.5 passes without the one-sided rule.
    assert res.details["input0"]["one_sided"] == (0 if at_zero == 0.5 else len(zeros))


def test_relu_with_a_wrong_value_at_zero_fails():
    x = _normal(500, np.float64)
    x[[10, 20]] = 0.0
    res = v.test_op_gradient(Relu(500, np.float64, at_zero=3.0), [x], verbose=False)
    assert not res.passed
    assert res.details["input0"]["worst_element"] in {"(10,)", "(20,)"}


def test_relu_float32_fixed_shape_small_uses_the_exact_loop_at_kinks():
    class FixedRelu(d5.CustomOp):
        def forward(self, x):
            return np.maximum(x, 0)

        def backward(self, grads, fwd_inputs, fwd_outputs):
            return (grads[0] * (fwd_inputs[0] > 0)).astype(np.float32)

    x = _normal(100, np.float32)
    x[:4] = 0
    res = v.test_op_gradient(FixedRelu(_descs(np.float32, [100]), _descs(np.float32, [100])), [x], verbose=False)
    assert res.passed, res.reason
    assert res.method == "directional+elementwise" and res.compute_dtype == "float32"
    assert res.details["input0"]["one_sided"] >= 4


def test_gradient_with_two_outputs_uses_both_output_gradients():
    x = _normal(200, np.float64)
    assert v.test_op_gradient(SinCos(200), [x], verbose=False).passed
    res = v.test_op_gradient(SinCos(200, wrong_second=True), [x], verbose=False)
    assert not res.passed


def test_integer_inputs_are_not_differentiated():
    op = ScaleByIndex(_descs(np.float64, [50]) + [d5.tensordesc(np.int64, [50])], _descs(np.float64, [50]))
    x, k = _normal(50, np.float64), np.arange(50, dtype=np.int64) % 5
    res = v.test_op_gradient(op, [x, k], verbose=False)
    assert res.passed, res.reason
    assert list(res.metrics) == ["input0"]


def test_float64_is_not_used_when_the_op_does_not_support_it():
    x = _normal(256, np.float32)
    res = v.test_op_gradient(TanhFloat32Only([256], np.float32), [x], verbose=False)
    assert res.passed and res.compute_dtype == "float32"
    assert not v.test_op_gradient(TanhFloat32Only([256], np.float32, scale=1.1), [x], verbose=False).passed
    cast = v.test_op_gradient(TanhCastsToFloat32([256], np.float32), [x], verbose=False)
    assert cast.passed and cast.compute_dtype == "float32"
    assert any("did not return float64" in n for n in cast.details["_notes"])


def test_bad_gradient_arguments_are_clear_errors():
    op = Tanh([8], np.float64)
    x = _normal(8, np.float64)
    with pytest.raises(ValueError, match=r"grad_inputs\[0\] must have the output's shape \[8\]. Received: \[7\]"):
        v.test_op_gradient(op, [x], grad_inputs=np.ones(7), verbose=False)
    with pytest.raises(ValueError, match="method must be one of"):
        v.test_op_gradient(op, [x], method="fast", verbose=False)
    ints = ScaleByIndex([d5.tensordesc(np.int64, [3])] * 2, [d5.tensordesc(np.int64, [3])])
    with pytest.raises(ValueError, match="no non-empty floating-point input"):
        v.test_op_gradient(ints, [np.ones(3, np.int64)] * 2, verbose=False)


def test_backward_returning_a_wrong_shape_is_a_failed_result():
    class BadShape(Tanh):
        def backward(self, grads, fwd_inputs, fwd_outputs):
            return np.zeros(3)

    res = v.test_op_gradient(BadShape([8], np.float64), [_normal(8, np.float64)], verbose=False)
    assert not res.passed and "float64[3]" in res.reason and "[8]" in res.reason


# ----------------------------------------------------------------------------------- determinism
def test_deterministic_op_is_bit_identical_and_writes_no_heatmap(tmp_path):
    x = _normal((4, 5), np.float32)
    res = v.test_op_determinism(Tanh([4, 5], np.float32), [x], reruns=5, heatmap=tmp_path / "h.png")
    assert res.deterministic and res.passed and res.differing_elements == 0 and res.max_deviation == 0
    assert not np.any(res.variance["output0"])
    assert res.heatmap is None and not (tmp_path / "h.png").exists()


def test_scalar_output_op_is_checked():
    class Sum(d5.CustomPythonOp):
        def forward(self, x):
            return x.sum()

        def backward(self, grads, fwd_inputs, fwd_outputs):
            return np.full_like(fwd_inputs[0], grads[0])

    op = Sum(_descs(np.float32, [3, 4]), [d5.tensordesc(np.float32, [])])
    x = _normal((3, 4), np.float32)
    assert v.test_op_determinism(op, [x], reruns=3).deterministic
    res = v.test_op_gradient(op, [x], grad_inputs=np.float32(2.0), verbose=False)
    assert res.passed and res.method == "directional+elementwise"  # sum over all axes does not broadcast
    np.testing.assert_allclose(res.numerical["input0"], np.full((3, 4), 2.0), rtol=1e-6)


def test_nan_outputs_do_not_count_as_nondeterminism():
    class WithNaN(d5.CustomPythonOp):
        def forward(self, x):
            return np.where(x > 0, np.nan, x)

        def backward(self, grads, fwd_inputs, fwd_outputs):
            return grads[0]

    x = _normal(20, np.float64)
    res = v.test_op_determinism(WithNaN(_descs(np.float64, [20]), _descs(np.float64, [20])), [x], reruns=4)
    assert res.deterministic


class DriftingOp(d5.CustomPythonOp):
    """Adds call_number * 1e-3 to one element: differences known in advance."""

    calls = 0

    def forward(self, x):
        y = x.copy()
        y[1, 2] += self.calls * 1e-3
        self.calls += 1
        return y

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return grads[0]


def test_nondeterministic_op_is_reported_with_variance_and_heatmap(tmp_path):
    pytest.importorskip("matplotlib")
    image = pytest.importorskip("PIL.Image")
    x = _normal((3, 4), np.float64)
    op = DriftingOp(_descs(np.float64, [3, 4]), _descs(np.float64, [3, 4]))
    path = tmp_path / "variance.png"
    res = v.test_op_determinism(op, [x], reruns=10, heatmap=path)
    assert not res.deterministic
    assert res.differing_elements == 1
    runs = x[1, 2] + np.arange(10) * 1e-3
    assert res.max_deviation == pytest.approx(abs(runs[9] - runs[0]), rel=1e-9)
    assert res.variance["output0"][1, 2] == pytest.approx(np.var(runs), rel=1e-6)
    assert np.count_nonzero(res.variance["output0"]) == 1
    assert res.heatmap == str(path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    with image.open(path) as img:
        img.verify()
    with image.open(path) as img:
        assert img.format == "PNG" and img.size[0] > 100 and img.size[1] > 100


def test_random_noise_op_is_not_deterministic():
    class Noisy(d5.CustomPythonOp):
        def forward(self, x):
            return x + np.random.default_rng().normal(scale=1e-6, size=x.shape)

        def backward(self, grads, fwd_inputs, fwd_outputs):
            return grads[0]

    x = _normal(100, np.float64)
    res = v.test_op_determinism(Noisy(_descs(np.float64, [100]), _descs(np.float64, [100])), [x], reruns=3)
    assert not res.deterministic and res.differing_elements == 100
    assert 0 < res.max_deviation < 1e-4
    assert "NOT DETERMINISTIC" in res.summary()


def test_determinism_needs_two_runs():
    with pytest.raises(ValueError, match="reruns must be an integer >= 2. Received: 1"):
        v.test_op_determinism(Tanh([3], np.float64), [np.zeros(3)], reruns=1)


def test_heatmap_grid_shapes():
    assert _as_2d(np.zeros(())).shape == (1, 1)
    assert _as_2d(np.zeros(10)).shape == (1, 10)
    assert _as_2d(np.zeros((2, 3, 4))).shape == (6, 4)
    folded = _as_2d(np.arange(1000.0))
    assert folded.shape == (32, 32) and np.isnan(folded).sum() == 24
