"""Deep500's EuroMPI'19 tutorial, notebook 1_mnist (the recipe interface), on deep500lite.

Each test is one cell group of the notebook, calling the API as the notebook does. Changed:
the imports, ``GPUDevice`` -> ``CPUDevice``, and the data: MNIST files written from
scikit-learn's digits (``DEEP500LITE_DATA``), so nothing is downloaded.
"""

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


def test_recipe_cells_reach_90_percent(mnist_files):
    fixed_components, mutable_components, acceptable_metrics = _components()
    assert d5.run_recipe(fixed_components, mutable_components, acceptable_metrics) is True


def test_weight_decay_cells_reach_90_percent(mnist_files):
    fixed_components, mutable_components, acceptable_metrics = _components()

    # the notebook's modifier, in Deep500's argument order (name, param, grad)
    def weight_decay(name: str, param, grad):
        grad += 1e-4 * param
        return grad

    mutable_components['optimizer_kwargs'] = dict(gradient_modifier=weight_decay)
    assert d5.run_recipe(fixed_components, mutable_components, acceptable_metrics) is True
