"""Control flow and data-dependent selection as TensorFlow ops: If, Loop, Scan, NonMaxSuppression.

These converters are built by :func:`build_control` (``build_node`` hands them over): a subgraph
is converted once into node functions with the same ``build_node`` (so layouts, training mode and
Dropout's generator carry into it) and traced inside the executor's ``tf.function``:

- ``If``: the branch of a condition known while tracing is traced alone; otherwise ``tf.cond``
  traces both (their outputs must have the same types);
- ``Loop``: ``tf.while_loop`` over ``(i, cond, carried...)`` with the scan outputs in
  ``tf.TensorArray`` objects, so a trip count or condition computed at run time works, and
  TensorFlow differentiates through the loop; carried values may change shape between
  iterations (their shape invariants are left open);
- ``Scan``: the body traced once per step of the scan axis, whose length must be known while
  tracing;
- ``NonMaxSuppression``: ``tf.image.non_max_suppression`` per batch and class (ONNX's corner and
  center box formats, IoU and score thresholds), the selected ``(batch, class, box)`` rows in
  ONNX's order; its output length depends on the values.

Subgraph values cross the node boundary in the plain ONNX layout. The values a subgraph reads
from the graphs around it come after the node's declared inputs (the executor passes them, in
:func:`deep500lite.lv1.control_flow.subgraph_captures` order).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from onnx import numpy_helper

from deep500lite.frameworks.tensorflow.dtypes import tf_dtype
from deep500lite.frameworks.tensorflow.layout import Value
from deep500lite.frameworks.tensorflow.ops._common import PLAIN, Node, registrar
from deep500lite.lv1.control_flow import scan_layout, unrolled_scan, loop_trip_plan, subgraph_captures

__all__ = ["CONVERTERS", "SUBGRAPH_CONVERTERS", "build_control"]

CONVERTERS: dict = {}
"""ONNX op type -> (layout kind, converter) of this family (built by :func:`build_control`)."""
op = registrar(CONVERTERS)


def _placeholder(ctx, *values):  # never called: build_node hands these ops to build_control
    raise AssertionError(f"{ctx.op_type} is built by build_control")


#: the ops whose nodes hold subgraphs; build_node hands them to build_control
SUBGRAPH_CONVERTERS = ("If", "Loop", "Scan")
for _name in SUBGRAPH_CONVERTERS:
    op(_name, kind=PLAIN)(_placeholder)


class _Subgraph:
    """A subgraph's node functions, traced with its inputs and the captured outer values."""

    def __init__(self, graph, opset, build, training, rng, gpu):
        self.inputs = [i.name for i in graph.input]
        self.outputs = [o.name for o in graph.output]
        self.output_types = {o.name: o.type.tensor_type.elem_type for o in graph.output}
        self.constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.steps = []
        for node in graph.node:
            captured = subgraph_captures(node)
            self.steps.append((build(node, opset, training=training, rng=rng, gpu=gpu),
                               list(node.input) + captured, list(node.output)))

    def __call__(self, outer: dict, values) -> list:
        env = {k: Value(v) for k, v in outer.items()}
        env.update((k, Value(tf.constant(v))) for k, v in self.constants.items())
        env.update((k, Value(tf.convert_to_tensor(v))) for k, v in zip(self.inputs, values))
        for run, ins, outs in self.steps:
            results = run([env[n] if n else None for n in ins])
            for name, value in zip(outs, results):
                if name and value is not None:
                    env[name] = value
        return [env[n].plain for n in self.outputs]


def _split(node, values, captured):
    declared = [None if v is None else v.plain for v in values[:len(values) - len(captured)]]
    outer = {n: v.plain for n, v in zip(captured, values[len(values) - len(captured):])}
    return declared, outer


def _static_flag(t):
    value = tf.get_static_value(t)
    return None if value is None else bool(np.asarray(value).reshape(-1)[0])


def build_control(node, opset: int, build, training: bool = False, rng=None, gpu: bool = False):
    """``run(values) -> list of Value``: an ``If``, ``Loop`` or ``Scan`` node (see module docs).

    Args:
        build: ``build_node``, to convert the subgraphs' nodes.
    """
    captured = subgraph_captures(node)
    ctx = Node(node, opset, rng, gpu)
    graphs = {a.name: a.g for a in node.attribute if a.HasField("g")}

    def sub(name):
        return _Subgraph(graphs[name], opset, build, training, rng, gpu)

    if node.op_type == "If":
        branches = sub("then_branch"), sub("else_branch")

        def run(values):
            (cond,), outer = _split(node, values, captured)
            flag = _static_flag(cond)
            if flag is not None:
                return [Value(t) for t in branches[0 if flag else 1](outer, [])]
            out = tf.cond(tf.reshape(tf.cast(cond, tf.bool), []), lambda: branches[0](outer, []),
                          lambda: branches[1](outer, []))
            return [Value(t) for t in (out if isinstance(out, (list, tuple)) else [out])]
        return run
    if node.op_type == "Loop":
        return _loop(ctx, sub("body"), captured)
    return _scan(ctx, sub("body"), captured)


