"""Training metrics (Deep500's ``TrainingAccuracy`` and ``TestAccuracy``, and more).

Each metric is a :class:`~deep500lite.TestMetric` and a training event: passed to
:func:`~deep500lite.lv2.trainer.test_training` (``metrics=[...]``) or to a
:class:`~deep500lite.lv2.trainer.Trainer` as an event, it reads what the trainer recorded in
``stats.steps`` / ``stats.epochs`` and keeps every raw sample in :attr:`TrainingMetric.samples`.
:meth:`TrainingMetric.measure` gives the headline value (the result ``test_training``
returns) and :meth:`TrainingMetric.summary` the median of the samples with its nonparametric
95% confidence interval (:func:`deep500lite.metrics.statistics.summarize`).

=========================  ============================  ==========================  ======
metric                     samples                       ``measure`` returns         better
=========================  ============================  ==========================  ======
:class:`TrainingAccuracy`  per epoch, percent            the last epoch's            higher
:class:`TestAccuracy`      per epoch, percent            the last evaluation         higher
:class:`TimeToAccuracy`    the one crossing time (s)     seconds (``inf``: never)    lower
:class:`Throughput`        per step, samples/s           samples / total step time   higher
:class:`StepTimeBreakdown` per step, s, for each part    dict of medians             lower
:class:`PeakMemory`        per epoch, bytes              peak bytes                  lower
=========================  ============================  ==========================  ======

:class:`TrainingMetric` derives from :class:`~deep500lite.metrics.events.TrainingEvent`, the
base of every training event, defined in this leaf package and re-exported by
:mod:`deep500lite.lv2.events`.
"""

from __future__ import annotations

import math
import sys

from deep500lite.errors import UserError, format_choices
from deep500lite.metrics.base import TestMetric
from deep500lite.metrics.events import TrainingEvent
from deep500lite.metrics.statistics import Summary, summarize

__all__ = ["TrainingMetric", "TrainingAccuracy", "TestAccuracy", "TimeToAccuracy", "Throughput",
           "StepTimeBreakdown", "PeakMemory", "DefaultTrainingMetrics"]


def _flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{name} must be True or False. Received: {name}={value!r}")
    return value


def DefaultTrainingMetrics() -> list:  # noqa: N802 - Deep500's name
    """Deep500's default training metrics: ``[TrainingAccuracy(), TestAccuracy()]`` (new objects each call)."""
    return [TrainingAccuracy(), TestAccuracy()]


class TrainingMetric(TestMetric, TrainingEvent):
    """Base of the training metrics: a :class:`TestMetric` that is also a training event.

    As a :class:`~deep500lite.metrics.events.TrainingEvent` it has every hook (no-ops here), so
    the trainer calls it like any event; subclasses override the hooks they measure in.

    Attributes:
        samples: every raw sample, in the order measured.
        stop_reason: as on a training event (metrics never ask to stop).
    """

    def __init__(self):
        super().__init__(reruns=1)
        self.samples: list[float] = []

    def summary(self) -> Summary | None:
        """Median of the finite samples with its 95% CI (None without samples)."""
        values = [v for v in self.samples if v is not None and math.isfinite(v)]
        return summarize(values) if values else None

    def measure_summary(self, inputs, outputs, reference_outputs):
        """The :meth:`summary` of the raw samples."""
        return self.summary()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class TrainingAccuracy(TrainingMetric):
    """Training accuracy in percent: per epoch, the correct predictions over the epoch's batches,
    each batch scored on the outputs of its own training step (before its update).

    Needs the trainer's ``network_output`` (``output_node`` in ``test_training``).

    Args:
        max_acc: measure the best epoch's accuracy instead of the last one's (Deep500's option).
    """

    higher_is_better = True
    name = "TrainingAccuracy"

    def __init__(self, max_acc: bool = False):
        super().__init__()
        self.max_acc = _flag("max_acc", max_acc)

    def after_epoch(self, trainer, stats, epoch):
        value = stats.epochs[-1].get("train_accuracy")
        if value is not None:
            self.samples.append(value)

    def measure(self, inputs, outputs, reference_outputs):
        """The last (with ``max_acc``: the best) epoch's training accuracy in percent, or None if none
        was measured."""
        if self.samples:
            return max(self.samples) if self.max_acc else self.samples[-1]
        return getattr(outputs, "train_accuracy", None)


