"""The Trainer and test_training: what is recorded, accuracies checked against numpy, the
non-finite loss stop, the training metrics and argument errors."""

from __future__ import annotations

import math
import resource
import time

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets, networks
from deep500lite.errors import UserError
from deep500lite.frameworks import reference as d5ref
from deep500lite.lv2.events import CSVSummaryWriter, TrainingEvent
from deep500lite.lv2.trainer import NonFiniteLossError, Trainer, TrainingStats, test_training
from deep500lite.metrics.training import (PeakMemory, StepTimeBreakdown, TestAccuracy, Throughput, TimeToAccuracy,
                                          TrainingAccuracy)


def _digits(n_train=96, n_test=37):
    train, test = datasets.load_dataset("digits", "input", "label")
    return (d5.NumpyDataset(train.data[:n_train], "input", train.labels[:n_train], "label"),
            d5.NumpyDataset(test.data[:n_test], "input", test.labels[:n_test], "label"))


def _mlp(batch_size=16, framework="reference"):
    net, _, out = networks.create_model("mlp", batch_size, classes=10, shape=(1, 8, 8), hidden=(32,))
    net.add_operation(datasets.dataset_loss("digits")([out, "label"], "loss"))
    return d5.executor(net, framework), out


def _setup(batch_size=16, lr=0.1, n_train=96, n_test=37, seed=0):
    ex, out = _mlp(batch_size)
    train, test = _digits(n_train, n_test)
    opt = d5ref.MomentumOptimizer(ex, learning_rate=lr, momentum=0.9)
    return ex, out, d5.ShuffleSampler(train, batch_size, seed=seed), d5.OrderedSampler(test, batch_size), opt


def _open_batch_accuracy(ex, dataset):
    """Accuracy (percent) of the executor's current parameters on the whole dataset, computed
    with an open-batch copy of the network in one inference call."""
    net, _, out = networks.create_model("mlp", None, classes=10, shape=(1, 8, 8), hidden=(32,))
    check = d5.executor(net, "reference")
    for name in net.parameters:
        check.network.feed_tensor(name, ex.network.fetch_tensor(name))
    logits = check.inference({"input": dataset.data})[out]
    return 100.0 * np.mean(np.argmax(logits, axis=1) == dataset.labels)


class _Frozen(d5.UpdateRuleOptimizer):
    """Runs forward and backward but leaves the parameters unchanged."""

    learning_rate = 0.0

    def update_rule(self, grad, old_param, param_name):
        return old_param


# ------------------------------------------------------------------------------ recording
def test_run_loop_records_every_step_and_epoch():
    ex, out, train, test, opt = _setup()
    stats = Trainer(train, test, ex, opt, out).run_loop(3)
    assert isinstance(stats, TrainingStats)
    steps_per_epoch = 96 // 16
    assert len(stats.steps) == 3 * steps_per_epoch and stats.global_step == 3 * steps_per_epoch
    assert [s["global_step"] for s in stats.steps] == list(range(3 * steps_per_epoch))
    assert [s["step"] for s in stats.steps] == list(range(steps_per_epoch)) * 3
    assert [e["epoch"] for e in stats.epochs] == [0, 1, 2] and stats.epoch == 3
    for e in stats.epochs:
        mine = [s for s in stats.steps if s["epoch"] == e["epoch"]]
        assert e["samples"] == 96 and e["steps"] == steps_per_epoch and e["complete"]
        assert e["train_loss"] == pytest.approx(np.mean([s["loss"] for s in mine]))
        assert e["test_samples"] == 37  # the whole validation set, although 37 % 16 != 0
    assert stats.stopped_by is None
    assert stats.epochs[-1]["train_loss"] < stats.epochs[0]["train_loss"]
    elapsed = [e["elapsed"] for e in stats.epochs]
    assert elapsed == sorted(elapsed) and elapsed[-1] <= stats.total_time


