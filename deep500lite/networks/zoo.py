"""The model zoo, written directly as ONNX graphs (no framework needed).

>>> from deep500lite import networks
>>> net, input_node, output_node = networks.create_model("lenet", 64, classes=10, shape=(1, 8, 8))
>>> net.inputs, output_node
(['input'], 'output')

Every model takes samples shaped ``(C, H, W)`` (``mlp``: any shape, flattened) and outputs logits
``[batch, classes]``. Weights are seeded (see :mod:`deep500lite.networks.builder`); parameter
names follow torchvision where a torchvision model exists (``features.0.weight``,
``layer1.0.conv1.weight``, ...). See ``docs/zoo.md`` for each model's options and size.
"""

from __future__ import annotations

import inspect
import math
from typing import Callable

import numpy as np

from deep500lite.errors import UserError, format_choices
from deep500lite.lv1.network import Network
from deep500lite.networks.builder import GraphBuilder, GraphSummary, dry_run

__all__ = ["create_model", "list_models", "register_model", "count_parameters",
           "model_parameter_count", "model_options", "default_shape"]

_MODELS: dict[str, Callable] = {}
_DEFAULT_SHAPES: dict[str, tuple] = {}


def register_model(name: str, default_shape: tuple = (1, 28, 28)):
    """Register a builder ``f(batch_size, classes, shape, seed, **kwargs) -> Network`` under ``name``.

    Args:
        name: the model's name.
        default_shape: the sample shape :func:`create_model` uses when none is given.
    """
    def wrap(fn):
        _MODELS[name] = fn
        _DEFAULT_SHAPES[name] = tuple(default_shape)
        return fn
    return wrap


def default_shape(name: str) -> tuple:
    """The sample shape ``name`` is built for when :func:`create_model` gets no ``shape``.

    MNIST's ``(1, 28, 28)`` for ``mlp``, ``lenet``, ``bn_cnn``, ``simple_cnn`` and ``deep_mnist``,
    CIFAR's ``(3, 32, 32)`` for the image classifiers ``resnet``, ``wide_resnet``, ``alexnet``,
    ``vgg`` and ``mobilenet_v2`` (Deep500's defaults for the models it had), ``(128,)`` tokens for ``bert``.

    Raises:
        UserError: unknown name.
    """
    _lookup(name)
    return _DEFAULT_SHAPES[name]


def list_models() -> list[str]:
    """Names of the zoo's networks."""
    return sorted(_MODELS)


