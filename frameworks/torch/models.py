"""Plain PyTorch versions of benchmark models (LeNet-5, CIFAR ResNet-20), for native baselines.

``deep500lite bench overhead`` times these modules called directly against the same modules
exported to ONNX and run by the deep500lite torch executor.

The functions have the same names and arguments as :mod:`deep500lite.frameworks.tensorflow.models`:
``lenet(classes, input_shape)`` and ``resnet20(classes, input_shape)`` return the model
(here a ``torch.nn.Module``), ``export_onnx(model, ...)`` writes it as ONNX. Each framework keeps
its own layout: ``input_shape`` is one sample's shape **channels-first (C, H, W)** here, as torch
convolutions take it, and channels-last (H, W, C) for Keras; the exported graphs take NCHW and
NHWC batches respectively and give the same output shape, ``(batch, classes)``.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import torch
from torch import nn

from deep500lite.errors import UserError

__all__ = ["lenet", "resnet20", "export_onnx", "LeNet", "ResNet20"]


def _chw(input_shape, what: str) -> tuple[int, int, int]:
    shape = tuple(input_shape)
    if len(shape) != 3 or not all(isinstance(d, (int, np.integer)) and d > 0 for d in shape):
        raise UserError(f"{what}: input_shape is one sample's shape, channels first: (C, H, W), three positive "
                        f"integers. Received: input_shape={input_shape!r}")
    return tuple(int(d) for d in shape)


def lenet(classes: int = 10, input_shape=(1, 28, 28)) -> nn.Module:
    """LeNet-5 as a :class:`LeNet` module, for square inputs.

    Args:
        classes: the number of outputs.
        input_shape: one sample's shape, channels first ``(C, H, W)`` with ``H == W``; inputs
            smaller than 16 pixels keep their size through the second convolution.

    Returns:
        The module, in training mode, with ``input_shape`` stored as its attribute (read by
        :func:`export_onnx`).

    Raises:
        UserError: ``input_shape`` is not ``(C, H, H)``.
    """
    channels, height, width = _chw(input_shape, "lenet")
    if height != width:
        raise UserError(f"lenet takes square inputs (H == W) in input_shape=(C, H, W). "
                        f"Received: input_shape={tuple(input_shape)!r}")
    return LeNet(classes, channels, height)


def resnet20(classes: int = 10, input_shape=(3, 32, 32)) -> nn.Module:
    """CIFAR ResNet-20 as a :class:`ResNet20` module.

    Args:
        classes: the number of outputs.
        input_shape: one sample's shape, channels first ``(C, H, W)``; any height and width
            (global average pooling before the classifier).

    Returns:
        The module, in training mode, with ``input_shape`` stored as its attribute.
    """
    shape = _chw(input_shape, "resnet20")
    module = ResNet20(classes, channels=shape[0])
    module.input_shape = shape
    return module


class LeNet(nn.Module):
    """LeNet-5 for ``channels x size x size`` inputs (28 for MNIST), as the zoo's ``lenet`` builds it:
    small inputs (8x8 digits) keep their size through the second convolution (padding 2)."""

    def __init__(self, classes: int = 10, channels: int = 1, size: int = 28):
        super().__init__()
        self.input_shape = (channels, size, size)
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
    """CIFAR ResNet-20 (three stages of three basic blocks, 16/32/64 channels) for ``channels``-channel images."""

    def __init__(self, classes: int = 10, channels: int = 3):
        super().__init__()
        self.input_shape = (channels, 32, 32)
        self.conv1 = nn.Conv2d(channels, 16, 3, 1, 1, bias=False)
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


def export_onnx(module: nn.Module, example=None, training: bool = False,
                batch_size: int | None = None) -> onnx.ModelProto:
    """Export ``module`` with ``torch.onnx.export`` (TorchScript exporter, opset 17).

    The graph's input is named ``input`` (NCHW for the models here) and its output ``output``.

    Args:
        module: the module (its mode is set to eval, or to train with ``training=True``).
        example: an input batch (a tensor or numpy array); the graph's batch size is its first
            dimension. None: a batch of zeros shaped ``(batch_size or 1, *module.input_shape)``
            (set by :func:`lenet` and :func:`resnet20`), and the batch dimension is left open
            when ``batch_size`` is None.
        training: export for training: in eval mode the exporter folds each BatchNormalization
            into the preceding convolution, leaving nothing to train; in training mode the
            BatchNormalization nodes stay.
        batch_size: a fixed batch size for the graph, with ``example=None``.

    Returns:
        The ONNX model.

    Raises:
        UserError: no ``example`` for a module without ``input_shape``, or a ``batch_size`` that
            differs from the example's.
    """
    dynamic_axes = None
    if example is None:
        shape = getattr(module, "input_shape", None)
        if shape is None:
            raise UserError(f"export_onnx needs an example input batch for a module without an input_shape "
                            f"attribute. Received: example=None for {type(module).__name__}")
        if batch_size is None:
            dynamic_axes = {"input": {0: "batch"}, "output": {0: "batch"}}
        param = next(module.parameters(), None)
        example = torch.zeros((batch_size or 1, *shape), device=None if param is None else param.device)
    else:
        example = torch.as_tensor(example)
        if batch_size is not None and example.shape[0] != batch_size:
            raise UserError(f"export_onnx: batch_size must match the example's first dimension, or be None. "
                            f"Received: batch_size={batch_size}, example shape {list(example.shape)}")
    buf = io.BytesIO()
    with warnings.catch_warnings():
        # The exporter warns, per BatchNormalization, that it drops the num_batches_tracked counter.
        warnings.filterwarnings("ignore", message=".*num_batches_tracked.*")
        _export(module, example, buf, training, dynamic_axes)
    return onnx.load_from_string(buf.getvalue())


def _export(module, example, buf, training, dynamic_axes=None):
    if training:
        torch.onnx.export(module.train(), (example,), buf, dynamo=False, opset_version=17, input_names=["input"],
                          output_names=["output"], training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, dynamic_axes=dynamic_axes)
    else:
        torch.onnx.export(module.eval(), (example,), buf, dynamo=False, opset_version=17, input_names=["input"],
                          output_names=["output"], dynamic_axes=dynamic_axes)
