"""Level 2: training events, the hooks :class:`~deep500lite.lv2.trainer.Trainer` calls.

An event is any object with some of the :class:`TrainingEvent` methods; subclass
:class:`TrainingEvent` to get no-op defaults for the others (the class is defined in the leaf
:mod:`deep500lite.metrics.events`, because the training metrics derive from it too, and
re-exported here). The trainer calls the hooks of
its events in list order. Every hook receives the trainer and its
:class:`~deep500lite.lv2.trainer.TrainingStats` first; a hook that returns ``False`` (exactly
``False``; ``None`` does not count) asks the trainer to stop (see :class:`TrainingEvent` for
when it stops). An event can give the reason through its ``stop_reason`` attribute.

Events provided here:

- :class:`TerminalBarEvent`: a progress bar on the terminal (``rich`` when installed).
- :class:`EpochHPSchedule`, :class:`StepHPSchedule`: hyperparameter schedules by epoch or by
  step, with linear warm-up; value helpers :func:`piecewise`, :func:`step_decay`,
  :func:`cosine_decay`, :func:`linear_warmup`.
- :class:`TargetAccuracyStop`, :class:`TimeBudgetStop`: stopping conditions;
  :class:`AccuracyAbortEvent` is Deep500's name for the test-accuracy stop.
- :class:`CSVSummaryWriter`, :class:`JSONSummaryWriter`: per-epoch and per-step summaries,
  written atomically after every epoch.
- :class:`PlotWriter`: loss and accuracy plots (PNG, matplotlib's Agg canvas).

Checkpointing is in :mod:`deep500lite.lv2.checkpoint` (:class:`~deep500lite.lv2.checkpoint.CheckpointEvent`);
the training metrics (:mod:`deep500lite.metrics.training`) are events too.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import sys
import time
from typing import Callable, Sequence

import numpy as np

from deep500lite.errors import FrameworkNotAvailableError, UserAttributeError, UserError, UserTypeError
from deep500lite.metrics.events import HOOKS, TrainingEvent
from deep500lite.utils import atomic_write_bytes, atomic_write_text, is_package_available

__all__ = ["TrainingEvent", "TerminalBarEvent", "EpochHPSchedule", "StepHPSchedule", "piecewise",
           "step_decay", "cosine_decay", "linear_warmup", "TargetAccuracyStop", "AccuracyAbortEvent", "TimeBudgetStop",
           "StepBudgetStop",
           "CSVSummaryWriter", "JSONSummaryWriter", "PlotWriter", "HOOKS", "set_hyperparameter"]

# ------------------------------------------------------------------------------------ progress
class TerminalBarEvent(TrainingEvent):
    """Training progress: epoch, batch, running loss and accuracy, then the epoch's test accuracy.

    On a terminal, a bar: ``rich`` when it is installed, otherwise one line per epoch rewritten in
    place with ``\\r``. When the stream is not a terminal (a file, a pipe, an MPI launcher), plain
    lines: one per epoch, and one for the test the trainer runs before the first epoch, so logs
    show the accuracies as Deep500's bars did.

    Args:
        enabled: ``None`` (default): the bar on a terminal, plain lines otherwise; ``True``: the
            bar even when the stream is not a terminal; ``False``: off. An integer is Deep500's
            ``total_epochs`` argument, accepted and not needed (the trainer knows the epochs),
            and means ``None``.
        stream: where to write (default ``sys.stderr``).
        use_rich: ``None``: rich when installed and the stream is a terminal; ``False``: the
            plain line; ``True``: rich (raises FrameworkNotAvailableError, an ImportError, if it is
            missing).
        every: redraw every this many steps (the last step of an epoch is always drawn).
    """

    def __init__(self, enabled: bool | None = None, stream=None, use_rich: bool | None = None, every: int = 1):
        if isinstance(enabled, (int, np.integer)) and not isinstance(enabled, bool):
            enabled = None  # Deep500's TerminalBarEvent(total_epochs)
        if enabled not in (None, True, False):
            raise UserError(f"enabled must be None, True or False. Received: {enabled!r}")
        if not isinstance(every, int) or every < 1:
            raise UserError(f"every must be an integer >= 1. Received: {every!r}")
        self.enabled, self.use_rich, self.every = enabled, use_rich, every
        self._stream = stream
        self._progress = None
        self._task = None
        self._active = False
        self._rich = False
        self._lines = False

    @property
    def stream(self):
        """The stream written to."""
        return self._stream if self._stream is not None else sys.stderr

    def _isatty(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        try:
            return bool(isatty and isatty())
        except (ValueError, OSError):  # a closed stream
            return False

    def before_training(self, trainer, stats):
        tty = self._isatty()
        self._active = self.enabled is not False
        self._lines = self.enabled is None and not tty
        if not self._active or self._lines:
            return
        if self.use_rich is None:
            self._rich = tty and is_package_available("rich")
        else:
            self._rich = bool(self.use_rich)
        if self._rich:
            try:
                from rich.console import Console
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            except ImportError as exc:
                raise FrameworkNotAvailableError("TerminalBarEvent(use_rich=True) needs rich, which is not "
                                                 "installed: pip install rich (or use_rich=None)") from exc

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                                      console=Console(file=self.stream), transient=False)
            self._progress.start()

    def _line(self, trainer, stats, epoch, done, total, info):
        width = 20
        filled = int(round(width * done / max(total, 1)))
        return (f"\repoch {epoch + 1}/{trainer.total_epochs} [{'=' * filled}{' ' * (width - filled)}] "
                f"{done}/{total} {info}")

    @staticmethod
    def _info(stats) -> str:
        if not stats.steps:
            return ""
        s = stats.steps[-1]
        text = f"loss {s['loss']:.4g}"
        if s.get("accuracy") is not None:
            text += f" acc {s['accuracy']:.1f}%"
        return text

    def _write_line(self, text: str) -> None:
        if self._rich:
            self._progress.console.print(text, markup=False, highlight=False)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def before_epoch(self, trainer, stats, epoch):
        first = stats.initial_test if (self._active and epoch == 0 and not stats.epochs) else None
        if first is not None and first.get("test_samples"):
            text = f"before training: {first['test_samples']} test samples"
            if first.get("test_accuracy") is not None:
                text += f", test acc {first['test_accuracy']:.2f}%"
            if first.get("test_loss") is not None:
                text += f", test loss {first['test_loss']:.4g}"
            self._write_line(text)
        if self._active and self._rich:
            self._task = self._progress.add_task(f"epoch {epoch + 1}/{trainer.total_epochs}",
                                                 total=trainer.steps_per_epoch, info="")

    def after_training_batch(self, trainer, stats, batch, outputs):
        if not self._active or self._lines:
            return
        step = stats.steps[-1]["step"] + 1
        total = trainer.steps_per_epoch
        if step % self.every and step != total:
            return
        info = self._info(stats)
        if self._rich:
            self._progress.update(self._task, completed=step, info=info)
        else:
            self.stream.write(self._line(trainer, stats, stats.epoch, step, total, info))
            self.stream.flush()

    def after_epoch(self, trainer, stats, epoch):
        if not self._active:
            return
        rec = stats.epochs[-1]
        if self._lines:
            text = f"epoch {epoch + 1}/{trainer.total_epochs}: {rec['steps']} steps, loss {rec['train_loss']:.4g}"
            if rec.get("train_accuracy") is not None:
                text += f", train acc {rec['train_accuracy']:.2f}%"
            if rec.get("test_accuracy") is not None:
                text += f", test acc {rec['test_accuracy']:.2f}%"
            if rec.get("test_loss") is not None:
                text += f", test loss {rec['test_loss']:.4g}"
            self._write_line(text)
            return
        info = self._info(stats)
        if rec.get("test_accuracy") is not None:
            info += f" | test acc {rec['test_accuracy']:.2f}%"
        if self._rich:
            self._progress.update(self._task, completed=rec["steps"], info=info)
        else:
            self.stream.write(self._line(trainer, stats, epoch, rec["steps"], trainer.steps_per_epoch, info) + "\n")
            self.stream.flush()

    def after_training(self, trainer, stats):
        if self._active and self._rich and self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._active and stats.stopped_by:
            self.stream.write(f"training stopped: {stats.stopped_by}\n")
            self.stream.flush()


# ---------------------------------------------------------------------------------- schedules
def piecewise(points: Sequence[tuple[float, float]]) -> Callable[[int], float | None]:
    """A piecewise-constant schedule: ``[(0, 0.1), (80, 0.01)]`` is 0.1 from 0, 0.01 from 80 on.

    Before the first point the schedule gives ``None`` (the hyperparameter is left as it is).

    Raises:
        UserError: the points are not ``(start, value)`` pairs with increasing starts.
    """
    try:
        pts = [(int(s), v) for s, v in points]
    except (TypeError, ValueError) as exc:
        raise UserError(f"A piecewise schedule takes (start, value) pairs. Received: {points!r}") from exc
    if not pts or any(b[0] <= a[0] for a, b in zip(pts, pts[1:])) or pts[0][0] < 0:
        raise UserError(f"A piecewise schedule needs at least one (start, value) pair with starts >= 0 "
                        f"and strictly increasing. Received: {points!r}")

    def value(t):
        current = None
        for start, v in pts:
            if t < start:
                break
            current = v
        return current
    return value


def step_decay(base: float, factor: float, every: int) -> Callable[[int], float]:
    """``base * factor ** (t // every)``: multiply by ``factor`` every ``every`` epochs or steps."""
    if not isinstance(every, int) or every < 1:
        raise UserError(f"every must be an integer >= 1. Received: {every!r}")
    return lambda t: base * factor ** (t // every)


def cosine_decay(base: float, total: int, final: float = 0.0) -> Callable[[int], float]:
    """``final + (base - final) * (1 + cos(pi * t / total)) / 2`` for ``t < total``, then ``final``."""
    if not isinstance(total, int) or total < 1:
        raise UserError(f"total must be an integer >= 1. Received: {total!r}")
    return lambda t: final + (base - final) * 0.5 * (1 + math.cos(math.pi * min(t, total) / total))


def linear_warmup(schedule, warmup: int, start_factor: float = 0.0) -> Callable[[int], float]:
    """Scale ``schedule`` up linearly over the first ``warmup`` steps, then follow it.

    At step ``t < warmup`` the value is ``schedule(t) * (start_factor + (1 - start_factor) *
    (t + 1) / warmup)``; ``schedule`` may be a number (warm-up then constant).
    """
    if not isinstance(warmup, int) or warmup < 0:
        raise UserError(f"warmup must be an integer >= 0. Received: {warmup!r}")
    fn = _as_schedule("schedule", schedule)

    def value(t):
        v = fn(t)
        if v is None or t >= warmup:
            return v
        return v * (start_factor + (1 - start_factor) * (t + 1) / warmup)
    return value


def _as_schedule(name, spec) -> Callable[[int], float | None]:
    if callable(spec):
        return spec
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        return lambda t: spec
    if isinstance(spec, (list, tuple)):
        return piecewise(spec)
    raise UserTypeError(f"Schedule for '{name}' must be a number, a list of (start, value) pairs or a callable "
                        f"f(t) -> value. Received: {type(spec).__name__}")


_ALIASES = {"lr": "learning_rate"}


def set_hyperparameter(optimizer, name: str, value) -> None:
    """Set ``name`` on the optimizer through ``set_parameter`` (reference and native optimizers
    update their framework state there), falling back to ``setattr``."""
    setter = getattr(optimizer, "set_parameter", None)
    if setter is not None:
        setter(name, value)
    elif hasattr(optimizer, name):
        setattr(optimizer, name, value)
    else:
        raise UserAttributeError(f"{type(optimizer).__name__} has no hyperparameter '{name}'; its hyperparameters "
                                 f"are its public attributes, such as learning_rate. Received: {name!r}")


class _Schedule(TrainingEvent):
    def __init__(self, schedules: dict):
        if not schedules:
            raise UserError(f"{type(self).__name__} needs at least one hyperparameter schedule, such as "
                            "learning_rate=[(0, 0.1), (30, 0.01)]. Received: no schedules")
        self.schedules = {_ALIASES.get(k, k): _as_schedule(k, v) for k, v in schedules.items()}

    def before_training(self, trainer, stats):
        for name in self.schedules:
            if not hasattr(trainer.optimizer, name):
                raise UserAttributeError(f"{type(self).__name__} schedules '{name}', which "
                                         f"{type(trainer.optimizer).__name__} does not have; schedule only "
                                         f"hyperparameters the optimizer has. Received: {name!r}")

    def _apply(self, trainer, stats, t, factor=1.0):
        for name, fn in self.schedules.items():
            value = fn(t)
            if value is not None:
                value = value * factor if factor != 1.0 else value
                set_hyperparameter(trainer.optimizer, name, value)
                stats.hyperparameters[name] = value


class EpochHPSchedule(_Schedule):
    """Set hyperparameters at the start of every epoch (Deep500's name).

    >>> EpochHPSchedule(lr=[(0, 1e-1), (81, 1e-2), (122, 1e-3)])            # doctest: +SKIP
    >>> EpochHPSchedule(learning_rate=cosine_decay(0.1, 90), warmup_epochs=5)  # doctest: +SKIP

    Args:
        warmup_epochs: scale the scheduled values linearly, step by step, from ``1/W`` of the
            value at the first step to the full value at the last step of epoch
            ``warmup_epochs - 1`` (``W = warmup_epochs * steps per epoch``).
        **schedules: one per hyperparameter name (``lr`` means ``learning_rate``): a number, a
            list of ``(epoch, value)`` pairs (piecewise constant), or a callable ``f(epoch)``.
            Each value is set with ``optimizer.set_parameter(name, value)``.
    """

    def __init__(self, warmup_epochs: int = 0, **schedules):
        if not isinstance(warmup_epochs, int) or warmup_epochs < 0:
            raise UserError(f"warmup_epochs must be an integer >= 0. Received: {warmup_epochs!r}")
        super().__init__(schedules)
        self.warmup_epochs = warmup_epochs

    def before_epoch(self, trainer, stats, epoch):
        if epoch >= self.warmup_epochs:
            self._apply(trainer, stats, epoch)

    def before_training_batch(self, trainer, stats, batch):
        if stats.epoch < self.warmup_epochs:
            total = self.warmup_epochs * trainer.steps_per_epoch
            self._apply(trainer, stats, stats.epoch, factor=min(1.0, (stats.global_step + 1) / total))


class StepHPSchedule(_Schedule):
    """Set hyperparameters before every training step, by global step (counted from 0).

    >>> StepHPSchedule(learning_rate=cosine_decay(0.1, 1000), warmup=100)  # doctest: +SKIP

    Args:
        warmup: linear warm-up over this many steps (see :func:`linear_warmup`).
        **schedules: as for :class:`EpochHPSchedule`, with ``t`` the global step.
    """

    def __init__(self, warmup: int = 0, **schedules):
        super().__init__(schedules)
        if warmup:
            self.schedules = {k: linear_warmup(v, warmup) for k, v in self.schedules.items()}
        self.warmup = warmup

    def before_training_batch(self, trainer, stats, batch):
        self._apply(trainer, stats, stats.global_step)


# ------------------------------------------------------------------------------ stop conditions
class TargetAccuracyStop(TrainingEvent):
    """Stop after the first epoch whose test accuracy (percent) reaches ``target``.

    Args:
        target: the accuracy in percent (0 to 100).
        key: the epoch record to compare (``"test_accuracy"`` or ``"train_accuracy"``).
    """

    def __init__(self, target: float, key: str = "test_accuracy"):
        if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 <= target <= 100:
            raise UserError(f"target must be an accuracy in percent, from 0 to 100. Received: {target!r}")
        if key not in ("test_accuracy", "train_accuracy"):
            raise UserError(f"key must be 'test_accuracy' or 'train_accuracy'. Received: {key!r}")
        self.target, self.key = float(target), key
        self.reached_epoch: int | None = None

    def after_epoch(self, trainer, stats, epoch):
        value = stats.epochs[-1].get(self.key)
        if value is not None and value >= self.target:
            self.reached_epoch = epoch
            self.stop_reason = f"{self.key} {value:.2f}% reached the target {self.target:g}% at epoch {epoch}"
            return False
        return None


class AccuracyAbortEvent(TargetAccuracyStop):
    """Deep500's name: stop once the test accuracy (percent) reaches ``max_accuracy``.

    Deep500 checked before each epoch's training set, so no further epoch ran once a test
    accuracy reached the bar; this stops after that epoch's evaluation, which runs the same
    epochs.

    Args:
        max_accuracy: the accuracy in percent (0 to 100).
    """

    def __init__(self, max_accuracy: float):
        super().__init__(max_accuracy)
        self.max_accuracy = self.target


class TimeBudgetStop(TrainingEvent):
    """Stop once ``seconds`` of wall-clock time have passed since training started.

    Checked after every training step (and before every epoch); the step that crosses the
    budget completes, then the validation set is evaluated.

    Args:
        seconds: the budget.
        clock: a clock in seconds (tests inject a fake one).
    """

    def __init__(self, seconds: float, clock: Callable[[], float] = time.perf_counter):
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
            raise UserError(f"seconds must be a number >= 0. Received: {seconds!r}")
        self.seconds, self.clock = float(seconds), clock
        self._start = None

    def before_training(self, trainer, stats):
        self._start = self.clock()

    def _check(self):
        spent = self.clock() - self._start
        if spent >= self.seconds:
            self.stop_reason = f"the time budget of {self.seconds:g} s is spent ({spent:.3g} s)"
            return False
        return None

    def before_epoch(self, trainer, stats, epoch):
        return self._check()

    def after_training_batch(self, trainer, stats, batch, outputs):
        return self._check()


class StepBudgetStop(TrainingEvent):
    """Stop after ``steps`` training steps (counted over all epochs).

    The validation set is still evaluated at the end of the epoch the budget ends in. Ranks of a
    distributed run stop at the same step (a time budget would stop them at different ones).

    Args:
        steps: the number of training steps, at least 1.
    """

    def __init__(self, steps: int):
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise UserError(f"steps must be an integer >= 1. Received: {steps!r}")
        self.steps = int(steps)
        self._done = 0

    def before_training(self, trainer, stats):
        self._done = 0

    def after_training_batch(self, trainer, stats, batch, outputs):
        self._done += 1
        if self._done >= self.steps:
            self.stop_reason = f"the step budget of {self.steps} steps is spent"
            return False
        return None


# ------------------------------------------------------------------------------------ summaries
def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # numpy scalars
        return _jsonable(value.item())
    return value


def _csv_text(rows: list[dict]) -> str:
    columns: dict[str, None] = {}
    for r in rows:
        for k in r:
            columns.setdefault(k)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if v is None or (isinstance(v, float) and math.isnan(v)) else v)
                         for k, v in r.items()})
    return buf.getvalue()


