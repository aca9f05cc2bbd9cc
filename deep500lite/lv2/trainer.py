"""Level 2: the training loop (Deep500's ``Trainer.run_loop`` and ``test_training``).

:class:`Trainer` runs epochs of ``optimizer.step`` over a training sampler, evaluates the whole
validation set after every epoch, records every step and epoch in :class:`TrainingStats`, and
calls :mod:`events <deep500lite.lv2.events>` around each part. :func:`test_training` wraps it
for metrics: it runs the training and returns one result per metric.

Timing of a step (``stats.steps`` rows, in seconds, ``time.perf_counter``)::

    t0; batch = next(sampler); t1                   data_time = t1 - t0 (transforms included)
    t1; outputs = optimizer.step(batch); sync; t2   step_time = t2 - t1
        inside it, executor.inference_and_backprop  forward_backward_time (timed around the
        (when the optimizer calls it)               call, with executor.synchronize())
                                                    optimizer_time = step_time - forward_backward_time

The forward+backward time is measured by wrapping ``executor.inference_and_backprop`` of this
executor object for the duration of :meth:`Trainer.run_loop` (the wrapper is removed after).
Optimizers that run forward, backward and update as one fused call (the native TensorFlow
optimizers) never call it, so their split is not available: ``forward_backward_time`` and
``optimizer_time`` are NaN and only ``step_time`` is recorded.

Compilation is not step time: the increase of ``executor.compile_seconds`` during a step (a
compiled executor tracing or compiling for a new input shape) is recorded as the step's
``compile_time`` and subtracted from its ``step_time`` (and, when it happened inside
``inference_and_backprop``, from its ``forward_backward_time``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Sequence

import numpy as np

from deep500lite.errors import NonFiniteLossError  # noqa: F401 - defined in errors, re-exported here
from deep500lite.errors import UserError, UserTypeError
from deep500lite.lv2.dataset import Dataset
from deep500lite.lv2.events import TerminalBarEvent
from deep500lite.lv2.sampler import OrderedSampler, ShuffleSampler
from deep500lite.metrics.training import DefaultTrainingMetrics

__all__ = ["Trainer", "TrainingStats", "TrainingResults", "NonFiniteLossError", "test_training",
           "DefaultTrainerEvents"]


def DefaultTrainerEvents(epochs: int) -> list:  # noqa: N802 - Deep500's name
    """Deep500's default training events: a list with one :class:`~deep500lite.lv2.events.TerminalBarEvent`.

    Args:
        epochs: the number of epochs (Deep500's progress bar showed it; here the trainer knows it).

    Returns:
        A new list, so callers can append their own events (``DefaultTrainerEvents(10) + [...]``).
    """
    return [TerminalBarEvent(epochs)]


@dataclasses.dataclass
class TrainingStats:
    """What a training run recorded.

    Attributes:
        epochs: one dict per epoch: ``epoch``, ``steps``, ``samples``, ``train_loss`` (mean of
            the steps' losses), ``train_accuracy`` (percent, over the epoch's batches, each
            measured before its update), ``test_loss``, ``test_accuracy`` (percent, whole
            validation set), ``test_samples``, ``train_time`` (steps and data loading),
            ``test_time``, ``elapsed`` (seconds since training started, at the end of the
            epoch), ``global_step_end``, ``complete`` (False when a stop cut the epoch short),
            and the current hyperparameters (``learning_rate``...).
        steps: one dict per step: ``epoch``, ``step``, ``global_step``, ``samples``, ``loss``,
            ``accuracy``, ``data_time``, ``step_time``, ``forward_backward_time``,
            ``optimizer_time``, ``elapsed`` and the hyperparameters at that step.
        epoch: the epoch running; from its ``after_epoch`` hooks on, the number of epochs done
            (the next epoch to run).
        global_step: steps done so far.
        stopped_by: why training ended before ``epochs`` epochs, or None.
        nonfinite: the message of a non-finite loss stop, or None.
        hyperparameters: the last values the schedules set.
        time_offset: seconds trained before a resume (``elapsed`` continues from it).
        initial_test: the validation set evaluated before the first epoch (as Deep500 did):
            ``{"test_accuracy", "test_loss", "test_samples", "test_time"}``, or None when there
            was no validation sampler, the trainer was told not to, or training was resumed.
    """

    epochs: list = dataclasses.field(default_factory=list)
    steps: list = dataclasses.field(default_factory=list)
    epoch: int = 0
    global_step: int = 0
    stopped_by: str | None = None
    nonfinite: str | None = None
    hyperparameters: dict = dataclasses.field(default_factory=dict)
    time_offset: float = 0.0
    start_time: float | None = None
    end_time: float | None = None
    initial_test: dict | None = None

    @property
    def test_accuracy(self) -> float | None:
        """The last epoch's test accuracy (percent), or None."""
        for rec in reversed(self.epochs):
            if rec.get("test_accuracy") is not None:
                return rec["test_accuracy"]
        return None

    @property
    def train_accuracy(self) -> float | None:
        """The last epoch's training accuracy (percent), or None."""
        return self.epochs[-1].get("train_accuracy") if self.epochs else None

    @property
    def total_time(self) -> float:
        """Seconds from the start of training (before any resume) to its end (or now)."""
        if self.start_time is None:
            return self.time_offset
        end = self.end_time if self.end_time is not None else time.perf_counter()
        return self.time_offset + end - self.start_time

    def to_dict(self, steps: bool = True) -> dict:
        """A JSON-ready dict (NaN stays NaN; :class:`~deep500lite.lv2.events.JSONSummaryWriter` writes null)."""
        out = {"epochs": list(self.epochs), "epoch": self.epoch, "global_step": self.global_step,
               "stopped_by": self.stopped_by, "nonfinite": self.nonfinite,
               "hyperparameters": dict(self.hyperparameters), "total_time": self.total_time,
               "initial_test": None if self.initial_test is None else dict(self.initial_test)}
        if steps:
            out["steps"] = list(self.steps)
        return out


class TrainingResults(list):
    """The list :func:`test_training` returns (one result per metric), with the run's
    :class:`TrainingStats` as :attr:`stats`."""

    def __init__(self, values, stats: TrainingStats):
        super().__init__(values)
        self.stats = stats


class _ForwardBackwardTimer:
    """Times ``executor.inference_and_backprop`` by shadowing it on the executor object."""

    def __init__(self, executor, sync: bool, clock):
        self.executor, self.sync, self.clock = executor, sync, clock
        self.elapsed, self.calls = 0.0, 0
        self._saved = None

    def __enter__(self):
        ex = self.executor
        self._saved = ex.__dict__.get("inference_and_backprop") if hasattr(ex, "__dict__") else None
        original = ex.inference_and_backprop

        def timed(*args, **kwargs):
            c0 = _compile_seconds(ex)
            t0 = self.clock()
            try:
                return original(*args, **kwargs)
            finally:
                if self.sync:
                    ex.synchronize()
                self.elapsed += self.clock() - t0 - (_compile_seconds(ex) - c0)
                self.calls += 1

        try:
            ex.inference_and_backprop = timed
        except AttributeError:  # an executor with __slots__ cannot be wrapped; no split then
            self.executor = None
        return self

    def take(self) -> float:
        """The forward+backward time since the last call (NaN if it was not called)."""
        value = self.elapsed if self.calls else math.nan
        self.elapsed, self.calls = 0.0, 0
        return value

    def __exit__(self, *exc):
        ex = self.executor
        if ex is None:
            return
        if self._saved is not None:
            ex.inference_and_backprop = self._saved
        else:
            ex.__dict__.pop("inference_and_backprop", None)


def _compile_seconds(executor) -> float:
    """The executor's cumulative compile time so far (0.0 for one that does not report it)."""
    return float(getattr(executor, "compile_seconds", 0.0) or 0.0)


def _label_node(sampler) -> str | None:
    return getattr(getattr(sampler, "dataset", None), "label_node", None)


def _count_correct(prediction, labels) -> tuple[int, int]:
    """Correct predictions by argmax over the class axis (1), and how many were compared."""
    pred = np.asarray(prediction)
    lab = np.asarray(labels)
    if pred.ndim < 2:
        raise UserError("Accuracy needs class scores shaped (batch, classes, ...); pass the logits or probabilities "
                        f"as network_output. Received: an output of shape {list(pred.shape)}")
    guess = pred.argmax(axis=1)
    if lab.shape == pred.shape:  # one-hot or probability labels
        lab = lab.argmax(axis=1)
    if lab.shape != guess.shape:
        raise UserError(f"Labels of shape {list(lab.shape)} do not match predictions of shape "
                        f"{list(pred.shape)} (class axis 1); labels are class indices shaped like the predictions "
                        f"without axis 1 ({list(guess.shape)}), or one-hot like the predictions. "
                        f"Received: labels of shape {list(np.shape(labels))}")
    return int(np.count_nonzero(guess == lab)), int(guess.size)


def _finite(value) -> bool:
    return bool(np.all(np.isfinite(np.asarray(value, dtype=np.float64))))


def _call(events, hook, *args):
    """Call ``hook`` on every event; the first that returns False gives the stop reason."""
    reason = None
    for e in events:
        fn = getattr(e, hook, None)
        if fn is None:
            continue
        if fn(*args) is False and reason is None:
            why = getattr(e, "stop_reason", None)
            reason = f"{type(e).__name__}.{hook}" + (f": {why}" if why else "")
    return reason


class Trainer:
    """Runs training epochs with events (Deep500's ``Trainer``).

    Args:
        train_sampler: yields the training batches (a :class:`~deep500lite.Sampler`); its
            dataset's ``label_node`` names the labels for the training accuracy.
        validation_sampler: yields the validation batches, or None for no validation. The
            whole validation set is evaluated after every epoch: a sampler that drops its last
            partial batch (``drop_last_batch=True``) is asked for it during validation, and a
            partial batch is padded (repeating its last sample) when the network's input has a
            fixed batch size; padded rows are not counted.
        executor: the :class:`~deep500lite.GraphExecutor`.
        optimizer: the :class:`~deep500lite.Optimizer` (its ``loss`` names the loss output).
        network_output: the output holding class scores, for accuracies (None: losses only).
        events: events for every :meth:`run_loop` call (more can be passed to ``run_loop``).
        on_nonfinite: what a NaN or infinite loss does: ``"raise"`` (default) stops training
            and raises :class:`NonFiniteLossError` after the ``after_training`` events ran;
            ``"stop"`` stops training and records the message in ``stats.nonfinite`` and
            ``stats.stopped_by``; ``"ignore"`` goes on.
        synchronize: call ``executor.synchronize()`` at the end of each step and of each timed
            forward+backward, so times include the device's work (GPU).
        test_every: evaluate the validation set every this many epochs (and after the last).
        test_before_training: evaluate the validation set once before the first epoch, as
            Deep500's trainer did (into ``stats.initial_test``; not part of the training's time).
        clock: the clock in seconds (tests inject a fake one).

    Attributes:
        stats: the :class:`TrainingStats` of the current (or last) run; kept across
            :meth:`run_loop` calls, so training can continue for more epochs.
        total_epochs: the ``epochs`` of the current :meth:`run_loop`.
    """

    _NONFINITE = ("raise", "stop", "ignore")

    def __init__(self, train_sampler, validation_sampler, executor, optimizer, network_output: str | None = None,
                 events: Sequence | None = None, on_nonfinite: str = "raise", synchronize: bool = True,
                 test_every: int = 1, test_before_training: bool = True,
                 clock: Callable[[], float] = time.perf_counter):
        if not hasattr(optimizer, "step"):
            raise UserTypeError("optimizer must be a d5.Optimizer (with step(inputs)). "
                                f"Received: {type(optimizer).__name__}")
        if not hasattr(executor, "inference"):
            raise UserTypeError(f"executor must be a d5.GraphExecutor. Received: {type(executor).__name__}")
        for name, s in (("train_sampler", train_sampler), ("validation_sampler", validation_sampler)):
            if s is not None and not hasattr(s, "__iter__"):
                raise UserTypeError(f"{name} must be a sampler (an iterable of feed dicts). "
                                    f"Received: {type(s).__name__}")
        if train_sampler is None:
            raise UserTypeError("train_sampler must be a sampler. Received: None")
        outputs = executor.network.outputs
        if network_output is not None and network_output not in outputs:
            raise UserError(f"network_output {network_output!r} is not an output of the network. "
                            f"Outputs: {outputs}. Received: {network_output!r}")
        if on_nonfinite not in self._NONFINITE:
            raise UserError(f"on_nonfinite must be one of {self._NONFINITE}. Received: {on_nonfinite!r}")
        if not isinstance(test_every, int) or test_every < 1:
            raise UserError(f"test_every must be an integer >= 1. Received: {test_every!r}")
        self.train_sampler, self.validation_sampler = train_sampler, validation_sampler
        self.executor, self.optimizer = executor, optimizer
        self.network_output = network_output
        self.events = list(events or [])
        self.on_nonfinite, self.synchronize, self.test_every = on_nonfinite, synchronize, test_every
        self.test_before_training = bool(test_before_training)
        self.clock = clock
        self.stats = TrainingStats()
        self.total_epochs = 0
        self._stop_reason: str | None = None

    # -------------------------------------------------------------------------- properties
    @property
    def loss(self) -> str:
        """The name of the loss output (the optimizer's)."""
        return getattr(self.optimizer, "loss", "loss")

    @property
    def steps_per_epoch(self) -> int:
        """Training batches per epoch (``len(train_sampler)``, 0 when it has no length)."""
        try:
            return len(self.train_sampler)
        except TypeError:
            return 0

    def describe(self) -> dict:
        """The run's configuration as a JSON-ready dict (for summaries)."""
        opt = self.optimizer
        hyper = {k: v for k, v in vars(opt).items()
                 if not k.startswith("_") and isinstance(v, (int, float, bool, str)) and k != "loss"}
        return {"executor": type(self.executor).__name__, "framework": getattr(self.executor, "framework", ""),
                "device": str(getattr(self.executor, "devname", "")), "optimizer": type(opt).__name__,
                "hyperparameters": hyper, "loss": self.loss, "network_output": self.network_output,
                "batch_size": getattr(self.train_sampler, "batch_size", None),
                "train_sampler": type(self.train_sampler).__name__,
                "validation_sampler": type(self.validation_sampler).__name__ if self.validation_sampler else None,
                "epochs": self.total_epochs}

    def stop(self, reason: str = "Trainer.stop() was called") -> None:
        """Ask training to stop after the current step (as a hook returning False does)."""
        self._stop_reason = reason

    def _hyper_now(self) -> dict:
        values = {}
        for name in set(self.stats.hyperparameters) | {"learning_rate"}:
            v = getattr(self.optimizer, name, None)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                values[name] = float(v)
        return values

    def elapsed(self) -> float:
        """Seconds of training so far (across resumes)."""
        s = self.stats
        return s.time_offset + (self.clock() - s.start_time if s.start_time is not None else 0.0)

    # -------------------------------------------------------------------------- evaluation
    def _padded(self, batch: dict) -> tuple[dict, int]:
        """Pad a short batch to the network's fixed batch size; returns (feeds, real rows).

        When an input declares a fixed first dimension larger than the batch, every feed with
        the batch's row count is padded to it by repeating its last row.
        """
        rows = [v.shape[0] for v in batch.values() if hasattr(v, "shape") and len(v.shape)]
        if not rows:
            return batch, 0
        n = rows[0]
        describe = getattr(self.executor.network, "input_descriptors", None)
        if describe is None:  # a framework-native network (no ONNX graph) declares no fixed batch size
            return batch, n
        declared = describe()
        fixed = [d.shape[0] for name, d in declared.items()
                 if name in batch and d is not None and d.shape and isinstance(d.shape[0], int)]
        want = max(fixed, default=n)
        if want <= n:
            return batch, n
        out = dict(batch)
        for name, value in batch.items():
            if hasattr(value, "shape") and len(value.shape) and value.shape[0] == n:
                arr = np.asarray(value)
                out[name] = np.concatenate([arr, np.repeat(arr[-1:], want - n, axis=0)])
        return out, n

    def evaluate(self, events: Sequence | None = None) -> dict:
        """Run the whole validation set once.

        Returns:
            ``{"test_accuracy": percent or None, "test_loss": mean or None, "test_samples": n,
            "test_time": seconds}``. The loss is the sample-weighted mean of the batch losses
            over the batches that needed no padding (a padded batch's mean loss would count the
            copies).
        """
        sampler = self.validation_sampler
        if sampler is None:
            raise UserError("This trainer has no validation sampler to evaluate; create the Trainer with a "
                            "validation_sampler. Received: validation_sampler=None")
        events = self.events if events is None else events
        stats = self.stats
        label = _label_node(sampler)
        t0 = self.clock()
        correct = counted = samples = 0
        loss_sum, loss_n = 0.0, 0
        restore = None
        if getattr(sampler, "drop_last_batch", False):
            restore, sampler.drop_last_batch = True, False
        try:
            for batch in sampler:
                stop = _call(events, "before_test_batch", self, stats, batch)
                feeds, n = self._padded(batch)
                outputs = self.executor.inference(feeds)
                stop = _call(events, "after_test_batch", self, stats, batch, outputs) or stop
                if stop is not None and self._stop_reason is None:
                    self._stop_reason = stop  # the whole set is still evaluated; training stops after the epoch
                samples += n
                if self.network_output is not None and label is not None and label in batch:
                    c, m = _count_correct(np.asarray(outputs[self.network_output])[:n], np.asarray(batch[label])[:n])
                    correct, counted = correct + c, counted + m
                if self.loss in outputs and feeds is batch:
                    loss_sum += float(np.asarray(outputs[self.loss])) * n
                    loss_n += n
        finally:
            if restore:
                sampler.drop_last_batch = True
        return {"test_accuracy": 100.0 * correct / counted if counted else None,
                "test_loss": loss_sum / loss_n if loss_n else None,
                "test_samples": samples, "test_time": self.clock() - t0}

    # -------------------------------------------------------------------------- training
    def run_loop(self, epochs: int, events: Sequence | None = None) -> TrainingStats:
        """Train until ``epochs`` epochs are done in total (Deep500's name).

        ``epochs`` counts from the start of training: a trainer restored from a checkpoint taken
        after epoch ``k`` (:func:`deep500lite.lv2.checkpoint.load_checkpoint`) runs epochs
        ``k+1 .. epochs``, and so does a second ``run_loop`` call on the same trainer.

        Args:
            epochs: the total number of epochs.
            events: events for this call, after the trainer's own.

        Returns:
            The :class:`TrainingStats` (also :attr:`stats`).

        Raises:
            NonFiniteLossError: the loss became NaN or infinite (with ``on_nonfinite="raise"``).
        """
        if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0:
            raise UserError(f"epochs must be an integer >= 0. Received: {epochs!r}")
        events = self.events + list(events or [])
        stats = self.stats
        stats.stopped_by, stats.nonfinite, stats.end_time = None, None, None
        if stats.start_time is not None:  # continuing: elapsed goes on from the previous run
            stats.time_offset = stats.epochs[-1]["elapsed"] if stats.epochs else stats.time_offset
        self.total_epochs = int(epochs)
        self._stop_reason = None
        error = None
        reason = _call(events, "before_training", self, stats)
        if (reason is None and self.test_before_training and self.validation_sampler is not None
                and stats.start_time is None and not stats.epochs):
            reason = _call(events, "before_test_set", self, stats)
            stats.initial_test = self.evaluate(events)
            reason = _call(events, "after_test_set", self, stats, stats.initial_test) or reason or self._stop_reason
        stats.start_time = self.clock()
        timer = _ForwardBackwardTimer(self.executor, self.synchronize, self.clock)
        with timer:
            try:
                while reason is None and stats.epoch < self.total_epochs:
                    reason = _call(events, "before_epoch", self, stats, stats.epoch)
                    if reason is not None:
                        break
                    reason, error = self._epoch(events, timer)
                    if error is not None:
                        break
            finally:
                stats.end_time = self.clock()
        stats.stopped_by = reason or (error.args[0] if error is not None else None)
        _call(events, "after_training", self, stats)
        if error is not None:
            raise error
        return stats

    def _epoch(self, events, timer) -> tuple[str | None, NonFiniteLossError | None]:
        stats, epoch, clock = self.stats, self.stats.epoch, self.clock
        label = _label_node(self.train_sampler)
        first_step = len(stats.steps)
        reason, error, step = None, None, 0
        t_epoch = clock()
        iterator = iter(self.train_sampler)
        per_epoch = self.steps_per_epoch
        while reason is None and not (per_epoch and step >= per_epoch):
            reason = _call(events, "before_sampling", self, stats)
            t0 = clock()
            try:
                batch = next(iterator)
            except StopIteration:
                break
            t1 = clock()
            reason = _call(events, "after_sampling", self, stats, batch) or reason
            reason = _call(events, "before_training_batch", self, stats, batch) or reason
            reason = _call(events, "before_optimizer_step", self, stats, batch) or reason
            timer.take()
            c1 = _compile_seconds(self.executor)
            t1b = clock()
            outputs = self.optimizer.step(batch)
            if self.synchronize:
                self.executor.synchronize()
            t2 = clock()
            fwd_bwd = timer.take()
            compile_time = _compile_seconds(self.executor) - c1
            reason = _call(events, "after_optimizer_step", self, stats, batch, outputs) or reason
            loss = float(np.asarray(outputs[self.loss])) if self.loss in outputs else math.nan
            n = len(batch[label]) if label in batch else len(next(iter(batch.values())))
            acc = None
            if self.network_output is not None and label in batch and self.network_output in outputs:
                c, m = _count_correct(outputs[self.network_output], batch[label])
                acc = 100.0 * c / m
            step_time = t2 - t1b - compile_time
            rec = {"epoch": epoch, "step": step, "global_step": stats.global_step, "samples": int(n),
                   "loss": loss, "accuracy": acc, "data_time": t1 - t0, "step_time": step_time,
                   "compile_time": compile_time,
                   "forward_backward_time": fwd_bwd,
                   "optimizer_time": step_time - fwd_bwd if not math.isnan(fwd_bwd) else math.nan,
                   "elapsed": self.elapsed(), **self._hyper_now()}
            stats.steps.append(rec)
            stats.global_step += 1
            if self.on_nonfinite != "ignore" and self.loss in outputs and not _finite(outputs[self.loss]):
                message = (f"The training loss '{self.loss}' is {loss} at epoch {epoch}, step {step} (global step "
                           f"{rec['global_step']}; counted from 0), learning rate "
                           f"{rec.get('learning_rate', 'unknown')}. Training stopped; the statistics of the "
                           f"{len(stats.steps) - 1} earlier steps are kept. Lower the learning rate, check the "
                           "inputs for NaN/inf, or add gradient clipping (gradient_modifier=).")
                stats.nonfinite = message
                if self.on_nonfinite == "raise":
                    error = NonFiniteLossError(message, stats, epoch, step, rec["global_step"])
                reason = reason or message
            reason = _call(events, "after_training_batch", self, stats, batch, outputs) or reason
            if self._stop_reason is not None:
                reason = reason or self._stop_reason
            step += 1
            if reason is not None:
                break
        t_train = clock() - t_epoch
        steps = stats.steps[first_step:]
        complete = error is None and (len(steps) == self.steps_per_epoch if self.steps_per_epoch else reason is None)
        result = {"test_accuracy": None, "test_loss": None, "test_samples": 0, "test_time": 0.0}
        last = epoch + 1 >= self.total_epochs or reason is not None
        if self.validation_sampler is not None and error is None and ((epoch + 1) % self.test_every == 0 or last):
            reason = _call(events, "before_test_set", self, stats) or reason
            result = self.evaluate(events)
            reason = _call(events, "after_test_set", self, stats, result) or reason
        n_train = sum(s["samples"] for s in steps)
        accs = [(s["accuracy"], s["samples"]) for s in steps if s["accuracy"] is not None]
        losses = [s["loss"] for s in steps]
        stats.epochs.append({
            "epoch": epoch, "steps": len(steps), "samples": n_train,
            "train_loss": float(np.mean(losses)) if losses else math.nan,
            "train_accuracy": (sum(a * m for a, m in accs) / sum(m for _, m in accs)) if accs else None,
            **result, "train_time": t_train, "elapsed": self.elapsed(), "global_step_end": stats.global_step,
            "complete": complete, **self._hyper_now()})
        stats.epoch += 1
        reason = _call(events, "after_epoch", self, stats, epoch) or reason
        if self._stop_reason is not None:
            reason = reason or self._stop_reason
        return reason, error


def _as_sampler(name: str, value, batch_size: int, cls, **kwargs):
    """A sampler as given, or Deep500's default sampler over a Dataset."""
    if value is None or hasattr(value, "__iter__") and not isinstance(value, Dataset):
        return value
    if isinstance(value, Dataset) or (hasattr(value, "__getitem__") and hasattr(value, "__len__")):
        return cls(value, batch_size, **kwargs)
    raise UserTypeError(f"test_training: {name} must be a Sampler or a Dataset. Received: {type(value).__name__}")


def test_training(executor, train_sampler, validation_sampler, optimizer, epochs: int, batch_size: int,
                  output_node: str | None = None, metrics: Sequence | None = None,
                  events: Sequence | None = None, verbose: bool = True) -> TrainingResults:
    """Train and measure: Deep500's ``test_training``.

    As in Deep500, the training and validation sets may be Samplers or Datasets: a training
    Dataset is visited by a ``ShuffleSampler(dataset, batch_size)``, a validation Dataset by an
    ``OrderedSampler`` (the whole set is evaluated either way, so the order does not change the
    result); ``metrics=None`` means Deep500's ``DefaultTrainingMetrics()`` (training and test
    accuracy); ``events=None`` means ``DefaultTrainerEvents(epochs)`` (a progress bar, drawn only
    on a terminal).

    Metrics that are training events (those of :mod:`deep500lite.metrics.training`) are added to
    the events and collect their samples during training; any other
    :class:`~deep500lite.TestMetric` (such as ``WallclockTime(reruns=0, avg_over=1)``) has ``begin``
    called before training and ``end`` after it. Each result is ``metric.measure(None, stats,
    None)``; as Deep500 did, each metric's result is printed as ``"<Metric>: <value>"``.

    The training runs once. A :class:`~deep500lite.WallclockTime` asking for reruns (Deep500's
    default ``WallclockTime()`` asks for 100) is refused with an error: Deep500 trained the network
    that many more times for it.

    Args:
        executor: the executor whose network (with its loss) is trained.
        train_sampler: the training sampler or Dataset (Deep500's ``training_set``).
        validation_sampler: the validation sampler or Dataset, or None (Deep500's ``validation_set``).
        optimizer: the optimizer.
        epochs: number of epochs.
        batch_size: the samplers' batch size (checked against them).
        output_node: the output with the class scores (for accuracies); None: losses only.
        metrics: the metrics to measure; None: ``DefaultTrainingMetrics()``.
        events: more training events (progress bar, schedules, stop conditions, summaries);
            None: ``DefaultTrainerEvents(epochs)``.
        verbose: print each metric's result after training.

    Returns:
        A list with one result per metric, in the order given; its ``.stats`` is the run's
        :class:`TrainingStats`.

    Raises:
        UserError: a sampler's batch size differs from ``batch_size``, or a WallclockTime asks for
            reruns.
        NonFiniteLossError: the loss became NaN or infinite (the metrics keep what they measured).
    """
    train_sampler = _as_sampler("train_sampler", train_sampler, batch_size, ShuffleSampler)
    # the whole validation set is evaluated, even when it is smaller than one batch
    validation_sampler = _as_sampler("validation_sampler", validation_sampler, batch_size, OrderedSampler,
                                     drop_last_batch=False)
    if events is None:
        events = DefaultTrainerEvents(epochs)
    if metrics is None:
        metrics = DefaultTrainingMetrics()
    for name, s in (("train_sampler", train_sampler), ("validation_sampler", validation_sampler)):
        bs = getattr(s, "batch_size", None)
        if s is not None and bs is not None and bs != batch_size:
            raise UserError(f"test_training: {name} has batch_size {bs}, but batch_size={batch_size} was given. "
                            f"Create the sampler with the same batch size. Received: {name} batch_size={bs}")
    training_metrics = [m for m in metrics if any(hasattr(m, h) for h in ("after_epoch", "after_training_batch"))]
    plain = [m for m in metrics if m not in training_metrics]
    for m in plain:
        if getattr(m, "avg_over", None) is not None and getattr(m, "reruns", 0) > 0:
            raise UserError(f"test_training: {m!r} asks for {m.reruns} runs, and test_training trains once "
                            f"(Deep500 trained the network {m.reruns} more times for it). To time the training, "
                            f"use WallclockTime(reruns=0, avg_over=1). Received: {m!r}")
    trainer = Trainer(train_sampler, validation_sampler, executor, optimizer, network_output=output_node)
    for m in plain:
        m.begin(None)
    try:
        stats = trainer.run_loop(epochs, list(training_metrics) + list(events))
    finally:
        for m in plain:
            m.end(trainer.stats)
    results = TrainingResults([m.measure(None, stats, None) for m in metrics], stats)
    if verbose:
        for m, value in zip(metrics, results):
            summary = m.measure_summary(None, stats, None)
            print(f"{type(m).__name__}: {summary if isinstance(summary, str) else value}", flush=True)
    return results


test_training.__test__ = False  # a library function, not a pytest test