def test_test_accuracy_covers_the_whole_validation_set_and_matches_numpy():
    ex, out, train, test, opt = _setup()
    metric = TestAccuracy()
    results = test_training(ex, train, test, opt, 2, 16, out, metrics=[metric])
    # 37 samples with a network fixed to batches of 16: the last batch (5 samples) is padded.
    expected = _open_batch_accuracy(ex, test.dataset)
    assert results == [pytest.approx(expected)]
    assert metric.samples[-1] == pytest.approx(expected) and metric.epochs == [0, 1]
    assert test.drop_last_batch is True  # restored after the validation pass
    assert metric.summary().n == 2 and metric.higher_is_better


def test_training_accuracy_scores_each_batch_with_its_own_step():
    ex, out, train, test, _ = _setup(seed=5, n_train=100)
    before = {n: ex.network.fetch_tensor(n).copy() for n in ex.network.parameters}
    metric = TrainingAccuracy()
    test_training(ex, train, test, _Frozen(ex), 1, 16, out, metrics=[metric])
    for n, v in before.items():
        np.testing.assert_array_equal(ex.network.fetch_tensor(n), v)
    # The same seed gives the sampler's first permutation; 6 full batches use its first 96 samples.
    order = np.random.default_rng(5).permutation(100)[:96]
    subset = d5.NumpyDataset(train.dataset.data[order], "input", train.dataset.labels[order], "label")
    assert metric.measure(None, None, None) == pytest.approx(_open_batch_accuracy(ex, subset))


def test_test_training_returns_one_result_per_metric_in_order():
    ex, out, train, test, opt = _setup()
    wall = d5.WallclockTime(reruns=0, avg_over=1)
    metrics = [Throughput(), TestAccuracy(), wall, TrainingAccuracy(), TimeToAccuracy(0.0)]
    t0 = time.perf_counter()
    results = test_training(ex, train, test, opt, 2, 16, out, metrics=metrics)
    outer = time.perf_counter() - t0
    assert isinstance(results, list) and len(results) == 5
    assert results[1] == results.stats.epochs[-1]["test_accuracy"]
    assert results[3] == results.stats.epochs[-1]["train_accuracy"]
    assert len(results[2]) == 1 and 0 < results[2][0] <= outer and results[2] == wall.samples
    assert results[4] == results.stats.epochs[0]["elapsed"]  # target 0% is met by the first epoch
    total_samples = sum(s["samples"] for s in results.stats.steps)
    assert total_samples == 2 * 96
    assert results[0] >= total_samples / outer  # throughput leaves out validation and overhead


def test_test_training_prints_each_result_and_refuses_a_rerunning_timer(capsys):
    ex, out, train, test, opt = _setup()
    results = test_training(ex, train, test, opt, 1, 16, out, metrics=[TestAccuracy()], events=[])
    assert capsys.readouterr().out == f"TestAccuracy: {results[0]}\n"
    test_training(ex, train, test, opt, 1, 16, out, metrics=[TestAccuracy()], events=[], verbose=False)
    assert capsys.readouterr().out == ""
    before = ex.network.fetch_tensors(ex.network.parameters)
    with pytest.raises(UserError, match=r"WallclockTime\(reruns=100, avg_over=10\) asks for 100 runs.*"
                                        r"use WallclockTime\(reruns=0, avg_over=1\)"):
        test_training(ex, train, test, opt, 1, 16, out, metrics=[d5.WallclockTime()])
    for b, a in zip(before, ex.network.fetch_tensors(ex.network.parameters)):
        np.testing.assert_array_equal(a, b)  # refused before any training


def test_test_training_checks_the_batch_size():
    ex, out, train, test, opt = _setup()
    with pytest.raises(UserError, match="train_sampler has batch_size 16, but batch_size=32"):
        test_training(ex, train, test, opt, 1, 32, out)