def model_options(name: str) -> dict:
    """The model-specific keyword arguments of ``name`` and their defaults.

    Raises:
        UserError: unknown name.
    """
    fn = _lookup(name)
    params = list(inspect.signature(fn).parameters.values())[4:]
    return {p.name: p.default for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _lookup(name):
    if name not in _MODELS:
        raise UserError(f"Unknown network {name!r}. Known networks: {format_choices(list_models())}. "
                        f"Received: {name!r}")
    return _MODELS[name]


def _check_args(name, batch_size, classes, shape, seed, kwargs):
    fn = _lookup(name)
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer))
                                   or batch_size < 1):
        raise UserError(f"batch_size must be a positive integer or None. Received: {batch_size!r}")
    if isinstance(classes, bool) or not isinstance(classes, (int, np.integer)) or classes < 2:
        raise UserError(f"classes must be an integer >= 2. Received: {classes!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UserError(f"seed must be an integer >= 0. Received: {seed!r}")
    try:
        dims = tuple(shape)
    except TypeError:
        dims = None
    if (not dims or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1 for s in dims)):
        raise UserError(f"shape must be a sequence of positive integers (one sample, channels first). "
                        f"Received: shape={shape!r}")
    allowed = model_options(name)
    open_ended = any(p.kind == p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown and not open_ended:
        hint = (" (simple_cnn is Deep500's MNIST CNN; the batch-normalized CNN with a width option that "
                "deep500lite called simple_cnn before is now 'bn_cnn')" if name == "simple_cnn" else "")
        raise UserError(f"{name} has no option {format_choices(unknown)}{hint}. Its options: "
                        f"{format_choices(allowed) if allowed else 'none'}. Received: {format_choices(sorted(kwargs))}")
    return fn, tuple(int(s) for s in dims)


def deep500_keywords(name: str, shape, kwargs: dict) -> tuple:
    """Translate Deep500's model keywords into :func:`create_model`'s.

    ``channels``/``height``/``width`` give the sample shape when ``channels`` or ``height`` is
    among them (so ``wide_resnet``'s own ``width`` option keeps its meaning otherwise),
    ``widen_factor`` is ``wide_resnet``'s ``width``, ``file_path`` is where to write the model,
    and ``with_linear=True`` (the only form built here) is dropped.

    Returns:
        ``(shape, file_path, remaining keyword arguments)``.

    Raises:
        UserError: both ``shape`` and ``channels``/``height`` are given, or ``with_linear`` is not True.
    """
    kwargs = dict(kwargs)
    file_path = kwargs.pop("file_path", None)
    if "channels" in kwargs or "height" in kwargs:
        parts = {k: kwargs.pop(k, None) for k in ("channels", "height", "width")}
        missing = [k for k, v in parts.items() if v is None]
        if missing or shape is not None:
            raise UserError(f"Give the sample shape as shape=(C, H, W) or as all of channels=, height=, width=, "
                            f"not both or in part. Received: shape={shape!r}, "
                            + ", ".join(f"{k}={v!r}" for k, v in parts.items()))
        shape = (parts["channels"], parts["height"], parts["width"])
    if "widen_factor" in kwargs:
        if name != "wide_resnet" or "width" in kwargs:
            raise UserError(f"widen_factor is wide_resnet's widening factor (its option width); give it once, to "
                            f"wide_resnet. Received: model {name!r}, widen_factor={kwargs['widen_factor']!r}")
        kwargs["width"] = kwargs.pop("widen_factor")
    if "with_linear" in kwargs:
        if kwargs.pop("with_linear") is not True:
            raise UserError("Only with_linear=True (the classifier's last dense layer included) is built. "
                            "Received: with_linear=False")
    return shape, file_path, kwargs


def create_model(name: str, batch_size: int | None, classes: int = 10, shape=None,
                 seed: int = 0, **kwargs) -> tuple[Network, str, str]:
    """Build a zoo network.

    Args:
        name: one of :func:`list_models`.
        batch_size: the batch dimension (``None`` for a symbolic one).
        classes: number of output classes.
        shape: the shape of one sample, channels first (``(C, H, W)``, or ``(D,)`` for ``mlp``);
            default: the model's :func:`default_shape`.
        seed: seed of the parameter initialization (same seed, same weights).
        **kwargs: model-specific options (see :func:`model_options` and ``docs/zoo.md``). Deep500's
            keywords work too: ``file_path`` (also write the model there, as an ONNX file),
            ``channels``/``height``/``width`` (the sample shape, when ``channels`` or ``height``
            is given) and ``widen_factor`` (``wide_resnet``'s ``width``).

    Returns:
        ``(network, input_node, output_node)``; the output is the logits.

    Raises:
        UserError: unknown name or option, or a shape the model cannot take.
    """
    shape, file_path, kwargs = deep500_keywords(name, shape, kwargs)
    fn, shape = _check_args(name, batch_size, classes, default_shape(name) if shape is None else shape, seed, kwargs)
    net = fn(batch_size, int(classes), shape, int(seed), **kwargs)
    if file_path is not None:
        net.save(file_path)
    return net, "input", "output"


def count_parameters(network: Network, trainable_only: bool = True) -> int:
    """Number of scalar parameters of a network.

    Args:
        network: a :class:`~deep500lite.Network`.
        trainable_only: leave out batch-normalization running statistics (as torchvision's
            published counts do, which count ``module.parameters()``, not buffers).
    """
    stats = {n.input[i] for n in network.graph.node if n.op_type == "BatchNormalization"
             for i in (3, 4) if len(n.input) > i}
    values = network.host_values()
    return sum(int(values[p].size) for p in network.parameters if not (trainable_only and p in stats))


def model_parameter_count(name: str, classes: int = 10, shape=None, trainable_only: bool = True,
                          **kwargs) -> int:
    """Number of scalar parameters of a zoo model, counted without allocating its weights.

    Takes :func:`create_model`'s arguments (the batch size does not matter). Cheap even for
    VGG-16 at 224x224; the count equals :func:`count_parameters` of the built network.
    """
    fn, shape = _check_args(name, None, classes, default_shape(name) if shape is None else shape, 0, kwargs)
    with dry_run():
        result = fn(None, int(classes), shape, 0, **kwargs)
    if isinstance(result, GraphSummary):
        return result.count(trainable_only)
    return count_parameters(result, trainable_only)  # a registered model not written with GraphBuilder


def _batch(batch_size):
    return batch_size if batch_size is not None else "N"


def _image_shape(model, shape):
    if len(shape) != 3:
        raise UserError(f"{model} takes samples shaped (C, H, W). Received: shape={shape}")
    return shape


def _out(n, k, stride=1, pad=0):
    return (n + 2 * pad - k) // stride + 1


def _choice(model, option, value, allowed):
    if value not in allowed:
        raise UserError(f"{model} option {option} must be one of {format_choices(allowed)}. "
                        f"Received: {option}={value!r}")
    return value


def _number(model, option, value, low, high=None, integer=False, low_inclusive=True):
    kinds = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    ok = isinstance(value, kinds) and not isinstance(value, bool)
    ok = ok and (value >= low if low_inclusive else value > low) and (high is None or value < high)
    if not ok:
        bound = f"{'>=' if low_inclusive else '>'} {low}" + (f" and < {high}" if high is not None else "")
        raise UserError(f"{model} option {option} must be {'an integer' if integer else 'a number'} {bound}. "
                        f"Received: {option}={value!r}")
    return value


def _scaled(channels, width):
    return max(1, int(round(channels * width)))


def _variant(model, variant, shape):
    """'imagenet' for inputs of at least 128x128 pixels, 'cifar' below, unless chosen."""
    if variant is None:
        return "imagenet" if min(shape[1:]) >= 128 else "cifar"
    return _choice(model, "variant", variant, ("imagenet", "cifar"))


# ------------------------------------------------------------------------------------ small models
@register_model("mlp")
def _mlp(batch_size, classes, shape, seed, hidden=(128, 64)):
    """Multilayer perceptron with ReLU hidden layers; flattens any input shape."""
    hidden = tuple(hidden)
    for h in hidden:
        _number("mlp", "hidden", h, 1, integer=True)
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
    c, h, w = _image_shape("lenet", shape)
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


@register_model("bn_cnn")
def _bn_cnn(batch_size, classes, shape, seed, width=32):
    """Two 3x3 convolution blocks with batch normalization, global average pooling, one dense layer
    (called ``simple_cnn`` before Deep500's ``simple_cnn`` took that name)."""
    _image_shape("bn_cnn", shape)
    _number("bn_cnn", "width", width, 1, integer=True)
    if min(shape[1:]) < 2:
        raise UserError(f"bn_cnn needs samples of at least 2x2 pixels. Received: shape={shape}")
    b = GraphBuilder("bn_cnn", seed)
    x = b.relu(b.batchnorm(b.conv("input", shape[0], width, 3, pad=1, bias=False, prefix="conv1"), width, "bn1"))
    x = b.maxpool(x)
    x = b.relu(b.batchnorm(b.conv(x, width, 2 * width, 3, pad=1, bias=False, prefix="conv2"), 2 * width, "bn2"))
    x = b.flatten(b.global_avgpool(x))
    x = b.dense(x, 2 * width, classes, prefix="fc", gain=1.0)
    return b.build({"input": (_batch(batch_size), *shape)}, x, doc="CNN with batch normalization")


# ------------------------------------------------------------------------------------------ ResNet
CIFAR_RESNET_DEPTHS = (20, 32, 44, 56, 110)
IMAGENET_RESNET_LAYERS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3)}
_INT64_MAX = np.iinfo(np.int64).max


