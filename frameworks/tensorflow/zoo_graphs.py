"""TensorFlow's graphs beyond classifiers for the real-model zoo, converted by tf2onnx.

- ``detection``: a single-shot detector head on a small convolutional backbone: per-anchor box
  offsets and scores, ``tf.image.non_max_suppression`` and a gather of the kept boxes and scores.
  tf2onnx writes ``NonMaxSuppression``; how many boxes come out depends on the values.
- ``while_loop``: ``tf.while_loop`` that doubles a state through a weight until its norm passes a
  bound or ten steps are done; tf2onnx writes a ``Loop`` whose trip count is decided at run time.

The weights are seeded ``tf.Variable`` objects (nothing is downloaded).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from deep500lite.bench.contract import GraphModel
from deep500lite.errors import ModelExportError, UserError, format_choices

__all__ = ["GRAPH_MODELS", "graph_model_names", "build_graph"]

_OPSET = 17
#: image side, anchors per cell and boxes kept by the detector
_IMAGE, _ANCHORS, _KEEP = 16, 2, 10


def _convert(name: str, fn, signature) -> "onnx.ModelProto":  # noqa: F821
    import tf2onnx

    try:
        proto, _ = tf2onnx.convert.from_function(fn, input_signature=signature, opset=_OPSET)
    except Exception as exc:  # tf2onnx raises many unrelated types
        raise ModelExportError(f"tf2onnx failed on zoo graph {name!r}: {type(exc).__name__}: "
                               f"{' '.join(str(exc).split())[:300]}") from exc
    return proto


def _detection(seed: int) -> GraphModel:
    rng = np.random.default_rng(seed)

    def weight(*shape, scale=0.3):
        return tf.Variable((rng.standard_normal(shape) * scale).astype(np.float32))

    conv1, conv2 = weight(3, 3, 3, 8), weight(3, 3, 8, 16, scale=0.15)
    box_w, box_b = weight(16, 4 * _ANCHORS, scale=0.1), weight(4 * _ANCHORS, scale=0.1)
    cls_w, cls_b = weight(16, _ANCHORS), weight(_ANCHORS, scale=0.1)
    cells = (_IMAGE // 4) ** 2
    grid = np.stack(np.meshgrid(np.arange(_IMAGE // 4), np.arange(_IMAGE // 4), indexing="ij"), -1).reshape(-1, 2)
    anchors = np.concatenate([np.repeat(grid, _ANCHORS, 0) * 4.0, np.repeat(grid, _ANCHORS, 0) * 4.0 + 6.0], 1)
    anchors = anchors.astype(np.float32)  # [cells * anchors, 4] as y1, x1, y2, x2

    signature = [tf.TensorSpec([1, _IMAGE, _IMAGE, 3], tf.float32, name="image")]

    @tf.function(input_signature=signature)
    def detect(image):
        h = tf.nn.relu(tf.nn.conv2d(image, conv1, 2, "SAME"))
        h = tf.nn.relu(tf.nn.conv2d(h, conv2, 2, "SAME"))
        features = tf.reshape(h, [cells, 16])
        offsets = tf.reshape(tf.matmul(features, box_w) + box_b, [cells * _ANCHORS, 4])
        scores = tf.reshape(tf.sigmoid(tf.matmul(features, cls_w) + cls_b), [cells * _ANCHORS])
        boxes = tf.constant(anchors) + 2.0 * offsets  # made in the function: a constant, not a captured input
        kept = tf.image.non_max_suppression(boxes, scores, _KEEP, iou_threshold=0.3, score_threshold=0.55)
        return {"boxes": tf.gather(boxes, kept), "scores": tf.gather(scores, kept)}

    proto = _convert("detection", detect, signature)
    image = rng.uniform(0, 1, (1, _IMAGE, _IMAGE, 3)).astype(np.float32)
    return GraphModel("detection", "tensorflow (tf.image)", "tf2onnx", proto, [{proto.graph.input[0].name: image}],
                      train=True, loss=f"mse:{proto.graph.output[0].name}",
                      notes="NonMaxSuppression keeps a number of boxes that depends on the values")


def _while_loop(seed: int) -> GraphModel:
    rng = np.random.default_rng(seed)
    w = tf.Variable((rng.standard_normal((4, 4)) * 0.5).astype(np.float32))
    signature = [tf.TensorSpec([2, 4], tf.float32, name="x")]

    @tf.function(input_signature=signature)
    def grow(x):
        def going(i, h):
            return tf.logical_and(i < 10, tf.reduce_sum(tf.abs(h)) < 40.0)

        _, h = tf.while_loop(going, lambda i, h: (i + 1, tf.matmul(h, w) * 1.5), [tf.constant(0), x])
        return {"y": h}

    proto = _convert("while_loop", grow, signature)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    return GraphModel("while_loop", "tensorflow (tf.while_loop)", "tf2onnx", proto, [{proto.graph.input[0].name: x}],
                      no_training="its trip count is decided at run time, and deep500lite's ONNX autodiff (the "
                                  "reference executor's, which is the ground truth) differentiates loops of a trip "
                                  "count known when the graph is built",
                      notes="tf.while_loop -> Loop with a condition computed in the body")


#: zoo name -> (builder(seed), source, exporter) of TensorFlow's graph models
GRAPH_MODELS = {"detection": (_detection, "tensorflow (tf.image)", "tf2onnx"),
                "while_loop": (_while_loop, "tensorflow (tf.while_loop)", "tf2onnx")}


def graph_model_names() -> list[str]:
    """The graph models this module builds."""
    return list(GRAPH_MODELS)


def build_graph(name: str, seed: int = 0) -> GraphModel:
    """Build graph model ``name`` with seeded weights (see the module docs).

    Raises:
        UserError: an unknown ``name``.
        ModelExportError: tf2onnx failed.
    """
    if name not in GRAPH_MODELS:
        raise UserError(f"Unknown tensorflow zoo graph. Allowed: {format_choices(GRAPH_MODELS)}. Received: {name!r}")
    return GRAPH_MODELS[name][0](seed)
