"""Find the first node where an executor's answer leaves the float64 ground truth.

``verify`` calls :func:`localize` for an executor that failed. Two graph transformations let
every executor show what it computes inside a model, without any executor-specific hook:

- **observed forward tensors**: every tensor a node of the main graph computes becomes a graph
  output (:func:`expose_intermediates`), so ``inference`` (and ``inference_and_backprop``, in
  training mode) returns it;
- **gradient probes**: each float input of each node reads ``Add(x, probe)`` instead of ``x``,
  ``probe`` a new float initializer of zeros with ``x``'s shape (:func:`add_gradient_probes`).
  The value is unchanged, and the probe's gradient is that node's own contribution to
  ``dL/dx`` (its vector-Jacobian product for that input); every executor returns it like any
  parameter gradient. The sum over the readers of a tensor is ``dL/dx`` itself.

The same model runs on the executor, on the reference executor in float64 (the ground truth)
and in float32 (each tensor's own noise floor), and every tensor is judged by the rule of
:mod:`deep500lite.lv1.verify.rule`. The forward walk names the first node, in graph order,
whose output diverges. When the forward pass holds, the backward walk goes from the loss towards
the inputs and names the first node whose output gradients hold but whose contribution to an
input's gradient diverges: the node whose backward pass is wrong.

Observing a tensor can change what an executor does (a graph optimizer cannot fuse across a
graph output); when no node diverges although the outputs did, :class:`Divergence` says so.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import helper, numpy_helper

from deep500lite.lv1.verify.rule import passes, relative_error, tensor_error, tolerance

__all__ = ["Divergence", "expose_intermediates", "add_gradient_probes", "localize", "PROBE_SUFFIX"]

PROBE_SUFFIX = "__d5probe"

# float inputs whose gradient no executor computes (statistics, scales, bounds): never probed
_NOT_PROBED = {("BatchNormalization", 3), ("BatchNormalization", 4), ("Resize", 1), ("Resize", 2),
               ("Upsample", 1), ("Dropout", 1), ("Range", 0), ("Range", 1), ("Range", 2), ("Clip", 1), ("Clip", 2),
               ("Pad", 2), ("ConstantOfShape", 0), ("Reshape", 1), ("Expand", 1), ("Tile", 1)}


@dataclasses.dataclass
class Divergence:
    """Where an executor first leaves the ground truth.

    Attributes:
        phase: ``"forward"``, ``"training forward"`` (training mode) or ``"backward"``.
        node: the node's name (or its first output's name when it has none).
        op_type: its operator (``domain::op`` outside the default domain).
        input_shapes: the shapes of its inputs (from the ground truth's run).
        output_shapes: the shapes of its outputs.
        tensor: the tensor that diverges: an output (forward) or the input whose gradient the
            node's backward pass gets wrong (backward).
        error: that tensor's error relative to its scale.
        tolerance: what the rule allowed there (from the tensor's own float32 floor).
        floor: the reference executor's float32 error on that tensor.
        note: set instead of a node when none could be named (see the module docs).
    """

    phase: str
    node: str = ""
    op_type: str = ""
    input_shapes: list = dataclasses.field(default_factory=list)
    output_shapes: list = dataclasses.field(default_factory=list)
    tensor: str = ""
    error: float | None = None
    tolerance: float | None = None
    floor: float | None = None
    note: str = ""

    def describe(self) -> str:
        """One line: the node, its operator and shapes, and the error against what was allowed."""
        if not self.node:
            return self.note
        ins = ", ".join(_shape_text(s) for s in self.input_shapes)
        outs = ", ".join(_shape_text(s) for s in self.output_shapes)
        what = (f"the gradient it passes to '{self.tensor}'" if self.phase == "backward" else f"output '{self.tensor}'")
        return (f"{self.phase}: node '{self.node}' ({self.op_type}, inputs {ins} -> {outs}): {what} is "
                f"{_num(self.error)} of its scale off (tolerance {_num(self.tolerance)}, float32 floor "
                f"{_num(self.floor)})")


def _num(x) -> str:
    return "-" if x is None else ("inf" if not np.isfinite(x) else f"{x:.2g}")


def _shape_text(shape) -> str:
    return "?" if shape is None else "[" + ",".join(str(d) for d in shape) + "]"


def _node_name(node) -> str:
    return node.name or (node.output[0] if node.output else node.op_type)


def _op_text(node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"


def _subgraph_references(graph) -> set[str]:
    """Names read inside the subgraphs of ``graph``'s nodes (outer-scope values they capture)."""
    found = set()
    stack = [a.g for n in graph.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH]
    stack += [g for n in graph.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPHS for g in a.graphs]
    while stack:
        g = stack.pop()
        for n in g.node:
            found.update(i for i in n.input if i)
            stack.extend(a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH)
            stack.extend(x for a in n.attribute if a.type == onnx.AttributeProto.GRAPHS for x in a.graphs)
    return found


def expose_intermediates(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` whose graph outputs also hold every tensor a main-graph node computes.

    Only tensors whose type shape inference knows to be a tensor are added (sequences and
    optionals are left out: not every executor returns them).

    Returns:
        ``(model, added output names)``.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(out)
    except Exception:  # noqa: BLE001 - without inferred types, nothing can be added safely
        return out, []
    types = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    present = {o.name for o in out.graph.output}
    added = []
    for node in out.graph.node:
        for name in node.output:
            vi = types.get(name)
            if not name or name in present or vi is None or not vi.type.HasField("tensor_type") \
                    or not vi.type.tensor_type.elem_type:
                continue
            out.graph.output.append(vi)
            present.add(name)
            added.append(name)
    return out, added


def add_gradient_probes(model: onnx.ModelProto, shapes: dict[str, tuple]) -> tuple[onnx.ModelProto, dict]:
    """A copy of ``model`` in which each float input of each main-graph node reads ``Add(x, probe)``.

    Args:
        model: the model (with its loss).
        shapes: tensor name -> its shape in the run to be probed; tensors of unknown shape, and
            non-float ones, get no probe.

    Returns:
        ``(model, probes)``: probes maps each probe initializer to ``(node index, input index,
        tensor)``. Node indices are those of ``model``'s nodes (the probes' Add nodes are put
        before their reader, so the original nodes keep their relative order).
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits = {t.name: t for t in graph.initializer}
    dtypes = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(out)
        for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
            if vi.type.HasField("tensor_type"):
                dtypes[vi.name] = vi.type.tensor_type.elem_type
    except Exception:  # noqa: BLE001 - the initializers' and inputs' types still count
        pass
    for t in graph.initializer:
        dtypes[t.name] = t.data_type
    taken = ({t.name for t in graph.initializer} | {i.name for i in graph.input}
             | {o for n in graph.node for o in n.output} | {n.name for n in graph.node})
    probes, nodes = {}, []
    for k, node in enumerate(graph.node):
        for i, name in enumerate(node.input):
            elem = dtypes.get(name)
            if (not name or (node.op_type, i) in _NOT_PROBED or name not in shapes
                    or elem not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)):
                continue
            if name in inits and (node.op_type, i) == ("BatchNormalization", 0):
                continue
            probe = f"{name}{PROBE_SUFFIX}{k}_{i}"
            while probe in taken:
                probe += "_"
            taken.add(probe)
            np_dtype = helper.tensor_dtype_to_np_dtype(elem)
            graph.initializer.append(numpy_helper.from_array(np.zeros(shapes[name], np_dtype), probe))
            probed = probe + "_sum"
            nodes.append(helper.make_node("Add", [name, probe], [probed], name=probe + "_add"))
            # the run's shape: shape inference may not know it (a Slice of computed bounds), the autodiff needs it
            graph.value_info.append(helper.make_tensor_value_info(probed, elem, list(shapes[name])))
            node.input[i] = probed
            probes[probe] = (k, i, name)
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return out, probes


def _forward_walk(nodes, got, want, floor32, phase) -> Divergence | None:
    for node in nodes:
        for name in node.output:
            if not name or name not in want:
                continue
            if name not in got:
                return Divergence(phase, _node_name(node), _op_text(node), tensor=name,
                                  note=f"the executor returned no value for '{name}'")
            err = tensor_error(got[name], want[name])
            floor = tensor_error(floor32[name], want[name]) if name in floor32 else None
            if not passes(err, "inference", floor):
                return Divergence(phase, _node_name(node), _op_text(node), tensor=name, error=err,
                                  tolerance=tolerance("inference", floor), floor=floor)
    return None


def _backward_walk(nodes, probes, got, want, floor32, param_scale_top, captured) -> Divergence | None:
    """The last node in graph order whose output gradients hold but whose input gradient diverges."""
    floor_abs = max(1e-3 * param_scale_top, np.finfo(np.float64).tiny)
    scales = {p: max(float(np.abs(want[p]).max()) if np.size(want[p]) else 0.0, floor_abs) for p in probes}
    by_node: dict[int, list] = {}
    readers: dict[str, list] = {}
    for probe, (k, i, name) in probes.items():
        by_node.setdefault(k, []).append((i, name, probe))
        readers.setdefault(name, []).append(probe)

    def ok(probe_list, scale) -> bool:
        total_want = sum(np.asarray(want[p], np.float64) for p in probe_list)
        total_got = sum(np.asarray(got[p], np.float64) for p in probe_list)
        total_ref = sum(np.asarray(floor32[p], np.float64) for p in probe_list)
        err = relative_error(total_got, total_want, scale)
        floor = relative_error(total_ref, total_want, scale)
        return passes(err, "gradient", floor)

    unknown = captured
    for k in range(len(nodes) - 1, -1, -1):
        node = nodes[k]
        outs_ok = True
        for name in node.output:
            if not name or name in unknown or name not in readers:
                continue
            plist = readers[name]
            scale = max(float(np.abs(sum(np.asarray(want[p], np.float64) for p in plist)).max()), floor_abs)
            if not ok(plist, scale):
                outs_ok = False
                break
        if not outs_ok:
            continue
        for i, name, probe in sorted(by_node.get(k, [])):
            err = relative_error(got[probe], want[probe], scales[probe])
            floor = relative_error(floor32[probe], want[probe], scales[probe])
            if not passes(err, "gradient", floor):
                return Divergence("backward", _node_name(node), _op_text(node), tensor=name, error=err,
                                  tolerance=tolerance("gradient", floor), floor=floor)
    return None


def _shapes_of(values: dict) -> dict[str, tuple]:
    return {k: tuple(np.shape(v)) for k, v in values.items() if isinstance(v, np.ndarray)}


def localize(model: onnx.ModelProto, feeds: dict, make_executor, reference_runs, train: bool,
             loss: str | None) -> Divergence:
    """Name the first node where ``make_executor``'s executor leaves the ground truth.

    Args:
        model: the float32 model as the executors run it (with the loss nodes when ``train``).
        feeds: its feeds (labels or targets of the loss included).
        make_executor: ``make_executor(model) -> GraphExecutor`` for the executor under test.
        reference_runs: ``reference_runs(model, feeds, train, loss, gradients)`` -> ``(values64,
            values32)``: the model's outputs (and, with ``gradients``, those gradients) from the
            reference executor in float64 and float32 (see :mod:`deep500lite.lv1.verify.run`).
        train: localize in training mode: the forward pass in training mode first, then the
            backward pass through gradient probes.
        loss: the loss tensor (``train``).

    Returns:
        The :class:`Divergence` (its ``note`` says why when no node could be named).
    """
    from deep500lite.lv1.network import gradient_name

    observed, names = expose_intermediates(model)
    graph_nodes = list(model.graph.node)
    phase = "training forward" if train else "forward"
    # shapes of every tensor (inputs and initializers too): for the probes and the report
    shapes = _shapes_of(reference_runs(observed, feeds, False, None, ())[1])
    shapes.update({k: tuple(np.shape(v)) for k, v in feeds.items() if isinstance(v, np.ndarray)})
    shapes.update({t.name: tuple(t.dims) for t in model.graph.initializer})
    if not train:
        want, floor32 = reference_runs(observed, feeds, False, None, ())
        got = make_executor(observed).inference(dict(feeds))
        found = _forward_walk(graph_nodes, got, want, floor32, phase)
        return _with_shapes(found, graph_nodes, shapes) or Divergence(phase, note=_UNOBSERVED)
    probed, probes = add_gradient_probes(observed, shapes)
    want, floor32 = reference_runs(probed, feeds, True, loss, ())
    ex = make_executor(probed)
    outs = ex.inference_and_backprop(dict(feeds), loss)
    got = dict(outs)
    net = ex.network
    have = dict(net.gradient(loss))
    for p in probes:
        if p in have:
            got[gradient_name(p)] = net.fetch_tensor(have[p])
    found = _forward_walk(graph_nodes, got, want, floor32, phase)
    if found is not None:
        return _with_shapes(found, graph_nodes, shapes)
    top = max((float(np.abs(want[g]).max()) for g in want if g.endswith("_grad") and PROBE_SUFFIX not in g
               and np.size(want[g])), default=0.0)
    renamed = {gradient_name(p): probes[p] for p in probes}
    missing = [g for g in renamed if g not in got]
    if missing:
        return Divergence("backward", note=f"the executor returned no gradient for {len(missing)} probe(s)")
    found = _backward_walk(graph_nodes, renamed, got, want, floor32, top, _subgraph_references(model.graph))
    return _with_shapes(found, graph_nodes, shapes) or Divergence("backward", note=_UNOBSERVED)


def _with_shapes(found: Divergence | None, nodes, shapes: dict) -> Divergence | None:
    """``found`` with its node's input and output shapes filled in from the run."""
    if found is None:
        return None
    node = next((n for n in nodes if _node_name(n) == found.node), None)
    if node is not None:
        found.input_shapes = [list(shapes[i]) if i in shapes else None for i in node.input if i]
        found.output_shapes = [list(shapes[o]) if o in shapes else None for o in node.output if o]
    return found


_UNOBSERVED = ("no single node diverges when the intermediate tensors are observed: the difference comes from a "
               "transformation across nodes (a fusion or a rewrite) that observing them prevents")