def _zero_pad_shortcut(b, x, cin, cout, stride, prefix):
    """He et al.'s option A: subsample by ``stride`` and zero-pad the new channels (no parameters)."""
    if stride != 1:
        x = b.op("Slice", [x, b.constant(f"{prefix}.sc_starts", np.array([0, 0], np.int64)),
                           b.constant(f"{prefix}.sc_ends", np.array([_INT64_MAX] * 2, np.int64)),
                           b.constant(f"{prefix}.sc_axes", np.array([2, 3], np.int64)),
                           b.constant(f"{prefix}.sc_steps", np.array([stride] * 2, np.int64))],
                 name=f"{prefix}.shortcut_subsample")
    if cout != cin:
        lo = (cout - cin) // 2
        pads = np.array([0, lo, 0, 0, 0, cout - cin - lo, 0, 0], np.int64)
        x = b.op("Pad", [x, b.constant(f"{prefix}.sc_pads", pads)], name=f"{prefix}.shortcut_pad", mode="constant")
    return x


def _basic_block(b, x, cin, cout, stride, prefix, shortcut="B"):
    out = b.relu(b.batchnorm(b.conv(x, cin, cout, 3, stride, 1, bias=False, prefix=f"{prefix}.conv1"), cout,
                             f"{prefix}.bn1"))
    out = b.batchnorm(b.conv(out, cout, cout, 3, 1, 1, bias=False, prefix=f"{prefix}.conv2"), cout, f"{prefix}.bn2")
    if stride != 1 or cin != cout:
        if shortcut == "A":
            x = _zero_pad_shortcut(b, x, cin, cout, stride, prefix)
        else:
            x = b.batchnorm(b.conv(x, cin, cout, 1, stride, 0, bias=False, prefix=f"{prefix}.shortcut"), cout,
                            f"{prefix}.shortcut_bn")
    return b.relu(b.op("Add", [out, x]))