# ------------------------------------------------------------------------------ metrics
def test_time_to_accuracy_is_the_elapsed_time_of_the_first_epoch_reaching_the_target():
    ex, out, train, test, opt = _setup(lr=0.05)
    never, first = TimeToAccuracy(100.0), TimeToAccuracy(0.0)
    mid = TimeToAccuracy(50.0)
    stats = Trainer(train, test, ex, opt, out, events=[never, first, mid]).run_loop(4)
    assert never.measure(None, stats, None) == math.inf and never.epoch is None and not never.higher_is_better
    assert first.epoch == 0 and first.seconds == stats.epochs[0]["elapsed"]
    reached = [e for e in stats.epochs if e["test_accuracy"] >= 50.0]
    assert reached, "the MLP should pass 50% on digits within 4 epochs"
    assert mid.epoch == reached[0]["epoch"] and mid.seconds == reached[0]["elapsed"]


def test_step_time_breakdown_splits_reference_steps():
    ex, out, train, test, opt = _setup()
    metric = StepTimeBreakdown(warmup=0)
    t0 = time.perf_counter()
    test_training(ex, train, None, opt, 2, 16, out, metrics=[metric])
    outer = time.perf_counter() - t0
    parts = metric.parts
    assert all(len(v) == 12 for v in parts.values())
    assert all(v > 0 for k in ("data_loading", "forward_backward", "optimizer", "step") for v in parts[k])
    for fb, opt_t, step in zip(parts["forward_backward"], parts["optimizer"], parts["step"]):
        assert fb + opt_t == pytest.approx(step, rel=1e-9, abs=1e-12) and fb < step
    assert sum(parts["data_loading"]) + sum(parts["step"]) <= outer
    med = metric.measure(None, None, None)
    assert set(med) == {"data_loading", "forward_backward", "optimizer", "step"}
    assert med["step"] == pytest.approx(np.median(parts["step"]))
    assert "inference_and_backprop" not in vars(ex)  # the timing wrapper is removed


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_step_time_breakdown_of_native_optimizers(framework):
    pytest.importorskip(framework)
    import importlib

    fw = importlib.import_module(f"deep500lite.frameworks.{framework}")
    ex, out = _mlp(16, framework)
    train, _ = _digits()
    metric = StepTimeBreakdown(warmup=0)
    test_training(ex, d5.ShuffleSampler(train, 16, seed=0), None, fw.GradientDescent(ex, learning_rate=0.1), 1, 16,
                  out, metrics=[metric])
    assert len(metric.parts["step"]) == 6 and all(v > 0 for v in metric.parts["step"])
    split = metric.parts["forward_backward"] + metric.parts["optimizer"]
    if framework == "torch":  # inference_and_backprop, then torch.optim's step
        assert all(v > 0 for v in split)
    else:  # one fused tf.function: no split
        assert all(math.isnan(v) for v in split)
        assert math.isnan(metric.measure(None, None, None)["forward_backward"])


def test_peak_memory_sees_memory_touched_during_training():
    ex, out, train, test, opt = _setup()
    size = 160 * 2**20

    class Allocate(TrainingEvent):
        rss = 0

        def after_training_batch(self, trainer, stats, batch, outputs):
            if stats.global_step == 2:
                block = np.empty(size, dtype=np.uint8)
                block.fill(1)  # touched, so resident
                with open("/proc/self/status") as f:
                    kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
                self.rss = kib * 1024
                del block

    allocate = Allocate()
    start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    metric = PeakMemory()
    [peak] = test_training(ex, train, test, opt, 1, 16, out, metrics=[metric], events=[allocate])
    assert peak == metric.host_peak_bytes and metric.device_peak_bytes is None  # CPU executor
    # The kernel updates ru_maxrss lazily (per-thread RSS counters are folded in batches), so it
    # may trail the VmRSS read inside the event by a few pages.
    assert allocate.rss > size and peak >= allocate.rss - 2**20 and peak >= start
    assert len(metric.samples) == 1 and metric.summary().median == metric.samples[0]


