"""Deep500's ``samples/train_until.py``: a ``Trainer`` that stops at a test accuracy.

The sample's path: ``dataset_shape`` feeding ``export_network(name, batch, classes=, channels=,
height=, width=)``, ``load_dataset``, ``LabelCrossEntropy`` on the logits, the reference
``GradientDescent(executor, 'loss')``, ``d5.Trainer(train_sampler, test_sampler, executor,
optimizer, output)`` and ``run_loop(max_epochs, DefaultTrainerEvents(max_epochs) +
[training_events.AccuracyAbortEvent(accuracy)])``. The trainer tests before the first epoch and
after each one, and stops after the first epoch whose test accuracy reaches the bar.
"""

import re

import pytest

import deep500lite as d5
from support import write_digits_as_mnist

pytest.importorskip("tensorflow")


@pytest.mark.parametrize("bar", [85.0, 100.0])
def test_trainer_stops_at_the_first_epoch_reaching_the_bar(tmp_path, monkeypatch, bar, capsys):
    write_digits_as_mnist(tmp_path / "mnist", n_train=960, n_test=320)
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    from deep500lite import datasets as d5ds, networks as d5net
    from deep500lite.frameworks import reference as d5ref, tensorflow as d5tf

    size, most = 32, 6
    classes, c, h, w = d5ds.dataset_shape("mnist")
    net = d5.parser.load_and_parse_model(d5net.export_network("simple_cnn", size, classes=classes, channels=c,
                                                              height=h, width=w))
    x_name, y_name = net.get_input_nodes()[0].name, net.get_output_nodes()[0].name
    learn, check = d5ds.load_dataset("mnist", x_name, "class")
    net.add_operation(d5.ops.LabelCrossEntropy([y_name, "class"], "loss"))
    ex = d5tf.from_model(net)
    trainer = d5.Trainer(d5.ShuffleSampler(learn, size), d5.ShuffleSampler(check, size), ex,
                         d5ref.GradientDescent(ex, "loss"), y_name)
    stats = trainer.run_loop(most, d5.DefaultTrainerEvents(most) + [d5.training_events.AccuracyAbortEvent(bar)])

    seen = [e["test_accuracy"] for e in stats.epochs]
    assert stats.initial_test["test_accuracy"] < 30  # tested before the first epoch: chance
    if bar == 100:  # not reached in a few epochs: every epoch runs
        assert len(seen) == most and stats.stopped_by is None
    else:
        assert seen[-1] >= bar and all(a < bar for a in seen[:-1])
        assert len(seen) < most and "AccuracyAbortEvent" in stats.stopped_by
    err = capsys.readouterr().err  # one plain line per epoch when stderr is not a terminal
    assert len(re.findall(rf"^epoch \d/{most}: 30 steps, loss ", err, re.M)) == len(seen)
