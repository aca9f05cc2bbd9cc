"""Deep500's recipes/cifar10_resnet44.py (ResNet-44, CIFAR-10, augmentation, PyTorch's momentum
optimizer with weight decay and a learning-rate schedule) on deep500lite.

Changed: the imports, ``GPUDevice`` -> ``CPUDevice``, the data (CIFAR-10 binary batches written
from scikit-learn's digits through ``DEEP500LITE_DATA``, 256 training and 64 test images) and
``'epochs': 90`` -> 1: ResNet-44 takes 10 to 35 s per epoch of 1,250 images on this 2-core CPU.
The recipe's bar, 93% after 90 epochs of the real CIFAR-10, cannot be reached in a test; the test
checks that the recipe runs with all its components (PyTorch momentum with ``weight_decay``, the
``lr`` schedule, the augmentations, ``TerminalBarEvent()``) and that ``run_recipe`` reports the
unmet bar as Deep500's did: False, with the measured accuracy printed.
"""

import re

import pytest

import deep500lite as d5
import deep500lite.frameworks.reference as d5ref
from deep500lite.recipe import run_recipe
from support import write_digits_as_cifar10

pytest.importorskip("torch")


def test_resnet44_recipe_runs_and_reports_its_bar(tmp_path, monkeypatch, capsys):
    write_digits_as_cifar10(tmp_path / "cifar10", n_train=256, n_test=64)
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    import deep500lite.frameworks.torch as d5fw

    FIXED = {
        'model': 'resnet',
        'model_kwargs': dict(depth=44),
        'dataset': 'cifar10',
        'epochs': 1
    }
    MUTABLE = {
        'batch_size': 64,
        'executor': d5fw.from_model,
        'executor_kwargs': dict(device=d5.CPUDevice()),
        'train_sampler': d5.ShuffleSampler,
        'train_sampler_kwargs': dict(transformations=[
            d5ref.Crop('0', 'label', (32, 32),
                       random_crop=True, padding=(4, 4)),
            d5ref.RandomFlip('0', 'label'),
            d5ref.Cutout('0', 'label', 1, 16)
        ]),
        'optimizer': d5fw.MomentumOptimizer,
        'optimizer_args': (0.1, 0.9),
        'optimizer_kwargs': dict(weight_decay=1e-4),
        'events': [d5.training_events.EpochHPSchedule(
                        lr=[(0, 1e-1), (81, 1e-2), (122, 1e-3), (164, 1e-4)]),
                   d5.training_events.TerminalBarEvent()]
    }
    METRICS = [
        (d5.TestAccuracy(), 93.0)
    ]
    with pytest.warns(UserWarning, match="feeds 'input', used instead"):
        assert run_recipe(FIXED, MUTABLE, METRICS) is False
    out = capsys.readouterr().out
    measured = float(re.search(r"TestAccuracy: measured ([0-9.]+)%", out).group(1))
    assert 0 <= measured < 93 and "FAIL" in out
