"""Deep500's model-zoo entry points: ``export_network``, its keywords, and the ``deep_mnist`` model.

Deep500 built its zoo in PyTorch and exported it to an ONNX file; ``export_network(name,
batch_size, ...)`` returned that file's path and ``create_model`` read it back. Here the zoo's
ONNX graphs are written directly (no framework needed), with Deep500's names, argument orders
and defaults for the four models Deep500 had. ``simple_cnn`` is Deep500's MNIST CNN (two 5x5
convolutions, dense 50; also registered as ``mnist_cnn``); the batch-normalized CNN deep500lite
called ``simple_cnn`` before is ``bn_cnn``.

========================  =====================================================================
``simple_cnn``            ``(batch_size, classes=10, shape=(1, 28, 28), file_path='mnist_cnn.onnx')``
``deep_mnist``            ``(batch_size, classes=10, shape=(1, 28, 28), file_path='deep_mnist.onnx')``
``resnet``                ``(batch_size, depth=50, classes=10, file_path='resnet.onnx', shape=(3, 32, 32))``
``wide_resnet``           ``(batch_size, depth=28, widen_factor=10, dropout=0.3, classes=10,
                          shape=(3, 32, 32), file_path='wide_resnet.onnx')``
========================  =====================================================================

The other zoo models take ``(batch_size, classes=10, shape=<their default>, file_path='<name>.onnx')``.
"""

from __future__ import annotations

import os

from deep500lite.errors import UserError, format_choices
from deep500lite.networks.zoo import _batch, _image_shape, create_model, deep500_keywords, list_models, register_model
from deep500lite.networks.builder import GraphBuilder

__all__ = ["export_network", "deep500_keywords"]

# Deep500's exporters: the order of their arguments after batch_size, and their defaults.
_POSITIONAL = {
    "simple_cnn": ("classes", "shape", "file_path"),
    "deep_mnist": ("classes", "shape", "file_path"),
    "resnet": ("depth", "classes", "file_path", "shape"),
    "wide_resnet": ("depth", "widen_factor", "dropout", "classes", "shape", "file_path", "with_linear"),
}
_DEFAULTS = {
    "simple_cnn": {"file_path": "mnist_cnn.onnx"},
    "deep_mnist": {"file_path": "deep_mnist.onnx"},
    "resnet": {"depth": 50, "file_path": "resnet.onnx"},
    "wide_resnet": {"depth": 28, "widen_factor": 10, "dropout": 0.3, "file_path": "wide_resnet.onnx"},
}


def export_network(name: str, batch_size: int, *args, **kwargs) -> str:
    """Write a zoo network to an ONNX file and return the file's path (Deep500's ``export_network``).

    Args:
        name: the network (``simple_cnn``, ``deep_mnist``, ``resnet``, ``wide_resnet`` or any
            other of :func:`~deep500lite.networks.list_models`); case and surrounding spaces are ignored.
        batch_size: the batch dimension (``None`` for a symbolic one).
        *args: the model's arguments in Deep500's order (see the module docstring).
        **kwargs: the model's keyword arguments: Deep500's (``classes``, ``shape``, ``file_path``,
            ``depth``, ``widen_factor``, ``dropout``, ``channels``/``height``/``width``) or the
            zoo's (:func:`~deep500lite.networks.model_options`, ``seed``).

    Returns:
        The path of the written file (``file_path``, by default Deep500's file name in the current folder).

    Raises:
        UserError: unknown network, too many positional arguments, an argument given twice, or
            an option the model does not have.
    """
    if not isinstance(name, str):
        raise UserError(f"export_network expects a network name. Received: {type(name).__name__}")
    key = name.strip().lower()
    if key not in list_models():
        raise UserError(f"Network {name!r} not found. Networks: {format_choices(list_models())}. Received: {name!r}")
    order = _POSITIONAL.get(key, ("classes", "shape", "file_path"))
    if len(args) > len(order):
        raise UserError(f"{key} takes at most {len(order)} positional arguments after batch_size "
                        f"({', '.join(order)}). Received: {len(args)}")
    given = dict(zip(order, args))
    twice = sorted(set(given) & set(kwargs))
    if twice:
        raise UserError(f"Arguments given both by position and by keyword: {format_choices(twice)}. "
                        f"Received: {format_choices(twice)}")
    merged = {**_DEFAULTS.get(key, {"file_path": f"{key}.onnx"}), **given, **kwargs}
    if "width" in merged and "widen_factor" in merged and "channels" not in merged and "height" not in merged:
        merged.pop("widen_factor")  # the zoo's own spelling given: it replaces Deep500's default
    file_path = os.fspath(merged.pop("file_path"))
    create_model(key, batch_size, file_path=file_path, **merged)
    return file_path


@register_model("deep_mnist")
def _deep_mnist(batch_size, classes, shape, seed, dropout=0.5):
    """Deep500's deep MNIST network: four 3x3 convolutions (32, 32, 64, 64 channels) with batch
    normalization and ReLU, 2x2 max pooling after the second and fourth, then dropout, dense 512,
    ReLU, dropout, dense 512, ReLU, dropout, dense ``classes``."""
    c, h, w = _image_shape("deep_mnist", shape)
    if min(h, w) < 4:
        raise UserError(f"deep_mnist needs samples of at least 4x4 pixels. Received: shape={shape}")
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise UserError(f"deep_mnist option dropout must be a number >= 0 and < 1. Received: dropout={dropout!r}")
    b = GraphBuilder("deep_mnist", seed)
    x, cin, idx = "input", c, 0
    for cout, pool in ((32, False), (32, True), (64, False), (64, True)):
        x = b.relu(b.batchnorm(b.conv(x, cin, cout, 3, 1, 1, prefix=f"features.{idx}"), cout, f"features.{idx + 1}"))
        cin, idx = cout, idx + 3
        if pool:
            x, h, w, idx = b.maxpool(x, 2, 2), h // 2, w // 2, idx + 1
    x = b.flatten(x)
    width = cin * h * w
    for i, out in enumerate((512, 512)):
        x = b.relu(b.dense(b.dropout(x, float(dropout)), width, out, prefix=f"classifier.{3 * i + 1}"))
        width = out
    x = b.dense(b.dropout(x, float(dropout)), width, classes, prefix="classifier.7", gain=1.0)
    return b.build({"input": (_batch(batch_size), *shape)}, x, doc="deep MNIST (Deep500)")


@register_model("simple_cnn")
@register_model("mnist_cnn")
def _mnist_cnn(batch_size, classes, shape, seed):
    """Deep500's ``simple_cnn``: 5x5 convolutions to 10 and 20 channels, each followed by 2x2 max
    pooling and ReLU, then dense 50, ReLU, dense ``classes``."""
    c, h, w = _image_shape("simple_cnn", shape)
    if min(h, w) < 16:
        raise UserError(f"simple_cnn (Deep500's MNIST CNN) needs samples of at least 16x16 pixels. Received: shape={shape}")
    b = GraphBuilder("mnist_cnn", seed)
    x = b.relu(b.maxpool(b.conv("input", c, 10, 5, prefix="conv1")))
    x = b.relu(b.maxpool(b.conv(x, 10, 20, 5, prefix="conv2")))
    h, w = ((h - 4) // 2 - 4) // 2, ((w - 4) // 2 - 4) // 2
    x = b.relu(b.dense(b.flatten(x), 20 * h * w, 50, prefix="fc1"))
    x = b.dense(x, 50, classes, prefix="fc2", gain=1.0)
    return b.build({"input": (_batch(batch_size), *shape)}, x, doc="MNIST CNN (Deep500's simple_cnn)")