class CSVSummaryWriter(TrainingEvent):
    """Write ``epochs.csv`` (one row per epoch) and ``steps.csv`` (one row per step) to ``folder``.

    The files are rewritten atomically after every epoch and at the end of training, so an
    interrupted run leaves complete files for the epochs done. Empty cells mean "not measured"
    (for example the forward+backward time of a fused native step).

    Args:
        folder: the output folder (created if needed).
        steps: also write ``steps.csv``.
    """

    def __init__(self, folder, steps: bool = True):
        self.folder = os.fspath(folder)
        self.steps = steps

    @property
    def epochs_path(self) -> str:
        """Path of ``epochs.csv``."""
        return os.path.join(self.folder, "epochs.csv")

    @property
    def steps_path(self) -> str:
        """Path of ``steps.csv``."""
        return os.path.join(self.folder, "steps.csv")

    def _write(self, stats):
        atomic_write_text(self.epochs_path, _csv_text(stats.epochs))
        if self.steps:
            atomic_write_text(self.steps_path, _csv_text(stats.steps))

    def after_epoch(self, trainer, stats, epoch):
        self._write(stats)

    def after_training(self, trainer, stats):
        self._write(stats)


class JSONSummaryWriter(TrainingEvent):
    """Write the whole :class:`~deep500lite.lv2.trainer.TrainingStats` (epochs, steps, stop
    reason, configuration) as JSON to ``path``, atomically, after every epoch and at the end.

    Non-finite numbers are written as ``null``.

    Args:
        path: the JSON file.
        steps: include the per-step records.
    """

    def __init__(self, path, steps: bool = True):
        self.path = os.fspath(path)
        self.steps = steps

    def _write(self, trainer, stats):
        data = stats.to_dict(steps=self.steps)
        data["config"] = trainer.describe()
        atomic_write_text(self.path, json.dumps(_jsonable(data), indent=1, allow_nan=False) + "\n")

    def after_epoch(self, trainer, stats, epoch):
        self._write(trainer, stats)

    def after_training(self, trainer, stats):
        self._write(trainer, stats)


