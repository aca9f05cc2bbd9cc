"""Fold the shape arithmetic of a forward graph into constants before it is differentiated.

Exporters write sizes as arithmetic on ``Shape``: transformers' TensorFlow-style "same" padding
computes a ``Pad``'s pads from the input's height at run time, flattening multiplies dimensions
read with ``Shape``/``Gather``. When the model's input shapes are static, all of that is
constant, but ONNX shape inference cannot see through it, so the gradient rules that need static
sizes (Conv, Pad, Resize, the recurrent operators) would refuse the node.

:func:`fold_constants` evaluates, with ``onnx.reference``, every node whose inputs are all known
constants and replaces it by a ``Constant`` node with the same output name, repeating while shape
inference discovers new static shapes. Known constants are ``Constant`` nodes, initializers that
are not floating point, and ``Shape``/``Size`` of tensors whose shape is static. Floating-point
initializers are never constants here: they are the parameters being trained (folding a
``Transpose`` of a weight would cut its gradient).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["fold_constants"]

_NOT_FOLDED = frozenset({
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli",
    "Dropout", "If", "Loop", "Scan", "SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SplitToSequence",
})
_MAX_ELEMENTS = 1 << 20
_MAX_ROUNDS = 8


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - shapes are a refinement; nothing is folded without them
        inferred = model
    shapes = {}
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = tuple(d.dim_value for d in dims)
    for init in inferred.graph.initializer:
        shapes[init.name] = tuple(init.dims)
    return shapes


def _evaluate(node: onnx.NodeProto, inputs: list[np.ndarray | None], opset: int) -> list[np.ndarray] | None:
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    copy = helper.make_node(node.op_type, names, [f"out{i}" for i in range(len(node.output))], domain=node.domain)
    copy.attribute.extend(node.attribute)
    graph = helper.make_graph(
        [copy], "fold",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs) if n],
        [helper.make_tensor_value_info(f"out{i}", onnx.TensorProto.UNDEFINED, None) for i in range(len(node.output))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        outs = ReferenceEvaluator(model).run(None, {n: x for n, x in zip(names, inputs) if n})
    except Exception:  # noqa: BLE001 - a node that cannot be evaluated here is simply not folded
        return None
    return [np.asarray(o) for o in outs]


def fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with its constant shape arithmetic replaced by ``Constant`` nodes.

    Args:
        model: a forward model whose floating-point initializers are parameters.

    Returns:
        The folded copy (the same model, copied, when nothing could be folded). Output names,
        graph inputs, outputs and initializers are unchanged.
    """
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    if not opset:
        return out
    graph_outputs = {o.name for o in out.graph.output}
    for _ in range(_MAX_ROUNDS):
        shapes = _static_shapes(out)
        known: dict[str, np.ndarray] = {}
        for init in out.graph.initializer:
            if init.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                                      onnx.TensorProto.BFLOAT16):
                known[init.name] = numpy_helper.to_array(init)
        changed = False
        nodes = []
        for node in out.graph.node:
            value = None
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                attr = node.attribute[0] if node.attribute else None
                if attr is not None and attr.type == onnx.AttributeProto.TENSOR:
                    known[node.output[0]] = numpy_helper.to_array(attr.t)
                nodes.append(node)
                continue
            if node.domain not in ("", "ai.onnx") or node.op_type in _NOT_FOLDED:
                nodes.append(node)
                continue
            if node.op_type in ("Shape", "Size") and node.input[0] in shapes:
                value = _evaluate(node, [np.zeros(shapes[node.input[0]], np.float32)], opset) \
                    if np.prod(shapes[node.input[0]]) <= _MAX_ELEMENTS else None
            elif all((not x) or x in known for x in node.input) and any(node.input):
                value = _evaluate(node, [known[x] if x else None for x in node.input], opset)
            if value is None or any(v.size > _MAX_ELEMENTS for v in value) or \
                    any(o in graph_outputs for o in node.output):
                nodes.append(node)
                continue
            for name, v in zip(node.output, value):
                if name:
                    known[name] = v
                    nodes.append(helper.make_node("Constant", [], [name], name=f"{node.name or name}__folded",
                                                  value=numpy_helper.from_array(v, name)))
            changed = True
        if not changed:
            break
        del out.graph.node[:]
        out.graph.node.extend(nodes)
    return out
