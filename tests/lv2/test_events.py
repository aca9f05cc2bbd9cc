"""Training events: hook order, stopping from any hook, schedules (reference and native
optimizers), stop conditions, the progress bar, CSV/JSON summaries and plots."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets, networks
from deep500lite.frameworks import reference as d5ref
from deep500lite.lv2.events import (HOOKS, CSVSummaryWriter, EpochHPSchedule, JSONSummaryWriter, PlotWriter,
                                    StepHPSchedule, TargetAccuracyStop, TerminalBarEvent, TimeBudgetStop,
                                    TrainingEvent, cosine_decay, linear_warmup, piecewise, step_decay)
from deep500lite.lv2.trainer import Trainer


def _setup(n_train=6, n_test=3, batch_size=2, framework="reference", optimizer=None, lr=0.1):
    train, test = datasets.load_dataset("digits", "input", "label")
    net, _, out = networks.create_model("mlp", batch_size, classes=10, shape=(1, 8, 8), hidden=(16,))
    net.add_operation(datasets.dataset_loss("digits")([out, "label"], "loss"))
    ex = d5.executor(net, framework)
    opt = optimizer(ex) if optimizer else d5ref.MomentumOptimizer(ex, learning_rate=lr, momentum=0.9)
    return (d5.ShuffleSampler(d5.NumpyDataset(train.data[:n_train], "input", train.labels[:n_train], "label"),
                              batch_size, seed=0),
            d5.OrderedSampler(d5.NumpyDataset(test.data[:n_test], "input", test.labels[:n_test], "label"), batch_size),
            ex, opt, out)


class Recorder(TrainingEvent):
    """Logs every hook call, and the learning rate the optimizer has right before each step."""

    def __init__(self):
        self.calls, self.rates = [], []

    def __getattribute__(self, name):
        if name in HOOKS:
            def hook(*args):
                self.calls.append(name)
                if name == "before_optimizer_step":
                    self.rates.append(float(args[0].optimizer.learning_rate))
            return hook
        return object.__getattribute__(self, name)


# ------------------------------------------------------------------------------ hook order
def test_hooks_run_in_the_documented_order():
    train, test, ex, opt, out = _setup()  # 3 training batches, 2 validation batches (3 samples)
    rec = Recorder()
    Trainer(train, test, ex, opt, out).run_loop(2, events=[rec])
    step = ["before_sampling", "after_sampling", "before_training_batch", "before_optimizer_step",
            "after_optimizer_step", "after_training_batch"]
    test_set = ["before_test_set"] + ["before_test_batch", "after_test_batch"] * 2 + ["after_test_set"]
    epoch = ["before_epoch"] + step * 3 + test_set + ["after_epoch"]
    # Deep500's order: the validation set once before the first epoch, then the epochs
    assert rec.calls == ["before_training"] + test_set + epoch * 2 + ["after_training"]
    assert set(HOOKS) == set(rec.calls)


class Stopper(TrainingEvent):
    def __init__(self, hook, nth):
        self.hook, self.nth, self.count = hook, nth, 0
        self.stop_reason = "asked by the test"

    def __getattribute__(self, name):
        if name in HOOKS and name == object.__getattribute__(self, "hook"):
            def hook(*args):
                self.count += 1
                return False if self.count == self.nth else None
            return hook
        return object.__getattribute__(self, name)


STEP_HOOKS = ["before_sampling", "after_sampling", "before_training_batch", "before_optimizer_step",
              "after_optimizer_step", "after_training_batch"]


@pytest.mark.parametrize("hook,nth,steps,epochs,complete", [
    ("before_training", 1, 0, 0, None),
    ("before_epoch", 2, 3, 1, True),
    *[(h, 2, 2, 1, False) for h in STEP_HOOKS],  # after the second step; still validated
    # the test before training calls the set hooks once and the batch hooks twice (2 batches)
    *[(h, 1, 0, 0, None) for h in ("before_test_set", "before_test_batch", "after_test_batch", "after_test_set")],
    *[(h, 2, 3, 1, True) for h in ("before_test_set", "after_test_set")],
    *[(h, 3, 3, 1, True) for h in ("before_test_batch", "after_test_batch")],
    ("after_epoch", 1, 3, 1, True),
])
def test_a_hook_returning_false_stops_training(hook, nth, steps, epochs, complete):
    train, test, ex, opt, out = _setup()
    after = Recorder()
    stats = Trainer(train, test, ex, opt, out).run_loop(3, events=[Stopper(hook, nth), after])
    assert len(stats.steps) == steps and len(stats.epochs) == epochs
    assert stats.stopped_by == f"Stopper.{hook}: asked by the test"
    assert after.calls[-1] == "after_training"
    if epochs:
        assert stats.epochs[-1]["complete"] is complete
        assert stats.epochs[-1]["test_samples"] == 3


def test_trainer_stop_method_stops_after_the_step():
    train, test, ex, opt, out = _setup()

    class StopAtTwo(TrainingEvent):
        def after_optimizer_step(self, trainer, stats, batch, outputs):
            if stats.global_step == 1:
                trainer.stop("enough")

    stats = Trainer(train, test, ex, opt, out, events=[StopAtTwo()]).run_loop(3)
    assert len(stats.steps) == 2 and stats.stopped_by == "enough"


# ------------------------------------------------------------------------------ schedules
def test_step_schedule_with_warmup_sets_each_steps_learning_rate():
    train, test, ex, opt, out = _setup(n_train=8)  # 4 steps per epoch
    rec = Recorder()
    stats = Trainer(train, test, ex, opt, out).run_loop(
        3, events=[StepHPSchedule(learning_rate=cosine_decay(0.1, 10, final=0.01), warmup=3), rec])
    expected = []
    for t in range(12):
        v = 0.01 + 0.09 * (1 + math.cos(math.pi * min(t, 10) / 10)) / 2
        expected.append(v * (t + 1) / 3 if t < 3 else v)
    np.testing.assert_allclose(rec.rates, expected, rtol=1e-12)
    np.testing.assert_allclose([s["learning_rate"] for s in stats.steps], expected, rtol=1e-12)
    assert stats.hyperparameters["learning_rate"] == pytest.approx(expected[-1])


def test_epoch_schedule_is_piecewise_by_epoch_with_per_step_warmup():
    train, test, ex, opt, out = _setup()  # 3 steps per epoch
    rec = Recorder()
    Trainer(train, test, ex, opt, out).run_loop(4, events=[EpochHPSchedule(lr=[(0, 0.1), (2, 0.01)],
                                                                           warmup_epochs=1), rec])
    assert rec.rates == pytest.approx([0.1 / 3, 0.2 / 3, 0.1, 0.1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01])


def test_schedule_helpers():
    assert [piecewise([(0, 1.0), (3, 0.5)])(t) for t in (0, 2, 3, 9)] == [1.0, 1.0, 0.5, 0.5]
    assert piecewise([(2, 1.0)])(1) is None
    assert [step_decay(1.0, 0.1, 2)(t) for t in range(5)] == pytest.approx([1, 1, 0.1, 0.1, 0.01])
    assert [linear_warmup(0.4, 4)(t) for t in range(6)] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.4, 0.4])
    assert cosine_decay(1.0, 4)(2) == pytest.approx(0.5) and cosine_decay(1.0, 4)(8) == 0.0
    with pytest.raises(ValueError, match="strictly increasing"):
        piecewise([(3, 1.0), (1, 0.5)])
    with pytest.raises(TypeError, match="Schedule for 'learning_rate' must be"):
        StepHPSchedule(learning_rate="fast")
    train, test, ex, opt, out = _setup()
    with pytest.raises(AttributeError, match="schedules 'beta2', which MomentumOptimizer does not have"):
        Trainer(train, test, ex, opt, out).run_loop(1, events=[StepHPSchedule(beta2=0.9)])


class _UpdateCheck(TrainingEvent):
    """Records, per step, a parameter before and after the step and the gradient used."""

    def __init__(self, name):
        self.name, self.rows = name, []

    def before_optimizer_step(self, trainer, stats, batch):
        self._before = trainer.executor.network.fetch_tensor(self.name).copy()

    def after_optimizer_step(self, trainer, stats, batch, outputs):
        net = trainer.executor.network
        after, grad = net.fetch_tensors([self.name, self.name + "_grad"])
        self.rows.append((self._before, np.array(after), np.array(grad)))


def _native_schedule_check(framework, lr_of):
    import importlib

    fw = importlib.import_module(f"deep500lite.frameworks.{framework}")
    train, test, ex, opt, out = _setup(framework=framework,
                                       optimizer=lambda e: fw.GradientDescent(e, learning_rate=0.5))
    rates = [0.1, 0.05, 0.02, 0.02, 0.01, 0.01]
    check, seen = _UpdateCheck("fc1.weight"), []

    class ReadNative(TrainingEvent):
        def after_optimizer_step(self, trainer, stats, batch, outputs):
            seen.append(lr_of(trainer.optimizer))

    Trainer(train, test, ex, opt, out).run_loop(2, events=[StepHPSchedule(learning_rate=list(enumerate(rates))),
                                                           check, ReadNative()])
    assert seen == pytest.approx(rates)
    for lr, (before, after, grad) in zip(rates, check.rows):
        assert np.abs(grad).max() > 0
        np.testing.assert_allclose(after, before - np.float32(lr) * grad, rtol=1e-5, atol=1e-7)


@pytest.mark.requires("torch")
def test_schedules_drive_native_torch_optimizers():
    _native_schedule_check("torch", lambda opt: opt.torch_optimizer.param_groups[0]["lr"])


@pytest.mark.requires("tensorflow")
def test_schedules_drive_native_tensorflow_optimizers():
    _native_schedule_check("tensorflow", lambda opt: float(opt.keras_optimizer.learning_rate.numpy()))


# ------------------------------------------------------------------------------ stop conditions
def test_target_accuracy_stop():
    train, test, ex, opt, out = _setup(n_train=32, n_test=20, batch_size=8)
    stop = TargetAccuracyStop(0.0)
    stats = Trainer(train, test, ex, opt, out, events=[stop]).run_loop(5)
    assert len(stats.epochs) == 1 and stop.reached_epoch == 0
    assert stats.stopped_by.startswith("TargetAccuracyStop.after_epoch: test_accuracy ")
    assert "reached the target 0% at epoch 0" in stats.stopped_by
    train, test, ex, opt, out = _setup(n_train=32, n_test=20, batch_size=8)
    stats = Trainer(train, test, ex, opt, out, events=[TargetAccuracyStop(100.0)]).run_loop(2)
    assert len(stats.epochs) == 2 and stats.stopped_by is None  # 100% on 20 digits after 64 samples: not reached
    with pytest.raises(ValueError, match="from 0 to 100. Received: 101"):
        TargetAccuracyStop(101)


class FakeClock:
    def __init__(self):
        self.t = -1.0

    def __call__(self):
        self.t += 1.0
        return self.t


def test_time_budget_stop_with_a_fake_clock():
    train, test, ex, opt, out = _setup()
    # Clock reads: start 0, before epoch 0 -> 1, after steps 0, 1, 2 -> 2, 3, 4 (>= 3.5: stop).
    stats = Trainer(train, test, ex, opt, out, events=[TimeBudgetStop(3.5, clock=FakeClock())]).run_loop(5)
    assert len(stats.steps) == 3 and "time budget of 3.5 s is spent (4 s)" in stats.stopped_by
    stats = Trainer(*_setup()[:4], out, events=[TimeBudgetStop(0, clock=FakeClock())]).run_loop(5)
    assert stats.steps == [] and stats.stopped_by.startswith("TimeBudgetStop.before_epoch")


# ------------------------------------------------------------------------------ progress bar
class TTY(io.StringIO):
    def isatty(self):
        return True


def test_terminal_bar_writes_plain_lines_when_not_a_terminal():
    train, test, ex, opt, out = _setup()
    stream = io.StringIO()
    stats = Trainer(train, test, ex, opt, out, events=[TerminalBarEvent(stream=stream)]).run_loop(2)
    first = stats.initial_test
    expected = [f"before training: 3 test samples, test acc {first['test_accuracy']:.2f}%, "
                f"test loss {first['test_loss']:.4g}"]
    for e in stats.epochs:
        expected.append(f"epoch {e['epoch'] + 1}/2: 3 steps, loss {e['train_loss']:.4g}, train acc "
                        f"{e['train_accuracy']:.2f}%, test acc {e['test_accuracy']:.2f}%, test loss {e['test_loss']:.4g}")
    assert stream.getvalue() == "\n".join(expected) + "\n"  # whole lines, no bar redraws
    stream = TTY()
    Trainer(train, test, ex, opt, out, events=[TerminalBarEvent(enabled=False, stream=stream)]).run_loop(1)
    assert stream.getvalue() == ""


def test_terminal_bar_plain_line():
    train, test, ex, opt, out = _setup()
    stream = io.StringIO()
    stats = Trainer(train, test, ex, opt, out, events=[TerminalBarEvent(True, stream, use_rich=False)]).run_loop(2)
    lines = stream.getvalue().split("\n")
    assert lines[-1] == ""
    assert lines[0].startswith("before training: 3 test samples, test acc ")
    for epoch, line in enumerate(lines[1:3]):
        last = line.split("\r")[-1]
        acc = stats.epochs[epoch]["test_accuracy"]
        assert last.startswith(f"epoch {epoch + 1}/2 [====================] 3/3 loss ")
        assert last.endswith(f"| test acc {acc:.2f}%")
        assert line.count("\r") == 4  # three steps, then the epoch's summary


def test_terminal_bar_with_rich():
    pytest.importorskip("rich")
    train, test, ex, opt, out = _setup()
    stream = TTY()
    Trainer(train, test, ex, opt, out, events=[TerminalBarEvent(stream=stream)]).run_loop(2)
    text = stream.getvalue()
    assert "epoch 1/2" in text and "epoch 2/2" in text and "test acc" in text and "3/3" in text


# ------------------------------------------------------------------------------ summaries
def test_csv_and_json_summaries_hold_every_step_and_epoch(tmp_path):
    train, test, ex, opt, out = _setup()
    stats = Trainer(train, test, ex, opt, out, events=[CSVSummaryWriter(tmp_path / "csv"),
                                                       JSONSummaryWriter(tmp_path / "run.json")]).run_loop(2)
    with open(tmp_path / "csv" / "steps.csv", newline="") as f:
        steps = list(csv.DictReader(f))
    with open(tmp_path / "csv" / "epochs.csv", newline="") as f:
        epochs = list(csv.DictReader(f))
    assert len(steps) == len(stats.steps) == 6 and len(epochs) == 2
    for row, rec in zip(steps, stats.steps):
        assert int(row["global_step"]) == rec["global_step"] and float(row["loss"]) == rec["loss"]
        assert float(row["step_time"]) == rec["step_time"] and float(row["learning_rate"]) == 0.1
    for row, rec in zip(epochs, stats.epochs):
        assert float(row["test_accuracy"]) == rec["test_accuracy"] and row["complete"] == "True"

    def strict(value):
        raise ValueError(f"non-standard JSON constant {value}")

    data = json.loads((tmp_path / "run.json").read_text(), parse_constant=strict)
    assert data["steps"] == json.loads(json.dumps(stats.steps)) and len(data["epochs"]) == 2
    assert data["config"]["optimizer"] == "MomentumOptimizer" and data["config"]["batch_size"] == 2
    assert data["config"]["hyperparameters"] == {"learning_rate": 0.1, "momentum": 0.9}
    assert sorted(os.listdir(tmp_path)) == ["csv", "run.json"]
    assert sorted(os.listdir(tmp_path / "csv")) == ["epochs.csv", "steps.csv"]  # no temporary files left


def test_summaries_write_unmeasured_values_as_empty_and_null(tmp_path):
    train, _, ex, opt, out = _setup()
    Trainer(train, None, ex, opt, out, events=[CSVSummaryWriter(tmp_path), JSONSummaryWriter(tmp_path / "s.json")]
            ).run_loop(1)
    with open(tmp_path / "epochs.csv", newline="") as f:
        [row] = list(csv.DictReader(f))
    assert row["test_accuracy"] == "" and row["test_loss"] == ""
    data = json.loads((tmp_path / "s.json").read_text())
    assert data["epochs"][0]["test_accuracy"] is None


# ------------------------------------------------------------------------------ plots
def test_plots_are_png_files_with_content(tmp_path):
    image = pytest.importorskip("matplotlib.image")
    train, test, ex, opt, out = _setup()
    Trainer(train, test, ex, opt, out, events=[PlotWriter(tmp_path)]).run_loop(3)
    for name in ("loss.png", "accuracy.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        pixels = image.imread(tmp_path / name)
        assert pixels.shape[:2] == (420, 750) and pixels.std() > 0.01  # 7.5 x 4.2 inches at 100 dpi


def test_event_modules_import_no_plotting_or_framework_library():
    code = ("import deep500lite.lv2.events, deep500lite.lv2.trainer, deep500lite.lv2.checkpoint, "
            "deep500lite.metrics.training; import sys; "
            "print(sorted(m for m in ('matplotlib', 'rich', 'torch', 'tensorflow', 'scipy') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_training_metrics_are_training_events():
    """One event protocol: lv2 re-exports the leaf's TrainingEvent, and training metrics derive from it."""
    import deep500lite.metrics.events as leaf
    from deep500lite.metrics.training import PeakMemory, TrainingMetric

    assert TrainingEvent is leaf.TrainingEvent and HOOKS is leaf.HOOKS
    assert issubclass(TrainingMetric, TrainingEvent) and isinstance(PeakMemory(), TrainingEvent)
    hooks = {name for name in vars(TrainingEvent) if not name.startswith("_") and callable(vars(TrainingEvent)[name])}
    assert hooks == set(HOOKS)
    assert TrainingMetric.stop_reason is None