def _loop(ctx, body, captured):
    carried = len(body.inputs) - 2
    scans = len(body.outputs) - 1 - carried

    def run(values):
        declared, outer = _split(None, values, captured)
        declared += [None] * 2
        trip, cond = declared[0], declared[1]
        state = [tf.convert_to_tensor(v) for v in declared[2:2 + carried]]
        _, watch = loop_trip_plan(0 if trip is not None else None, cond is not None)
        bound = tf.cast(tf.reshape(trip, []), tf.int64) if trip is not None else None
        going = tf.constant(True) if cond is None else tf.reshape(tf.cast(cond, tf.bool), [])
        static_trip = None if trip is None else tf.get_static_value(trip)
        # XLA keeps a TensorArray's size fixed: a known trip count sizes the scan outputs
        size = None if static_trip is None or (cond is not None and watch) else int(np.asarray(static_trip).reshape(-1)[0])
        if scans and size is None and _in_xla():
            ctx.fail("under XLA a loop with scan outputs needs a trip count known while tracing and no condition",
                     "a trip count or condition known only at run time")
        types = [tf_dtype(body.output_types[o]) if body.output_types[o] else None for o in body.outputs[1 + carried:]]
        if None in types:
            # a scan output of undeclared type (ONNX's expanded functions, e.g. Range's loop body,
            # declare none): trace the body once on the initial values for its dtype
            probe = body(outer, [tf.constant(0, tf.int64), going] + state)[1 + carried:]
            types = [t or tf.convert_to_tensor(o).dtype for t, o in zip(types, probe)]
        arrays = [tf.TensorArray(t, size=size or 0, dynamic_size=size is None, infer_shape=False) for t in types]

        def keep_going(i, flag, *rest):
            return flag if bound is None else tf.logical_and(flag, i < bound)

        def step(i, flag, *rest):
            current, stacks = list(rest[:carried]), list(rest[carried:])
            out = body(outer, [i, flag] + current)
            nxt = tf.reshape(tf.cast(out[0], tf.bool), []) if watch else flag
            new_state = [tf.cast(o, s.dtype) for o, s in zip(out[1:1 + carried], current)]
            stacks = [a.write(tf.cast(i, tf.int32), o) for a, o in zip(stacks, out[1 + carried:])]
            return [i + 1, nxt] + new_state + stacks

        loop_vars = [tf.constant(0, tf.int64), going] + state + arrays
        # carried values may change size between iterations, not rank (converters need the rank)
        invariants = [tf.TensorShape([]), tf.TensorShape([])] + [
            tf.TensorShape(None if v.shape.rank is None else [None] * v.shape.rank) for v in state] + [
            tf.TensorShape(None)] * scans
        out = tf.while_loop(keep_going, step, loop_vars, shape_invariants=invariants)
        results = list(out[2:2 + carried]) + [a.stack() for a in out[2 + carried:]]
        return [Value(t) for t in results]
    return run


def _in_xla() -> bool:
    """Whether the function being traced is compiled by XLA (``tf.function(jit_compile=True)``)."""
    try:
        from tensorflow.python.ops import control_flow_util

        return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))
    except Exception:  # noqa: BLE001 - a private helper that moved: assume no XLA
        return False


def _scan(ctx, body, captured):
    layout = scan_layout(ctx.get, len(body.inputs), len(body.outputs))
    n_state, in_axes = layout.n_state, layout.in_axes

    def scan(outer, state, xs):
        ranks = [x.shape.rank for x in xs]
        axes = [a % r for a, r in zip(in_axes, ranks)]
        length = xs[0].shape[axes[0]] if xs else 0
        if length is None:
            ctx.fail("the length of the scan axis must be known while tracing", "a length known only at run time")
        return unrolled_scan(lambda values: body(outer, values), state, xs, axes, length, layout,
                             lambda x, a, i: tf.gather(x, i, axis=a),
                             lambda items, axis: tf.stack(items, axis=axis % (items[0].shape.rank + 1)))

    def run(values):
        declared, outer = _split(None, values, captured)
        if ctx.opset >= 9:
            results = scan(outer, list(declared[:n_state]), declared[n_state:])
        else:  # Scan-8: a leading sequence_lens input and a batch axis 0 (scans axis 1)
            rest = declared[1:]
            batch = rest[0].shape[0]
            if batch is None:
                ctx.fail("the batch size of a Scan-8 node must be known while tracing", "an unknown batch size")
            per = [scan(outer, [x[b] for x in rest[:n_state]], [x[b] for x in rest[n_state:]]) for b in range(batch)]
            results = [tf.stack([p[k] for p in per]) for k in range(len(per[0]))]
        return [Value(t) for t in results]
    return run


@op("NonMaxSuppression", kind=PLAIN)
def _nms(ctx, boxes, scores, max_per_class=None, iou=None, score_threshold=None):
    batches, classes = boxes.shape[0], scores.shape[1]
    if batches is None or classes is None:
        ctx.fail("the number of batches and classes must be known while tracing", "an unknown batch or class count")
    limit = tf.zeros([], tf.int32) if max_per_class is None else tf.cast(tf.reshape(max_per_class, []), tf.int32)
    iou = tf.zeros([], tf.float32) if iou is None else tf.cast(tf.reshape(iou, []), tf.float32)
    threshold = (tf.constant(float("-inf"), tf.float32) if score_threshold is None
                 else tf.cast(tf.reshape(score_threshold, []), tf.float32))
    boxes = tf.cast(boxes, tf.float32)
    if ctx.get("center_point_box", 0):  # [x_center, y_center, width, height] -> corners [y1, x1, y2, x2]
        xc, yc, w, h = tf.unstack(boxes, axis=-1)
        boxes = tf.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
    rows = []
    for b in range(batches):
        for c in range(classes):
            kept = tf.image.non_max_suppression(boxes[b], tf.cast(scores[b, c], tf.float32), limit, iou, threshold)
            kept = tf.cast(kept, tf.int64)
            n = tf.shape(kept, out_type=tf.int64)[0]
            rows.append(tf.stack([tf.fill([n], tf.constant(b, tf.int64)), tf.fill([n], tf.constant(c, tf.int64)),
                                  kept], axis=1))
    return tf.concat(rows, axis=0) if rows else tf.zeros([0, 3], tf.int64)