def _bottleneck(b, x, cin, width, stride, prefix):
    cout = 4 * width
    out = b.relu(b.batchnorm(b.conv(x, cin, width, 1, 1, 0, bias=False, prefix=f"{prefix}.conv1"), width,
                             f"{prefix}.bn1"))
    out = b.relu(b.batchnorm(b.conv(out, width, width, 3, stride, 1, bias=False, prefix=f"{prefix}.conv2"), width,
                             f"{prefix}.bn2"))
    out = b.batchnorm(b.conv(out, width, cout, 1, 1, 0, bias=False, prefix=f"{prefix}.conv3"), cout, f"{prefix}.bn3")
    if stride != 1 or cin != cout:
        x = b.batchnorm(b.conv(x, cin, cout, 1, stride, 0, bias=False, prefix=f"{prefix}.shortcut"), cout,
                        f"{prefix}.shortcut_bn")
    return b.relu(b.op("Add", [out, x]))


@register_model("resnet", default_shape=(3, 32, 32))
def _resnet(batch_size, classes, shape, seed, depth=20, shortcut="B"):
    """ResNet: CIFAR style (depth 6n+2: 20, 32, 44, 56, 110) or ImageNet style (18, 34, 50).

    CIFAR ResNets (He et al. 2016, section 4.2): a 3x3 convolution to 16 channels, then three
    stages of ``(depth - 2) / 6`` basic blocks with 16/32/64 channels, the first block of stages 2
    and 3 striding by 2; global average pooling and one dense layer. ``shortcut`` picks the
    shortcut of the blocks that change shape: ``"B"`` a 1x1 convolution and batch normalization
    (projection), ``"A"`` the paper's parameter-free subsampling and zero-padding of the new
    channels (the variant of the published 0.27M/0.85M/1.7M counts).

    ImageNet ResNets (torchvision layout, ``shortcut="B"`` only): a 7x7 stride-2 convolution to 64
    channels and 3x3 stride-2 max pooling, four stages of 64/128/256/512 channels (basic blocks for
    18 and 34; bottleneck blocks with 4x expansion and the stride on the 3x3 convolution for 50).
    """
    _image_shape("resnet", shape)
    allowed = list(CIFAR_RESNET_DEPTHS) + list(IMAGENET_RESNET_LAYERS)
    if depth not in allowed or isinstance(depth, bool):
        raise UserError(f"resnet depth must be one of {allowed}. Received: depth={depth!r}")
    _choice("resnet", "shortcut", shortcut, ("A", "B"))
    b = GraphBuilder(f"resnet{depth}", seed)
    h, w = shape[1:]
    if depth in CIFAR_RESNET_DEPTHS:
        if min(h, w) < 4:
            raise UserError(f"CIFAR resnet needs samples of at least 4x4 pixels. Received: shape={shape}")
        n = (depth - 2) // 6
        x = b.relu(b.batchnorm(b.conv("input", shape[0], 16, 3, 1, 1, bias=False, prefix="conv1"), 16, "bn1"))
        cin = 16
        for stage, width in enumerate((16, 32, 64)):
            for i in range(n):
                stride = 2 if stage > 0 and i == 0 else 1
                x = _basic_block(b, x, cin, width, stride, f"layer{stage + 1}.{i}", shortcut)
                cin = width
    else:
        if shortcut != "B":
            raise UserError(f"ImageNet resnet (depth {depth}) has projection shortcuts only: shortcut must be 'B'. "
                            f"Received: shortcut={shortcut!r}")
        if min(h, w) < 8:
            raise UserError(f"ImageNet resnet needs samples of at least 8x8 pixels. Received: shape={shape}")
        x = b.relu(b.batchnorm(b.conv("input", shape[0], 64, 7, 2, 3, bias=False, prefix="conv1"), 64, "bn1"))
        x = b.maxpool(x, 3, 2, 1)
        cin = 64
        for stage, (blocks, width) in enumerate(zip(IMAGENET_RESNET_LAYERS[depth], (64, 128, 256, 512))):
            for i in range(blocks):
                stride = 2 if stage > 0 and i == 0 else 1
                if depth >= 50:
                    x = _bottleneck(b, x, cin, width, stride, f"layer{stage + 1}.{i}")
                    cin = 4 * width
                else:
                    x = _basic_block(b, x, cin, width, stride, f"layer{stage + 1}.{i}")
                    cin = width
    x = b.flatten(b.global_avgpool(x))
    x = b.dense(x, cin, classes, prefix="fc", gain=1.0)
    return b.build({"input": (_batch(batch_size), *shape)}, x, doc=f"ResNet-{depth}")


