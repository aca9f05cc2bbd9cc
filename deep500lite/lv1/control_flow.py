"""What the converting executors (torch, TensorFlow, JAX) share to run ONNX control flow.

``If``, ``Loop`` and ``Scan`` carry subgraphs, and a subgraph may read any value of the graphs
around it (its *captures*) besides its declared inputs. :func:`subgraph_captures` lists them,
so an executor passes them to the node's function after its declared inputs. The semantics each
executor implements with its framework's operators are ONNX's:

- ``If(cond)``: the ``then_branch`` or ``else_branch`` subgraph's outputs;
- ``Loop(M, cond, v...)``: the body ``(i, cond, v...) -> (cond, v..., scan...)`` runs while
  ``i < M`` (when M is given) and ``cond`` holds (when a condition is given; a loop with a trip
  count and no condition ignores the body's condition output); the outputs are the final ``v``
  and each scan output stacked along a new first axis;
- ``Scan(state..., inputs...)``: the body ``(state..., slices...) -> (state..., out slices...)``
  runs once per slice of the scan inputs along their scan axes (in their directions); the
  outputs are the final state and the output slices stacked along their axes.

:func:`host_kernel` runs one node with ``onnx.reference`` on numpy arrays; executors use it for
``NonMaxSuppression``, whose output shape depends on the values (the selected boxes), where the
framework has no kernel of ONNX's semantics.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import onnx
from onnx import helper

__all__ = ["SUBGRAPH_OPS", "REFERENCE_FIXES", "ScanLayout", "scan_layout", "unrolled_scan", "subgraphs",
           "subgraph_captures", "host_kernel", "loop_trip_plan"]

#: ONNX operators whose attributes hold subgraphs
SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan"})


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The subgraphs held by ``node``'s attributes."""
    found = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            found.append(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            found.extend(attr.graphs)
    return found


def _free_names(graph: onnx.GraphProto) -> list[str]:
    """Names ``graph`` (and its nested subgraphs) read that it does not define, in first-use order."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    free: dict[str, None] = {}
    for node in graph.node:
        for name in node.input:
            if name and name not in defined:
                free.setdefault(name)
        for sub in subgraphs(node):
            for name in _free_names(sub):
                if name not in defined:
                    free.setdefault(name)
        defined.update(o for o in node.output if o)
    for out in graph.output:
        if out.name not in defined:
            free.setdefault(out.name)
    return list(free)


def subgraph_captures(node: onnx.NodeProto) -> list[str]:
    """The outer-scope values ``node``'s subgraphs read, in first-use order (empty for other nodes)."""
    found: dict[str, None] = {}
    for sub in subgraphs(node):
        for name in _free_names(sub):
            found.setdefault(name)
    return list(found)


def _nms_kernel():
    """``onnx.reference``'s NonMaxSuppression, taking its scalar inputs as scalars too.

    ONNX defines ``max_output_boxes_per_class``, ``iou_threshold`` and ``score_threshold`` as
    scalars (tf2onnx writes them so); ``onnx.reference`` indexes them as 1-D tensors of one
    element and fails on scalars.
    """
    from onnx.reference.ops.op_non_max_suppression import NonMaxSuppression as _Reference

    class NonMaxSuppression(_Reference):
        op_domain = ""

        def _run(self, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None, score_threshold=None,
                 center_point_box=None):
            def one(v):
                return None if v is None else np.asarray(v).reshape(-1)[:1]
            return super()._run(boxes, scores, one(max_output_boxes_per_class), one(iou_threshold),
                                one(score_threshold), center_point_box=center_point_box)

    return NonMaxSuppression


#: ``OpRun`` classes that fix ``onnx.reference`` kernels (the reference executor uses them too)
REFERENCE_FIXES = [_nms_kernel()]


def host_kernel(node: onnx.NodeProto, opset: int) -> Callable:
    """``run(*numpy inputs) -> list of numpy outputs``: ``node`` evaluated by ``onnx.reference``.

    Absent optional inputs are passed as None.
    """
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if name else "" for i, name in enumerate(node.input)]
    outs = [f"out{i}" if name else "" for i, name in enumerate(node.output)]
    single = onnx.NodeProto()
    single.CopyFrom(node)
    del single.input[:]
    single.input.extend(names)
    del single.output[:]
    single.output.extend(outs)
    graph = helper.make_graph([single], "host_kernel", [helper.make_tensor_value_info(n, 0, None) for n in names if n],
                              [helper.make_tensor_value_info(n, 0, None) for n in outs if n])
    domain = node.domain or ""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
    evaluator = ReferenceEvaluator(model, new_ops=REFERENCE_FIXES)
    wanted = [n for n in outs if n]

    def run(*values):
        feeds = {n: np.asarray(v) for n, v in zip(names, values) if n and v is not None}
        return evaluator.run(wanted, feeds)

    return run


