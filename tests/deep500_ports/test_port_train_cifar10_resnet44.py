"""Deep500's ``recipes/cifar10_resnet44.py``: a recipe with augmentation, a schedule and a bar it misses.

The recipe's path, with settings of our own (ResNet-20 for one short epoch on a small digits
stand-in for CIFAR-10): ``model_kwargs`` for the depth, the torch ``from_model`` with a device,
``train_sampler`` with ``train_sampler_kwargs`` holding Deep500's older augmentation forms that
name the nodes first (``Crop('0', 'label', size, random_crop=, padding=)``, ``RandomFlip('0',
'label')``, ``Cutout('0', 'label', holes, length)``; the model's input is not called ``'0'`` here,
which a warning says), the torch ``MomentumOptimizer`` with ``optimizer_args`` and
``weight_decay``, ``EpochHPSchedule(lr=[(epoch, value), ...])`` and ``TerminalBarEvent()`` as
events, and a bar the short run cannot reach: ``run_recipe`` prints the measured accuracy and
returns False, as Deep500's did.
"""

import re

import pytest

import deep500lite as d5
import deep500lite.frameworks.reference as d5ref
from deep500lite.recipe import run_recipe
from support import write_digits_as_cifar10

pytest.importorskip("torch")


def test_augmented_scheduled_recipe_reports_its_missed_bar(tmp_path, monkeypatch, capsys):
    write_digits_as_cifar10(tmp_path / "cifar10", n_train=160, n_test=64)
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    import deep500lite.frameworks.pytorch as d5fw

    schedule = d5.training_events.EpochHPSchedule(lr=[(0, 0.05), (1, 0.005)])
    fixed = {"model": "resnet", "model_kwargs": {"depth": 20}, "dataset": "cifar10", "epochs": 1}
    mutable = {"batch_size": 32, "executor": d5fw.from_model, "executor_kwargs": {"device": d5.CPUDevice()},
               "train_sampler": d5.ShuffleSampler,
               "train_sampler_kwargs": {"transformations": [
                   d5ref.Crop("0", "label", (32, 32), random_crop=True, padding=(2, 2)),
                   d5ref.RandomFlip("0", "label"), d5ref.Cutout("0", "label", 2, 8)]},
               "optimizer": d5fw.MomentumOptimizer, "optimizer_args": (0.05, 0.8),
               "optimizer_kwargs": {"weight_decay": 5e-4},
               "events": [schedule, d5.training_events.TerminalBarEvent()]}
    with pytest.warns(UserWarning, match="feeds 'input', used instead"):
        ok = run_recipe(fixed, mutable, [(d5.TestAccuracy(), 97.5)])
    assert ok is False
    captured = capsys.readouterr()
    measured = float(re.search(r"TestAccuracy: measured ([0-9.]+)%", captured.out).group(1))
    assert 0 <= measured < 97.5 and "FAIL" in captured.out
    # one progress display: the recipe's TerminalBarEvent, in plain lines since stderr is not a terminal
    assert captured.err.count("epoch 1/1: 5 steps") == 1
