"""Per-layer forward and backward times of an ONNX network, measured on this machine through an executor.

Method (``deep500lite model layers``; docs/scaling.md): for each node of the network (one node is
one :class:`~deep500lite.perfmodel.scaling_networks.Layer` of :func:`describe_onnx`, under the same
name) and each per-node batch ``b``:

1. the network's graph inputs get the batch dimension ``b`` and ``onnx.shape_inference`` gives
   every tensor's shape;
2. a one-node sub-network is built (:func:`layer_subnetwork`): the node's inputs that are
   initializers of the network stay initializers; inputs the network reads from its feeds stay
   graph inputs (fed random data, so no input gradient is computed, as in the real network);
   every other input (an activation computed by an earlier node) becomes a float initializer of
   random values, so that ``inference_and_backprop`` also computes its gradient, as the backward
   pass of the whole network does; a scalar ``loss = ReduceSum(first output)`` closes it;
3. its ``inference`` (forward) and ``inference_and_backprop`` (forward + backward) are timed with
   :func:`deep500lite.metrics.timing.time_function` (``synchronize`` of the executor inside the
   timed region);
4. the same two calls on a *loss-only* network (``ReduceSum`` of an initializer shaped like the
   layer's output; one per distinct shape) are timed and subtracted: what remains is the layer's
   own forward, and ``step - forward`` its backward. The loss-only network holds the executor's
   per-call cost too; that cost is measured once more on a scalar (``ReduceSum`` of one element)
   and recorded as ``overhead``: the part of a step that does not shrink with the batch.

The whole network (``loss = ReduceSum(output)``) is timed the same way at each batch: the
reference the sum of the layers is compared with; with an optimizer, its whole training step too,
in alternation with ``inference_and_backprop``, the difference being the update.
"""

from __future__ import annotations

import math

import numpy as np

from deep500lite.errors import UserError

__all__ = ["LAYER_TIMES_FORMAT", "LAYER_TIMES_SCHEMA", "OPTIMIZERS", "with_batch", "layer_subnetwork",
           "loss_only_network", "measure_layers", "check_layer_times", "layer_label", "summary_rows"]

LAYER_TIMES_FORMAT = "deep500lite-layer-times/1"

#: ``--optimizer`` names: the numpy reference optimizers the bundled recipes use (None: no update timed).
OPTIMIZERS = {"momentum": ("MomentumOptimizer", {"learning_rate": 0.01, "momentum": 0.9}),
              "sgd": ("GradientDescent", {"learning_rate": 0.01}),
              "adam": ("AdamOptimizer", {"learning_rate": 0.001}),
              "none": None}

_FLOAT_TYPES = (1, 10, 11, 16)  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
_NP = {1: np.float32, 10: np.float16, 11: np.float64}

_SAMPLES = {"type": "array", "items": {"type": "number", "minimum": 0}}
_MEDIANS = {"type": "array", "items": {"type": ["number", "null"]}}

#: JSON Schema of the file ``model layers --json`` writes (checked with jsonschema on reading).
LAYER_TIMES_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["format", "model", "framework", "device", "batches", "overhead", "layers", "network"],
    "properties": {
        "format": {"const": LAYER_TIMES_FORMAT},
        "model": {"type": "string"},
        "framework": {"type": "string"},
        "device": {"type": "string"},
        "batches": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 1}},
        "overhead": {"type": "object", "required": ["forward", "backward"],
                     "properties": {"forward": {"type": "number", "minimum": 0},
                                    "backward": {"type": "number", "minimum": 0},
                                    "forward_samples": _SAMPLES, "step_samples": _SAMPLES}},
        "layers": {"type": "array", "items": {
            "type": "object", "required": ["name", "op_type", "status", "forward", "backward"],
            "properties": {"name": {"type": "string"}, "op_type": {"type": "string"},
                           "status": {"enum": ["measured", "skipped"]},
                           "forward": _MEDIANS, "backward": _MEDIANS}}},
        "network": {"type": "object", "required": ["forward", "step"],
                    "properties": {"forward": _MEDIANS, "step": _MEDIANS, "update": _MEDIANS}},
    },
}


def layer_label(node, index: int) -> str:
    """The name of node ``index``: its own name, else ``OpType_index`` (as :func:`describe_onnx` names it)."""
    return node.name or f"{node.op_type}_{index}"


