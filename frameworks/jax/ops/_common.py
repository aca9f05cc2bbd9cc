"""Helpers shared by the JAX converter families: the registration decorator and :class:`NodeContext`.

A converter is a plain function ``fn(ctx, *inputs)`` called while the executor traces the graph
for ``jax.jit``; it returns the node's output (an array) or a tuple with one entry per declared
output (``None`` for outputs it does not compute). ``inputs`` holds one entry per declared
input: ``None`` for an absent optional input, a ``numpy.ndarray`` for a value known while
tracing (an integer initializer, a ``Constant``, a ``Shape`` and everything computed only from
such values), otherwise a traced ``jax.Array``. Converters compute with ``jax.numpy`` and
``jax.lax``, which accept both kinds; a value that must be known while tracing (a target shape,
axes, pads, slice bounds) is read with :meth:`NodeContext.static`. When every input of a node is
known, the executor runs its converter under ``jax.ensure_compile_time_eval()`` and keeps the
result as numpy, so chains such as ``Shape -> Gather -> Concat -> Reshape`` fold while tracing.
Converters never modify their inputs.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx

from deep500lite.errors import ModelError
from deep500lite.lv1.converters import parse_attributes, registrar

__all__ = ["NodeContext", "parse_attributes", "registrar", "is_static"]


def is_static(value) -> bool:
    """Whether ``value`` is known while tracing (a numpy array or scalar, not a traced array)."""
    return isinstance(value, (np.ndarray, np.generic, int, float, bool))


class NodeContext:
    """What a converter knows about its node while the graph is traced.

    Attributes:
        node: the ``onnx.NodeProto``.
        op: its op type.
        name: its name (or its first output's name when unnamed).
        attrs: its attributes, parsed once by :func:`parse_attributes`.
        opset: the model's default-domain opset version.
        training: True in the training trace (``BatchNormalization`` uses batch statistics,
            ``Dropout`` is active).
    """

    def __init__(self, node: onnx.NodeProto, opset: int, attrs: dict | None = None, training: bool = False,
                 key=None, index: int = 0, assign: Callable[[int, Any], None] | None = None):
        self.node = node
        self.op = node.op_type
        self.name = node.name or (node.output[0] if node.output else node.op_type)
        self.attrs = parse_attributes(node) if attrs is None else attrs
        self.opset = opset
        self.training = training
        self._key = key
        self._index = index
        self._assign = assign
        #: The node's input values, set by the executor before the converter runs.
        self.args: tuple = ()

    def attr(self, name: str, default=None):
        """Attribute ``name``, or ``default`` when the node does not set it."""
        return self.attrs.get(name, default)

    def static(self, value, what: str) -> np.ndarray:
        """``value`` as a numpy array; it must be known while tracing.

        Raises:
            ModelError: ``value`` is computed from the network's inputs or parameters (the JAX
                executor compiles for fixed shapes, so ``what`` must be a constant).
        """
        if value is None:
            raise ModelError(f"Node '{self.name}' ({self.op}) needs its {what}. Received: no value")
        if not is_static(value):
            error = ModelError(
                f"The jax executor compiles node '{self.name}' ({self.op}) with XLA, which needs its {what} to be a "
                f"constant (an initializer, a Constant or computed from shapes); here it is computed from the "
                f"network's inputs or parameters. Received: a traced array of shape {list(value.shape)}")
            # Which input it was, so the executor can make that input's initializers trace constants.
            error.input_index = next((i for i, a in enumerate(self.args) if a is value), None)
            error.node_name = self.name  # input_index counts this node's inputs (maybe a subgraph's node)
            raise error
        return np.asarray(value)

    def key(self):
        """A PRNG key for this node (training-mode ``Dropout``): the step's key folded with the node's index.

        Raises:
            ModelError: no key was given (only the training trace draws random numbers).
        """
        if self._key is None:
            raise ModelError(f"Node '{self.name}' ({self.op}) draws random numbers, which only the training trace "
                             f"does. Received: an inference trace")
        import jax

        return jax.random.fold_in(self._key, self._index)

    def assign(self, input_index: int, value) -> None:
        """Record a new value for the initializer feeding input ``input_index`` after this step.

        Training-mode ``BatchNormalization`` calls this for its running mean and variance; the
        executor writes the values back to its parameters when the compiled step returns. Outside
        the training trace, or when the input is not an initializer, nothing is recorded.
        """
        if self._assign is not None:
            self._assign(input_index, value)
