"""Deep500's EuroMPI'19 tutorial, notebook 1_mnist (the recipe interface), on deep500lite.

Each test is one cell group of the notebook, calling the API as the notebook does. Changed:
the imports, ``GPUDevice`` -> ``CPUDevice``, and the data: MNIST files written from
scikit-learn's digits (``DEEP500LITE_DATA``), so nothing is downloaded.
"""

import json

import pytest

import deep500lite as d5
from deep500lite.frameworks import torch as d5fw
from support import write_digits_as_mnist

pytest.importorskip("torch")


@pytest.fixture
def mnist_files(tmp_path, monkeypatch):
    write_digits_as_mnist(tmp_path / "mnist")
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    return tmp_path


def _components():
    fixed_components = {
        'dataset': 'mnist',
        'train_sampler': d5.ShuffleSampler,
        'model': 'simple_cnn',
        'epochs': 10
    }
    mutable_components = {
        'executor': d5fw.from_model,
        'executor_kwargs': dict(device=d5.CPUDevice()),
        'batch_size': 64,
        'optimizer': d5fw.MomentumOptimizer,
        'optimizer_args': (0.1, 0.9)
    }
    acceptable_metrics = [
        (d5.TestAccuracy(), 90)
    ]
    return fixed_components, mutable_components, acceptable_metrics


def _run_notebook_recipe(fixed_components, mutable_components, acceptable_metrics, out):
    """The notebook's ``run_recipe`` call; returns its verdict and the test accuracy it measured.

    The notebook's 90% is a claim about real MNIST. On the digits stand-in, with the notebook's
    learning rate 0.1 and momentum 0.9, the last epoch's test accuracy moves by several points
    between epochs and between CPU kinds (89.0% on an AMD EPYC, above 90% on an Intel Xeon, same
    seed). So the test checks that the verdict follows the 90% metric and that the network trained
    (>= 85%, chance is 10%), not on which side of 90% one machine lands.
    """
    passed = d5.run_recipe(fixed_components, mutable_components, acceptable_metrics, out=out)
    (verdict,) = json.loads((out / "results.json").read_text())["verdicts"]
    assert verdict["metric"] == "TestAccuracy" and verdict["required"] == 90
    return passed, verdict["measured"]


def test_recipe_cells_train_and_judge_by_the_90_percent_metric(mnist_files, tmp_path):
    passed, accuracy = _run_notebook_recipe(*_components(), tmp_path / "run")
    assert passed is (accuracy >= 90)
    assert accuracy >= 85


def test_weight_decay_cells_train_and_judge_by_the_90_percent_metric(mnist_files, tmp_path):
    fixed_components, mutable_components, acceptable_metrics = _components()

    # the notebook's modifier, in Deep500's argument order (name, param, grad)
    def weight_decay(name: str, param, grad):
        grad += 1e-4 * param
        return grad

    mutable_components['optimizer_kwargs'] = dict(gradient_modifier=weight_decay)
    passed, accuracy = _run_notebook_recipe(fixed_components, mutable_components, acceptable_metrics,
                                            tmp_path / "run")
    assert passed is (accuracy >= 90)
    assert accuracy >= 85