def with_batch(model, batch: int):
    """A copy of ``model`` whose graph inputs have batch dimension ``batch``, with shapes inferred.

    Args:
        model: an ``onnx.ModelProto`` (the batch dimension symbolic or fixed).
        batch: the per-node batch.

    Returns:
        The inferred ``ModelProto``.
    """
    import onnx
    from onnx import shape_inference

    model = onnx.ModelProto.FromString(model.SerializeToString())
    init = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in init:
            continue
        dims = vi.type.tensor_type.shape.dim
        if len(dims):
            dims[0].Clear()
            dims[0].dim_value = int(batch)
    del model.graph.value_info[:]
    return shape_inference.infer_shapes(model)


def _types(model) -> dict:
    """``name -> (elem_type, shape or None)`` of every tensor ``model`` declares."""
    out = {}
    g = model.graph
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        tt = vi.type.tensor_type
        dims = tt.shape.dim
        shape = tuple(d.dim_value for d in dims) if all(d.HasField("dim_value") for d in dims) else None
        out[vi.name] = (tt.elem_type, shape if tt.HasField("shape") else None)
    for t in g.initializer:
        out[t.name] = (t.data_type, tuple(t.dims))
    return out


def _model(nodes, inputs, outputs, initializers, like):
    from onnx import helper

    graph = helper.make_graph(nodes, "layer", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=list(like.opset_import))
    model.ir_version = like.ir_version
    return model


def _loss(name: str):
    from onnx import helper

    return helper.make_node("ReduceSum", [name], ["loss"], keepdims=0, name="layer_times_loss")


def _scalar_output():
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])


def layer_subnetwork(inferred, index: int, seed: int = 0):
    """The one-node training network of node ``index`` (see the module docstring).

    Args:
        inferred: the network at one batch, from :func:`with_batch`.
        index: the node's index in ``inferred.graph.node``.
        seed: seed of the random values given to the activations and fed inputs.

    Returns:
        ``(ModelProto, feeds, output shape)``, or ``(None, reason, None)`` where the node cannot be
        measured alone (its output is not a float tensor of known shape, or it reads a computed
        tensor that is not float).
    """
    from onnx import helper, numpy_helper

    g = inferred.graph
    node = g.node[index]
    types = _types(inferred)
    inits = {t.name: t for t in g.initializer}
    graph_inputs = {vi.name: vi for vi in g.input if vi.name not in inits}
    out = node.output[0] if node.output else ""
    etype, oshape = types.get(out, (0, None))
    if etype not in _NP or oshape is None:
        return None, f"its output {out!r} is not a float tensor of known shape", None
    rng = np.random.default_rng(seed)
    inputs, initializers, feeds, seen = [], [], {}, set()
    for name in node.input:
        if not name or name in seen:
            continue
        seen.add(name)
        if name in inits:
            initializers.append(inits[name])
            continue
        itype, ishape = types.get(name, (0, None))
        if ishape is None or itype not in _NP:
            return None, f"it reads the computed tensor {name!r}, which is not a float tensor of known shape", None
        value = rng.standard_normal(ishape).astype(_NP[itype])
        if name in graph_inputs:
            inputs.append(graph_inputs[name])
            feeds[name] = value
        else:
            initializers.append(numpy_helper.from_array(value, name))
    copy = helper.make_node(node.op_type, list(node.input), list(node.output), name=node.name or None,
                            domain=node.domain or None)
    copy.attribute.extend(node.attribute)
    nodes = [copy, _loss(out)]
    return _model(nodes, inputs, [_scalar_output()], initializers, inferred), feeds, oshape


def loss_only_network(shape, like, elem_type: int = 1):
    """``loss = ReduceSum(x)`` with ``x`` a float initializer of ``shape`` (opset and IR version of ``like``)."""
    from onnx import numpy_helper

    x = numpy_helper.from_array(np.ones(shape, _NP.get(elem_type, np.float32)), "layer_times_x")
    return _model([_loss("layer_times_x")], [], [_scalar_output()], [x], like)


def _network_with_loss(inferred):
    """The whole network with ``loss = ReduceSum(first output)`` as its only output."""
    import onnx

    model = onnx.ModelProto.FromString(inferred.SerializeToString())
    first = model.graph.output[0].name
    model.graph.node.append(_loss(first))
    del model.graph.output[:]
    model.graph.output.append(_scalar_output())
    return model