class TestAccuracy(TrainingMetric):
    """Test accuracy in percent over the whole validation set, by argmax of the output node
    against the labels, after every evaluated epoch.

    Args:
        max_acc: measure the best evaluation instead of the last one (Deep500's option).

    Attributes:
        epochs: the epoch of each sample.
    """

    higher_is_better = True
    name = "TestAccuracy"

    def __init__(self, max_acc: bool = False):
        super().__init__()
        self.max_acc = _flag("max_acc", max_acc)
        self.epochs: list[int] = []

    def after_epoch(self, trainer, stats, epoch):
        value = stats.epochs[-1].get("test_accuracy")
        if value is not None:
            self.samples.append(value)
            self.epochs.append(epoch)

    def measure(self, inputs, outputs, reference_outputs):
        """The last (with ``max_acc``: the best) test accuracy in percent, or None if the validation set
        was never evaluated."""
        if self.samples:
            return max(self.samples) if self.max_acc else self.samples[-1]
        return getattr(outputs, "test_accuracy", None)


class TimeToAccuracy(TrainingMetric):
    """Seconds of training until the test accuracy first reached ``target``, compilation left out.

    The time is the ``elapsed`` of the first epoch record whose accuracy is at least the target
    (training, data loading and the evaluations of that and earlier epochs included: the time a
    user waits) minus the executor's compile time until then (``executor.compile_seconds``, which
    MLPerf counts as initialization, before ``run_start``). The compile time and the time with it
    are kept apart (:attr:`compile_seconds`, :attr:`wall_seconds`). It does not stop training;
    combine it with :class:`~deep500lite.lv2.events.TargetAccuracyStop` for that.

    Args:
        target: the accuracy in percent.
        key: ``"test_accuracy"`` or ``"train_accuracy"``.

    Attributes:
        seconds: the time without compilation, or None while not reached.
        wall_seconds: the time with compilation (the epoch's ``elapsed``), or None.
        compile_seconds: the executor's compile time until then, or None.
        epoch: the epoch that reached it (counted from 0, as in the epoch records), or None.
    """

    higher_is_better = False
    name = "TimeToAccuracy"

    def __init__(self, target: float, key: str = "test_accuracy"):
        super().__init__()
        if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 <= target <= 100:
            raise UserError(f"target must be an accuracy in percent, from 0 to 100. Received: {target!r}")
        if key not in ("test_accuracy", "train_accuracy"):
            raise UserError(f"Unknown accuracy key. Allowed values are "
                            f"{format_choices(('test_accuracy', 'train_accuracy'))}. Received: {key!r}")
        self.target, self.key = float(target), key
        self.seconds: float | None = None
        self.wall_seconds: float | None = None
        self.compile_seconds: float | None = None
        self.epoch: int | None = None
        self._compile_at_start = 0.0

    def before_training(self, trainer, stats):
        # compilation before training (MLPerf's initialization) is not training time at all
        self._compile_at_start = float(getattr(trainer.executor, "compile_seconds", 0.0) or 0.0)

    def after_epoch(self, trainer, stats, epoch):
        rec = stats.epochs[-1]
        value = rec.get(self.key)
        if self.seconds is None and value is not None and value >= self.target:
            compiled = float(getattr(trainer.executor, "compile_seconds", 0.0) or 0.0) - self._compile_at_start
            self.wall_seconds, self.compile_seconds, self.epoch = rec["elapsed"], compiled, epoch
            self.seconds = max(0.0, rec["elapsed"] - compiled)
            self.samples.append(self.seconds)

    def measure(self, inputs, outputs, reference_outputs):
        """Seconds to reach the target, or ``math.inf`` if it was never reached."""
        return self.seconds if self.seconds is not None else math.inf

    def __repr__(self) -> str:
        return f"TimeToAccuracy({self.target:g})"


class Throughput(TrainingMetric):
    """Training throughput in samples per second.

    Per step the sample is ``samples / (data_time + step_time)`` (``data_time`` left out with
    ``include_data_loading=False``); :meth:`measure` is all training samples over the sum of
    those times (validation excluded).
    """

    higher_is_better = True
    name = "Throughput"

    def __init__(self, include_data_loading: bool = True):
        super().__init__()
        self.include_data_loading = include_data_loading
        self.total_samples = 0
        self.total_time = 0.0

    def after_training_batch(self, trainer, stats, batch, outputs):
        s = stats.steps[-1]
        t = s["step_time"] + (s["data_time"] if self.include_data_loading else 0.0)
        self.total_samples += s["samples"]
        self.total_time += t
        self.samples.append(s["samples"] / t if t > 0 else math.inf)

    def measure(self, inputs, outputs, reference_outputs):
        """Samples per second over the whole training (None before any step)."""
        return self.total_samples / self.total_time if self.total_time > 0 else None


