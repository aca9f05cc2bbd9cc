"""``deep500lite bench`` on JAX: the overhead runners and the operator runner (``frameworks/jax/bench.py``).

Tiny configurations only: the tests check that the numbers are sane and the outputs agree, never a
speed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from deep500lite.bench.op import ConvCase, GemmCase
from deep500lite.bench.op_overhead import run_op_overhead
from deep500lite.bench.overhead import run_overhead
from deep500lite.errors import DeviceError
from deep500lite.lv1.device import Device

pytest.importorskip("jax")
bench = pytest.importorskip("deep500lite.frameworks.jax.bench")
pytest.importorskip("deep500lite.frameworks.jax.executor")


def _check(results, training):
    assert [r.model for r in results] == ["lenet"]
    r = results[0]
    assert r.framework == "jax" and r.training is training and r.has_native
    a, b = r.paired.a.summary, r.paired.b.summary
    assert a.median > 0 and b.median > 0
    assert math.isfinite(r.paired.ratio.median) and r.paired.ratio.median > 0
    assert r.verdict in ("meets", "likely", "misses")
    # both sides start from the same weights: same logits, or the same first loss
    assert r.max_abs_error is not None and r.max_abs_error < 1e-4
    # compilation happened before timing and is reported apart
    assert r.compile_seconds["native"] >= 0 and r.compile_seconds["deep500lite"] >= 0
    assert "deep500lite_during_timing" not in r.compile_seconds
    d = r.to_dict()
    assert d["compile_seconds"] == r.compile_seconds and len(d["ratios"]) == r.paired.ratio.n


def test_inference_overhead_runs_and_agrees():
    _check(run_overhead("jax", ["lenet"], batch_size=2, max_time=0.3), training=False)


def test_training_overhead_runs_and_agrees():
    _check(run_overhead("jax", ["lenet"], batch_size=2, max_time=0.3, training=True), training=True)


def test_training_pair_sides_stay_at_the_same_weights():
    d5, native, _ = bench.training_pair("lenet", 2, np.random.default_rng(0))
    for _ in range(3):
        np.testing.assert_allclose(d5(), native(), rtol=1e-4)


@pytest.mark.parametrize("case", [GemmCase("g", 5, 7, 3), ConvCase("c", 2, 3, 9, 9, 4, 3, 3, 2, 1)])
def test_op_runner_computes_the_case(case):
    inputs = case.make_inputs(np.random.default_rng(0))
    with bench.op_threads(1, Device()) as how:
        assert "XLA cpu" in how
        runner = bench.op_runner(case, inputs, Device(), 1)
    runner.fn()
    np.testing.assert_allclose(runner.fetch(), case.expected(inputs), rtol=1e-4, atol=1e-4)


def test_missing_gpu_is_a_device_error():
    import jax

    try:
        gpus = len(jax.devices("gpu"))
    except RuntimeError:
        gpus = 0
    with pytest.raises(DeviceError, match=f"Received: --device gpu:{gpus}"):
        bench.op_runner(GemmCase("g", 2, 2, 2), (np.eye(2, dtype=np.float32),) * 2, Device("gpu", gpus), 1)


def test_bench_module_has_every_role():
    for name in ("op_runner", "op_threads", "set_seed", "inference_pair", "training_pair", "custom_op_pair"):
        assert callable(getattr(bench, name)) and getattr(bench, name).__doc__ and name in bench.__all__


def test_custom_op_overhead_agrees_with_silu():
    (r,) = run_op_overhead(["jax"], ["python"], elements=256, max_time=0.2)
    assert r.framework == "jax" and r.max_abs_error < 1e-5
    assert r.paired.a.summary.median > 0 and math.isfinite(r.paired.ratio.median)