def loop_trip_plan(trip_count, has_condition: bool) -> tuple[int | None, bool]:
    """``(maximum iterations or None, whether the body's condition output stops the loop)``.

    Args:
        trip_count: the value of Loop's ``M`` input (None when absent).
        has_condition: whether Loop's ``cond`` input is given.
    """
    limit = None if trip_count is None else int(np.asarray(trip_count).reshape(-1)[0])
    # ONNX: with M and no condition, the body's condition output is ignored (a for loop)
    return limit, has_condition or trip_count is None


@dataclasses.dataclass(frozen=True)
class ScanLayout:
    """How a ``Scan`` node splits its body's inputs and outputs, and along which axes it scans.

    Attributes:
        n_scan: scan inputs; n_state: state values; n_out: scan outputs.
        in_axes, in_dirs: per scan input, its scan axis and direction (1: from the end).
        out_axes, out_dirs: per scan output, the axis its slices are stacked along and the direction.
    """

    n_scan: int
    n_state: int
    n_out: int
    in_axes: list
    in_dirs: list
    out_axes: list
    out_dirs: list


def scan_layout(attr: Callable, body_inputs: int, body_outputs: int) -> ScanLayout:
    """The :class:`ScanLayout` of a Scan node from its attribute getter ``attr(name, default)``.

    Scan-8 names the input directions ``directions`` (and scans axis 1 of a batch: axis 0 of
    each batch element).
    """
    n_scan = int(attr("num_scan_inputs", 0))
    n_state = body_inputs - n_scan
    n_out = body_outputs - n_state
    return ScanLayout(n_scan, n_state, n_out, list(attr("scan_input_axes", [0] * n_scan)),
                      list(attr("scan_input_directions", attr("directions", [0] * n_scan))),
                      list(attr("scan_output_axes", [0] * n_out)), list(attr("scan_output_directions", [0] * n_out)))


def unrolled_scan(step: Callable, state: list, xs: list, axes: list, length: int, layout: ScanLayout,
                  take: Callable, stack: Callable) -> list:
    """A Scan's outputs, its body run once per step in Python: the final state, then the stacked outputs.

    Args:
        step: ``step(state + slices) -> state + output slices`` (the body).
        state, xs: the initial state and the scan inputs; axes: their scan axes (non-negative).
        length: the number of steps.
        take: ``take(x, axis, index)``, one slice of a scan input.
        stack: ``stack(items, axis)``, the slices of one output stacked (``items`` may be empty).
    """
    outs: list[list] = [[] for _ in range(layout.n_out)]
    for t in range(length):
        slices = [take(x, a, length - 1 - t if d else t) for x, a, d in zip(xs, axes, layout.in_dirs)]
        res = step(list(state) + slices)
        state = list(res[:layout.n_state])
        for k in range(layout.n_out):
            outs[k].append(res[layout.n_state + k])
    return list(state) + [stack(outs[k][::-1] if layout.out_dirs[k] else outs[k], layout.out_axes[k])
                          for k in range(layout.n_out)]
