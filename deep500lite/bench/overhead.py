"""``deep500lite bench overhead``: the cost of going through deep500lite instead of the framework.

For each model the same network runs two ways on the same inputs (numpy in, numpy out on both):

- **native**: the framework's own call — a ``torch.nn.Module`` under ``torch.inference_mode``,
  a Keras model inside ``tf.function``, or ``onnxruntime.InferenceSession.run``;
- **deep500lite**: the model as ONNX (exported by ``torch.onnx.export``, converted by tf2onnx, or
  the zoo's graph for ONNX Runtime) run by ``d5.executor(network, framework).inference``.

The two are timed in alternation (:func:`deep500lite.metrics.time_paired`) and the result is the
median of the per-pair ratios deep500lite/native with its nonparametric 95% CI. Outputs are
checked to agree before timing.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from deep500lite.errors import UserError, format_choices

__all__ = ["OverheadResult", "run_overhead", "MODELS", "TARGET_RATIO"]

MODELS = ("lenet", "resnet20")
TARGET_RATIO = 1.05
_SHAPES = {"lenet": (1, 28, 28), "resnet20": (3, 32, 32)}


@dataclasses.dataclass
class OverheadResult:
    """One model's native and deep500lite timings and their ratio."""

    framework: str
    model: str
    batch_size: int
    max_abs_error: float
    paired: object  # PairedMeasurement

    @property
    def verdict(self) -> str:
        """``meets`` (CI upper bound <= target), ``likely`` (median <= target) or ``misses``."""
        r = self.paired.ratio
        if r.ci_high <= TARGET_RATIO:
            return "meets"
        return "likely" if r.median <= TARGET_RATIO else "misses"

    def to_dict(self) -> dict:
        """JSON-ready form with every raw sample."""
        return {"framework": self.framework, "model": self.model, "batch_size": self.batch_size,
                "max_abs_error": self.max_abs_error, "target_ratio": TARGET_RATIO, "verdict": self.verdict,
                "native": self.paired.b.to_dict(), "deep500lite": self.paired.a.to_dict(),
                "ratios": list(self.paired.ratios), "ratio": self.paired.ratio.to_dict()}


def _torch_pair(model, batch, rng):
    import torch

    import deep500lite as d5
    from deep500lite.frameworks.torch import models

    module = (models.LeNet() if model == "lenet" else models.ResNet20()).eval()
    x = rng.standard_normal((batch, *_SHAPES[model])).astype(np.float32)
    ex = d5.executor(d5.load_model(models.export_onnx(module, torch.from_numpy(x))), "torch")

    def native():
        with torch.inference_mode():
            return module(torch.from_numpy(x)).numpy()

    return (lambda: ex.inference({"input": x})["output"]), native, ex


def _tensorflow_pair(model, batch, rng):
    import tensorflow as tf

    import deep500lite as d5
    from deep500lite.frameworks.tensorflow import models

    c, h, w = _SHAPES[model]
    keras_model = models.lenet(input_shape=(h, w, c)) if model == "lenet" else models.resnet20(input_shape=(h, w, c))
    proto = models.to_onnx(keras_model)
    ex = d5.executor(d5.load_model(proto), "tensorflow")
    name, out = ex.network.inputs[0], ex.network.outputs[0]
    x = rng.standard_normal((batch, h, w, c)).astype(np.float32)
    spec = (tf.TensorSpec((None, h, w, c), tf.float32),)
    call = tf.function(lambda t: keras_model(t, training=False), input_signature=spec)

    def native():
        return call(x).numpy()

    return (lambda: ex.inference({name: x})[out]), native, ex


def _onnxruntime_pair(model, batch, rng):
    import onnxruntime as ort

    import deep500lite as d5
    from deep500lite import networks

    name = "lenet" if model == "lenet" else "resnet"
    kwargs = {} if model == "lenet" else {"depth": 20}
    net, _, _ = networks.create_model(name, batch, classes=10, shape=_SHAPES[model], **kwargs)
    def options():
        # Two sessions in one process: with spinning intra-op thread pools, the idle one would
        # spin while the other works and slow it down; both sides get the same settings.
        opts = ort.SessionOptions()
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return opts

    session = ort.InferenceSession(net.to_onnx().SerializeToString(), sess_options=options(),
                                   providers=["CPUExecutionProvider"])
    ex = d5.executor(net, "onnxruntime", session_options=options())
    x = rng.standard_normal((batch, *_SHAPES[model])).astype(np.float32)

    def native():
        return session.run(["output"], {"input": x})[0]

    return (lambda: ex.inference({"input": x})["output"]), native, ex


_PAIRS = {"torch": _torch_pair, "tensorflow": _tensorflow_pair, "onnxruntime": _onnxruntime_pair}


def run_overhead(framework: str, models=MODELS, batch_size: int = 64, max_time: float = 20.0,
                 seed: int = 0, progress=None) -> list[OverheadResult]:
    """Measure deep500lite/native inference time ratios for ``framework`` on ``models``.

    Args:
        framework: ``torch``, ``tensorflow`` or ``onnxruntime``.
        models: names from :data:`MODELS`.
        batch_size: samples per call.
        max_time: seconds of timed work per model (both sides together).
        seed: seed of the inputs and weights.
        progress: optional ``callable(str)`` told what is being measured.
    """
    from deep500lite.metrics.accuracy import MaxError
    from deep500lite.metrics.timing import time_paired
    from deep500lite.registry import canonical_framework, import_framework

    key = canonical_framework(framework)
    if key not in _PAIRS:
        raise UserError(f"bench overhead compares a framework with its native API; framework must be one of "
                        f"{format_choices(_PAIRS)}. Received: {framework!r}")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise UserError(f"Unknown model(s) {unknown} for bench overhead. Known: {format_choices(MODELS)}.")
    import_framework(key)
    if key == "torch":
        import torch

        torch.manual_seed(seed)
    elif key == "tensorflow":
        import keras

        keras.utils.set_random_seed(seed)
    results = []
    for model in models:
        if progress:
            progress(f"{key} {model} batch {batch_size}: preparing")
        rng = np.random.default_rng(seed)
        d5_call, native_call, ex = _PAIRS[key](model, batch_size, rng)
        err = MaxError().measure(None, d5_call(), native_call())
        if progress:
            progress(f"{key} {model} batch {batch_size}: timing (up to {max_time:g} s)")
        paired = time_paired(d5_call, native_call, label_a="deep500lite", label_b="native",
                             sync=ex.synchronize, max_time=max_time)
        results.append(OverheadResult(key, model, batch_size, err, paired))
    return results