# ------------------------------------------------------------------------------------ Wide ResNet
def _wide_block(b, x, cin, cout, stride, dropout, prefix):
    """Pre-activation block: BN-ReLU-conv3x3-(dropout)-BN-ReLU-conv3x3, plus the shortcut."""
    act = b.relu(b.batchnorm(x, cin, f"{prefix}.bn1"))
    if stride != 1 or cin != cout:
        # As in the reference implementation, a projection shortcut takes the pre-activated input.
        x = b.conv(act, cin, cout, 1, stride, 0, bias=False, prefix=f"{prefix}.shortcut")
    out = b.conv(act, cin, cout, 3, stride, 1, bias=False, prefix=f"{prefix}.conv1")
    out = b.dropout(b.relu(b.batchnorm(out, cout, f"{prefix}.bn2")), dropout)
    out = b.conv(out, cout, cout, 3, 1, 1, bias=False, prefix=f"{prefix}.conv2")
    return b.op("Add", [out, x])


@register_model("wide_resnet", default_shape=(3, 32, 32))
def _wide_resnet(batch_size, classes, shape, seed, depth=28, width=10, dropout=0.0):
    """Wide ResNet WRN-depth-width (Zagoruyko & Komodakis 2016), CIFAR style.

    A 3x3 convolution to 16 channels, three stages of ``(depth - 4) / 6`` pre-activation blocks
    with ``16*width``, ``32*width``, ``64*width`` channels (stages 2 and 3 start with stride 2),
    dropout between the two convolutions of a block, then BN-ReLU, global average pooling and one
    dense layer. Convolutions have no bias; shortcuts that change shape are 1x1 convolutions.
    """
    _image_shape("wide_resnet", shape)
    _number("wide_resnet", "depth", depth, 10, integer=True)
    if (depth - 4) % 6:
        raise UserError(f"wide_resnet depth must be 6n+4 (10, 16, 22, 28, 34, 40, ...). Received: depth={depth!r}")
    _number("wide_resnet", "width", width, 1, integer=True)
    _number("wide_resnet", "dropout", dropout, 0, 1)
    if min(shape[1:]) < 4:
        raise UserError(f"wide_resnet needs samples of at least 4x4 pixels. Received: shape={shape}")
    n = (depth - 4) // 6
    b = GraphBuilder(f"wrn{depth}_{width}", seed)
    x = b.conv("input", shape[0], 16, 3, 1, 1, bias=False, prefix="conv1")
    cin = 16
    for stage, base in enumerate((16, 32, 64)):
        cout = base * width
        for i in range(n):
            stride = 2 if stage > 0 and i == 0 else 1
            x = _wide_block(b, x, cin, cout, stride, float(dropout), f"block{stage + 1}.{i}")
            cin = cout
    x = b.relu(b.batchnorm(x, cin, "bn"))
    x = b.flatten(b.global_avgpool(x))
    x = b.dense(x, cin, classes, prefix="fc", gain=1.0)
    return b.build({"input": (_batch(batch_size), *shape)}, x, doc=f"WRN-{depth}-{width}")


