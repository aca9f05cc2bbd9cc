"""Deep500's EuroMPI'19 tutorial, notebook 2_manual (training without recipes), on deep500lite.

One test per cell group, calling the API as the notebook does. Changed: the imports,
``GPUDevice`` -> ``CPUDevice``, the data (CIFAR-10 binary batches written from scikit-learn's
digits through ``DEEP500LITE_DATA``) and ``epochs = 5`` -> 2 (ResNet-20 takes 4 s per epoch on
this 2-core CPU when idle, 20 s and more under load).
"""

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets as d5ds
from deep500lite import networks as d5nt
from support import write_digits_as_cifar10

pytest.importorskip("torch")

EPOCHS = 2  # the notebook's 5, shortened for the test's time budget


@pytest.fixture
def cifar_files(tmp_path, monkeypatch):
    write_digits_as_cifar10(tmp_path / "cifar10")
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    return tmp_path


def _model_and_data():
    shape = d5ds.dataset_shape('cifar10')
    loss = d5ds.dataset_loss('cifar10')
    batch_size = 64
    epochs = EPOCHS
    model, input_node, output_node = d5nt.create_model('resnet', depth=20, classes=shape[0],
                                                       batch_size=batch_size)
    model.add_operation(loss([output_node, 'label'], 'loss'))
    train_set, validation_set = d5ds.load_dataset('cifar10', input_node, 'label')
    train_sampler = d5.ShuffleSampler(train_set, batch_size)
    return model, output_node, train_set, validation_set, train_sampler, batch_size, epochs


def test_manual_training_cells(cifar_files):
    model, output_node, train_set, validation_set, train_sampler, batch_size, epochs = _model_and_data()
    from deep500lite.frameworks import torch as d5fw
    executor = d5fw.from_model(model, device=d5.CPUDevice())
    optimizer = d5fw.MomentumOptimizer(executor, learning_rate=0.1, momentum=0.9, loss='loss')
    results = d5.test_training(executor, train_sampler, validation_set,
                               optimizer, epochs, batch_size, output_node,
                               metrics=[d5.WallclockTime(reruns=0, avg_over=1)])
    assert results[0][0] > 0  # the wall-clock time of the whole training, in seconds
    losses = [step["loss"] for step in results.stats.steps]
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:5])  # 2.7 -> below 1
    # The second epoch's training accuracy (87-93% over seeds 0-7; chance is 10%) is the stable
    # signal. The test accuracy after two epochs at lr 0.1 depends on BatchNorm's running statistics
    # and ranged 24-67% over the same seeds, so it is only checked to be a percentage.
    assert results.stats.epochs[-1]["train_accuracy"] >= 60
    assert 0 <= results.stats.test_accuracy <= 100


def test_augmentation_cells(cifar_files):
    model, output_node, train_set, validation_set, _, batch_size, epochs = _model_and_data()
    from deep500lite.frameworks import reference as d5ref
    train_sampler = d5.ShuffleSampler(train_set, batch_size, transformations=[
        d5ref.Crop((32, 32), random_crop=True, padding=(4, 4)),
        d5ref.RandomFlip(),
        d5ref.Cutout(1, 16),
    ])
    from deep500lite.frameworks import torch as d5fw
    executor = d5fw.from_model(model, device=d5.CPUDevice())
    optimizer = d5fw.MomentumOptimizer(executor, learning_rate=0.1, momentum=0.9, loss='loss')
    results = d5.test_training(executor, train_sampler, validation_set,
                               optimizer, epochs, batch_size, output_node,
                               metrics=[d5.WallclockTime(reruns=0, avg_over=1)])
    assert results[0][0] > 0
    first, second = (e["train_loss"] for e in results.stats.epochs)
    assert second < first - 0.2  # augmented training learns more slowly (as in the notebook): 2.5 -> 2.0
    # Training accuracy in the second epoch: 27-35% over seeds 0-7 (chance is 10%). The test
    # accuracy ranged 13-39% over the same seeds (BatchNorm running statistics after two epochs).
    assert results.stats.epochs[-1]["train_accuracy"] >= 20
    assert 0 <= results.stats.test_accuracy <= 100
