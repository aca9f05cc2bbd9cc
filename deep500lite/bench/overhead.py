"""``deep500lite bench overhead``: the cost of going through deep500lite instead of the framework.

Inference (default):

For each model the same network runs two ways on the same inputs (numpy in, numpy out on both):

- **native**: the framework's own call — a ``torch.nn.Module`` under ``torch.inference_mode``,
  a Keras model inside ``tf.function``, or ``onnxruntime.InferenceSession.run``;
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
- onnxruntime and reference have no native training loop to compare with: their deep500lite
  step (ONNX autodiff graph, reference numpy ``MomentumOptimizer``) is timed alone.

The two are timed in alternation (:func:`deep500lite.metrics.time_paired`) and the result is the
median of the per-pair ratios deep500lite/native with its nonparametric 95% CI. Outputs (the
loss, for training) are checked to agree before timing where both sides start from the same
weights.
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
    max_abs_error: float | None
    paired: object  # PairedMeasurement, or a Measurement when there is no native side
    training: bool = False

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
                  "verdict": self.verdict}
        if not self.has_native:
            return {**common, "deep500lite": self.paired.to_dict()}
        return {**common, "native": self.paired.b.to_dict(), "deep500lite": self.paired.a.to_dict(),
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

LEARNING_RATE, MOMENTUM = 0.01, 0.9


def _with_loss(network):
    from deep500lite.datasets import dataset_loss

    network.add_operation(dataset_loss("digits")(["output", "label"], "loss"))
    return network


def _labels(rng, batch):
    return rng.integers(0, 10, size=batch).astype(np.int64)


def _torch_train_pair(model, batch, rng):
    import torch

    import deep500lite as d5
    from deep500lite.frameworks import torch as d5torch
    from deep500lite.frameworks.torch import models

    module = models.LeNet() if model == "lenet" else models.ResNet20()
    x = rng.standard_normal((batch, *_SHAPES[model])).astype(np.float32)
    y = _labels(rng, batch)
    net = _with_loss(d5.load_model(models.export_onnx(module, torch.from_numpy(x), training=True)))
    ex = d5.executor(net, "torch")
    optimizer = d5torch.MomentumOptimizer(ex, learning_rate=LEARNING_RATE, momentum=MOMENTUM)
    native_opt = torch.optim.SGD(module.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    module.train()

    def native():
        native_opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(module(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        native_opt.step()
        return loss.detach().numpy()

    return (lambda: optimizer.step({"input": x, "label": y})["loss"]), native, ex


def _tensorflow_train_pair(model, batch, rng):
    import keras
    import tensorflow as tf

    import deep500lite as d5
    from deep500lite import networks
    from deep500lite.frameworks import tensorflow as d5tf
    from deep500lite.frameworks.tensorflow import models

    c, h, w = _SHAPES[model]
    keras_model = models.lenet(input_shape=(h, w, c)) if model == "lenet" else models.resnet20(input_shape=(h, w, c))
    name, kwargs = ("lenet", {}) if model == "lenet" else ("resnet", {"depth": 20})
    net = _with_loss(networks.create_model(name, batch, classes=10, shape=_SHAPES[model], **kwargs)[0])
    ex = d5.executor(net, "tensorflow")
    optimizer = d5tf.MomentumOptimizer(ex, learning_rate=LEARNING_RATE, momentum=MOMENTUM)
    x = rng.standard_normal((batch, c, h, w)).astype(np.float32)
    x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    y = _labels(rng, batch)
    keras_opt = keras.optimizers.SGD(learning_rate=LEARNING_RATE, momentum=MOMENTUM)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, keras_model(xb, training=True))
        grads = tape.gradient(loss, keras_model.trainable_variables)
        keras_opt.apply_gradients(zip(grads, keras_model.trainable_variables))
        return loss

    def native():
        return train_step(x_nhwc, y).numpy()

    return (lambda: optimizer.step({"input": x, "label": y})["loss"]), native, ex


def _d5_train_step(framework, model, batch, rng):
    import deep500lite as d5
    from deep500lite import networks
    from deep500lite.frameworks import reference as d5ref

    name, kwargs = ("lenet", {}) if model == "lenet" else ("resnet", {"depth": 20})
    net = _with_loss(networks.create_model(name, batch, classes=10, shape=_SHAPES[model], **kwargs)[0])
    ex = d5.executor(net, framework)
    optimizer = d5ref.MomentumOptimizer(ex, learning_rate=LEARNING_RATE, momentum=MOMENTUM)
    feeds = {"input": rng.standard_normal((batch, *_SHAPES[model])).astype(np.float32), "label": _labels(rng, batch)}
    return (lambda: optimizer.step(feeds)["loss"]), None, ex


_TRAIN_PAIRS = {"torch": _torch_train_pair, "tensorflow": _tensorflow_train_pair,
                "onnxruntime": lambda m, b, r: _d5_train_step("onnxruntime", m, b, r),
                "reference": lambda m, b, r: _d5_train_step("reference", m, b, r)}


def run_overhead(framework: str, models=MODELS, batch_size: int = 64, max_time: float = 20.0,
                 seed: int = 0, progress=None, training: bool = False) -> list[OverheadResult]:
    """Measure deep500lite/native time ratios for ``framework`` on ``models`` (see the module doc).

    Args:
        framework: ``torch``, ``tensorflow`` or ``onnxruntime`` (and ``reference`` for training).
        models: names from :data:`MODELS`.
        batch_size: samples per call.
        max_time: seconds of timed work per model (both sides together).
        seed: seed of the inputs and weights.
        progress: optional ``callable(str)`` told what is being measured.
        training: time training steps instead of inference calls.
    """
    from deep500lite.metrics.accuracy import MaxError
    from deep500lite.metrics.timing import time_function, time_paired
    from deep500lite.registry import canonical_framework, import_framework

    key = canonical_framework(framework)
    pairs = _TRAIN_PAIRS if training else _PAIRS
    if key not in pairs:
        raise UserError(f"bench overhead compares a framework with its native API; framework must be one of "
                        f"{format_choices(pairs)}. Received: {framework!r}")
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
    what = "training step" if training else "inference"
    results = []
    for model in models:
        if progress:
            progress(f"{key} {model} batch {batch_size} {what}: preparing")
        rng = np.random.default_rng(seed)
        d5_call, native_call, ex = pairs[key](model, batch_size, rng)
        # Both training sides start from the same weights only for torch (the module is exported).
        first = d5_call()
        err = (MaxError().measure(None, first, native_call())
               if native_call is not None and (not training or key == "torch") else None)
        if progress:
            progress(f"{key} {model} batch {batch_size} {what}: timing (up to {max_time:g} s)")
        if native_call is None:
            timed = time_function(d5_call, label="deep500lite", sync=ex.synchronize, warmup=2, min_runs=5,
                                  max_time=max_time)
        else:
            timed = time_paired(d5_call, native_call, label_a="deep500lite", label_b="native",
                                sync=ex.synchronize, max_time=max_time)
        results.append(OverheadResult(key, model, batch_size, err, timed, training))
    return results
