"""Helpers shared by the TensorFlow converter families: the layout kinds, the per-family
registration decorators, :class:`Node` (what a converter knows about its node) and small
tracing-time helpers (static values, ranks, dimensions, axes).

Each converter is registered for one ONNX op type with a *layout kind* that says how it treats
channels-last values (see :mod:`deep500lite.frameworks.tensorflow.layout`):

- ``PLAIN``: takes and returns tensors in the ONNX layout (the default, always correct).
- ``UNARY``: elementwise in its first input; works on the stored tensor and keeps its layout.
- ``ELEMENTWISE``: broadcasting n-ary op; operands are brought to one common layout.
- ``SPATIAL``: first input is given channels-last, outputs of the same rank are channels-last.
- ``VALUE``: receives and returns :class:`Value` objects and handles layouts itself.
"""

from __future__ import annotations

import numpy as np
import onnx
import tensorflow as tf
from onnx import numpy_helper

from deep500lite.errors import UnsupportedOperatorError

__all__ = ["PLAIN", "UNARY", "ELEMENTWISE", "SPATIAL", "VALUE", "Node", "registrar", "training_registrar"]

PLAIN, UNARY, ELEMENTWISE, SPATIAL, VALUE = "plain", "unary", "elementwise", "spatial", "value"


def registrar(table: dict):
    """The ``op(*names, kind=PLAIN)`` decorator that registers converters in ``table``.

    Args:
        table: a family's converter table (op type -> (layout kind, converter)).
    """
    def op(*names, kind=PLAIN):
        """Register a converter for the ONNX op types ``names``."""
        def wrap(fn):
            for n in names:
                table[n] = (kind, fn)
            return fn
        return wrap
    return op


def training_registrar(table: dict):
    """The ``training_op(name, kind=PLAIN, outputs=1)`` decorator that registers training-mode converters.

    Args:
        table: a family's training-mode table (op type -> (layout kind, converter, minimum outputs)).
    """
    def training_op(name, kind=PLAIN, outputs=1):
        """Register the training-mode converter of ``name`` (returning at least ``outputs`` outputs)."""
        def wrap(fn):
            table[name] = (kind, fn, outputs)
            return fn
        return wrap
    return training_op


class Node:
    """Build-time view of an ONNX node: parsed attributes, opset and output count."""

    __slots__ = ("op_type", "name", "attrs", "opset", "n_outputs", "n_inputs", "rng", "gpu")

    def __init__(self, node: onnx.NodeProto, opset: int, rng=None, gpu: bool = False):
        self.rng = rng  # the executor's tf.random.Generator (training-mode Dropout)
        self.gpu = gpu  # whether the node runs on a GPU
        self.op_type = node.op_type
        self.name = node.name or (node.output[0] if node.output else node.op_type)
        self.opset = opset
        self.n_outputs = len(node.output)
        self.n_inputs = len(node.input)
        self.attrs = {}
        for a in node.attribute:
            if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                continue  # subgraphs (If, Loop and Scan bodies) are converted by ops/control.py
            v = onnx.helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, onnx.TensorProto):
                v = numpy_helper.to_array(v)
            elif isinstance(v, list) and v and isinstance(v[0], bytes):
                v = [s.decode() for s in v]
            self.attrs[a.name] = v

    def get(self, key, default=None):
        """An attribute's value, or ``default``."""
        return self.attrs.get(key, default)

    def fail(self, what: str, received: str):
        """Raise UnsupportedOperatorError naming this node: it needs what ``what`` says, and got ``received``."""
        raise UnsupportedOperatorError(
            f"The tensorflow executor cannot run {self.op_type} node '{self.name}': {what}. Received: {received}"
        )


def _static(t):
    """The value of ``t`` as numpy if it is known while tracing, else ``None``."""
    if t is None:
        return None
    try:
        return tf.get_static_value(t)
    except (TypeError, ValueError):
        return None


def _ints(t):
    """A static integer tensor as a list of ints (None if not static)."""
    v = _static(t)
    return None if v is None else [int(i) for i in np.asarray(v).reshape(-1)]


def _rank(ctx, t):
    r = t.shape.rank
    if r is None:
        ctx.fail("the input rank must be known while tracing", "an input of unknown rank")
    return r


def _dims(t):
    """Dimensions of ``t``: Python ints where static, scalar tensors elsewhere."""
    static = t.shape.as_list()
    if all(d is not None for d in static):
        return static
    dyn = tf.shape(t)
    return [d if d is not None else dyn[i] for i, d in enumerate(static)]


def _axis(ax, rank):
    return ax + rank if ax < 0 else ax


def _max0(v):
    return max(v, 0) if isinstance(v, int) else tf.maximum(v, 0)


def _cdiv(a, b):
    return -(-a // b)


def _lowest(dtype):
    return -np.inf if dtype.is_floating else dtype.min
