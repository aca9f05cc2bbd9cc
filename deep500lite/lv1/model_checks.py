"""Checks of an ONNX model made when it is loaded, before any executor runs it.

:func:`check_model_proto` is what :func:`deep500lite.lv1.network.load_model` runs (with
``check=True``). In order, each check raising one :class:`~deep500lite.errors.ModelError` that
names the file, the node and what was received:

1. versions: the IR version and the default-domain opset against the range the installed
   ``onnx`` package knows (an opset newer than it knows has no defined semantics);
2. structure: operators that are not ONNX operators (with the closest names), operators newer
   than the opset the model imports, node inputs nothing defines (a missing initializer) and
   cycles (found with the standard library's :mod:`graphlib`);
3. ``onnx.checker.check_model`` (its whole message, on one line);
4. ONNX's own shape and type inference in strict mode
   (``onnx.shape_inference.infer_shapes(strict_mode=True, check_type=True)``): attributes out of
   range (Softmax ``axis=99``, Conv ``strides=0``) and input types an operator does not allow
   (Sin on int64);
5. with the shapes it inferred: Gather indices and Reshape shapes given as constants that cannot
   fit their input.

Which executor runs which opsets is checked when the executor is built
(:meth:`deep500lite.GraphExecutor.check_versions`).
"""

from __future__ import annotations

import difflib
import functools
import graphlib
import re

import numpy as np
import onnx
from onnx import numpy_helper

from deep500lite.errors import ModelError

__all__ = ["check_model_proto", "check_versions", "check_structure", "check_inferred", "newest_opset",
           "MIN_IR_VERSION", "one_line"]

#: The oldest IR version whose models name their opsets (older ones cannot be checked per operator).
MIN_IR_VERSION = 3

_FLOAT_TYPE_ONLY = re.compile(r"has unsupported type: tensor\((?:float|double|float16|bfloat16)\)")
_INFERENCE_NODE = re.compile(r"\(op_type:(\w+), node name: ([^)]*)\):\s*(?:\[\w+\]\s*)?(.*)", re.S)


def newest_opset() -> int:
    """The newest default-domain opset the installed ``onnx`` package defines."""
    return onnx.defs.onnx_opset_version()


def one_line(exc: BaseException | str, limit: int = 400) -> str:
    """A library message on one line (whitespace collapsed), cut to ``limit`` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _node_label(node: onnx.NodeProto) -> str:
    name = node.name or (node.output[0] if len(node.output) else "")
    return f"node '{name}' ({node.op_type})"


def _default_opset(proto: onnx.ModelProto) -> int | None:
    for o in proto.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return None


def check_versions(proto: onnx.ModelProto, where: str) -> None:
    """The IR version and default opset lie in the range the installed onnx package knows.

    Raises:
        ModelError: the IR version or the opset is outside that range.
    """
    ir = proto.ir_version
    if ir > onnx.IR_VERSION or ir < MIN_IR_VERSION:
        raise ModelError(f"{where} has IR version {ir}; this installation (onnx {onnx.__version__}) reads IR "
                         f"versions {MIN_IR_VERSION} to {onnx.IR_VERSION}. Received: ir_version {ir}")
    imports: dict[str, list[int]] = {}
    for o in proto.opset_import:
        imports.setdefault("" if o.domain == "ai.onnx" else o.domain, []).append(o.version)
    twice = {d: v for d, v in imports.items() if len(v) > 1}
    if twice:
        domain, versions = next(iter(twice.items()))
        raise ModelError(f"{where} imports the opset of domain {domain or 'ai.onnx (default)'!r} "
                         f"{len(versions)} times; a model imports each domain once, so which operator versions "
                         f"apply is undefined. Received: versions {versions}")
    opset = _default_opset(proto)
    if opset is not None and not 1 <= opset <= newest_opset():
        raise ModelError(f"{where} imports ONNX opset {opset}; the installed onnx {onnx.__version__} defines "
                         f"opsets 1 to {newest_opset()}, and operators of other opsets have no known meaning. "
                         f"Received: opset {opset}")


@functools.lru_cache(maxsize=1)
def _onnx_since() -> dict[str, int]:
    """Each ONNX operator's first opset."""
    since: dict[str, int] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain in ("", "ai.onnx"):
            since[schema.name] = min(since.get(schema.name, schema.since_version), schema.since_version)
    return since


def _onnx_op_names() -> tuple[str, ...]:
    return tuple(sorted(_onnx_since()))


