"""Plain PyTorch versions of benchmark models (LeNet-5, CIFAR ResNet-20), for native baselines.

``deep500lite bench overhead`` times these modules called directly against the same modules
exported to ONNX and run by the deep500lite torch executor.
"""

from __future__ import annotations

import io
import warnings

import onnx
import torch
from torch import nn

__all__ = ["LeNet", "ResNet20", "export_onnx"]


class LeNet(nn.Module):
    """LeNet-5 for ``channels x size x size`` inputs (28 for MNIST), as the zoo's ``lenet`` builds it:
    small inputs (8x8 digits) keep their size through the second convolution (padding 2)."""

    def __init__(self, classes: int = 10, channels: int = 1, size: int = 28):
        super().__init__()
        pad2 = 0 if size // 2 >= 8 else 2
        out = (size // 2 + 2 * pad2 - 4) // 2
        self.conv1 = nn.Conv2d(channels, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5, padding=pad2)
        self.fc1 = nn.Linear(16 * out * out, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class _Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet20(nn.Module):
    """CIFAR ResNet-20 (three stages of three basic blocks, 16/32/64 channels)."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers, cin = [], 16
        for stage, width in enumerate((16, 32, 64)):
            for i in range(3):
                layers.append(_Block(cin, width, 2 if stage > 0 and i == 0 else 1))
                cin = width
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = self.layers(torch.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def export_onnx(module: nn.Module, example: torch.Tensor, training: bool = False) -> onnx.ModelProto:
    """Export ``module`` with ``torch.onnx.export`` (TorchScript exporter, opset 17).

    Args:
        module: the module (its mode is set to eval, or to train with ``training=True``).
        example: an input batch.
        training: export for training: in eval mode the exporter folds each BatchNormalization
            into the preceding convolution, leaving nothing to train; in training mode the
            BatchNormalization nodes stay.
    """
    buf = io.BytesIO()
    with warnings.catch_warnings():
        # The exporter warns, per BatchNormalization, that it drops the num_batches_tracked counter.
        warnings.filterwarnings("ignore", message=".*num_batches_tracked.*")
        _export(module, example, buf, training)
    return onnx.load_from_string(buf.getvalue())


def _export(module, example, buf, training):
    if training:
        torch.onnx.export(module.train(), (example,), buf, dynamo=False, opset_version=17, input_names=["input"],
                          output_names=["output"], training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False)
    else:
        torch.onnx.export(module.eval(), (example,), buf, dynamo=False, opset_version=17, input_names=["input"],
                          output_names=["output"])
