"""Control flow and data-dependent selection as JAX functions: If, Loop, Scan, NonMaxSuppression.

A subgraph is run by :class:`_Subgraph`, which calls the converters of its nodes as the executor
does (folding what is known while tracing). Under ``jax.jit``:

- ``If``: a condition known while tracing selects its branch in Python; otherwise
  ``jax.lax.cond`` traces both (their outputs must have the same shapes and dtypes);
- ``Loop``: with a trip count known while tracing and no condition to watch, ``jax.lax.scan``
  over the iterations (differentiable; the scan outputs are its stacked outputs); with a
  condition or a trip count computed at run time and no scan outputs, ``jax.lax.while_loop``
  (which JAX cannot differentiate in reverse mode);
- ``Scan``: ``jax.lax.scan`` over the scan axis, in each input's and output's direction.

What XLA cannot compile, because an output's shape depends on the values (``NonMaxSuppression``;
a loop whose trip count is computed at run time and that has scan outputs), raises a
:class:`~deep500lite.errors.ModelError` marked ``needs_eager``: the executor then runs that graph
op by op without ``jax.jit`` (``options["eager"]`` says why), where these converters see the
values: ``NonMaxSuppression`` runs ``onnx.reference``'s kernel on them, and loops and branches
are plain Python. Gradients still come from ``jax.value_and_grad``, through every iteration run
and every branch taken.

Subgraphs read the values of the graphs around them from ``ctx.outer`` (set by the executor, and
by :class:`_Subgraph` for nested ones).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from onnx import numpy_helper

from deep500lite.errors import ModelError
from deep500lite.frameworks.jax.ops._common import NodeContext, is_static, parse_attributes, registrar
from deep500lite.lv1.control_flow import scan_layout, host_kernel, loop_trip_plan, subgraph_captures

__all__ = ["CONVERTERS", "concrete", "needs_eager"]

CONVERTERS: dict[str, Callable] = {}
_op = registrar(CONVERTERS)


def concrete(value):
    """``value`` as numpy when it is known here (a constant, or an array computed eagerly), else None.

    Eager ``jax.value_and_grad`` passes tracers that carry their concrete values as ``primal``.
    """
    while isinstance(value, jax.core.Tracer):
        value = getattr(value, "primal", None)
        if value is None:
            return None
    return None if value is None else np.asarray(value)


def needs_eager(ctx: NodeContext, why: str) -> ModelError:
    """The error that makes the executor run the graph without ``jax.jit`` (see the module docs)."""
    error = ModelError(f"The jax executor cannot compile node '{ctx.name}' ({ctx.op}) with XLA: {why}. Received: a "
                       f"value known only at run time")
    error.needs_eager = why
    return error


class _Subgraph:
    """A subgraph's nodes with their parsed attributes, run by calling their converters."""

    def __init__(self, graph, ctx: NodeContext):
        from deep500lite.frameworks.jax.ops import lookup

        self.ctx = ctx
        self.inputs = [i.name for i in graph.input]
        self.outputs = [o.name for o in graph.output]
        self.constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.nodes = [(node, parse_attributes(node), lookup(node.op_type, node.name), subgraph_captures(node))
                      for node in graph.node]

    def __call__(self, outer: dict, values) -> list:
        env = dict(outer)
        env.update(self.constants)
        env.update(zip(self.inputs, values))
        parent = self.ctx
        for k, (node, attrs, fn, captured) in enumerate(self.nodes):
            args = [env[n] if n else None for n in node.input]
            while args and args[-1] is None:
                args.pop()
            ctx = NodeContext(node, parent.opset, attrs, training=parent.training, key=parent._key,
                              index=parent._index * 7919 + k + 1)
            ctx.args = tuple(args)
            ctx.outer = {n: env[n] for n in captured}
            known = all(a is None or is_static(a) for a in list(args) + list(ctx.outer.values()))
            if known and not (parent.training and node.op_type in ("Dropout", "BatchNormalization")):
                with jax.ensure_compile_time_eval():
                    result = fn(ctx, *args)
                results = result if isinstance(result, (tuple, list)) else (result,)
                results = [None if r is None else np.asarray(r) for r in results]
            else:
                result = fn(ctx, *args)
                results = result if isinstance(result, (tuple, list)) else (result,)
            for name, value in zip(node.output, results):
                if name and value is not None:
                    env[name] = value
        return [env[n] for n in self.outputs]


def _bodies(ctx, *names) -> list:
    cache = ctx.__dict__.setdefault("_bodies", {})
    key = tuple(names)
    if key not in cache:
        cache[key] = [_Subgraph(ctx.attr(n).g, ctx) for n in names]
    return cache[key]


def _outer(ctx) -> dict:
    return getattr(ctx, "outer", {}) or {}


def _flag(value) -> bool | None:
    known = concrete(value) if not is_static(value) else np.asarray(value)
    return None if known is None else bool(known.reshape(-1)[0])


def _tuple(out: list):
    return tuple(out) if len(out) != 1 else out[0]


@_op("If")
def _if(ctx, cond):
    then_branch, else_branch = _bodies(ctx, "then_branch", "else_branch")
    outer = _outer(ctx)
    flag = _flag(cond)
    if flag is not None:
        return _tuple((then_branch if flag else else_branch)(outer, []))
    then_out = jax.eval_shape(lambda o: [jnp.asarray(v) for v in then_branch(o, [])], outer)
    else_out = jax.eval_shape(lambda o: [jnp.asarray(v) for v in else_branch(o, [])], outer)
    if [(t.shape, t.dtype) for t in then_out] != [(t.shape, t.dtype) for t in else_out]:
        raise needs_eager(ctx, "its branches return values of different shapes or types, which jax.lax.cond "
                               "cannot select between")
    out = jax.lax.cond(jnp.reshape(cond, ()).astype(bool), lambda o: [jnp.asarray(v) for v in then_branch(o, [])],
                       lambda o: [jnp.asarray(v) for v in else_branch(o, [])], outer)
    return _tuple(list(out))


