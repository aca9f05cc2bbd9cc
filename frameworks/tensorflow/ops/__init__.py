"""ONNX operators as TensorFlow ops: the converter table, assembled from one module per family.

Each converter is registered for one ONNX op type with a *layout kind* (``PLAIN``, ``UNARY``,
``ELEMENTWISE``, ``SPATIAL``, ``VALUE``; see :mod:`._common`) that says how it treats the
channels-last values of :mod:`deep500lite.frameworks.tensorflow.layout`. The layout module stays
beside the executor, not in this package: its :class:`~deep500lite.frameworks.tensorflow.layout.Value`
is what the executor carries between nodes, not a family of converters.

:func:`build_node` parses a node's attributes once and returns a callable used while
``tf.function`` traces the graph. With ``training=True`` it uses the training-mode converter
where an op has one: BatchNormalization with batch statistics, returning its new running
statistics (``TRAINING_STATE_OUTPUTS`` says which inputs they replace), and Dropout drawing a mask.

Families (the same module names as :mod:`deep500lite.frameworks.torch.ops`):
:mod:`.elementwise`, :mod:`.linalg`, :mod:`.conv` (convolution and pooling),
:mod:`.normalization` (with Dropout and the training-mode converters), :mod:`.shape`,
:mod:`.reduction`, :mod:`.recurrent`, :mod:`.losses`, :mod:`.control` (If, Loop, Scan,
NonMaxSuppression; the subgraph nodes are built by :func:`.control.build_control`); shared helpers are in :mod:`._common`, the
dtype tables in :mod:`deep500lite.frameworks.tensorflow.dtypes`. Custom-domain nodes run registered
custom operators (:func:`deep500lite.lv0.custom.lookup_custom_op`) through ``tf.custom_gradient``.
"""

from __future__ import annotations

import onnx
import tensorflow as tf

from deep500lite.frameworks.tensorflow.custom import custom_op
from deep500lite.frameworks.tensorflow.dtypes import check_types, tf_dtype
from deep500lite.frameworks.tensorflow.layout import Value, channels_last, inverse
from deep500lite.frameworks.tensorflow.ops import (control, conv, elementwise, linalg, losses, normalization,
                                                   recurrent, reduction, shape)
from deep500lite.frameworks.tensorflow.ops._common import ELEMENTWISE, PLAIN, SPATIAL, UNARY, Node
from deep500lite.frameworks.tensorflow.ops.normalization import TRAINING_STATE_OUTPUTS
from deep500lite.lv0.custom import lookup_custom_op

__all__ = ["SUPPORTED_OPS", "CONVERTERS", "TRAINING_CONVERTERS", "TRAINING_STATE_OUTPUTS", "build_node",
           "check_types", "tf_dtype"]

FAMILIES = (elementwise, linalg, conv, normalization, shape, reduction, recurrent, losses, control)


def _assemble(tables) -> dict:
    table: dict = {}
    for family_table in tables:
        for op_type, entry in family_table.items():
            assert op_type not in table, f"{op_type} has converters in two families"
            table[op_type] = entry
    return table


CONVERTERS: dict = _assemble(f.CONVERTERS for f in FAMILIES)
"""ONNX op type -> (layout kind, converter), over every family."""

TRAINING_CONVERTERS: dict = _assemble(getattr(f, "TRAINING_CONVERTERS", {}) for f in FAMILIES)
"""Training-mode converters (used by inference_and_backprop and the native optimizers): op type ->
(layout kind, converter, minimum number of outputs the converter returns)."""

SUPPORTED_OPS: frozenset = frozenset(CONVERTERS)


def _custom_converter(node: onnx.NodeProto, ctx: Node):
    fn = custom_op(lookup_custom_op(node.op_type, node.domain, ctx.name))
    return lambda ctx, *xs: fn(*xs)


