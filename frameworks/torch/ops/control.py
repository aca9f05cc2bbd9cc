"""Control flow and data-dependent selection as torch functions: If, Loop, Scan, NonMaxSuppression.

A subgraph (a branch, a loop or scan body) is converted once, when its node is, into a list of
node functions (:class:`_Subgraph`) and interpreted at run time with Python control flow: torch
runs eagerly, so ``if``, ``while`` and the loop over a scan axis are plain Python, autograd records
each iteration, and gradients flow through every branch taken and every iteration run. The values
a subgraph reads from the graphs around it come after the node's declared inputs (the executor
passes them, in :func:`deep500lite.lv1.control_flow.subgraph_captures` order).

``NonMaxSuppression``'s output shape depends on the values (the boxes it selects): it runs
``onnx.reference``'s kernel on the host (:func:`deep500lite.lv1.control_flow.host_kernel`) and
returns int64 indices, which carry no gradient.

Converters follow the contract of :mod:`deep500lite.frameworks.torch.ops`.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from onnx import numpy_helper

from deep500lite.frameworks.torch.dtypes import to_numpy, to_torch
from deep500lite.frameworks.torch.ops._common import registrar
from deep500lite.lv1.control_flow import scan_layout, unrolled_scan, host_kernel, loop_trip_plan, subgraph_captures

__all__ = ["CONVERTERS"]

CONVERTERS: dict[str, Callable] = {}
"""ONNX op type -> converter (``NodeSpec -> function of tensors``) of this family."""
_op = registrar(CONVERTERS)


class _Subgraph:
    """A subgraph converted to node functions, run with its inputs and the captured outer values."""

    def __init__(self, graph, spec):
        from deep500lite.frameworks.torch.ops import NodeSpec, build_node

        self.inputs = [i.name for i in graph.input]
        self.outputs = [o.name for o in graph.output]
        consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.constants = {k: to_torch(np.array(v), spec.device) for k, v in consts.items()}
        self.steps = []
        for node in graph.node:
            captured = subgraph_captures(node)
            sub = NodeSpec(node, spec.opset, [consts.get(n) for n in node.input], spec.device,
                           training=spec.training, generator=spec.generator)
            sub.captured = captured
            self.steps.append((build_node(sub), list(node.input), captured, list(node.output)))

    def __call__(self, outer: dict, values) -> list:
        env = dict(outer)
        env.update(self.constants)
        env.update(zip(self.inputs, values))
        for fn, ins, captured, outs in self.steps:
            args = [env[n] if n else None for n in ins] + [env[n] for n in captured]
            result = fn(*args)
            results = result if isinstance(result, (tuple, list)) else (result,)
            for name, value in zip(outs, results):
                if name:
                    env[name] = value
        return [env[n] for n in self.outputs]


def _outer(spec, values) -> dict:
    """The captured outer values of a call: the arguments after the node's declared inputs."""
    captured = getattr(spec, "captured", [])
    return dict(zip(captured, values[len(values) - len(captured):])) if captured else {}


def _declared(spec, values) -> list:
    captured = getattr(spec, "captured", [])
    return list(values[:len(values) - len(captured)]) if captured else list(values)


def _flag(value) -> bool:
    return bool(value.reshape(-1)[0].item()) if isinstance(value, torch.Tensor) else bool(np.asarray(value).reshape(-1)[0])


@_op("If")
def _if(spec):
    then_branch = _Subgraph(spec.attr("then_branch").g, spec)
    else_branch = _Subgraph(spec.attr("else_branch").g, spec)

    def run(*values):
        outer = _outer(spec, values)
        branch = then_branch if _flag(_declared(spec, values)[0]) else else_branch
        out = branch(outer, [])
        return tuple(out) if len(out) != 1 else out[0]
    return run


def _stack(items: list, device) -> torch.Tensor:
    if not items:
        return torch.zeros((0,), device=device)
    return torch.stack([torch.as_tensor(t) for t in items])


@_op("Loop")
def _loop(spec):
    body = _Subgraph(spec.attr("body").g, spec)
    carried = len(body.inputs) - 2
    scans = len(body.outputs) - 1 - carried

    def run(*values):
        outer = _outer(spec, values)
        declared = _declared(spec, values) + [None] * 2
        trip, cond = declared[0], declared[1]
        state = list(declared[2:2 + carried])
        limit, watch = loop_trip_plan(None if trip is None else to_numpy(trip), cond is not None)
        going = True if cond is None else _flag(cond)
        stacks: list[list] = [[] for _ in range(scans)]
        i = 0
        while going and (limit is None or i < limit):
            flag = torch.tensor(going, device=spec.device)
            out = body(outer, [torch.tensor(i, dtype=torch.int64, device=spec.device), flag] + state)
            state = list(out[1:1 + carried])
            for k in range(scans):
                stacks[k].append(out[1 + carried + k])
            if watch:
                going = _flag(out[0])
            i += 1
        results = state + [_stack(s, spec.device) for s in stacks]
        return tuple(results) if len(results) != 1 else results[0]
    return run


@_op("Scan")
def _scan(spec):
    body = _Subgraph(spec.attr("body").g, spec)
    layout = scan_layout(spec.attr, len(body.inputs), len(body.outputs))
    n_state, in_axes = layout.n_state, layout.in_axes

    def scan(outer, state, xs):
        axes = [a % x.dim() for a, x in zip(in_axes, xs)]
        length = int(xs[0].shape[axes[0]]) if xs else 0

        def stack(items, axis):
            if not items:
                return torch.zeros((0,), device=spec.device)
            return torch.stack(items, dim=axis % (items[0].dim() + 1))
        return unrolled_scan(lambda values: body(outer, values), state, xs, axes, length, layout,
                             lambda x, a, i: x.select(a, i), stack)

    def run(*values):
        outer = _outer(spec, values)
        declared = _declared(spec, values)
        if spec.opset >= 9:
            results = scan(outer, list(declared[:n_state]), declared[n_state:])
        else:
            # Scan-8: a leading sequence_lens input, and a batch axis 0 before every state and scan axis
            lens, rest = declared[0], declared[1:]
            batch = int(rest[0].shape[0])
            if lens is not None and torch.any(lens != rest[n_state].shape[1]):
                raise spec.unsupported(f"sequence_lens {lens.tolist()}", "sequences of the full length")
            per = [scan(outer, [x[b] for x in rest[:n_state]], [x[b] for x in rest[n_state:]]) for b in range(batch)]
            results = [torch.stack([p[k] for p in per]) for k in range(len(per[0]))]
        return tuple(results) if len(results) != 1 else results[0]
    return run


@_op("NonMaxSuppression")
def _nms(spec):
    from onnx import NodeProto

    node = NodeProto()
    node.op_type = "NonMaxSuppression"
    node.input.extend(f"i{k}" if present else "" for k, present in enumerate(spec.present))
    node.output.append("selected")
    center = spec.attr("center_point_box", 0)
    if center:
        from onnx import helper

        node.attribute.append(helper.make_attribute("center_point_box", int(center)))
    kernel = host_kernel(node, max(spec.opset, 11))

    def run(*values):
        host = [None if v is None else to_numpy(v.detach() if isinstance(v, torch.Tensor) else v) for v in values]
        (selected,) = kernel(*host)
        return torch.from_numpy(np.asarray(selected, dtype=np.int64)).to(spec.device)
    return run
