"""The recipe interface of Deep500's EuroMPI'19 notebook ``1_mnist``, through deep500lite.

What the notebook relies on, checked with a recipe of our own (Deep500's MNIST CNN
``'simple_cnn'`` on a digits stand-in for MNIST): ``d5.run_recipe(fixed, mutable, metrics)`` with
the three dicts apart, ``executor_kwargs`` carrying the device, ``optimizer_args`` given
positionally after the loss (Deep500's ``(executor, 'loss', learning_rate, momentum)``), a bare
number as the acceptable accuracy (percent), the boolean verdict, and a ``gradient_modifier``
called with Deep500's ``(name, param, grad)``.
"""

import json

import numpy as np
import pytest

import deep500lite as d5
from support import write_digits_as_mnist

pytest.importorskip("torch")


@pytest.fixture
def digit_files(tmp_path, monkeypatch):
    write_digits_as_mnist(tmp_path / "mnist", n_train=1000, n_test=300)
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    return tmp_path


def _recipe(bar):
    import deep500lite.frameworks.pytorch as torch_fw

    unchangeable = {"dataset": "mnist", "model": "simple_cnn", "train_sampler": d5.ShuffleSampler, "epochs": 3}
    tunable = {"batch_size": 32, "executor": torch_fw.from_model,
               "executor_kwargs": {"device": d5.CPUDevice()},
               "optimizer": torch_fw.MomentumOptimizer, "optimizer_args": (0.05, 0.9)}
    return unchangeable, tunable, [(d5.TestAccuracy(), bar)]


def _verdict(folder):
    (only,) = json.loads((folder / "results.json").read_text())["verdicts"]
    return only


@pytest.mark.parametrize("bar", [60, 99.9])
def test_recipe_verdict_follows_a_percent_bar(digit_files, tmp_path, bar, capsys):
    fixed, mutable, wanted = _recipe(bar)
    ok = d5.run_recipe(fixed, mutable, wanted, out=tmp_path / "run")
    verdict = _verdict(tmp_path / "run")
    # three epochs of 32-image steps take the CNN from chance (10%) to 80-95% on the stand-in
    assert verdict["metric"] == "TestAccuracy" and verdict["required"] == bar
    assert 60 <= verdict["measured"] <= 100
    assert ok is (verdict["measured"] >= bar) and ok is (bar == 60)
    assert ("PASS" if ok else "FAIL") in capsys.readouterr().out


def test_optimizer_args_follow_the_loss_in_deep500s_order(digit_files):
    import deep500lite.frameworks.pytorch as torch_fw
    from deep500lite import networks

    net, _, _ = networks.create_model("simple_cnn", 8)
    net.add_operation(d5.ops.SoftmaxCrossEntropy([net.outputs[0], "label"], "loss"))
    opt = torch_fw.MomentumOptimizer(torch_fw.from_model(net), "loss", 0.05, 0.9)
    assert (opt.loss, opt.learning_rate, opt.momentum) == ("loss", 0.05, 0.9)


def test_a_gradient_modifier_gets_name_param_grad(digit_files, tmp_path):
    fixed, mutable, wanted = _recipe(60)
    calls = []

    def decay_towards_zero(param_name: str, weights, gradient):
        calls.append((param_name, np.shape(weights), np.shape(gradient)))
        return gradient + 3e-4 * weights

    mutable["optimizer_kwargs"] = {"gradient_modifier": decay_towards_zero}
    d5.run_recipe(fixed, mutable, wanted, out=tmp_path / "run")
    # every trainable tensor of the CNN, every step, with the value and the gradient of one shape
    names = {name for name, _, _ in calls}
    assert len(names) == 8 and all(isinstance(n, str) for n in names)
    assert all(w == g for _, w, g in calls)
    assert _verdict(tmp_path / "run")["measured"] >= 60