class PlotWriter(TrainingEvent):
    """Plot the training curves to ``folder/loss.png`` and ``folder/accuracy.png``.

    ``loss.png``: the training loss of every step and its mean per epoch, and the test loss per
    epoch, against the global step (counted from 1; a log scale when the losses span more than
    10x). ``accuracy.png``: training and test accuracy per epoch (counted from 1, as the console
    and the MLPerf log count) and the target accuracy as a dotted line. Curves take the colour
    of the executor variant (:func:`deep500lite.metrics.plots.variant_color`), the same as in
    ``compare``'s and ``report``'s plots; legends sit outside the axes. matplotlib is imported
    when the first plot is drawn, and only its Agg canvas is used (no pyplot, no global backend
    change).

    Args:
        folder: the output folder.
        every_epoch: redraw after every epoch (default: only at the end of training).
        dpi: resolution.
        target: the target accuracy in percent (a dotted line), or None.
        label: the executor variant (``torch``, ``torch:compile``) whose colour the curves take.
    """

    def __init__(self, folder, every_epoch: bool = False, dpi: int = 100, target: float | None = None,
                 label: str | None = None):
        self.folder = os.fspath(folder)
        self.every_epoch, self.dpi = every_epoch, dpi
        self.target, self.label = target, label

    @property
    def loss_path(self) -> str:
        """Path of the loss plot."""
        return os.path.join(self.folder, "loss.png")

    @property
    def accuracy_path(self) -> str:
        """Path of the accuracy plot."""
        return os.path.join(self.folder, "accuracy.png")

    def _save(self, fig, path):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        buf = io.BytesIO()
        fig.set_dpi(self.dpi)
        FigureCanvasAgg(fig).print_png(buf)
        atomic_write_bytes(path, buf.getvalue())

    def plot(self, stats) -> list[str]:
        """Draw both plots now; returns the paths written."""
        loss, accuracy = self.figures(stats)
        self._save(loss, self.loss_path)
        self._save(accuracy, self.accuracy_path)
        return [self.loss_path, self.accuracy_path]

    def figures(self, stats) -> tuple:
        """The two matplotlib figures, ``(loss, accuracy)``, of the statistics so far."""
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            raise FrameworkNotAvailableError("PlotWriter needs matplotlib: pip install 'deep500lite[plots]'")
        from matplotlib.ticker import MaxNLocator

        from deep500lite.metrics.plots import legend_outside, log_scale_if_wide, new_figure, variant_color

        color = variant_color(self.label) if self.label else None
        title = f" ({self.label})" if self.label else ""
        fig = new_figure(7.5, 4.2)
        ax = fig.add_subplot()
        steps = stats.steps
        if steps:
            ax.plot([s["global_step"] + 1 for s in steps], [s["loss"] for s in steps], lw=0.6, alpha=0.4,
                    color=color, label="training loss (step)")
        ends = [e["global_step_end"] for e in stats.epochs]
        if stats.epochs:
            ax.plot(ends, [e["train_loss"] for e in stats.epochs], "o-", color=color,
                    label="training loss (epoch mean)")
            if any(e.get("test_loss") is not None for e in stats.epochs):
                ax.plot(ends, [e.get("test_loss") if e.get("test_loss") is not None else math.nan
                               for e in stats.epochs], "s--", color="black", label="test loss")
        log_scale_if_wide(ax, [s["loss"] for s in steps] + [e["train_loss"] for e in stats.epochs])
        ax.set_xlabel("step (counted from 1)")
        ax.set_ylabel("loss")
        ax.set_title("Loss" + title)
        ax.grid(alpha=0.3)
        legend_outside(fig)
        loss_figure = fig

        fig = new_figure(7.5, 4.2)
        ax = fig.add_subplot()
        epochs = [e["epoch"] + 1 for e in stats.epochs]
        for key, label, style in (("train_accuracy", "training accuracy", "--"), ("test_accuracy", "test accuracy",
                                                                                  "o-")):
            values = [e.get(key) for e in stats.epochs]
            if any(v is not None for v in values):
                ax.plot(epochs, [math.nan if v is None else v for v in values], style, color=color, label=label)
        if self.target is not None:
            ax.axhline(self.target, color="black", lw=0.9, ls=":", label=f"target {self.target:g}%")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch (counted from 1)")
        ax.set_ylabel("accuracy (%)")
        ax.set_title("Accuracy" + title)
        ax.grid(alpha=0.3)
        legend_outside(fig)
        return loss_figure, fig

    def after_epoch(self, trainer, stats, epoch):
        if self.every_epoch:
            self.plot(stats)

    def after_training(self, trainer, stats):
        self.plot(stats)