# ---------------------------------------------------------------------------------------- AlexNet
def _classifier(b, x, cin, hidden, classes, dropout, dropout_first, start=0):
    """Two ReLU dense layers of ``hidden`` units and the output layer, named ``classifier.<i>``
    as torchvision's ``nn.Sequential`` indices (dropout first in AlexNet, after ReLU in VGG)."""
    i = start
    for _ in range(2):
        if dropout_first:
            x, i = b.dropout(x, dropout), i + 1
        x = b.relu(b.dense(x, cin, hidden, prefix=f"classifier.{i}"))
        cin, i = hidden, i + 2
        if not dropout_first:
            x, i = b.dropout(x, dropout), i + 1
    return b.dense(x, cin, classes, prefix=f"classifier.{i}", gain=1.0)


@register_model("alexnet", default_shape=(3, 32, 32))
def _alexnet(batch_size, classes, shape, seed, variant=None, width=1.0, hidden=None, dropout=0.5):
    """AlexNet, torchvision's single-stream variant (Krizhevsky 2014, "One weird trick").

    ``variant="imagenet"`` (default for inputs of at least 128x128): convolutions 11x11/4 (64),
    5x5 (192), 3x3 (384, 256, 256), 3x3/2 max pooling after the 1st, 2nd and 5th; adaptive average
    pooling to 6x6; dropout, dense 4096, dropout, dense 4096, dense ``classes``: 61.1M parameters
    for 1000 classes at 224x224 (any input of at least 63x63 works).
    ``variant="cifar"`` (default below 128x128): the same five convolutions all 3x3 stride 1 with
    2x2 max pooling, no adaptive pooling (the classifier takes ``256 * H/8 * W/8`` features) and
    ``hidden`` 1024 by default; any input of at least 8x8.
    ``width`` scales the convolution channels, ``hidden`` sets the dense layers' width.
    """
    c, h, w = _image_shape("alexnet", shape)
    variant = _variant("alexnet", variant, shape)
    _number("alexnet", "width", width, 0, low_inclusive=False)
    _number("alexnet", "dropout", dropout, 0, 1)
    hidden = (4096 if variant == "imagenet" else 1024) if hidden is None else hidden
    _number("alexnet", "hidden", hidden, 1, integer=True)
    chans = [_scaled(ch, width) for ch in (64, 192, 384, 256, 256)]
    if variant == "imagenet":
        sizes = [(h, w)]
        for k, s, p, pool in ((11, 4, 2, True), (5, 1, 2, True), (3, 1, 1, False), (3, 1, 1, False),
                              (3, 1, 1, True)):
            hh, ww = _out(sizes[-1][0], k, s, p), _out(sizes[-1][1], k, s, p)
            if pool:
                hh, ww = _out(hh, 3, 2), _out(ww, 3, 2)
            sizes.append((hh, ww))
        if min(sizes[-1]) < 1:
            raise UserError(f"alexnet variant 'imagenet' needs samples of at least 63x63 pixels (use "
                            f"variant='cifar' for small images). Received: shape={shape}")
        layout = ((11, 4, 2, True), (5, 1, 2, True), (3, 1, 1, False), (3, 1, 1, False), (3, 1, 1, True))
    else:
        if min(h, w) < 8:
            raise UserError(f"alexnet variant 'cifar' needs samples of at least 8x8 pixels. Received: shape={shape}")
        layout = ((3, 1, 1, True), (3, 1, 1, True), (3, 1, 1, False), (3, 1, 1, False), (3, 1, 1, True))
    b = GraphBuilder("alexnet", seed)
    x, cin, idx = "input", c, 0
    for (k, s, p, pool), cout in zip(layout, chans):
        x = b.relu(b.conv(x, cin, cout, k, s, p, prefix=f"features.{idx}"))
        h, w, idx, cin = _out(h, k, s, p), _out(w, k, s, p), idx + 2, cout
        if pool:
            if variant == "imagenet":
                x, h, w = b.maxpool(x, 3, 2), _out(h, 3, 2), _out(w, 3, 2)
            else:
                x, h, w = b.maxpool(x, 2, 2), h // 2, w // 2
            idx += 1
    if variant == "imagenet":
        x, h, w = b.adaptive_avgpool(x, (h, w), (6, 6)), 6, 6
    x = _classifier(b, b.flatten(x), cin * h * w, hidden, classes, float(dropout), dropout_first=True)
    return b.build({"input": (_batch(batch_size), *shape)}, x, doc=f"AlexNet ({variant})")


