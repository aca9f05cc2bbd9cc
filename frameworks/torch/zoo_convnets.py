"""Two mobile CNN families for the real-model zoo, written from their papers with torch.nn layers.

The image-model library that ships them (timm) needs torchvision, whose CPU wheel does not install
beside this torch, so the two architectures are written here from the papers' tables, at the
papers' layouts with a width multiplier:

- **RepVGG** (Ding et al., 2021, "RepVGG: Making VGG-style ConvNets Great Again"), the training-time
  form: every block sums a 3x3 convolution with batch normalization, a 1x1 convolution with batch
  normalization and, where the shape allows, a batch normalization of the input, then a ReLU;
  stages of 1, 2, 4, 14 and 1 blocks (RepVGG-A), each starting with a stride-2 block.
- **GhostNet** (Han et al., 2020, "GhostNet: More Features from Cheap Operations"): Ghost modules
  (a 1x1 convolution making half the channels, a cheap 3x3 depthwise convolution making the other
  half from them, concatenated and sliced to the wanted width), Ghost bottlenecks with squeeze-and-
  excitation (hard sigmoid gate) and depthwise stride-2 convolutions, the paper's stage table.

At the zoo's 32x32 images the last stage of both is 1x1, so at batch 2 its batch normalizations
normalize over two values: the gradients through them are ill-conditioned (float32 itself is far
from float64 there), which is what the zoo's floor-relative training check is for.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["RepVGG", "GhostNet", "ARCHITECTURES"]


def _width(channels: float, multiplier: float, divisor: int = 4) -> int:
    """``channels * multiplier`` rounded to a multiple of ``divisor`` (at least ``divisor``)."""
    return max(divisor, int(channels * multiplier + divisor / 2) // divisor * divisor)


class _ConvBN(nn.Sequential):
    def __init__(self, cin, cout, kernel, stride=1, groups=1, relu=False):
        layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        if relu:
            layers.append(nn.ReLU())
        super().__init__(*layers)


class _RepVGGBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.dense = _ConvBN(cin, cout, 3, stride)
        self.pointwise = _ConvBN(cin, cout, 1, stride)
        self.identity = nn.BatchNorm2d(cin) if cin == cout and stride == 1 else None

    def forward(self, x):
        y = self.dense(x) + self.pointwise(x)
        if self.identity is not None:
            y = y + self.identity(x)
        return F.relu(y)


class RepVGG(nn.Module):
    """RepVGG-A (training-time branches) with stage widths ``64a, 64a, 128a, 256a, 512b``.

    Args:
        classes: logits.
        a, b: the paper's width multipliers (A0: 0.75 and 2.5), times ``width``.
        depths: blocks per stage (RepVGG-A: 1, 2, 4, 14, 1).
    """

    def __init__(self, classes: int = 5, a: float = 0.75, b: float = 2.5, width: float = 0.25,
                 depths=(1, 2, 4, 14, 1)):
        super().__init__()
        widths = [min(64, 64 * a), 64 * a, 128 * a, 256 * a, 512 * b]
        widths = [_width(w, width) for w in widths]
        blocks, cin = [], 3
        for cout, depth in zip(widths, depths):
            for i in range(depth):
                blocks.append(_RepVGGBlock(cin, cout, 2 if i == 0 else 1))
                cin = cout
        self.stages = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        return self.head(self.stages(x).mean((2, 3)))


class _GhostModule(nn.Module):
    def __init__(self, cin, cout, relu=True):
        super().__init__()
        self.cout = cout
        primary = -(-cout // 2)
        self.primary = _ConvBN(cin, primary, 1, relu=relu)
        self.cheap = _ConvBN(primary, primary, 3, groups=primary, relu=relu)

    def forward(self, x):
        a = self.primary(x)
        return torch.cat([a, self.cheap(a)], dim=1)[:, :self.cout]


class _SqueezeExcite(nn.Module):
    def __init__(self, channels, ratio):
        super().__init__()
        reduced = _width(channels * ratio, 1.0)
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.expand = nn.Conv2d(reduced, channels, 1)

    def forward(self, x):
        s = F.relu(self.reduce(x.mean((2, 3), keepdim=True)))
        return x * F.hardsigmoid(self.expand(s))


class _GhostBottleneck(nn.Module):
    def __init__(self, cin, mid, cout, kernel, stride, se):
        super().__init__()
        self.ghost1 = _GhostModule(cin, mid)
        self.depthwise = _ConvBN(mid, mid, kernel, stride, groups=mid) if stride > 1 else None
        self.se = _SqueezeExcite(mid, se) if se else None
        self.ghost2 = _GhostModule(mid, cout, relu=False)
        if cin == cout and stride == 1:
            self.shortcut = None
        else:
            self.shortcut = nn.Sequential(_ConvBN(cin, cin, kernel, stride, groups=cin), _ConvBN(cin, cout, 1))

    def forward(self, x):
        y = self.ghost1(x)
        if self.depthwise is not None:
            y = self.depthwise(y)
        if self.se is not None:
            y = self.se(y)
        y = self.ghost2(y)
        return y + (x if self.shortcut is None else self.shortcut(x))


# The paper's table: (kernel, expansion, output channels, squeeze-and-excitation ratio, stride) per block.
_GHOST_STAGES = (
    ((3, 16, 16, 0, 1),),
    ((3, 48, 24, 0, 2),), ((3, 72, 24, 0, 1),),
    ((5, 72, 40, 0.25, 2),), ((5, 120, 40, 0.25, 1),),
    ((3, 240, 80, 0, 2),),
    ((3, 200, 80, 0, 1), (3, 184, 80, 0, 1), (3, 184, 80, 0, 1), (3, 480, 112, 0.25, 1), (3, 672, 112, 0.25, 1)),
    ((5, 672, 160, 0.25, 2),),
    ((5, 960, 160, 0, 1), (5, 960, 160, 0.25, 1), (5, 960, 160, 0, 1), (5, 960, 160, 0.25, 1)),
)


class GhostNet(nn.Module):
    """GhostNet (the paper's stage table) at ``width`` times its channels.

    Args:
        classes: logits.
        width: the width multiplier (the paper's 1.0 makes GhostNet 1.0x).
        stages: how many of the table's stages to build.
    """

    def __init__(self, classes: int = 5, width: float = 0.25, stages: int = len(_GHOST_STAGES)):
        super().__init__()
        cin = _width(16, width)
        self.stem = _ConvBN(3, cin, 3, 2, relu=True)
        blocks = []
        for stage in _GHOST_STAGES[:stages]:
            for kernel, expansion, cout, se, stride in stage:
                mid, cout = _width(expansion, width), _width(cout, width)
                blocks.append(_GhostBottleneck(cin, mid, cout, kernel, stride, se))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.last = _ConvBN(cin, _width(960, width), 1, relu=True)
        self.head_conv = nn.Conv2d(_width(960, width), _width(1280, width), 1)
        self.classifier = nn.Linear(_width(1280, width), classes)

    def forward(self, x):
        y = self.last(self.blocks(self.stem(x))).mean((2, 3), keepdim=True)
        return self.classifier(F.relu(self.head_conv(y)).flatten(1))


#: zoo name -> the class building it
ARCHITECTURES = {"repvgg": RepVGG, "ghostnet": GhostNet}