def _time_pair(net, feeds, framework, device, max_time, optimizer=None):
    """``(forward Measurement, step Measurement)`` of ``inference`` and ``inference_and_backprop`` on a fresh
    executor; with ``optimizer`` (a key of :data:`OPTIMIZERS`) a third: that optimizer's whole ``step``."""
    from deep500lite.lv1.network import Network
    from deep500lite.metrics.timing import time_function, time_paired
    from deep500lite.registry import baseline, executor

    ex = executor(Network(net), framework, device=device)
    kw = dict(sync=ex.synchronize, warmup=2, min_runs=5, max_time=max_time)
    fwd = time_function(lambda: ex.inference(feeds), label="forward", **kw)
    step = time_function(lambda: ex.inference_and_backprop(feeds, "loss"), label="forward+backward", **kw)
    if not OPTIMIZERS.get(optimizer):
        return fwd, step
    cls, options = OPTIMIZERS[optimizer]
    opt = getattr(baseline().role("optimizers"), cls)(ex, **options)
    # In alternation, so that load on the machine hits both alike; the update is the median of the
    # per-pair differences, steadier than a difference of two medians.
    return fwd, step, time_paired(lambda: opt.step(feeds), lambda: ex.inference_and_backprop(feeds, "loss"),
                                  label_a="optimizer step", label_b="forward+backward", sync=ex.synchronize,
                                  warmup=2, min_pairs=5, target_rel_ci=0.05, max_time=2 * max_time)


def _raw(m) -> list:
    return [float(t) for t in m.raw_times]


def measure_layers(model, batches, framework: str, device=None, max_time: float = 0.5, name: str = "network",
                   progress=None, optimizer: str = "none") -> dict:
    """Measure every layer of ``model`` and the whole network at each batch (see the module docstring).

    Args:
        model: an ``onnx.ModelProto`` whose graph inputs have the batch as first dimension.
        batches: per-node batches, each >= 1.
        framework: an executor spelling (``torch``, ``onnxruntime``, ``reference``, ...).
        device: ``None``/``"cpu"`` or ``"gpu:N"``.
        max_time: seconds of timed runs per measurement (at least 5 runs each).
        name: the model's name in the result.
        progress: called with a line of text after each batch (or None).
        optimizer: a key of :data:`OPTIMIZERS`: the whole network's training step is also timed with
            that numpy reference optimizer (``optimizer.step``: forward, backward and update), in
            alternation with ``inference_and_backprop`` (:func:`~deep500lite.metrics.timing.time_paired`),
            and ``network.update`` records the update: the median of the per-pair differences.

    Returns:
        The JSON-ready dict :data:`LAYER_TIMES_SCHEMA` describes.
    """
    from deep500lite.environment import collect_environment

    if optimizer not in OPTIMIZERS:
        from deep500lite.errors import format_choices

        raise UserError(f"Unknown optimizer to time the update with. Allowed values are {format_choices(OPTIMIZERS)}. "
                        f"Received: {optimizer!r}")
    batches = sorted({int(b) for b in batches})
    if not batches or batches[0] < 1 or not (max_time > 0 and math.isfinite(max_time)):
        raise UserError(f"Measuring layers needs batches >= 1 and a finite max_time > 0. Received: "
                        f"batches={batches}, max_time={max_time!r}")
    nodes = list(model.graph.node)
    layers = [{"name": layer_label(n, i), "op_type": n.op_type, "index": i, "status": "measured",
               "forward": [], "backward": [], "samples": []} for i, n in enumerate(nodes)]
    network = {"forward": [], "backward": [], "step": [], "samples": [], "optimizer": optimizer}
    if OPTIMIZERS[optimizer]:
        network["update"] = []
    first = with_batch(model, batches[0])
    scalar = loss_only_network((1,), first)
    o_fwd, o_step = _time_pair(scalar, {}, framework, device, max_time)
    overhead = {"forward": o_fwd.median, "backward": max(0.0, o_step.median - o_fwd.median),
                "forward_samples": _raw(o_fwd), "step_samples": _raw(o_step),
                "method": "inference and inference_and_backprop of loss = ReduceSum(x), x one float initializer"}
    for b in batches:
        inferred = first if b == batches[0] else with_batch(model, b)
        baselines = {}
        for i, layer in enumerate(layers):
            sub, feeds, shape = layer_subnetwork(inferred, i, seed=i)
            if sub is None:
                layer.update(status="skipped", reason=feeds)
                layer["forward"].append(None)
                layer["backward"].append(None)
                continue
            key = (shape, _types(inferred)[nodes[i].output[0]][0])
            if key not in baselines:
                baselines[key] = _time_pair(loss_only_network(shape, inferred, key[1]), {}, framework, device,
                                            max_time)
            base_f, base_s = baselines[key]
            fwd, step = _time_pair(sub, feeds, framework, device, max_time)
            f = max(0.0, fwd.median - base_f.median)
            bw = max(0.0, (step.median - fwd.median) - (base_s.median - base_f.median))
            layer["forward"].append(f)
            layer["backward"].append(bw)
            layer["samples"].append({"batch": b, "forward": _raw(fwd), "step": _raw(step),
                                     "loss_only_forward": _raw(base_f), "loss_only_step": _raw(base_s)})
        whole = _network_with_loss(inferred)
        feeds = {vi.name: np.random.default_rng(b).standard_normal(
            tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)).astype(_NP.get(
                vi.type.tensor_type.elem_type, np.float32))
            for vi in whole.graph.input if vi.name not in {t.name for t in whole.graph.initializer}}
        fwd, step, *opt = _time_pair(whole, feeds, framework, device, max_time, optimizer)
        network["forward"].append(fwd.median)
        network["step"].append(step.median)
        network["backward"].append(max(0.0, step.median - fwd.median))
        network["samples"].append({"batch": b, "forward": _raw(fwd), "step": _raw(step)})
        if opt:
            pairs = opt[0]
            diffs = [a - b for a, b in zip(pairs.a.raw_times, pairs.b.raw_times)]
            network["update"].append(max(0.0, float(np.median(diffs))))
            network["samples"][-1]["optimizer_step"] = _raw(pairs.a)
            network["samples"][-1]["paired_step"] = _raw(pairs.b)
        if progress is not None:
            progress(f"batch {b}: network forward {fwd.median * 1e3:.3g} ms, step {step.median * 1e3:.3g} ms")
    for layer in layers:
        if layer["status"] == "skipped":
            layer["forward"] = [None] * len(batches)
            layer["backward"] = [None] * len(batches)
    return {"format": LAYER_TIMES_FORMAT, "model": name, "framework": str(framework),
            "device": str(device or "cpu"), "batches": batches, "max_time": max_time, "overhead": overhead,
            "method": ("layer = its one-node network minus a loss-only network of its output's shape; backward = "
                       "(inference_and_backprop - inference) of each, subtracted; medians of time_function samples"),
            "layers": layers, "network": network, "environment": collect_environment(include_mpi=False)}