def _suggest(op_type: str) -> str:
    names = _onnx_op_names()
    by_lower = {n.lower(): n for n in names}
    close = [by_lower[op_type.lower()]] if op_type.lower() in by_lower else []
    close += [n for n in difflib.get_close_matches(op_type, names, n=3, cutoff=0.7) if n not in close]
    return f"Did you mean {', '.join(repr(n) for n in close[:3])}? " if close else ""


def check_structure(proto: onnx.ModelProto, where: str) -> None:
    """Every operator exists at the model's opset, every node input is defined, and there is no cycle.

    Only the main graph's own nodes are checked for defined inputs and cycles (a subgraph may read
    names of the graph around it).

    Raises:
        ModelError: naming the node and the operator or input at fault.
    """
    graph = proto.graph
    opset = _default_opset(proto)
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type not in _onnx_since():
            raise ModelError(f"{where} is not a valid ONNX model: {_node_label(node)} uses '{node.op_type}', which is not an ONNX operator. "
                             f"{_suggest(node.op_type)}Use an ONNX operator or a registered custom one "
                             f"(d5.register_op, in its own domain). Received: op_type={node.op_type!r}")
        since = _onnx_since()[node.op_type]
        if opset is not None and since > opset:
            raise ModelError(f"{where} is not a valid ONNX model: {_node_label(node)} uses '{node.op_type}', an operator added in "
                             f"opset {since}; the model imports opset {opset}. Import opset {since} or newer. "
                             f"Received: opset {opset}")
    known_types = set(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}
    for kind, values in (("input", graph.input), ("output", graph.output), ("value_info", graph.value_info)):
        for vi in values:
            elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else None
            dims = [d.dim_value for d in vi.type.tensor_type.shape.dim if d.HasField("dim_value")] if elem else []
            if any(d < 0 for d in dims):
                shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                         for d in vi.type.tensor_type.shape.dim]
                raise ModelError(f"{where} is not a valid ONNX model: graph {kind} '{vi.name}' has a negative "
                                 f"dimension; dimensions are sizes >= 0 or names (open). Received: shape {shape}")
            if elem is not None and elem != 0 and elem not in known_types:
                raise ModelError(f"{where} is not a valid ONNX model: graph {kind} '{vi.name}' has element type "
                                 f"{elem}, which onnx {onnx.__version__} does not define (types are the "
                                 f"TensorProto.DataType values 1 to {max(known_types)}). Received: elem_type {elem}")
    for init in graph.initializer:
        if init.data_type not in known_types:
            raise ModelError(f"{where} is not a valid ONNX model: initializer '{init.name}' has element type "
                             f"{init.data_type}, which onnx {onnx.__version__} does not define. "
                             f"Received: data_type {init.data_type}")
    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    producer = {}
    for i, node in enumerate(graph.node):
        for out in node.output:
            if out:
                producer.setdefault(out, i)
    for node in graph.node:
        for name in node.input:
            if name and name not in defined and name not in producer:
                raise ModelError(f"{where} is not a valid ONNX model: input '{name}' of {_node_label(node)} is not a graph input, an "
                                 f"initializer or any node's output; every input must be defined (is an "
                                 f"initializer missing?). Received: input {name!r}")
    sorter = graphlib.TopologicalSorter()
    for i, node in enumerate(graph.node):
        sorter.add(i, *(producer[n] for n in node.input if n in producer and n not in defined))
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        cycle = exc.args[1]
        names = [graph.node[i].name or graph.node[i].output[0] for i in cycle]
        raise ModelError(f"{where} is not a valid ONNX model: the nodes {' -> '.join(repr(n) for n in names)} form a cycle; an ONNX graph "
                         f"must be acyclic (loops belong in a Loop node). Received: cycle through "
                         f"{len(set(cycle))} nodes") from None


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple]:
    shapes = {}
    graph = model.graph
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        t = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[vi.name] = tuple(d.dim_value for d in t.shape.dim)
    for init in graph.initializer:
        shapes[init.name] = tuple(init.dims)
    return shapes


def _constants(graph: onnx.GraphProto) -> dict:
    """Small integer initializers and Constant outputs (indices and shapes), as arrays."""
    found = {}
    for init in graph.initializer:
        if init.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) and np.prod(init.dims) <= 4096:
            found[init.name] = init
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
            for attr in node.attribute:
                if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                    found[node.output[0]] = attr.t
    out = {}
    for name, tensor in found.items():
        try:
            out[name] = numpy_helper.to_array(tensor)
        except Exception:  # noqa: BLE001 - an unreadable constant is left to the checker and the executor
            continue
    return out


