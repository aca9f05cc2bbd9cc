"""``deep500lite bench overhead --op``: a custom operator against the framework's own operator.

The operator is Swish (``y = x * sigmoid(x)``, SiLU) on a float32 vector, with its gradient. On
each framework it is timed two ways, in alternation (:func:`deep500lite.metrics.time_paired`),
forward and backward together (``y = op(x)``, then the gradient of ``sum(y * g)``):

- **custom**: deep500lite's C++ Swish (compiled with :func:`d5.compile_custom_cppop_inline`),
  or the same operator in numpy (a ``d5.CustomPythonOp``), through
  ``deep500lite.frameworks.<fw>.custom_op`` (torch, TensorFlow, JAX) or as a custom node of an ONNX
  graph (ONNX Runtime through onnxruntime-extensions, the reference executor);
- **native**: the framework's own operator: ``torch.nn.functional.silu`` with autograd,
  ``tf.nn.silu`` under ``tf.GradientTape`` in a ``tf.function``, ``jax.nn.silu`` under ``jax.vjp`` in
  ``jax.jit``, and for ONNX Runtime and the
  reference executor the graph ``x * Sigmoid(x)`` of standard operators, differentiated by
  deep500lite's ONNX autodiff like the custom node.

The ratio custom/native (median of per-pair ratios, 95% CI) is the cost of writing the operator
outside the framework; both sides' results are checked to agree first. The code of each framework
is ``custom_op_pair`` in ``frameworks/<fw>/bench.py``, reached through
the framework's spec (``spec.role("bench")``) when the benchmark runs.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from deep500lite.bench.contract import graph_pair
from deep500lite.errors import UserError, format_choices
from deep500lite.registry import FrameworkNames

__all__ = ["OpOverheadResult", "run_op_overhead", "swish_op", "graph_pair", "SWISH_CPP", "KINDS"]

KINDS = ("cpp", "python")
OP_FRAMEWORKS = _FRAMEWORKS = FrameworkNames(bench="custom_op")  # frameworks whose spec runs custom ops

SWISH_CPP = r"""
#include <deep500lite/deep500lite.h>
#include <cmath>
#include <cstdint>

template <typename T>
class BenchSwish : public deep500lite::CustomOperator {
    int64_t n;
public:
    explicit BenchSwish(int64_t len) : n(len) {}
    void forward(const T *x, T *y) {
        #pragma omp parallel for if (n > 65536)
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (T(1) + std::exp(-x[i]));
    }
    void backward(const T *gy, const T *x, const T *y, T *gx) {
        #pragma omp parallel for if (n > 65536)
        for (int64_t i = 0; i < n; ++i) {
            T s = T(1) / (T(1) + std::exp(-x[i]));
            gx[i] = gy[i] * (s + x[i] * s * (T(1) - s));
        }
    }
};

D500_EXPORTED void *create_new_op(deep500lite::tensor_t *in, int nin, deep500lite::tensor_t *out, int nout) {
    return new BenchSwish<DTYPE>(deep500lite::num_elements(in[0]));
}

D500_REGISTER_OP(BenchSwish<DTYPE>);
"""


def _python_swish(n: int):
    from deep500lite.lv0.operator import CustomPythonOp
    from deep500lite.lv0.tensordesc import tensordesc

    class PySwish(CustomPythonOp):
        def forward(self, x):
            return x / (np.float32(1) + np.exp(-x))

        def backward(self, grads, fwd_inputs, fwd_outputs):
            x = fwd_inputs[0]
            s = np.float32(1) / (np.float32(1) + np.exp(-x))
            return grads[0] * (s + x * s * (np.float32(1) - s))

    d = tensordesc(np.float32, (n,))
    return PySwish([d], [d])


def swish_op(kind: str, n: int):
    """The benchmark's Swish operator on ``n`` float32 elements: compiled C++ or numpy."""
    if kind == "python":
        return _python_swish(n)
    from deep500lite.lv0.cppop import compile_custom_cppop_inline
    from deep500lite.lv0.tensordesc import tensordesc

    d = tensordesc(np.float32, (n,))
    return compile_custom_cppop_inline("bench_swish", SWISH_CPP, [d], [d])


@dataclasses.dataclass
class OpOverheadResult:
    """One framework's custom-vs-native timing of Swish (forward + backward)."""

    framework: str
    kind: str
    elements: int
    max_abs_error: float
    paired: object  # PairedMeasurement: a = custom, b = native

    def to_dict(self) -> dict:
        """JSON-ready form with every raw sample."""
        return {"framework": self.framework, "kind": self.kind, "elements": self.elements,
                "max_abs_error": self.max_abs_error, "custom": self.paired.a.to_dict(),
                "native": self.paired.b.to_dict(), "ratios": list(self.paired.ratios),
                "ratio": self.paired.ratio.to_dict()}


def run_op_overhead(frameworks, kinds=("cpp",), elements: int = 1 << 16, max_time: float = 10.0,
                    progress=None, seed: int = 0) -> list[OpOverheadResult]:
    """Time Swish as a custom operator against each framework's own (see module docstring).

    Args:
        frameworks: framework keys (torch, tensorflow, onnxruntime, reference, jax).
        kinds: ``"cpp"`` (the compiled C++ operator) and/or ``"python"`` (numpy).
        elements: vector length.
        max_time: seconds of timed work per framework and kind.
        progress: called with a short message before each measurement.
        seed: seed of the inputs.

    Returns:
        One :class:`OpOverheadResult` per framework and kind.
    """
    from deep500lite.metrics.timing import time_paired
    from deep500lite.registry import canonical_framework, spec

    frameworks = [canonical_framework(f) for f in frameworks]
    for f in frameworks:
        if f not in _FRAMEWORKS:
            raise UserError(f"bench overhead --op runs on {format_choices(_FRAMEWORKS)}. Received: {f!r}")
    for k in kinds:
        if k not in KINDS:
            raise UserError(f"--op-kinds takes {format_choices(KINDS)}. Received: {k!r}")
    if elements < 1:
        raise UserError(f"--elements must be a positive integer. Received: {elements}")
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(elements).astype(np.float32)
    g = rng.standard_normal(elements).astype(np.float32)
    results = []
    for kind in kinds:
        op = swish_op(kind, elements)
        for fw in frameworks:
            if progress:
                progress(f"{fw}: {kind} Swish vs native, {elements} elements")
            custom, native = spec(fw).role("bench").custom_op_pair(op, x, g)
            (ya, ga), (yb, gb) = custom(), native()
            err = float(max(np.abs(ya - yb).max(), np.abs(ga - gb).max()))
            if err > 1e-4:
                raise AssertionError(f"{fw}: the custom Swish and the native one disagree by {err:.3g}.")
            paired = time_paired(custom, native, label_a=f"{fw} {kind} custom", label_b=f"{fw} native",
                                 max_time=max_time, target_rel_ci=0.02)
            results.append(OpOverheadResult(fw, kind, elements, err, paired))
    return results
