"""MobileNetV2 (Sandler et al. 2018) for the model zoo, written directly as an ONNX graph.

Registered as ``mobilenet_v2`` in :mod:`deep500lite.networks`; the layout and parameter names
follow torchvision's ``mobilenet_v2`` (``features.0.0.weight``, ``features.1.conv.0.0.weight``,
``classifier.1.weight``), so a torchvision ``state_dict`` maps onto it by name. ReLU6 is written
as ``Clip(x, 0, 6)`` and the depthwise convolutions as ``Conv`` with ``group`` equal to the
channel count, which every executor runs and differentiates.
"""

from __future__ import annotations

import numpy as np

from deep500lite.errors import UserError
from deep500lite.networks.zoo import _batch, _image_shape, _number, register_model
from deep500lite.networks.builder import GraphBuilder

__all__ = ["MOBILENET_V2_SETTINGS", "make_divisible"]

# (expansion t, output channels c, repeats n, first stride s) of the paper's Table 2.
MOBILENET_V2_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                         (6, 160, 3, 2), (6, 320, 1, 1))


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round a channel count to the nearest multiple of ``divisor`` (at least ``divisor``), never
    going below 90% of ``value``: the channel rounding of the MobileNet reference code."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


def _conv_bn(b, x, cin, cout, k, stride, groups, prefix, relu6=True):
    """Convolution (no bias, ``groups`` groups, 'same' padding) + batch normalization (+ ReLU6),
    named ``<prefix>.0`` and ``<prefix>.1`` as torchvision's ``Conv2dNormActivation``."""
    w = b.weight(f"{prefix}.0.weight", (cout, cin // groups, k, k), (cin // groups) * k * k)
    x = b.op("Conv", [x, w], name=f"{prefix}.0", kernel_shape=[k, k], strides=[stride, stride],
             pads=[(k - 1) // 2] * 4, group=groups)
    x = b.batchnorm(x, cout, f"{prefix}.1")
    return _relu6(b, x) if relu6 else x


def _relu6(b, x):
    lo = b.const_node(np.asarray(0.0, np.float32), "relu6_min")
    hi = b.const_node(np.asarray(6.0, np.float32), "relu6_max")
    return b.op("Clip", [x, lo, hi])


def _inverted_residual(b, x, cin, cout, stride, expansion, prefix):
    """Expansion 1x1 (skipped for t=1), depthwise 3x3, linear 1x1 projection; a residual
    connection when the block keeps the shape."""
    hidden = int(round(cin * expansion))
    out, idx = x, 0
    if expansion != 1:
        out, idx = _conv_bn(b, out, cin, hidden, 1, 1, 1, f"{prefix}.conv.0"), 1
    out = _conv_bn(b, out, hidden, hidden, 3, stride, hidden, f"{prefix}.conv.{idx}")
    w = b.weight(f"{prefix}.conv.{idx + 1}.weight", (cout, hidden, 1, 1), hidden, gain=1.0)
    out = b.op("Conv", [out, w], name=f"{prefix}.conv.{idx + 1}", kernel_shape=[1, 1])
    out = b.batchnorm(out, cout, f"{prefix}.conv.{idx + 2}")
    if stride == 1 and cin == cout:
        out = b.op("Add", [x, out])
    return out


@register_model("mobilenet_v2", default_shape=(3, 32, 32))
def _mobilenet_v2(batch_size, classes, shape, seed, width=1.0, dropout=0.2):
    """MobileNetV2 (torchvision layout): a 3x3 stride-2 convolution to 32 channels, 17 inverted
    residual blocks (Table 2 of the paper), a 1x1 convolution to 1280 channels, global average
    pooling, dropout and a dense layer. ``width`` is the width multiplier (channels rounded to
    multiples of 8; the last 1280 scale only when ``width > 1``). Any input of at least 32x32
    (the network downsamples by 32); 3.5M parameters for 1000 classes.
    """
    c, h, w = _image_shape("mobilenet_v2", shape)
    _number("mobilenet_v2", "width", width, 0, low_inclusive=False)
    _number("mobilenet_v2", "dropout", dropout, 0, 1)
    if min(h, w) < 32:
        raise UserError(f"mobilenet_v2 needs samples of at least 32x32 pixels (it downsamples by 32). "
                        f"Received: shape={shape}")
    b = GraphBuilder("mobilenet_v2", seed)
    cin = make_divisible(32 * width)
    last = make_divisible(1280 * max(1.0, width))
    x = _conv_bn(b, "input", c, cin, 3, 2, 1, "features.0")
    idx = 1
    for t, ch, n, s in MOBILENET_V2_SETTINGS:
        cout = make_divisible(ch * width)
        for i in range(n):
            x = _inverted_residual(b, x, cin, cout, s if i == 0 else 1, t, f"features.{idx}")
            cin, idx = cout, idx + 1
    x = _conv_bn(b, x, cin, last, 1, 1, 1, f"features.{idx}")
    x = b.flatten(b.global_avgpool(x))
    x = b.dense(b.dropout(x, float(dropout)), last, classes, prefix="classifier.1", gain=1.0)
    return b.build({"input": (_batch(batch_size), *shape)}, x, doc=f"MobileNetV2 (width {width})")