def check_layer_times(data, what: str) -> dict:
    """``data`` checked against :data:`LAYER_TIMES_SCHEMA` (jsonschema) and its lists' lengths.

    Raises:
        UserError: the document does not match (names ``what``, the field and the value).
    """
    from deep500lite.utils import check_schema

    check_schema(data, LAYER_TIMES_SCHEMA, what)
    n = len(data["batches"])
    for part in [data["network"]] + list(data["layers"]):
        for key in ("forward", "backward" if "name" in part else "step", "update"):
            if key in part and len(part[key]) != n:
                raise UserError(f"{what}: every list of times has one entry per batch ({n}). Received: "
                                f"{part.get('name', 'network')}.{key} with {len(part[key])}")
    return data


def summary_rows(data) -> tuple[list, list]:
    """``(headers, rows)`` of a table: per layer forward/backward at each batch, then the sums and the network."""
    from deep500lite.metrics.tables import format_seconds

    def cell(v):
        return "-" if v is None else format_seconds(v)

    batches = data["batches"]
    headers = ["layer", "op"] + [f"fwd b={b}" for b in batches] + [f"bwd b={b}" for b in batches]
    rows = [[layer["name"], layer["op_type"], *map(cell, layer["forward"]), *map(cell, layer["backward"])]
            for layer in data["layers"]]
    over = data["overhead"]
    sum_f = [sum(v[i] or 0.0 for v in (la["forward"] for la in data["layers"])) + over["forward"]
             for i in range(len(batches))]
    sum_b = [sum(v[i] or 0.0 for v in (la["backward"] for la in data["layers"])) + over["backward"]
             for i in range(len(batches))]
    rows.append(["per-call overhead", "", *[cell(over["forward"])] * len(batches),
                 *[cell(over["backward"])] * len(batches)])
    rows.append(["sum of layers + overhead", "", *map(cell, sum_f), *map(cell, sum_b)])
    net = data["network"]
    rows.append(["whole network (measured)", "", *map(cell, net["forward"]), *map(cell, net["backward"])])
    if net.get("update"):
        rows.append([f"update ({net.get('optimizer', '')}, measured)", "", *[""] * len(batches),
                     *map(cell, net["update"])])
    return headers, rows