@_op("Loop")
def _loop(ctx, trip=None, cond=None, *initial):
    (body,) = _bodies(ctx, "body")
    outer = _outer(ctx)
    carried = len(body.inputs) - 2
    scans = len(body.outputs) - 1 - carried
    state = list(initial[:carried])
    static_trip = None if trip is None else (np.asarray(trip) if is_static(trip) else concrete(trip))
    limit, watch = loop_trip_plan(static_trip, cond is not None)
    going = True if cond is None else _flag(cond)
    if going is not None and (trip is None or static_trip is not None) and _all_known(state):
        # every value is known (an eager run): a Python loop, any shapes, any condition
        return _tuple(_python_loop(body, outer, state, limit, watch, going, scans))
    if watch:
        # a body whose condition output is a constant true (torch exports ``for`` loops so) is not watched
        probe = body(outer, [jnp.asarray(0, jnp.int64), jnp.asarray(True)] + state)[0]
        watch = not (is_static(probe) and bool(np.asarray(probe).reshape(-1)[0]))
    if static_trip is not None and not watch and going is not None:
        if not going:
            return _tuple(state + [jnp.zeros((0,)) for _ in range(scans)])

        def step(carry, i):
            out = body(outer, [i, jnp.asarray(True)] + list(carry))
            return [jnp.asarray(o) for o in out[1:1 + carried]], [jnp.asarray(o) for o in out[1 + carried:]]
        final, ys = jax.lax.scan(step, [jnp.asarray(s) for s in state], jnp.arange(limit, dtype=jnp.int64))
        return _tuple(list(final) + list(ys))
    if scans:
        raise needs_eager(ctx, "a loop with scan outputs whose number of iterations is known only at run time")
    bound = None if trip is None else jnp.reshape(trip, ()).astype(jnp.int64)

    def keep_going(carry):
        i, flag = carry[0], carry[1]
        return flag if bound is None else jnp.logical_and(flag, i < bound)

    def step(carry):
        i, flag, rest = carry[0], carry[1], carry[2:]
        out = body(outer, [i, flag] + list(rest))
        nxt = jnp.reshape(jnp.asarray(out[0]), ()).astype(bool) if watch else flag
        return [i + 1, nxt] + [jnp.asarray(o) for o in out[1:1 + carried]]
    start = [jnp.asarray(0, jnp.int64), jnp.reshape(jnp.asarray(True if cond is None else cond), ()).astype(bool)]
    final = jax.lax.while_loop(keep_going, step, start + [jnp.asarray(s) for s in state])
    return _tuple(list(final[2:]))


def _all_known(values) -> bool:
    return all(is_static(v) or concrete(v) is not None for v in values)


def _python_loop(body, outer, state, limit, watch, going, scans) -> list:
    stacks: list[list] = [[] for _ in range(scans)]
    i = 0
    while going and (limit is None or i < limit):
        out = body(outer, [np.asarray(i, np.int64), np.asarray(going)] + state)
        state = list(out[1:1 + len(state)])
        for k in range(scans):
            stacks[k].append(out[1 + len(state) + k])
        if watch:
            going = _flag(out[0])
        i += 1
    return state + [jnp.stack([jnp.asarray(v) for v in s]) if s else jnp.zeros((0,)) for s in stacks]


@_op("Scan")
def _scan(ctx, *values):
    (body,) = _bodies(ctx, "body")
    outer = _outer(ctx)
    layout = scan_layout(ctx.attr, len(body.inputs), len(body.outputs))
    n_state, n_out = layout.n_state, layout.n_out
    in_axes, in_dirs, out_axes, out_dirs = layout.in_axes, layout.in_dirs, layout.out_axes, layout.out_dirs

    def scan(state, xs):
        seq = []
        for x, axis, rev in zip(xs, in_axes, in_dirs):
            x = jnp.moveaxis(jnp.asarray(x), axis % np.ndim(x), 0)
            seq.append(x[::-1] if rev else x)

        def step(carry, slices):
            out = body(outer, list(carry) + list(slices))
            return [jnp.asarray(o) for o in out[:n_state]], [jnp.asarray(o) for o in out[n_state:]]
        final, ys = jax.lax.scan(step, [jnp.asarray(s) for s in state], seq)
        outs = []
        for y, axis, rev in zip(ys, out_axes, out_dirs):
            y = y[::-1] if rev else y
            outs.append(jnp.moveaxis(y, 0, axis % y.ndim))
        return list(final) + outs

    if ctx.opset >= 9:
        return _tuple(scan(list(values[:n_state]), list(values[n_state:])))
    rest = values[1:]  # Scan-8: a leading sequence_lens input and a batch axis 0
    per = [scan([x[b] for x in rest[:n_state]], [x[b] for x in rest[n_state:]]) for b in range(np.shape(rest[0])[0])]
    return _tuple([jnp.stack([p[k] for p in per]) for k in range(len(per[0]))])


@_op("NonMaxSuppression")
def _nms(ctx, *values):
    host = []
    for v in values:
        known = None if v is None else (np.asarray(v) if is_static(v) else concrete(v))
        if v is not None and known is None:
            raise needs_eager(ctx, "the number of boxes it selects depends on the values")
        host.append(known)
    kernels = ctx.__dict__.setdefault("_kernels", {})
    if "nms" not in kernels:
        kernels["nms"] = host_kernel(ctx.node, max(ctx.opset, 11))
    (selected,) = kernels["nms"](*host)
    return np.asarray(selected, dtype=np.int64)
