"""Lower control flow into plain operators before a graph is differentiated.

deep500lite's ONNX autodiff differentiates a list of nodes; ``If``, ``Loop`` and ``Scan`` hide
nodes in subgraphs. :func:`lower_control_flow` rewrites them, where the structure is known when
the graph is built, into the nodes they run, so that every gradient rule applies:

- ``If``: with a constant condition, the taken branch's nodes; otherwise both branches' nodes and
  one ``Where(cond, then, else)`` per output (the gradient of the branch not taken is zero, as
  the gradient of ``If`` is; both branches are computed, so they must be computable for either
  condition and return outputs of one shape);
- ``Loop``: with a constant trip count, and a condition that is absent or constant true and that
  the body passes on unchanged (or a constant true), the body's nodes once per iteration; the
  scan outputs are stacked with ``Unsqueeze`` and ``Concat``;
- ``Scan``: with a scan length known from static shapes, the body's nodes once per step, reading
  its slices with ``Gather``.

The body's internal names get a prefix per copy; values the subgraphs read from outside keep
their names. Loops whose trip count or condition is computed at run time are left as they are
(the autodiff then names them as nodes it cannot differentiate).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from deep500lite.lv1.control_flow import loop_trip_plan, scan_layout, subgraphs

__all__ = ["lower_control_flow", "MAX_UNROLLED"]

#: Loops and scans of more iterations than this are not unrolled.
MAX_UNROLLED = 1024
_MAX_ROUNDS = 8


class _Namer:
    def __init__(self, taken: set):
        self.taken = set(taken)
        self.count = 0

    def fresh(self, hint: str) -> str:
        while True:
            self.count += 1
            name = f"{hint}__cf{self.count}"
            if name not in self.taken:
                self.taken.add(name)
                return name


def _rename_graph_refs(graph: onnx.GraphProto, mapping: dict) -> None:
    """Rename, inside a nested subgraph, the references to outer values renamed by ``mapping``."""
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output}
    active = {k: v for k, v in mapping.items() if k not in local}
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in active:
                node.input[i] = active[name]
        for sub in subgraphs(node):
            _rename_graph_refs(sub, active)
    for out in graph.output:
        if out.name in active:
            out.name = active[out.name]


def _inline(graph: onnx.GraphProto, bindings: dict, namer: _Namer, prefix: str) -> tuple[list, list]:
    """The nodes of ``graph`` with inputs bound and internal names made unique; and its output names."""
    mapping = dict(bindings)
    nodes = []
    for init in graph.initializer:  # a body's constants stay constants (never parameters)
        name = namer.fresh(f"{prefix}{init.name}")
        mapping[init.name] = name
        nodes.append(helper.make_node("Constant", [], [name], name=name, value=init))
    for node in graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        for i, name in enumerate(copy.input):
            if name in mapping:
                copy.input[i] = mapping[name]
        for sub in subgraphs(copy):
            _rename_graph_refs(sub, mapping)
        for i, name in enumerate(copy.output):
            if name:
                mapping[name] = copy.output[i] = namer.fresh(f"{prefix}{name}")
        copy.name = namer.fresh(f"{prefix}{node.name or node.op_type}")
        nodes.append(copy)
    return nodes, [mapping.get(o.name, o.name) for o in graph.output]


def _constant(namer: _Namer, value: np.ndarray, hint: str) -> tuple:
    name = namer.fresh(hint)
    return helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(value)), name


def _known_values(model: onnx.ModelProto) -> dict:
    known = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer
             if t.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].type == onnx.AttributeProto.TENSOR:
            known[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return known


def _lower_if(node, known, namer) -> list | None:
    graphs = {a.name: a.g for a in node.attribute if a.HasField("g")}
    cond = known.get(node.input[0])
    if cond is not None:
        branch = graphs["then_branch" if bool(np.asarray(cond).reshape(-1)[0]) else "else_branch"]
        nodes, outs = _inline(branch, {}, namer, f"{node.name or 'if'}/")
        return nodes + [helper.make_node("Identity", [o], [y], name=namer.fresh("if_out"))
                        for o, y in zip(outs, node.output) if y]
    then_nodes, then_outs = _inline(graphs["then_branch"], {}, namer, f"{node.name or 'if'}/then/")
    else_nodes, else_outs = _inline(graphs["else_branch"], {}, namer, f"{node.name or 'if'}/else/")
    flag = namer.fresh("if_cond")
    nodes = then_nodes + else_nodes + [helper.make_node("Cast", [node.input[0]], [flag], to=onnx.TensorProto.BOOL)]
    for t, e, y in zip(then_outs, else_outs, node.output):
        if y:
            nodes.append(helper.make_node("Where", [flag, t, e], [y], name=namer.fresh("if_where")))
    return nodes


def _passes_condition_on(body: onnx.GraphProto, known: dict) -> bool:
    """Whether the body's condition output is its condition input (directly or by Identity) or a constant true
    (of the body, or of the outer graph: ``known``)."""
    cond_in, cond_out = body.input[1].name, body.output[0].name
    if cond_out == cond_in:
        return True
    if cond_out in known:
        return bool(np.asarray(known[cond_out]).reshape(-1)[0])
    producer = next((n for n in body.node if cond_out in n.output), None)
    if producer is None:
        return False
    if producer.op_type == "Identity" and producer.input[0] == cond_in:
        return True
    if producer.op_type == "Identity" and producer.input[0] in known:
        return bool(np.asarray(known[producer.input[0]]).reshape(-1)[0])
    if producer.op_type == "Constant" and producer.attribute and producer.attribute[0].type == onnx.AttributeProto.TENSOR:
        return bool(numpy_helper.to_array(producer.attribute[0].t).reshape(-1)[0])
    return False


def _stack(items: list, output: str, axis: int, namer: _Namer) -> list:
    axes_node, axes = _constant(namer, np.array([axis], np.int64), "stack_axis")
    nodes, parts = [axes_node], []
    for item in items:
        part = namer.fresh("stack_part")
        nodes.append(helper.make_node("Unsqueeze", [item, axes], [part], name=namer.fresh("stack_unsqueeze")))
        parts.append(part)
    nodes.append(helper.make_node("Concat", parts, [output], name=namer.fresh("stack_concat"), axis=axis))
    return nodes


def _lower_loop(node, known, namer) -> list | None:
    body = next(a.g for a in node.attribute if a.name == "body")
    inputs = list(node.input) + [""] * 2
    trip, cond = inputs[0], inputs[1]
    if not trip or trip not in known:
        return None
    limit, watch = loop_trip_plan(known[trip], bool(cond))
    going = True
    if cond:
        if cond not in known:
            return None
        going = bool(np.asarray(known[cond]).reshape(-1)[0])
    if watch and not _passes_condition_on(body, known):
        return None
    carried = len(body.input) - 2
    scans = len(body.output) - 1 - carried
    if not going:
        limit = 0
    if limit > MAX_UNROLLED or (limit == 0 and scans):
        return None
    state = inputs[2:2 + carried]
    nodes, stacks = [], [[] for _ in range(scans)]
    true_node, true_name = _constant(namer, np.array(True), "loop_cond")
    nodes.append(true_node)
    for t in range(limit):
        i_node, i_name = _constant(namer, np.array(t, np.int64), "loop_i")
        nodes.append(i_node)
        bindings = {body.input[0].name: i_name, body.input[1].name: true_name}
        bindings.update((vi.name, s) for vi, s in zip(body.input[2:], state))
        copy, outs = _inline(body, bindings, namer, f"{node.name or 'loop'}/{t}/")
        nodes.extend(copy)
        state = outs[1:1 + carried]
        for k in range(scans):
            stacks[k].append(outs[1 + carried + k])
    for s, y in zip(state, node.output[:carried]):
        if y:
            nodes.append(helper.make_node("Identity", [s], [y], name=namer.fresh("loop_out")))
    for k, y in enumerate(node.output[carried:carried + scans]):
        if y:
            nodes.extend(_stack(stacks[k], y, 0, namer))
    return nodes


def _lower_scan(node, shapes, opset, namer) -> list | None:
    if opset < 9:
        return None
    body = next(a.g for a in node.attribute if a.name == "body")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name != "body"}
    layout = scan_layout(attrs.get, len(body.input), len(body.output))
    n_state, n_out = layout.n_state, layout.n_out
    in_axes, in_dirs, out_axes, out_dirs = layout.in_axes, layout.in_dirs, layout.out_axes, layout.out_dirs
    xs = list(node.input[n_state:])
    if not xs or xs[0] not in shapes:
        return None
    first = shapes[xs[0]]
    length = first[in_axes[0] % len(first)]
    if length > MAX_UNROLLED or length == 0:
        return None
    state = list(node.input[:n_state])
    nodes, outs_per = [], [[] for _ in range(n_out)]
    for t in range(length):
        bindings = dict((vi.name, s) for vi, s in zip(body.input[:n_state], state))
        for vi, x, axis, rev in zip(body.input[n_state:], xs, in_axes, in_dirs):
            index_node, index = _constant(namer, np.array(length - 1 - t if rev else t, np.int64), "scan_t")
            rank = len(shapes[x]) if x in shapes else None
            if rank is None:
                return None
            sliced = namer.fresh("scan_slice")
            nodes += [index_node, helper.make_node("Gather", [x, index], [sliced], name=namer.fresh("scan_gather"),
                                                   axis=axis % rank)]
            bindings[vi.name] = sliced
        copy, outs = _inline(body, bindings, namer, f"{node.name or 'scan'}/{t}/")
        nodes.extend(copy)
        state = outs[:n_state]
        for k in range(n_out):
            outs_per[k].append(outs[n_state + k])
    for s, y in zip(state, node.output[:n_state]):
        if y:
            nodes.append(helper.make_node("Identity", [s], [y], name=namer.fresh("scan_out")))
    for k, y in enumerate(node.output[n_state:n_state + n_out]):
        if not y:
            continue
        items = outs_per[k][::-1] if out_dirs[k] else outs_per[k]
        body_rank = _rank_of(body.output[n_state + k])
        if out_axes[k] < 0 and body_rank is None:
            return None
        nodes.extend(_stack(items, y, out_axes[k] % (body_rank + 1) if out_axes[k] < 0 else out_axes[k], namer))
    return nodes


def _rank_of(vi: onnx.ValueInfoProto) -> int | None:
    t = vi.type.tensor_type
    return len(t.shape.dim) if vi.type.HasField("tensor_type") and t.HasField("shape") else None


def _static_shapes(model) -> dict:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - without shapes no Scan is unrolled
        return {}
    shapes = {}
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        t = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[vi.name] = tuple(d.dim_value for d in t.shape.dim)
    for init in inferred.graph.initializer:
        shapes[init.name] = tuple(init.dims)
    return shapes


def lower_control_flow(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with its ``If``, ``Loop`` and ``Scan`` nodes lowered where possible (see module docs).

    Nested control flow is lowered from the outside in, in several rounds. Nodes that cannot be
    lowered are kept.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    opset = next((o.version for o in out.opset_import if o.domain in ("", "ai.onnx")), 0)
    graph = out.graph
    for _ in range(_MAX_ROUNDS):
        if not any(n.op_type in ("If", "Loop", "Scan") for n in graph.node):
            break
        taken = ({i.name for i in graph.input} | {t.name for t in graph.initializer}
                 | {o for n in graph.node for o in n.output} | {n.name for n in graph.node})
        namer = _Namer(taken)
        known = _known_values(out)
        shapes = _static_shapes(out)
        nodes, changed = [], False
        for node in graph.node:
            lowered = None
            if node.domain in ("", "ai.onnx"):
                if node.op_type == "If":
                    lowered = _lower_if(node, known, namer)
                elif node.op_type == "Loop":
                    lowered = _lower_loop(node, known, namer)
                elif node.op_type == "Scan":
                    lowered = _lower_scan(node, shapes, opset, namer)
            if lowered is None:
                nodes.append(node)
            else:
                nodes.extend(lowered)
                changed = True
        del graph.node[:]
        graph.node.extend(nodes)
        if not changed:
            break
    return out
