"""The model zoo, written directly as ONNX graphs (no framework needed).

>>> from deep500lite import networks
>>> net, input_node, output_node = networks.create_model("lenet", 64, classes=10, shape=(1, 8, 8))
>>> net.inputs, output_node
(['input'], 'output')
"""

from __future__ import annotations

import math
from typing import Callable

from deep500lite.errors import UserError, format_choices
from deep500lite.lv1.network import Network
from deep500lite.networks.builder import GraphBuilder

__all__ = ["create_model", "list_models", "register_model"]

_MODELS: dict[str, Callable] = {}


def register_model(name: str):
    """Register a builder ``f(batch_size, classes, shape, seed, **kwargs) -> Network`` under ``name``."""
    def wrap(fn):
        _MODELS[name] = fn
        return fn
    return wrap


def list_models() -> list[str]:
    """Names of the zoo's networks."""
    return sorted(_MODELS)


def create_model(name: str, batch_size: int | None, classes: int = 10, shape=(1, 28, 28),
                 seed: int = 0, **kwargs) -> tuple[Network, str, str]:
    """Build a zoo network.

    Args:
        name: one of :func:`list_models`.
        batch_size: the batch dimension (``None`` for a symbolic one).
        classes: number of output classes.
        shape: the shape of one sample, channels first (``(C, H, W)``, or ``(D,)`` for ``mlp``).
        seed: seed of the parameter initialization.
        **kwargs: model-specific options.

    Returns:
        ``(network, input_node, output_node)``; the output is the logits.

    Raises:
        UserError: unknown name, or a shape the model cannot take.
    """
    if name not in _MODELS:
        raise UserError(f"Unknown network {name!r}. Known networks: {format_choices(list_models())}.")
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise UserError(f"batch_size must be a positive integer or None. Received: {batch_size!r}")
    if not isinstance(classes, int) or classes < 2:
        raise UserError(f"classes must be an integer >= 2. Received: {classes!r}")
    shape = tuple(int(s) for s in shape)
    net = _MODELS[name](batch_size, classes, shape, seed, **kwargs)
    return net, "input", "output"


def _batch(batch_size):
    return batch_size if batch_size is not None else "N"


@register_model("mlp")
def _mlp(batch_size, classes, shape, seed, hidden=(128, 64)):
    """Multilayer perceptron with ReLU hidden layers; flattens any input shape."""
    b = GraphBuilder("mlp", seed)
    x = b.flatten("input") if len(shape) > 1 else "input"
    width = math.prod(shape)
    for i, h in enumerate(hidden):
        x = b.relu(b.dense(x, width, h, prefix=f"fc{i + 1}"))
        width = h
    x = b.dense(x, width, classes, prefix=f"fc{len(hidden) + 1}", gain=1.0)
    return b.build({"input": (_batch(batch_size), *shape)}, x, doc="MLP")


@register_model("lenet")
def _lenet(batch_size, classes, shape, seed):
    """LeNet-5 (two 5x5 convolutions, three dense layers), adapting padding to small inputs."""
    if len(shape) != 3:
        raise UserError(f"lenet takes samples shaped (C, H, W). Received: shape={shape}")
    c, h, w = shape
    b = GraphBuilder("lenet", seed)
    x = b.maxpool(b.relu(b.conv("input", c, 6, 5, pad=2, prefix="conv1")))
    h, w = h // 2, w // 2
    pad2 = 0 if min(h, w) >= 8 else 2  # small inputs (8x8 digits) keep their size through conv2
    x = b.maxpool(b.relu(b.conv(x, 6, 16, 5, pad=pad2, prefix="conv2")))
    h, w = (h + 2 * pad2 - 4) // 2, (w + 2 * pad2 - 4) // 2
    if h < 1 or w < 1:
        raise UserError(f"lenet needs samples of at least 4x4 pixels. Received: shape={shape}")
    x = b.flatten(x)
    x = b.relu(b.dense(x, 16 * h * w, 120, prefix="fc1"))
    x = b.relu(b.dense(x, 120, 84, prefix="fc2"))
    x = b.dense(x, 84, classes, prefix="fc3", gain=1.0)
    return b.build({"input": (_batch(batch_size), *shape)}, x, doc="LeNet-5")


