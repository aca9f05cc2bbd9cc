"""Deep500's sample ``samples/synthetic_dataset.py`` on deep500lite: a perceptron learns x**2 from a
synthetic dataset.

Written as the sample calls the API: a ``d5.Dataset`` subclass whose ``__init__`` calls
``super().__init__()`` with no arguments, ``d5.ShuffleSampler(ds, batch_size=...)``, a PyTorch
model exported to ONNX and parsed with ``d5.parser.load_and_parse_model``, ``d5.ops.MeanSquaredError``,
the TensorFlow executor and the reference ``GradientDescent`` trained with ``optimizer.train``.
Changed: the imports, and ``test_loss`` returns the average it prints, so the test can check it.
"""

import random

import numpy as np
import pytest

import deep500lite as d5
from deep500lite.frameworks import reference as d5ref

torch = pytest.importorskip("torch")
pytest.importorskip("tensorflow")
from deep500lite.frameworks import tensorflow as d5tf  # noqa: E402
from torch import nn  # noqa: E402
from torch.autograd import Variable  # noqa: E402

EPOCHS = 5
BATCH_SIZE = 1
TESTSET_SIZE = 100


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.network = nn.Sequential(
            nn.Linear(1, 1),
        )

    def forward(self, x):
        return self.network(x)


def simple_regression_net(batch_size):
    model = Net()
    file_path = "simple_regression.onnx"
    dummy_input = Variable(torch.randn(batch_size, 1))
    torch.onnx.export(model, dummy_input, file_path, verbose=True)
    return file_path


def train_fn(x):
    return x ** 2


class SynthDataset(d5.Dataset):
    def __init__(self, input_node, label_node):
        super().__init__()
        self.input_node = input_node
        self.label_node = label_node

    def __getitem__(self, index):
        if isinstance(index, int):
            num = np.array([random.random()], np.float32)
        else:
            if isinstance(index, slice):
                length = len(range(*index.indices(len(self))))
            else:
                length = len(index)
            num = np.random.rand(length, 1).astype(np.float32)
        return {self.input_node: num, self.label_node: train_fn(num)}

    def __len__(self):
        return 1000


def test_loss(executor, input_node, output_node):
    avg_testloss = 0
    for i in range(TESTSET_SIZE):
        input = np.random.rand(BATCH_SIZE, 1).astype(np.float32)
        output = executor.inference({input_node: input, 'ground_truth': train_fn(input)})
        avg_testloss += output['loss']
    print('Test loss: %f' % (avg_testloss / TESTSET_SIZE))
    return avg_testloss / TESTSET_SIZE


test_loss.__test__ = False  # the sample's function, called by the test below


def test_synthetic_dataset_sample(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    np.random.seed(0)
    torch.manual_seed(0)

    onnxfile = simple_regression_net(BATCH_SIZE)
    model = d5.parser.load_and_parse_model(onnxfile)
    input_node = model.get_input_nodes()[0].name
    output_node = model.get_output_nodes()[0].name
    model.add_operation(d5.ops.MeanSquaredError([output_node, 'ground_truth'], 'loss'))
    executor = d5tf.from_model(model)

    ds = SynthDataset(input_node, 'ground_truth')
    sampler = d5.ShuffleSampler(ds, batch_size=BATCH_SIZE)

    optimizer = d5ref.GradientDescent(executor)

    before = test_loss(executor, input_node, output_node)

    from tqdm import trange  # noqa: F401 - imported by the sample
    for i in range(EPOCHS):
        print('Epoch %d/%d' % (i + 1, EPOCHS))
        optimizer.train(len(ds), sampler)
        sampler.reset()
        after = test_loss(executor, input_node, output_node)

    # The best line through x**2 on [0, 1] is x - 1/6, with mean squared error 1/180.
    assert after < 0.02 and after < max(before, 0.02)
    for x in (0.0, 0.5, 1.0):
        feed = np.array([[x]], np.float32)
        y = executor.inference({input_node: feed, 'ground_truth': train_fn(feed)})[output_node]
        assert abs(float(np.ravel(y)[0]) - (x - 1 / 6)) < 0.15, (x, y)
