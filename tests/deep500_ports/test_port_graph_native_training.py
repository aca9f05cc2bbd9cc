"""Deep500's native PyTorch executor as its video sample (``ucf101_resnetlstm.py``) drives it.

The sample's path, with a model and data of our own: ``d5fw.PyTorchNativeGraphExecutor(module,
loss_module, device=)`` around a ``torch.nn.Module`` and ``torch.nn.CrossEntropyLoss``, datasets
loaded under the executor's default node names (``'0'`` and ``'label'``), a ``ShuffleSampler``
and an ``OrderedSampler``, the torch ``GradientDescent(executor, 'loss')`` and
``d5.test_training(..., 'output', metrics=[d5.TestAccuracy(), d5.WallclockTime(reruns=0,
avg_over=1)])``.
"""

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets as d5ds
from support import write_digits_as_mnist

torch = pytest.importorskip("torch")


class Strided(torch.nn.Module):
    """Two strided convolutions and a linear read-out."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Conv2d(1, 6, 4, stride=2), torch.nn.ReLU(),
                                        torch.nn.Conv2d(6, 12, 3, stride=2), torch.nn.ReLU())
        self.out = torch.nn.Linear(12 * 6 * 6, 10)

    def forward(self, x):
        return self.out(self.body(x).flatten(1))


def test_native_module_trains_through_test_training(tmp_path, monkeypatch, capsys):
    write_digits_as_mnist(tmp_path / "mnist", n_train=800, n_test=200)
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    import deep500lite.frameworks.pytorch as d5fw

    torch.manual_seed(5)
    net = Strided()
    ex = d5fw.PyTorchNativeGraphExecutor(net, torch.nn.CrossEntropyLoss(), device=d5.CPUDevice())
    assert (ex.innode, ex.labelnode, ex.lossnode, ex.outnode) == ("0", "label", "loss", "output")
    learn, check = d5ds.load_dataset("mnist", ex.innode, ex.labelnode)
    results = d5.test_training(ex, d5.ShuffleSampler(learn, 40), d5.OrderedSampler(check, 40),
                               d5fw.GradientDescent(ex, "loss"), 3, 40, "output",
                               metrics=[d5.TestAccuracy(), d5.WallclockTime(reruns=0, avg_over=1)])
    accuracy, [seconds] = results
    assert seconds > 0 and accuracy > 60  # from chance (10%)
    assert results.stats.initial_test["test_accuracy"] < 30
    steps = [s["loss"] for s in results.stats.steps]
    assert len(steps) == 60 and np.mean(steps[-10:]) < 0.6 * np.mean(steps[:10])
    assert not net.training  # left in evaluation mode by the last test
    assert ex.network.input_descriptors() == {"0": None, "label": None}
    assert "TestAccuracy: " in capsys.readouterr().out
