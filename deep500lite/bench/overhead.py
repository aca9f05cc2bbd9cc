"""``deep500lite bench overhead``: the cost of going through deep500lite instead of the framework.

Inference (default):

For each model the same network runs two ways on the same inputs (numpy in, numpy out on both):

- **native**: the framework's own call — a ``torch.nn.Module`` under ``torch.inference_mode``,
  a Keras model inside ``tf.function``, ``onnxruntime.InferenceSession.run``, or the model
  written in plain JAX under ``jax.jit`` (``frameworks/jax/models.py``);
- **deep500lite**: the model as ONNX (exported by ``torch.onnx.export``, converted by tf2onnx, or
  the zoo's graph for ONNX Runtime) run by ``d5.executor(network, framework).inference``.

Training (``training=True``): one step of forward, backward and a momentum update
(learning rate 0.01, momentum 0.9, softmax cross-entropy):

- torch: native is the module in train mode with ``torch.optim.SGD``; deep500lite runs the same
  module exported for training (``export_onnx(..., training=True)``, BatchNormalization kept)
  with the loss added, on the torch executor with its native ``MomentumOptimizer``;
- tensorflow: native is a Keras model of the same architecture (channels-last) trained in a
  ``tf.function`` with ``GradientTape`` and ``keras.optimizers.SGD(momentum=0.9)``; deep500lite
  runs the zoo's ONNX graph of that architecture on the TensorFlow executor with its native
  ``MomentumOptimizer``;
- jax: native is ``jax.jit`` of ``jax.value_and_grad`` and an ``optax.sgd(momentum=0.9)`` update
  of the plain-JAX model; deep500lite runs the same model's ONNX graph (the same weights,
  batch normalization with batch statistics on both sides) on the JAX executor with its
  native ``MomentumOptimizer``;
- onnxruntime and reference have no native training loop to compare with: their deep500lite
  step (ONNX autodiff graph, reference numpy ``MomentumOptimizer``) is timed alone.

The two are timed in alternation (:func:`deep500lite.metrics.time_paired`) and the result is the
median of the per-pair ratios deep500lite/native with its nonparametric 95% CI. Outputs (the
loss, for training) are checked to agree before timing where both sides start from the same
weights.

The code of each framework is ``set_seed``, ``inference_pair`` and ``training_pair`` in
``frameworks/<fw>/bench.py``, reached through the framework's spec (``spec.role("bench")``)
when the benchmark runs.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from deep500lite.bench.contract import (LEARNING_RATE, MODEL_SHAPES, MOMENTUM, d5_training_step, random_labels,
                                        with_loss)
from deep500lite.errors import UserError, format_choices
from deep500lite.registry import FrameworkNames

__all__ = ["OverheadResult", "run_overhead", "MODELS", "MODEL_SHAPES", "TARGET_RATIO", "INFERENCE_FRAMEWORKS",
           "TRAINING_FRAMEWORKS", "LEARNING_RATE", "MOMENTUM", "with_loss", "random_labels", "d5_training_step"]

MODELS = ("lenet", "resnet20")
TARGET_RATIO = 1.05
# The input shape (C, H, W) of each model.


@dataclasses.dataclass
class OverheadResult:
    """One model's native and deep500lite timings and their ratio."""

    framework: str
    model: str
    batch_size: int
    max_abs_error: float | None
    paired: object  # PairedMeasurement, or a Measurement when there is no native side
    training: bool = False
    # seconds spent compiling, kept out of the timed calls: {"deep500lite": ..., "native": ...}
    compile_seconds: dict | None = None

    @property
    def has_native(self) -> bool:
        """Whether a native baseline was timed (not for onnxruntime/reference training)."""
        return hasattr(self.paired, "ratio")

    @property
    def verdict(self) -> str:
        """``meets`` (CI upper bound <= target), ``likely`` (median <= target), ``misses``, or
        ``n/a`` without a native baseline."""
        if not self.has_native:
            return "n/a"
        r = self.paired.ratio
        if r.ci_high <= TARGET_RATIO:
            return "meets"
        return "likely" if r.median <= TARGET_RATIO else "misses"

    def to_dict(self) -> dict:
        """JSON-ready form with every raw sample."""
        common = {"framework": self.framework, "model": self.model, "batch_size": self.batch_size,
                  "training": self.training, "max_abs_error": self.max_abs_error, "target_ratio": TARGET_RATIO,
                  "verdict": self.verdict, "compile_seconds": self.compile_seconds}
        if not self.has_native:
            return {**common, "deep500lite": self.paired.to_dict()}
        return {**common, "native": self.paired.b.to_dict(), "deep500lite": self.paired.a.to_dict(),
                "ratios": list(self.paired.ratios), "ratio": self.paired.ratio.to_dict()}