def check_inferred(proto: onnx.ModelProto, where: str) -> None:
    """ONNX's strict shape and type inference, then constant Gather indices and Reshape shapes.

    Raises:
        ModelError: naming the node, what its operator allows and what it received.
    """
    try:
        try:
            inferred = onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True, data_prop=True)
        except onnx.shape_inference.InferenceError as exc:
            if not _FLOAT_TYPE_ONLY.search(str(exc)):
                raise
            # The executors run float-only operators on every float width (Celu on float64), so a
            # float type the schema does not list is not a fault: check the attributes alone.
            inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=True, data_prop=True)
    except onnx.shape_inference.InferenceError as exc:
        text = one_line(exc)
        match = _INFERENCE_NODE.search(text)
        if match is None or text.count("Inference error(s)") > 1:
            # No node named, or a fault inside a function's body (onnx's own expansion of an
            # operator such as MeanVarianceNormalization): not the model's fault, left to the executor.
            return
        op_type, name, cause = match.groups()
        cause = re.sub(r"^(?:\[\w+\]\s*)+", "", cause).strip()
        label = f"node '{name}' ({op_type})" if name else f"a {op_type} node"
        raise ModelError(f"{where} is not a valid ONNX model: {label} fails ONNX's type and shape checks; its attributes and input types "
                         f"must be ones the operator allows. Received: {cause}") from None
    except Exception:  # noqa: BLE001 - a model too large or too unusual for inference is checked at run time
        return
    shapes = _static_shapes(inferred)
    consts = _constants(inferred.graph)
    for node in inferred.graph.node:
        if node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        data, second = node.input[0], node.input[1]
        if node.op_type == "Gather" and data in shapes and second in consts:
            rank = len(shapes[data])
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            if not -rank <= axis < rank:
                continue  # the inference above reports the axis
            size, idx = shapes[data][axis], consts[second]
            bad = idx[(idx < -size) | (idx >= size)] if idx.size else idx
            if bad.size:
                raise ModelError(f"{where} is not a valid ONNX model: {_node_label(node)} gathers index {int(bad.flat[0])} on axis {axis} "
                                 f"of '{data}', which has {size} entries there; indices must lie in "
                                 f"[{-size}, {size - 1}]. Received: indices {idx.ravel()[:8].tolist()}")
        if node.op_type == "Reshape" and data in shapes and second in consts:
            _check_reshape(node, shapes[data], consts[second], where)


def _check_reshape(node: onnx.NodeProto, shape: tuple, target: np.ndarray, where: str) -> None:
    allowzero = next((a.i for a in node.attribute if a.name == "allowzero"), 0)
    target = [int(d) for d in target.ravel()]
    dims = [shape[i] if d == 0 and not allowzero and i < len(shape) else d for i, d in enumerate(target)]
    size = int(np.prod(shape, dtype=object))
    problem = None
    if sum(d == -1 for d in dims) > 1:
        problem = "more than one -1"
    elif any(d < -1 for d in dims):
        problem = "a dimension below -1"
    else:
        known = int(np.prod([d for d in dims if d != -1], dtype=object))
        if (-1 in dims and (known == 0 or size % known)) or (-1 not in dims and known != size):
            problem = f"{size} elements cannot take that shape"
    if problem:
        raise ModelError(f"{where} is not a valid ONNX model: {_node_label(node)} reshapes '{node.input[0]}' of shape {list(shape)} "
                         f"({size} elements) to {target}: {problem}; the new shape must hold the same number of "
                         f"elements. Received: shape {target}")


def check_model_proto(proto: onnx.ModelProto, where: str) -> None:
    """Every load-time check, in the order of the module docstring.

    Args:
        proto: the model (with its initializers' data, so constants can be read).
        where: how messages name the model (``"ONNX model 'net.onnx'"``).

    Raises:
        ModelError: the first fault found.
    """
    check_versions(proto, where)
    check_structure(proto, where)
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as exc:
        raise ModelError(f"{where} is not a valid ONNX model: onnx.checker rejects it; fix the model (or load it "
                         f"with check=False). Received: {one_line(exc)}") from None
    except UnicodeDecodeError as exc:  # onnx's C++ checker reads every name as UTF-8
        raise ModelError(f"{where} holds a name or string that is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} "
                         f"cannot be decoded); ONNX names are UTF-8. Received: "
                         f"{bytes(exc.object[max(0, exc.start - 8):exc.start + 8])!r}") from None
    check_inferred(proto, where)