def build_node(node: onnx.NodeProto, opset: int, training: bool = False, rng=None, gpu: bool = False):
    """A callable ``f(values: list[Value | None]) -> list[Value | None]`` for one node.

    Args:
        node: the ONNX node.
        opset: the default-domain opset of the model.
        training: use the training-mode converter where the op has one (BatchNormalization with
            batch statistics, returning the new running statistics as outputs 1 and 2 even when the
            node declares fewer outputs; Dropout drawing a mask from ``rng``).
        rng: a ``tf.random.Generator`` for training-mode Dropout.
        gpu: whether the node runs on a GPU (some kernels have GPU-only limits).
    """
    if node.domain in ("", "ai.onnx") and node.op_type in control.SUBGRAPH_CONVERTERS:
        return control.build_control(node, opset, build_node, training=training, rng=rng, gpu=gpu)
    ctx = Node(node, opset, rng, gpu)
    n_out = ctx.n_outputs
    if node.domain not in ("", "ai.onnx"):
        kind, fn = PLAIN, _custom_converter(node, ctx)
    elif training and node.op_type in TRAINING_CONVERTERS:
        kind, fn, min_out = TRAINING_CONVERTERS[node.op_type]
        n_out = max(n_out, min_out)
    else:
        kind, fn = CONVERTERS[node.op_type]

    def as_list(out):
        return list(out) if isinstance(out, (list, tuple)) else [out]

    if kind == PLAIN:
        def run(values):
            outs = as_list(fn(ctx, *[None if v is None else v.plain for v in values]))
            return [None if o is None else Value(o) for o in outs[:n_out]]
    elif kind == UNARY:
        def run(values):
            x = values[0]
            rest = [None if v is None else v.plain for v in values[1:]]
            outs = as_list(fn(ctx, x.tensor, *rest))
            return [None if o is None else Value(o, x.perm) for o in outs[:n_out]]
    elif kind == ELEMENTWISE:
        def run(values):
            tensors, perm = _align(values)
            return [Value(fn(ctx, *tensors), perm)]
    elif kind == SPATIAL:
        weight_layout = getattr(fn, "weight_layout", None)

        def run(values):
            x = values[0]
            rank = x.rank
            if rank is None:
                ctx.fail("the input rank must be known while tracing", "an input of unknown rank")
            xs = x.channels_last
            rest = [None if v is None else v.as_layout(weight_layout(v.rank)) if i == 0 and weight_layout
                    else v.plain for i, v in enumerate(values[1:])]  # weight_layout: e.g. Conv's HWIO filter
            outs = as_list(fn(ctx, xs, *rest))
            perm = channels_last(rank) if rank >= 3 else None
            return [None if o is None else Value(o, perm if o.shape.rank == rank else None)
                    for o in outs[:n_out]]
    else:
        def run(values):
            return as_list(fn(ctx, *values))[:n_out]
    return run


def _align(values):
    """Bring broadcasting operands to one layout; returns (tensors, perm)."""
    perm = next((v.perm for v in values if v is not None and v.perm is not None), None)
    if perm is None:
        return [None if v is None else v.tensor for v in values], None
    rank = len(perm)
    ranks = [None if v is None else v.rank for v in values]
    if any(r is None or r > rank for r in ranks if r is not None) or any(
            v is not None and v.rank is None for v in values):
        return [None if v is None else v.plain for v in values], None
    out = []
    for v, r in zip(values, ranks):
        if v is None:
            out.append(None)
        elif r == rank:
            out.append(v.as_layout(perm))
        elif r == 0:
            out.append(v.tensor)
        else:
            t = v.plain
            order = inverse(perm)
            if t.shape.is_fully_defined():
                shape = [1] * (rank - r) + t.shape.as_list()
                moved = [shape[a] for a in order]
                kept = [a for a in order if shape[a] != 1]
                if kept == sorted(kept):  # only size-1 axes move: a reshape, not a transpose
                    out.append(tf.reshape(t, moved))
                    continue
            else:
                shape = [1] * (rank - r) + tf.unstack(tf.shape(t))
            out.append(tf.transpose(tf.reshape(t, shape), order))
    return out, perm