#: Frameworks whose ``bench`` module times inference against their native API (from the specs).
INFERENCE_FRAMEWORKS = FrameworkNames(bench="inference")
#: Frameworks whose ``bench`` module times a training step.
TRAINING_FRAMEWORKS = FrameworkNames(bench="training")
#: Frameworks whose ``bench`` runners take a GPU.
GPU_FRAMEWORKS = FrameworkNames(bench="gpu")

def run_overhead(framework: str, models=MODELS, batch_size: int = 64, max_time: float = 20.0,
                 seed: int = 0, progress=None, training: bool = False, device=None) -> list[OverheadResult]:
    """Measure deep500lite/native time ratios for ``framework`` on ``models`` (see the module doc).

    Args:
        framework: ``torch``, ``tensorflow``, ``onnxruntime`` or ``jax`` (and ``reference`` for training).
        models: names from :data:`MODELS`.
        batch_size: samples per call.
        max_time: seconds of timed work per model (both sides together).
        seed: seed of the inputs and weights.
        progress: optional ``callable(str)`` told what is being measured.
        training: time training steps instead of inference calls.
        device: ``None``/``"cpu"`` or ``"gpu:N"``: both sides run there (torch and jax only). Inputs
            start as numpy arrays and outputs end as numpy on both sides, so the copies to and
            from a GPU are in both times.
    """
    from deep500lite.metrics.accuracy import MaxError
    from deep500lite.metrics.timing import time_function, time_paired
    from deep500lite.registry import canonical_framework, spec

    key = canonical_framework(framework)
    supported = TRAINING_FRAMEWORKS if training else INFERENCE_FRAMEWORKS
    if key not in supported:
        raise UserError(f"bench overhead compares a framework with its native API; framework must be one of "
                        f"{format_choices(supported)}. Received: {framework!r}")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise UserError(f"Unknown model(s) {unknown} for bench overhead. Known: {format_choices(MODELS)}. "
                        f"Received: {format_choices(models)}")
    from deep500lite.lv1.device import as_device

    dev = as_device(device)
    if dev.is_gpu and key not in GPU_FRAMEWORKS:
        raise UserError(f"bench overhead runs on a GPU for {format_choices(GPU_FRAMEWORKS)} only. "
                        f"Received: --framework {key} --device {dev}")
    bench = spec(key).role("bench")
    if hasattr(bench, "set_device"):
        bench.set_device(dev)
    bench.set_seed(seed)
    pair = bench.training_pair if training else bench.inference_pair
    what = "training step" if training else "inference"
    results = []
    for model in models:
        if progress:
            progress(f"{key} {model} batch {batch_size} {what}: preparing")
        rng = np.random.default_rng(seed)
        d5_call, native_call, ex = pair(model, batch_size, rng)
        # Both training sides start from the same weights only where the bench module says so (the
        # model is exported from the native one: torch and jax).
        first = d5_call()
        same_start = getattr(bench, "TRAINING_SAME_WEIGHTS", False)
        err = (MaxError().measure(None, first, native_call())
               if native_call is not None and (not training or same_start) else None)
        compiled = {"deep500lite": float(getattr(ex, "compile_seconds", 0.0))}
        if hasattr(native_call, "compile_seconds"):
            compiled["native"] = float(native_call.compile_seconds)
        if progress:
            progress(f"{key} {model} batch {batch_size} {what}: timing (up to {max_time:g} s)")
        if native_call is None:
            timed = time_function(d5_call, label="deep500lite", sync=ex.synchronize, warmup=2, min_runs=5,
                                  max_time=max_time)
        else:
            timed = time_paired(d5_call, native_call, label_a="deep500lite", label_b="native",
                                sync=ex.synchronize, max_time=max_time)
        during = float(getattr(ex, "compile_seconds", 0.0)) - compiled["deep500lite"]
        if during > 0:  # a recompilation inside the timed calls: reported, so it cannot hide
            compiled["deep500lite_during_timing"] = during
        results.append(OverheadResult(key, model, batch_size, err, timed, training, compiled))
    return results