class StepTimeBreakdown(TrainingMetric):
    """Per-step time split into data loading, forward+backward and the optimizer's update.

    How each part is measured is described in :mod:`deep500lite.lv2.trainer`: data loading is
    the sampler's ``next()``, forward+backward is ``executor.inference_and_backprop`` as the
    optimizer calls it, and the optimizer part is the rest of ``optimizer.step`` (host copies and
    the update). Optimizers that fuse the whole step (the native TensorFlow ones) give NaN for
    the split parts; ``step`` (the whole ``optimizer.step``) is always there.

    Args:
        warmup: steps left out of the summaries at the start (graph tracing, allocation);
            the raw samples keep them.

    Attributes:
        parts: ``{"data_loading": [...], "forward_backward": [...], "optimizer": [...],
            "step": [...]}``, raw seconds per step.
    """

    higher_is_better = False
    name = "StepTimeBreakdown"
    _KEYS = {"data_loading": "data_time", "forward_backward": "forward_backward_time",
             "optimizer": "optimizer_time", "step": "step_time"}

    def __init__(self, warmup: int = 1):
        super().__init__()
        if not isinstance(warmup, int) or warmup < 0:
            raise UserError(f"warmup must be an integer >= 0. Received: {warmup!r}")
        self.warmup = warmup
        self.parts: dict[str, list[float]] = {k: [] for k in self._KEYS}

    def after_training_batch(self, trainer, stats, batch, outputs):
        s = stats.steps[-1]
        for part, key in self._KEYS.items():
            self.parts[part].append(s[key])
        self.samples.append(s["data_time"] + s["step_time"])

    def summaries(self) -> dict[str, Summary | None]:
        """Per part, the median and 95% CI of its finite samples after the warm-up steps."""
        out = {}
        for part, values in self.parts.items():
            kept = [v for v in values[self.warmup:] if math.isfinite(v)]
            out[part] = summarize(kept) if kept else None
        return out

    def summary(self) -> Summary | None:
        """Summary of the whole step (data loading included) after the warm-up steps."""
        kept = [v for v in self.samples[self.warmup:] if math.isfinite(v)]
        return summarize(kept) if kept else None

    def measure(self, inputs, outputs, reference_outputs):
        """``{part: median seconds}`` (NaN for a part that was not measured)."""
        return {part: (s.median if s is not None else math.nan) for part, s in self.summaries().items()}


def _host_peak_bytes() -> int | None:
    try:
        import resource
    except ImportError:  # not on this platform (Windows)
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # Linux reports KiB


def _device_peak(executor, reset: bool = False) -> int | None:
    """The executor's device peak (``GraphExecutor.device_peak_memory``); None for an object without one."""
    read = getattr(executor, "device_peak_memory", None)
    return read(reset=reset) if callable(read) else None


class PeakMemory(TrainingMetric):
    """Peak memory in bytes.

    On the CPU: the process's peak resident set size (``resource.getrusage(...).ru_maxrss``),
    a high-water mark since the process started (so it includes what ran before training).
    On a GPU: the executor's :meth:`~deep500lite.GraphExecutor.device_peak_memory`
    (``torch.cuda.max_memory_allocated`` for torch executors and
    ``tf.config.experimental.get_memory_info(...)["peak"]`` for TensorFlow ones), reset when
    training starts (so it is training's own peak). ONNX Runtime's GPU memory is not measured.

    Attributes:
        host_peak_bytes: the host peak at the end of training.
        device_peak_bytes: the GPU peak, or None on the CPU or when it cannot be read.
    """

    higher_is_better = False
    name = "PeakMemory"

    def __init__(self):
        super().__init__()
        self.host_peak_bytes: int | None = None
        self.device_peak_bytes: int | None = None

    def before_training(self, trainer, stats):
        _device_peak(trainer.executor, reset=True)

    def _read(self, trainer) -> int | None:
        self.host_peak_bytes = _host_peak_bytes()
        self.device_peak_bytes = _device_peak(trainer.executor)
        return self.device_peak_bytes if self.device_peak_bytes is not None else self.host_peak_bytes

    def after_epoch(self, trainer, stats, epoch):
        value = self._read(trainer)
        if value is not None:
            self.samples.append(value)

    def after_training(self, trainer, stats):
        self._read(trainer)

    def measure(self, inputs, outputs, reference_outputs):
        """The GPU peak when training ran on a GPU, else the host peak (bytes)."""
        return self.device_peak_bytes if self.device_peak_bytes is not None else self.host_peak_bytes