def test_peak_memory_reads_the_executors_device_peak(monkeypatch):
    ex, out, train, test, opt = _setup()
    assert ex.device_peak_memory() is None and ex.device_peak_memory(reset=True) is None  # the default: CPU
    calls = []

    def device_peak_memory(reset=False):
        calls.append(reset)
        return None if reset else 12345

    monkeypatch.setattr(ex, "device_peak_memory", device_peak_memory)
    metric = PeakMemory()
    [peak] = test_training(ex, train, test, opt, 2, 16, out, metrics=[metric])
    assert peak == metric.device_peak_bytes == 12345 and metric.samples == [12345, 12345]
    assert calls == [True, False, False, False]  # reset before training, read after each epoch and at the end


# ------------------------------------------------------------------------------ non-finite loss
def _nan_setup(bad_index=37):
    ex, out = _mlp(8)
    train, test = _digits(64, 16)
    data = train.data.copy()
    data[bad_index, 0, 3, 3] = np.nan  # ordered batches of 8: sample 37 is in step 4
    train = d5.NumpyDataset(data, "input", train.labels, "label")
    opt = d5ref.MomentumOptimizer(ex, learning_rate=0.01, momentum=0.9)
    return ex, out, d5.OrderedSampler(train, 8), d5.OrderedSampler(test, 8), opt


def test_nonfinite_loss_raises_naming_epoch_and_step_and_keeps_results(tmp_path):
    ex, out, train, test, opt = _nan_setup()
    writer = CSVSummaryWriter(tmp_path)
    metric = TrainingAccuracy()
    trainer = Trainer(train, test, ex, opt, out, events=[writer, metric])
    with pytest.raises(NonFiniteLossError, match=r"is nan at epoch 0, step 4 \(global step 4") as info:
        trainer.run_loop(3)
    err = info.value
    assert (err.epoch, err.step, err.global_step) == (0, 4, 4)
    assert err.stats is trainer.stats and len(err.stats.steps) == 5
    assert all(np.isfinite(s["loss"]) for s in err.stats.steps[:4]) and np.isnan(err.stats.steps[4]["loss"])
    assert err.stats.nonfinite == str(err) and err.stats.epochs[0]["complete"] is False
    # after_training ran: the summary has the five steps
    assert len((tmp_path / "steps.csv").read_text().splitlines()) == 1 + 5
    assert metric.samples  # the metric kept the partial epoch


def test_nonfinite_loss_can_stop_without_raising():
    ex, out, train, test, opt = _nan_setup()
    stats = Trainer(train, test, ex, opt, out, on_nonfinite="stop").run_loop(3)
    assert len(stats.steps) == 5 and len(stats.epochs) == 1
    assert "epoch 0, step 4" in stats.stopped_by and stats.nonfinite == stats.stopped_by


# ------------------------------------------------------------------------------ argument errors
def test_bad_arguments_say_what_is_allowed():
    ex, out, train, test, opt = _setup()
    with pytest.raises(UserError, match=r"network_output 'logits' is not an output.*\['output', 'loss'\]"):
        Trainer(train, test, ex, opt, "logits")
    with pytest.raises(UserError, match="on_nonfinite must be one of"):
        Trainer(train, test, ex, opt, out, on_nonfinite="warn")
    with pytest.raises(UserError, match="epochs must be an integer >= 0. Received: -1"):
        Trainer(train, test, ex, opt, out).run_loop(-1)
    with pytest.raises(TypeError, match="optimizer must be a d5.Optimizer"):
        Trainer(train, test, ex, object(), out)
    with pytest.raises(UserError, match="no validation sampler"):
        Trainer(train, None, ex, opt, out).evaluate()


def test_a_second_run_loop_continues_where_the_first_stopped():
    ex, out, train, test, opt = _setup()
    trainer = Trainer(train, test, ex, opt, out)
    trainer.run_loop(1)
    first_elapsed = trainer.stats.epochs[0]["elapsed"]
    stats = trainer.run_loop(2)
    assert [e["epoch"] for e in stats.epochs] == [0, 1] and stats.global_step == 12
    assert stats.epochs[1]["elapsed"] > first_elapsed