@register_model("simple_cnn")
def _simple_cnn(batch_size, classes, shape, seed, width=32):
    """Two 3x3 convolution blocks with batch normalization, global average pooling, one dense layer."""
    if len(shape) != 3:
        raise UserError(f"simple_cnn takes samples shaped (C, H, W). Received: shape={shape}")
    b = GraphBuilder("simple_cnn", seed)
    x = b.relu(b.batchnorm(b.conv("input", shape[0], width, 3, pad=1, bias=False, prefix="conv1"), width, "bn1"))
    x = b.maxpool(x)
    x = b.relu(b.batchnorm(b.conv(x, width, 2 * width, 3, pad=1, bias=False, prefix="conv2"), 2 * width, "bn2"))
    x = b.flatten(b.op("GlobalAveragePool", [x]))
    x = b.dense(x, 2 * width, classes, prefix="fc", gain=1.0)
    return b.build({"input": (_batch(batch_size), *shape)}, x, doc="simple CNN")


_CIFAR_DEPTHS = (20, 32, 44, 56, 110)
_IMAGENET_LAYERS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3)}


def _basic_block(b, x, cin, cout, stride, prefix):
    out = b.relu(b.batchnorm(b.conv(x, cin, cout, 3, stride, 1, bias=False, prefix=f"{prefix}.conv1"), cout, f"{prefix}.bn1"))
    out = b.batchnorm(b.conv(out, cout, cout, 3, 1, 1, bias=False, prefix=f"{prefix}.conv2"), cout, f"{prefix}.bn2")
    if stride != 1 or cin != cout:
        x = b.batchnorm(b.conv(x, cin, cout, 1, stride, 0, bias=False, prefix=f"{prefix}.shortcut"), cout,
                        f"{prefix}.shortcut_bn")
    return b.relu(b.op("Add", [out, x]))


def _bottleneck(b, x, cin, width, stride, prefix):
    cout = 4 * width
    out = b.relu(b.batchnorm(b.conv(x, cin, width, 1, 1, 0, bias=False, prefix=f"{prefix}.conv1"), width, f"{prefix}.bn1"))
    out = b.relu(b.batchnorm(b.conv(out, width, width, 3, stride, 1, bias=False, prefix=f"{prefix}.conv2"), width,
                             f"{prefix}.bn2"))
    out = b.batchnorm(b.conv(out, width, cout, 1, 1, 0, bias=False, prefix=f"{prefix}.conv3"), cout, f"{prefix}.bn3")
    if stride != 1 or cin != cout:
        x = b.batchnorm(b.conv(x, cin, cout, 1, stride, 0, bias=False, prefix=f"{prefix}.shortcut"), cout,
                        f"{prefix}.shortcut_bn")
    return b.relu(b.op("Add", [out, x]))


@register_model("resnet")
def _resnet(batch_size, classes, shape, seed, depth=20):
    """ResNet: CIFAR style (depth 6n+2: 20, 32, 44, 56, 110) or ImageNet style (18, 34, 50).

    CIFAR ResNets have three stages of 16/32/64 channels (He et al. 2016, section 4.2) with
    projection shortcuts; ImageNet ResNets start with a 7x7 convolution and max pooling.
    """
    if len(shape) != 3:
        raise UserError(f"resnet takes samples shaped (C, H, W). Received: shape={shape}")
    b = GraphBuilder(f"resnet{depth}", seed)
    if depth in _CIFAR_DEPTHS:
        n = (depth - 2) // 6
        x = b.relu(b.batchnorm(b.conv("input", shape[0], 16, 3, 1, 1, bias=False, prefix="conv1"), 16, "bn1"))
        cin = 16
        for stage, width in enumerate((16, 32, 64)):
            for i in range(n):
                stride = 2 if stage > 0 and i == 0 else 1
                x = _basic_block(b, x, cin, width, stride, f"layer{stage + 1}.{i}")
                cin = width
    elif depth in _IMAGENET_LAYERS:
        x = b.relu(b.batchnorm(b.conv("input", shape[0], 64, 7, 2, 3, bias=False, prefix="conv1"), 64, "bn1"))
        x = b.maxpool(x, 3, 2, 1)
        cin = 64
        for stage, (blocks, width) in enumerate(zip(_IMAGENET_LAYERS[depth], (64, 128, 256, 512))):
            for i in range(blocks):
                stride = 2 if stage > 0 and i == 0 else 1
                if depth >= 50:
                    x = _bottleneck(b, x, cin, width, stride, f"layer{stage + 1}.{i}")
                    cin = 4 * width
                else:
                    x = _basic_block(b, x, cin, width, stride, f"layer{stage + 1}.{i}")
                    cin = width
    else:
        raise UserError(f"resnet depth must be one of {list(_CIFAR_DEPTHS) + list(_IMAGENET_LAYERS)}. "
                        f"Received: depth={depth}")
    x = b.flatten(b.op("GlobalAveragePool", [x]))
    x = b.dense(x, cin, classes, prefix="fc", gain=1.0)
    return b.build({"input": (_batch(batch_size), *shape)}, x, doc=f"ResNet-{depth}")
