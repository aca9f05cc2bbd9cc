"""Storage layouts of the TensorFlow executor's parameters, chosen once when the graph is built.

TensorFlow's CPU convolutions take channels-last data and ``[k..., C_in, C_out]`` (HWIO)
filters, while ONNX stores filters ``[C_out, C_in, k...]`` (OIHW). Storing the filter variables
in ONNX's layout costs a transpose of every filter per step, and a second one of its gradient.
:func:`plan` picks, for each parameter, the layout its variable is stored in so that the
converted graph reads it without a transpose:

- a filter read as the weight of a Conv node is stored HWIO (:class:`AxisLayout`); other readers
  of it (a weight-decay term, a graph output) get it transposed back to OIHW inside the graph;
- the weight ``B`` of a Gemm whose ``A`` is ``Flatten(axis=1)`` of a channels-first tensor of
  static shape ``[N, C, H, W]`` is stored with its ``C*H*W`` rows (``transB=1``: columns) in
  channels-last order (:class:`RowLayout`), and that Flatten flattens the channels-last tensor
  directly: the activations are not transposed back to channels-first at every step. This
  holds only when the Flatten output feeds nothing but such Gemms and is no graph output, and
  ``B`` is read by nothing else.

The executor converts between the stored layout and ONNX's where values cross its API
(``fetch_tensor``, ``feed_tensor``, gradients), so users only ever see ONNX layouts. The
optimizers of :mod:`.optimizers` update the stored variables; their rules are elementwise, so a
permuted parameter gets the same (permuted) update.
"""

from __future__ import annotations

import numpy as np

from deep500lite.frameworks.tensorflow.layout import Value, channels_last_filter, inverse

__all__ = ["AxisLayout", "RowLayout", "plan"]


class AxisLayout:
    """A parameter stored with its axes permuted: ``plain = transpose(stored, perm)``."""

    def __init__(self, perm):
        self.perm = tuple(perm)
        self._inv = inverse(self.perm)

    def to_stored(self, plain: np.ndarray) -> np.ndarray:
        """The stored array of an ONNX-layout array."""
        return np.ascontiguousarray(np.transpose(plain, self._inv))

    def to_plain(self, stored: np.ndarray) -> np.ndarray:
        """The ONNX-layout array of a stored array."""
        return np.ascontiguousarray(np.transpose(stored, self.perm))

    def plain_shape(self, stored_shape) -> tuple:
        """The ONNX shape of a stored shape."""
        return tuple(stored_shape[p] for p in self.perm)

    def value(self, tensor) -> Value:
        """The graph value of the stored tensor (its ``plain`` is the ONNX layout)."""
        return Value(tensor, self.perm)

    def __eq__(self, other):
        return isinstance(other, AxisLayout) and other.perm == self.perm

    def __repr__(self):
        return f"AxisLayout({self.perm})"


class RowLayout:
    """A matrix stored with the entries of one axis reordered: ``plain = take(stored, order, axis)``."""

    def __init__(self, order, axis: int):
        self.order = np.asarray(order, dtype=np.int64)
        self.axis = axis
        self._inv = np.argsort(self.order)

    def to_stored(self, plain: np.ndarray) -> np.ndarray:
        """The stored array of an ONNX-layout array."""
        return np.ascontiguousarray(np.take(plain, self.order, axis=self.axis))

    def to_plain(self, stored: np.ndarray) -> np.ndarray:
        """The ONNX-layout array of a stored array."""
        return np.ascontiguousarray(np.take(stored, self._inv, axis=self.axis))

    def plain_shape(self, stored_shape) -> tuple:
        """The ONNX shape of a stored shape (the same)."""
        return tuple(stored_shape)

    def value(self, tensor) -> Value:
        """The stored tensor as a graph value, as the Gemm that reads it expects it (no ONNX view)."""
        return Value(tensor)

    def __eq__(self, other):
        return (isinstance(other, RowLayout) and other.axis == self.axis
                and np.array_equal(other.order, self.order))

    def __repr__(self):
        return f"RowLayout(axis={self.axis}, {len(self.order)} entries)"


def plan(graph, variables: dict, shapes: dict, outputs) -> tuple[dict, set]:
    """The storage layout of each parameter that gets one, and the Flatten nodes that flatten channels-last.

    Args:
        graph: the ONNX ``GraphProto``.
        variables: parameter name -> its shape in the ONNX layout (float initializers only).
        shapes: tensor name -> shape from ONNX shape inference (``None`` for unknown sizes).
        outputs: the names of the graph outputs.

    Returns:
        ``(layouts, flatten_nodes)``: parameter name -> :class:`AxisLayout` or :class:`RowLayout`,
        and the indices of the Flatten nodes (in ``graph.node``) whose output is stored
        channels-last-flattened.
    """
    readers: dict[str, list] = {}
    for i, node in enumerate(graph.node):
        for k, name in enumerate(node.input):
            if name:
                readers.setdefault(name, []).append((i, k))
    nodes = graph.node
    outputs = set(outputs)
    layouts: dict = {}
    for name, shape in variables.items():
        uses = readers.get(name, [])
        if len(shape) >= 3 and any(nodes[i].op_type == "Conv" and nodes[i].domain in ("", "ai.onnx") and k == 1
                                   for i, k in uses):
            layouts[name] = AxisLayout(channels_last_filter(len(shape)))
    flatten_nodes: set = set()
    for i, node in enumerate(nodes):
        if node.op_type != "Flatten" or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        src = shapes.get(node.input[0])
        out = node.output[0]
        if axis != 1 or src is None or len(src) != 4 or any(d is None for d in src[1:]) or out in outputs:
            continue
        uses = readers.get(out, [])
        gemms = [nodes[j] for j, k in uses]
        if not uses or any(k != 0 or g.op_type != "Gemm" or g.domain not in ("", "ai.onnx") for (j, k), g
                           in zip(uses, gemms)):
            continue
        attrs = [{a.name: a.i for a in g.attribute if a.name in ("transA", "transB")} for g in gemms]
        weights = [g.input[1] if len(g.input) > 1 else "" for g in gemms]
        if any(a.get("transA", 0) for a in attrs) or any(
                w not in variables or w in layouts or w in outputs or len(readers.get(w, [])) != 1
                or len(variables[w]) != 2 for w in weights):
            continue
        c, h, w_ = src[1:]
        # channels-last flat index g reads channels-first flat index order[g]
        order = np.arange(c * h * w_).reshape(c, h, w_).transpose(1, 2, 0).reshape(-1)
        if any(variables[w][1 if a.get("transB", 0) else 0] != order.size for w, a in zip(weights, attrs)):
            continue
        for w, a in zip(weights, attrs):
            layouts[w] = RowLayout(order, 1 if a.get("transB", 0) else 0)
        flatten_nodes.add(i)
    return layouts, flatten_nodes
