"""The Keras side of the real-model zoo: ``keras.applications`` networks exported with tf2onnx.

Each model is built with random weights (``weights=None``, 5 classes, logits out, channels last),
batch 2, and handed to :mod:`deep500lite.bench.zoo` as a
:class:`~deep500lite.bench.zoo_model.ZooModel` with Keras's own answers: float64 and float32
logits in inference mode and the gradients of the mean softmax cross-entropy.

Input size. deep500lite trains BatchNormalization with batch statistics; at the smallest input
(32x32) the last blocks of the /32-downsampling networks are 1x1, so their BatchNormalization
normalizes 2 values per channel and the training-mode gradients are chaotic (Keras's own float32
and float64 gradients differ by 100%). Networks with BatchNormalization are therefore built at
64x64 (last blocks 2x2) and InceptionV3 at 107x107 (not 75), where float32 and float64 agree to
1e-5..6e-2 (relative, per tensor); Xception stays at its minimum 71 (last blocks 3x3), VGG16 (no
BatchNormalization) at 32.

Not in the zoo: ConvNeXtTiny (tf2onnx 1.17 leaves ``Erfc`` from the exact GELU and Keras's
depthwise-convolution ``StatefulPartitionedCall`` unconverted) and RegNetX002 (not in Keras 3.15's
``keras.applications``).

Weights. After ``keras.utils.set_random_seed(seed)`` every float variable is perturbed with seeded
noise so that all values are unique (``map_parameters`` matches initializers by value). Fresh
BatchNormalization layers hold ``moving_mean = 0`` and ``moving_variance = 1``, which through 50+
layers makes the inference output blow up or saturate to the same logits for every sample; so the
moving statistics are first calibrated on a separate seeded batch (one training-mode pass with
momentum 0) and then perturbed too. Every ``Dropout`` (EfficientNet's stochastic depth is a
``Dropout``) has its rate set to 0.

Export. Keras 3 computes inference BatchNormalization as plain arithmetic that grappler's constant
folding merges into the convolution kernels, which would leave gamma, beta and the kernels found
in no initializer. While tracing for tf2onnx, 4-D channels-last float32 batch normalization is
therefore computed with ``tf.compat.v1.nn.fused_batch_norm(is_training=False)`` (the same
function, so the graph is unchanged in meaning), which tf2onnx writes as an ONNX
``BatchNormalization`` node, and tf2onnx's ``remove_back_to_back`` optimizer (which fuses
Conv + BatchNormalization) is switched off; every other tf2onnx optimizer stays on. The graph then
keeps every Keras parameter as an initializer, and since deep500lite trains BatchNormalization
nodes with batch statistics, ``gradients64``/``gradients32`` are computed with ``training=True``
(dropout is 0, so only BatchNormalization changes). Where a graph has no BatchNormalization node
the gradients use ``training=False``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re

import numpy as np

from deep500lite.bench.contract import ZooModel, map_parameters
from deep500lite.errors import FrameworkNotAvailableError, ModelExportError, UserError

__all__ = ["EXPORTERS", "model_names", "model_source", "build"]

#: the exporters this module can use.
EXPORTERS = ("tf2onnx",)

_SOURCE = "keras.applications"
_CLASSES = 5


@dataclasses.dataclass(frozen=True)
class _Spec:
    constructor: str  # attribute of keras.applications
    size: int  # side of the square input (see the module docstring)
    pixels: tuple[float, float]  # range of the fed values (models with preprocessing layers see 0..255)
    kwargs: tuple = ()


_UNIT = (-1.0, 1.0)
_BYTE = (0.0, 255.0)

_SPECS: dict[str, _Spec] = {
    "keras_mobilenet_v2": _Spec("MobileNetV2", 64, _UNIT, (("alpha", 0.35),)),
    "keras_mobilenet_v3_small": _Spec("MobileNetV3Small", 64, _BYTE, (("include_preprocessing", True),)),
    "keras_mobilenet_v3_large_minimalistic": _Spec(
        "MobileNetV3Large", 64, _BYTE, (("minimalistic", True), ("include_preprocessing", True))),
    "keras_resnet50": _Spec("ResNet50", 64, _UNIT),
    "keras_resnet50_v2": _Spec("ResNet50V2", 64, _UNIT),
    "keras_efficientnet_b0": _Spec("EfficientNetB0", 64, _BYTE),
    "keras_efficientnet_v2_b0": _Spec("EfficientNetV2B0", 64, _BYTE),
    "keras_densenet121": _Spec("DenseNet121", 64, _UNIT),
    "keras_xception": _Spec("Xception", 71, _UNIT),
    "keras_inception_v3": _Spec("InceptionV3", 107, _UNIT),
    "keras_nasnet_mobile": _Spec("NASNetMobile", 64, _UNIT),
    "keras_vgg16": _Spec("VGG16", 32, _UNIT),
}

# Logits larger than this are scaled down through the classifier's kernel and bias.
_MAX_LOGIT = 8.0


def model_names() -> list[str]:
    """Every model this module can build, in a stable order.

    Returns:
        The zoo names, each prefixed ``"keras_"``.
    """
    return list(_SPECS)


def _check_name(name) -> _Spec:
    if name not in _SPECS:
        raise UserError(f"Unknown Keras zoo model. Allowed: {', '.join(_SPECS)}. Received: {name!r}")
    return _SPECS[name]


def model_source(name: str) -> str:
    """The library a zoo model comes from.

    Args:
        name: one of :func:`model_names`.

    Returns:
        ``"keras.applications"``.

    Raises:
        UserError: ``name`` is not a model of this module.
    """
    _check_name(name)
    return _SOURCE


def _import():
    try:
        import keras
        import tensorflow as tf
        import tf2onnx
        import tf2onnx.optimizer  # noqa: F401  (tf2onnx does not import its optimizer package lazily)
    except ImportError as exc:
        raise FrameworkNotAvailableError(
            "The Keras zoo needs tensorflow, keras and tf2onnx: pip install tensorflow tf2onnx") from exc
    return keras, tf, tf2onnx


def _construct(keras, spec: _Spec, floatx: str):
    # Layers take the global dtype policy, which Keras caches apart from floatx: set and restore both.
    previous, previous_policy = keras.config.floatx(), keras.config.dtype_policy()
    keras.config.set_floatx(floatx)
    keras.config.set_dtype_policy(floatx)
    try:
        model = getattr(keras.applications, spec.constructor)(
            input_shape=(spec.size, spec.size, 3), weights=None, classes=_CLASSES,
            classifier_activation=None, **dict(spec.kwargs))
    finally:
        keras.config.set_floatx(previous)
        keras.config.set_dtype_policy(previous_policy)
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, keras.layers.Dropout):
            layer.rate = 0.0
    return model


def _float_variables(model):
    return [v for v in model.variables if np.issubdtype(np.dtype(v.dtype), np.floating)]


def _batch_norms(keras, model):
    return [layer for layer in model._flatten_layers(include_self=False, recursive=True)
            if isinstance(layer, keras.layers.BatchNormalization)]


def _randomize(keras, model, spec: _Spec, rng: np.random.Generator) -> None:
    """Perturb every weight, calibrate the BatchNormalization statistics, bound the logits."""
    statistics = set()
    norms = _batch_norms(keras, model)
    kernels = [layer for layer in model._flatten_layers(include_self=False, recursive=True)
               if getattr(layer, "kernel", None) is not None]
    head = kernels[-1]  # the classifier (Dense, or MobileNetV3's 1x1 Conv2D "Logits")
    for layer in norms:
        statistics.update(id(v) for v in (layer.moving_mean, layer.moving_variance))
    for v in _float_variables(model):
        if id(v) in statistics:
            continue
        a = v.numpy().astype(np.float64)
        if "variance" in v.path:
            a = a * (1.0 + 0.1 * rng.random(a.shape))
        else:
            scale = float(np.sqrt(np.mean(a * a))) or 1.0
            a = a * (1.0 + 0.1 * rng.standard_normal(a.shape)) + 0.02 * scale * rng.standard_normal(a.shape)
        v.assign(a.astype(v.dtype))
    if not norms:
        # Glorot-initialized ReLU stacks (VGG) halve the signal's power per layer until the biases
        # alone decide the logits; the He gain sqrt(2) keeps the output dependent on the image.
        for layer in kernels[:-1]:
            layer.kernel.assign((layer.kernel.numpy() * np.sqrt(2.0)).astype(layer.kernel.dtype))
    if norms:
        calibration = _images(spec, 8, rng)
        momenta = [layer.momentum for layer in norms]
        for layer in norms:
            layer.momentum = 0.0
        model(calibration, training=True)
        for layer, momentum in zip(norms, momenta):
            layer.momentum = momentum
            mean = layer.moving_mean.numpy().astype(np.float64)
            var = np.maximum(layer.moving_variance.numpy().astype(np.float64), 1e-3)
            layer.moving_mean.assign((mean + 0.05 * np.sqrt(var) * rng.standard_normal(mean.shape)).astype(np.float32))
            layer.moving_variance.assign((var * (1.0 + 0.1 * rng.random(var.shape))).astype(np.float32))
    logits = np.asarray(model(_images(spec, 2, rng), training=False))
    peak = float(np.max(np.abs(logits)))
    if peak > _MAX_LOGIT:
        for v in head.trainable_variables:
            v.assign((v.numpy() * (_MAX_LOGIT / peak)).astype(v.dtype))


def _images(spec: _Spec, batch: int, rng: np.random.Generator) -> np.ndarray:
    low, high = spec.pixels
    return rng.uniform(low, high, (batch, spec.size, spec.size, 3)).astype(np.float32)


@contextlib.contextmanager
def _fused_batch_norm(tf):
    """Trace 4-D channels-last float32 batch normalization as one FusedBatchNormV3 op."""
    from keras.src.backend.tensorflow import nn as backend_nn

    plain = backend_nn.batch_normalization

    def fused(x, mean, variance, axis, offset=None, scale=None, epsilon=1e-3):
        if len(x.shape) == 4 and axis in (-1, 3) and x.dtype == tf.float32:
            channels = x.shape[-1]
            scale = tf.ones([channels], x.dtype) if scale is None else scale
            offset = tf.zeros([channels], x.dtype) if offset is None else offset
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(
                x, scale, offset, mean=mean, variance=variance, epsilon=epsilon,
                data_format="NHWC", is_training=False)
            return y
        return plain(x, mean, variance, axis, offset, scale, epsilon)

    backend_nn.batch_normalization = fused
    try:
        yield
    finally:
        backend_nn.batch_normalization = plain


def _export(name: str, model, spec: _Spec, batch: int, tf, tf2onnx):
    import onnx
    import tf2onnx.optimizer

    signature = (tf.TensorSpec((batch, spec.size, spec.size, 3), tf.float32, name="images"),)
    optimizers = {k: v for k, v in tf2onnx.optimizer._optimizers.items() if k != "remove_back_to_back"}
    try:
        with _fused_batch_norm(tf):
            proto, _ = tf2onnx.convert.from_keras(model, input_signature=signature, opset=17,
                                                  optimizers=optimizers)
    except Exception as exc:  # tf2onnx raises anything from ValueError to its own errors
        raise ModelExportError(f"tf2onnx could not export {name}: {type(exc).__name__}: {_short(str(exc))}") from exc
    # tf2onnx writes TensorFlow ops it cannot convert into the graph as they are, and only logs them.
    unknown = sorted({n.op_type for n in proto.graph.node if n.domain in ("", "ai.onnx") and not onnx.defs.has(n.op_type)})
    if unknown:
        raise ModelExportError(f"tf2onnx could not export {name}: unsupported TensorFlow ops left in the graph: "
                               f"{', '.join(unknown)}")
    if len(proto.graph.output) != 1:
        raise ModelExportError(f"tf2onnx exported {name} with {len(proto.graph.output)} outputs; "
                               f"expected the logits only")
    return proto


def _gradients(tf, model, keys, images, labels, training: bool) -> dict[str, np.ndarray]:
    variables = model.trainable_variables
    x = tf.constant(images, dtype=model.compute_dtype)
    with tf.GradientTape() as tape:
        logits = model(x, training=training)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    grads = tape.gradient(loss, variables)
    return {k: np.asarray(g, dtype=np.float64) for k, g in zip(keys, grads)}


def _prepare(name: str, batch: int, seed: int):
    """The seeded float32 model, its float64 twin with the same weights, the images and the labels."""
    spec = _check_name(name)
    keras, _, _ = _import()
    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    model = _construct(keras, spec, "float32")
    _randomize(keras, model, spec, rng)
    images = _images(spec, batch, rng)
    labels = rng.integers(0, _CLASSES, batch).astype(np.int64)
    model64 = _construct(keras, spec, "float64")
    model64.set_weights([np.asarray(w, dtype=np.float64) if np.issubdtype(np.asarray(w).dtype, np.floating)
                         else w for w in model.get_weights()])
    return model, model64, images, labels


def build(name: str, exporter: str = "tf2onnx", batch: int = 2, seed: int = 0) -> ZooModel:
    """Build one Keras zoo model with random weights, export it and compute Keras's answers.

    Args:
        name: one of :func:`model_names`.
        exporter: ``"tf2onnx"`` (the only one).
        batch: batch size the graph is exported for.
        seed: seeds Keras (``keras.utils.set_random_seed``) and the numpy generator for the
            weight noise, the images and the labels.

    Returns:
        The :class:`~deep500lite.bench.zoo_model.ZooModel`; ``gradients64`` and ``gradients32``
        are keyed by Keras variable path, in Keras layout.

    Raises:
        UserError: unknown ``name`` or ``exporter``, or ``batch`` is not a positive integer.
        ModelExportError: tf2onnx failed on the model.
        FrameworkNotAvailableError: tensorflow, keras or tf2onnx is not installed.
    """
    spec = _check_name(name)
    if exporter not in EXPORTERS:
        raise UserError(f"Unknown exporter for the Keras zoo. Allowed: {', '.join(EXPORTERS)}. "
                        f"Received: {exporter!r}")
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise UserError(f"batch must be a positive integer. Received: {batch!r}")
    batch = int(batch)
    keras, tf, tf2onnx = _import()
    model, model64, images, labels = _prepare(name, batch, seed)
    proto = _export(name, model, spec, batch, tf, tf2onnx)
    logits32 = np.asarray(model(images, training=False), dtype=np.float32)
    logits64 = np.asarray(model64(images.astype(np.float64), training=False), dtype=np.float64)

    keys = [v.path for v in model.trainable_variables]
    parameters, unmapped = map_parameters({k: v.numpy() for k, v in zip(keys, model.trainable_variables)}, proto)
    has_bn = any(node.op_type == "BatchNormalization" for node in proto.graph.node)
    # Gradients last: training=True calls move the BatchNormalization statistics of both models.
    gradients64 = _gradients(tf, model64, keys, images, labels, has_bn)
    gradients32 = _gradients(tf, model, keys, images, labels, has_bn)

    size = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    notes = [f"{spec.constructor}{dict(spec.kwargs) or ''} {spec.size}x{spec.size}x3 NHWC, {size} trainable values",
             "BatchNormalization kept as ONNX nodes (fused_batch_norm trace, remove_back_to_back off); "
             "gradients with training=True" if has_bn else "no BatchNormalization; gradients with training=False"]
    if unmapped:
        notes.append(f"{len(unmapped)} parameters not found among the initializers")
    return ZooModel(
        name=name, source=_SOURCE, exporter=exporter, proto=proto,
        feeds={proto.graph.input[0].name: images}, output=proto.graph.output[0].name, labels=labels,
        logits64=logits64, logits32=logits32, parameters=parameters,
        gradients64=gradients64, gradients32=gradients32, unmapped=unmapped,
        notes="; ".join(notes))


def _short(text: str) -> str:
    return re.sub(r"\s+", " ", text)[:300]