# -------------------------------------------------------------------------------------------- VGG
VGG_CONFIGS = {
    11: (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    13: (64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    16: (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"),
    19: (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"),
}


@register_model("vgg", default_shape=(3, 32, 32))
def _vgg(batch_size, classes, shape, seed, depth=16, batch_norm=False, variant=None, width=1.0, hidden=4096,
         dropout=0.5):
    """VGG-11/13/16/19 (Simonyan & Zisserman 2015, configurations A, B, D, E), torchvision layout.

    3x3 convolutions with bias (each followed by batch normalization if ``batch_norm``) and ReLU,
    2x2 max pooling after each group. ``variant="imagenet"`` (default for inputs of at least
    128x128): adaptive average pooling to 7x7, then dense ``hidden``, ReLU, dropout, dense
    ``hidden``, ReLU, dropout, dense ``classes`` (VGG-16: 138.36M parameters at 224x224 with 1000
    classes). ``variant="cifar"`` (default below 128x128): one dense layer on the flattened
    features (``512 * H/32 * W/32`` of them; 512 for 32x32). Inputs of at least 32x32.
    ``width`` scales the convolution channels.
    """
    c, h, w = _image_shape("vgg", shape)
    if depth not in VGG_CONFIGS or isinstance(depth, bool):
        raise UserError(f"vgg depth must be one of {list(VGG_CONFIGS)}. Received: depth={depth!r}")
    _choice("vgg", "batch_norm", batch_norm, (True, False))
    variant = _variant("vgg", variant, shape)
    _number("vgg", "width", width, 0, low_inclusive=False)
    _number("vgg", "hidden", hidden, 1, integer=True)
    _number("vgg", "dropout", dropout, 0, 1)
    if min(h, w) < 32:
        raise UserError(f"vgg needs samples of at least 32x32 pixels (five 2x2 poolings). Received: shape={shape}")
    b = GraphBuilder(f"vgg{depth}{'_bn' if batch_norm else ''}", seed)
    x, cin, idx = "input", c, 0
    for item in VGG_CONFIGS[depth]:
        if item == "M":
            x, h, w, idx = b.maxpool(x, 2, 2), h // 2, w // 2, idx + 1
            continue
        cout = _scaled(item, width)
        x = b.conv(x, cin, cout, 3, 1, 1, prefix=f"features.{idx}")
        if batch_norm:
            x = b.batchnorm(x, cout, f"features.{idx + 1}")
        x, cin, idx = b.relu(x), cout, idx + (3 if batch_norm else 2)
    if variant == "imagenet":
        x = b.adaptive_avgpool(x, (h, w), (7, 7))
        x = _classifier(b, b.flatten(x), cin * 49, hidden, classes, float(dropout), dropout_first=False)
    else:
        x = b.dense(b.flatten(x), cin * h * w, classes, prefix="classifier", gain=1.0)
    return b.build({"input": (_batch(batch_size), *shape)}, x,
                   doc=f"VGG-{depth}{'-BN' if batch_norm else ''} ({variant})")


# Models in their own modules register themselves on import.
