"""Level 1 autodiff: the backward-graph builder.

:class:`GraphInfo` holds the forward graph's static dtypes, shapes and constants (from ONNX shape
inference); :class:`GraphBuilder` appends nodes and constants to the training graph under fresh
names, with helpers the gradient rules share (reductions, reshapes, unbroadcasting);
:class:`RuleContext` is what a gradient rule (:mod:`.rules`) receives for one node.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import helper, numpy_helper

from deep500lite.errors import UnsupportedOperatorError

__all__ = ["GraphInfo", "GraphBuilder", "RuleContext", "node_name"]


class GraphInfo:
    """Static dtypes and shapes of the forward graph's tensors (from ONNX shape inference)."""

    def __init__(self, model: onnx.ModelProto):
        try:
            inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
        except Exception:  # noqa: BLE001 - shapes are a refinement; Shape-based ops are the fallback
            inferred = model
        self.types: dict[str, int] = {}
        self.shapes: dict[str, tuple | None] = {}
        for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
            tt = vi.type.tensor_type
            if not vi.type.HasField("tensor_type"):
                continue
            if tt.elem_type:
                self.types[vi.name] = tt.elem_type
            if tt.HasField("shape"):
                self.shapes[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
        self.values: dict[str, np.ndarray] = {}
        for init in inferred.graph.initializer:
            arr = numpy_helper.to_array(init)
            self.values[init.name] = arr
            self.types[init.name] = init.data_type
            self.shapes[init.name] = tuple(arr.shape)
        for node in inferred.graph.node:
            if node.op_type == "Constant" and node.attribute:
                try:
                    arr = numpy_helper.to_array(helper.get_attribute_value(node.attribute[0])) \
                        if node.attribute[0].type == onnx.AttributeProto.TENSOR else None
                except Exception:  # noqa: BLE001
                    arr = None
                if arr is not None:
                    self.values[node.output[0]] = arr
                    self.types[node.output[0]] = helper.np_dtype_to_tensor_dtype(arr.dtype)
                    self.shapes[node.output[0]] = tuple(arr.shape)

    def shape(self, name):
        return self.shapes.get(name)

    def rank(self, name, node=None) -> int:
        s = self.shapes.get(name)
        if s is None:
            raise UnsupportedOperatorError(
                f"ONNX autodiff needs the rank of '{name}'"
                + (f" (input of {node.op_type} node '{node_name(node)}')" if node is not None else "")
                + ", which shape inference could not find; declare the input shapes of the model. "
                f"Received: '{name}' of unknown shape")
        return len(s)

    def np_dtype(self, name):
        t = self.types.get(name)
        return np.dtype(np.float32) if not t else helper.tensor_dtype_to_np_dtype(t)

    def is_float(self, name) -> bool:
        t = self.types.get(name)
        return t is None or helper.tensor_dtype_to_np_dtype(t).kind == "f"

    def const_value(self, name):
        return self.values.get(name)


def node_name(node) -> str:
    """The node's name, else its first output, else its op type (for messages)."""
    return node.name or (node.output[0] if node.output else node.op_type)


class GraphBuilder:
    """Appends nodes and constants to the training graph with fresh names."""

    def __init__(self, opset: int, info: GraphInfo, taken: set):
        self.opset = opset
        self.info = info
        self.nodes: list = []
        self.inits: list = []
        self._taken = set(taken)
        self._count = 0
        self._shape_cache: dict[str, str] = {}
        self.masks: dict[str, tuple] = {}  # Dropout mask input -> (shape, ratio)

    def fresh(self, hint: str) -> str:
        while True:
            self._count += 1
            name = f"__d5ad_{hint}_{self._count}"
            if name not in self._taken:
                self._taken.add(name)
                return name

    def op(self, op_type: str, inputs, n_out: int = 1, hint: str | None = None, outputs=None, **attrs):
        if outputs is None:
            outputs = [self.fresh(hint or op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), list(outputs),
                                           name=self.fresh(f"n_{op_type}"), **attrs))
        return outputs[0] if len(outputs) == 1 else list(outputs)

    def const(self, value, dtype=None, hint="c") -> str:
        arr = np.asarray(value, dtype=dtype)
        name = self.fresh(hint)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def ints(self, values) -> str:
        return self.const(np.asarray(values, np.int64), hint="i")

    def scalar(self, value, like: str) -> str:
        return self.const(np.asarray(value, self.info.np_dtype(like)), hint="s")

    def shape(self, x: str) -> str:
        if x not in self._shape_cache:
            self._shape_cache[x] = self.op("Shape", [x], hint="shape")
        return self._shape_cache[x]

    def reduce(self, op_type: str, x: str, axes, keepdims: int = 1) -> str:
        """ReduceSum/ReduceMean over constant ``axes`` in the form the opset requires."""
        axes = [int(a) for a in axes]
        if not axes:
            return self.op("Identity", [x])
        takes_input = op_type == "ReduceSum" or self.opset >= 18
        if takes_input:
            return self.op(op_type, [x, self.ints(axes)], keepdims=keepdims)
        return self.op(op_type, [x], axes=axes, keepdims=keepdims)

    def reshape_like(self, g: str, x: str) -> str:
        s = self.info.shape(x)
        if s is not None and all(d is not None for d in s):
            return self.op("Reshape", [g, self.ints(list(s))])
        return self.op("Reshape", [g, self.shape(x)])

    def numel(self, x: str) -> str:
        return self.op("Size", [x])

    def zeros_like(self, x: str) -> str:
        return self.op("ConstantOfShape", [self.shape(x)],
                       value=numpy_helper.from_array(np.zeros(1, self.info.np_dtype(x))))

    def unsqueeze(self, x: str, axes) -> str:
        return self.op("Unsqueeze", [x, self.ints(list(axes))])

    def unbroadcast(self, g: str, gshape, target: str, tshape=None) -> str:
        """Sum ``g`` (shaped ``gshape``) over the axes broadcast to it from ``target``'s shape."""
        if tshape is None:
            tshape = self.info.shape(target)
        if gshape is not None and tshape is not None and tuple(gshape) == tuple(tshape) and None not in gshape:
            return g
        if gshape is not None and tshape is not None:
            lead = len(gshape) - len(tshape)
            static = all(d is not None for d in tshape) and all(
                gshape[lead + i] is not None for i, d in enumerate(tshape) if d == 1)
            if static:
                axes = list(range(lead)) + [lead + i for i, d in enumerate(tshape)
                                             if d == 1 and gshape[lead + i] != 1]
                if not axes:
                    return g if lead == 0 else self.op("Reshape", [g, self.ints(list(tshape))])
                r = self.reduce("ReduceSum", g, axes, keepdims=1)
                return self.op("Reshape", [r, self.ints(list(tshape))])
            # Ranks known, some dims open: find the broadcast axes at run time.
            one = self.ints([1] * lead) if lead else None
            tpad = self.op("Concat", [one, self.shape(target)], axis=0) if lead else self.shape(target)
            is_one = self.op("Equal", [tpad, self.ints([1])])
            if lead:
                lead_mask = self.const(np.array([True] * lead + [False] * len(tshape)), hint="m")
                is_one = self.op("Or", [is_one, lead_mask])
            axes = self.op("Reshape", [self.op("NonZero", [is_one]), self.ints([-1])])
            r = self.op("ReduceSum", [g, axes], keepdims=1, noop_with_empty_axes=1)
            return self.op("Reshape", [r, self.shape(target)])
        raise UnsupportedOperatorError(
            f"ONNX autodiff cannot unbroadcast the gradient of '{target}': its rank is unknown to shape "
            f"inference; declare the model's input shapes. Received: '{target}' of unknown rank")


@dataclasses.dataclass
class RuleContext:
    """What a gradient rule gets for one forward node: the builder, the node, its output gradients."""

    b: GraphBuilder
    node: onnx.NodeProto
    dys: list  # gradient name per output (None: no gradient flows into that output)
    need: list  # per input: whether its gradient is wanted
    saved: dict  # what the training-mode forward kept for this node

    @property
    def info(self) -> GraphInfo:
        return self.b.info

    def attr(self, name, default=None):
        for a in self.node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default

    def input(self, i):
        return self.node.input[i] if i < len(self.node.input) and self.node.input[i] else None

    def dy(self, i: int = 0) -> str:
        g = self.dys[i] if i < len(self.dys) else None
        if g is None:
            g = self.b.zeros_like(self.node.output[i])
        return g

    def unsupported(self, why: str, received: str):
        """Raise UnsupportedOperatorError: the rule needs what ``why`` says, and got ``received``."""
        raise UnsupportedOperatorError(
            f"ONNX autodiff cannot differentiate operator '{self.node.op_type}' (node "
            f"'{node_name(self.node)}'): {why}. Received: {received}")
