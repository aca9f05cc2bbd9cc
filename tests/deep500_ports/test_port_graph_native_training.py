"""Deep500's native PyTorch executor, as its video-classification sample uses it, on deep500lite.

Deep500's sample builds ``d5fw.PyTorchNativeGraphExecutor(model, loss, device=d5.GPUDevice())``
around a ``torch.nn.Module`` and a ``torch.nn.CrossEntropyLoss``, steps ``d5fw.GradientDescent(
executor, 'loss')`` and trains with ``d5.test_training(..., 'output', metrics=...)``. Here the
same calls train a small CNN on MNIST files written from scikit-learn's digits; changed: the
imports, ``GPUDevice`` -> ``CPUDevice`` and the data. This is issue 15's bug: ``test_training``
with a native executor failed (``'NativeNetwork' object has no attribute
'input_descriptors'``). The checks: the loss falls and the accuracy rises far above chance.
"""

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets as d5ds
from support import write_digits_as_mnist

torch = pytest.importorskip("torch")

BATCH_SIZE = 32
EPOCHS = 4


@pytest.fixture
def mnist_files(tmp_path, monkeypatch):
    write_digits_as_mnist(tmp_path / "mnist")
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, 5, stride=2)
        self.fc = torch.nn.Linear(8 * 12 * 12, 10)

    def forward(self, x):
        return self.fc(torch.flatten(torch.relu(self.conv(x)), 1))


def test_native_executor_trains_with_test_training(mnist_files):
    import deep500lite.frameworks.pytorch as d5fw

    torch.manual_seed(0)
    # Deep500's default input node name is '0'
    train_set, validation_set = d5ds.load_dataset('mnist', '0', 'label')
    train_sampler = d5.ShuffleSampler(train_set, BATCH_SIZE)
    validation_sampler = d5.OrderedSampler(validation_set, BATCH_SIZE)

    model = Net()
    loss = torch.nn.CrossEntropyLoss()
    executor = d5fw.PyTorchNativeGraphExecutor(model, loss, device=d5.CPUDevice())
    optimizer = d5fw.GradientDescent(executor, 'loss')

    before = executor.inference(validation_set[0:BATCH_SIZE])
    results = d5.test_training(executor, train_sampler, validation_sampler,
                               optimizer, EPOCHS, BATCH_SIZE, 'output',
                               metrics=[d5.TestAccuracy(), d5.WallclockTime(reruns=0, avg_over=1)])

    assert (executor.innode, executor.outnode, executor.labelnode, executor.lossnode) == ('0', 'output', 'label', 'loss')
    assert executor.model is model and not executor.model.training  # evaluation mode after the last test pass
    losses = [step['loss'] for step in results.stats.steps]
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])
    # from ~10% (chance); the sample's sampler is unseeded: 82.75-92.25% over sampler seeds 0-11
    assert results.stats.test_accuracy > 70
    after = executor.inference(validation_set[0:BATCH_SIZE])
    assert after['loss'] < 0.5 * before['loss']
    # The native network describes its feeds for the trainer: no declared shapes, so no padding
    assert executor.network.input_descriptors() == {'0': None, 'label': None}
    assert [node.name for node in executor.network.get_input_nodes()] == ['0', 'label']
