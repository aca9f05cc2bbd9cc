"""Level 1 autodiff: the training graph, what the executors call.

:func:`training_graph` runs the forward pass in training mode (:func:`training_forward`), then the
gradient rules (:mod:`.rules`) backward from the scalar ``y``, and assembles one ONNX model whose
outputs are the network's outputs, ``y``, one gradient per parameter and the updated running
statistics (:class:`TrainingGraph`). :func:`build_training_model` returns just the model and
:func:`save_backward_graph` writes it.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import onnx
from onnx import helper, numpy_helper

from deep500lite.errors import ModelError, UnsupportedOperatorError, UserError
from deep500lite.lv1.autodiff.builder import GraphBuilder, GraphInfo, RuleContext, node_name
from deep500lite.lv1.autodiff.fold import fold_constants
from deep500lite.lv1.autodiff.gradients import NOT_DIFFERENTIABLE, RULES, custom_rule, differentiable_operators
from deep500lite.lv1.autodiff.lower import lower_control_flow
from deep500lite.lv1.control_flow import SUBGRAPH_OPS, subgraph_captures
from deep500lite.lv1.network import Network, gradient_name

__all__ = ["TrainingGraph", "training_graph", "build_training_model", "save_backward_graph", "updated_name",
           "MIN_OPSET", "training_forward"]

MIN_OPSET = 13


def updated_name(stat: str) -> str:
    """The training-graph output holding the updated value of the running statistic ``stat``."""
    return f"{stat}__updated"


@dataclasses.dataclass
class TrainingGraph:
    """A training model and what its outputs mean.

    Attributes:
        model: the ONNX training model (forward in training mode, then backward).
        outputs: the network's outputs (computed in training mode), in order.
        y: the differentiated scalar.
        gradients: parameter name -> graph output holding its gradient.
        running_stats: running-statistic name -> graph output holding its updated value.
        param_inputs: the initializers that are graph inputs (fed with the caller's values).
        feed_inputs: the network's own inputs.
        dropout_masks: boolean mask input -> ``(shape, ratio)`` for every Dropout whose input
            shape is static; the caller draws them (:meth:`draw_masks`) and feeds them.
    """

    model: onnx.ModelProto
    outputs: list
    y: str
    gradients: dict
    running_stats: dict
    param_inputs: list
    feed_inputs: list
    dropout_masks: dict = dataclasses.field(default_factory=dict)

    def draw_masks(self, rng: np.random.Generator) -> dict:
        """Fresh Dropout masks (``True`` keeps an element, with probability ``1 - ratio``)."""
        return {name: rng.random(shape) >= ratio for name, (shape, ratio) in self.dropout_masks.items()}

    @property
    def output_names(self) -> list:
        """Every graph output name, in the model's order."""
        return [o.name for o in self.model.graph.output]


def training_forward(b: GraphBuilder, node, saved: dict, running: dict, seed: int):
    """Append ``node`` in training mode; fills ``saved`` for its backward and ``running`` with stats."""
    info = b.info
    if node.op_type == "BatchNormalization":
        x, scale, bias, mean, var = node.input[:5]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        eps, momentum = attrs.get("epsilon", 1e-5), attrs.get("momentum", 0.9)
        rank = info.rank(x, node)
        axes = [0] + list(range(2, rank))
        bshape = b.ints([1, -1] + [1] * (rank - 2))
        bm = b.reduce("ReduceMean", x, axes, keepdims=1)
        xc = b.op("Sub", [x, bm])
        bv = b.reduce("ReduceMean", b.op("Mul", [xc, xc]), axes, keepdims=1)
        invstd = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [bv, b.scalar(eps, x)])])])
        xhat = b.op("Mul", [xc, invstd])
        scale_r = b.op("Reshape", [scale, bshape])
        b.op("Add", [b.op("Mul", [xhat, scale_r]), b.op("Reshape", [bias, bshape])], outputs=[node.output[0]])
        saved.update(xhat=xhat, invstd=invstd, scale_r=scale_r, axes=axes)
        flat = b.ints([-1])
        for k, (stat, batch) in enumerate(((mean, bm), (var, bv))):
            out = updated_name(stat)
            upd = b.op("Add", [b.op("Mul", [stat, b.scalar(momentum, stat)]),
                               b.op("Mul", [b.op("Reshape", [batch, flat]), b.scalar(1.0 - momentum, stat)])],
                       outputs=[out] if out not in b._taken else None)
            running[stat] = upd
            if len(node.output) > k + 1 and node.output[k + 1]:
                b.op("Identity", [upd], outputs=[node.output[k + 1]])
        return
    if node.op_type == "MaxPool":
        new = onnx.NodeProto()
        new.CopyFrom(node)
        if len(new.output) < 2 or not new.output[1]:
            del new.output[1:]
            new.output.append(b.fresh("maxpool_indices"))
        saved["indices"] = new.output[1]
        b.nodes.append(new)
        return
    if node.op_type == "Dropout":
        x = node.input[0]
        ratio = 0.5
        if len(node.input) > 1 and node.input[1]:
            v = info.const_value(node.input[1])
            if v is None:
                raise UnsupportedOperatorError(
                    f"ONNX autodiff needs a constant ratio for Dropout node '{node_name(node)}' (an initializer or "
                    f"Constant node). Received: ratio input '{node.input[1]}', known only at run time")
            ratio = float(v)
        if ratio == 0.0:
            b.op("Identity", [x], outputs=[node.output[0]])
            return
        xs = info.shape(x)
        if xs is not None and all(d is not None for d in xs):
            # Static shape: the mask is a graph input, drawn by the executor at every step.
            mask = b.fresh("dropout_mask")
            b.masks[mask] = (tuple(int(d) for d in xs), ratio)
            keep = b.op("Cast", [mask], to=info.types.get(x, onnx.TensorProto.FLOAT))
            b.op("Mul", [b.op("Mul", [x, keep]), b.scalar(1.0 / (1.0 - ratio), x)], outputs=[node.output[0]])
            if len(node.output) > 1 and node.output[1]:
                b.op("Identity", [mask], outputs=[node.output[1]])
        else:
            mask = node.output[1] if len(node.output) > 1 and node.output[1] else b.fresh("dropout_mask")
            b.op("Dropout", [x, b.const(np.asarray(ratio, info.np_dtype(x))), b.const(np.asarray(True))],
                 outputs=[node.output[0], mask], seed=int(seed + len(b.nodes)))
        saved.update(mask=mask, scale=1.0 / (1.0 - ratio))
        return
    b.nodes.append(node)


# ---------------------------------------------------------------------------------- entry points
def training_graph(network: Network, y: str = "loss", seed: int = 0) -> TrainingGraph:
    """Build the training graph of ``network`` for the scalar ``y`` (see :func:`build_training_model`).

    Returns:
        A :class:`TrainingGraph`: the model and the names of its gradient and statistics outputs.
    """
    opset = network.opset
    if opset < MIN_OPSET:
        raise ModelError(
            f"ONNX autodiff needs a model of opset >= {MIN_OPSET}; convert it with "
            f"onnx.version_converter.convert_version(model, {MIN_OPSET}). Received: opset {opset}")
    graph = network.graph
    producers = {o: n for n in graph.node for o in n.output}
    if y not in producers and y not in network.inputs:
        raise ModelError(f"ONNX autodiff: '{y}' is not a tensor of the network. Outputs: {network.outputs}. "
                         f"Received: y={y!r}")
    values = dict(zip(network.initializers, network.fetch_tensors(network.initializers)))
    fwd = onnx.ModelProto()
    fwd.CopyFrom(network._model)
    fwd.graph.initializer.extend(numpy_helper.from_array(np.asarray(v), k) for k, v in values.items())
    fwd = fold_constants(fwd)
    if any(n.op_type in SUBGRAPH_OPS for n in fwd.graph.node):
        # If, Loop and Scan of a structure known now become plain nodes, which the rules differentiate
        fwd = fold_constants(lower_control_flow(fwd))
    graph = fwd.graph
    producers = {o: n for n in graph.node for o in n.output}
    info = GraphInfo(fwd)
    ys = info.shape(y)
    if ys is not None and None not in ys and int(np.prod(ys)) != 1:
        raise UserError(f"ONNX autodiff differentiates a scalar; '{y}' has shape {list(ys)}. Reduce it to "
                        "a scalar first (for example with a loss operator or ReduceMean). "
                        f"Received: y={y!r} of shape {list(ys)}")

    taken = {i.name for i in graph.input} | set(values) | {o for n in graph.node for o in n.output}
    b = GraphBuilder(opset, info, taken)

    # Forward pass in training mode.
    saved: dict[int, dict] = {}
    running: dict[str, str] = {}
    for i, node in enumerate(graph.node):
        saved[i] = {}
        training_forward(b, node, saved[i], running, seed)

    # Which tensors carry gradient: reachable from the trainable parameters, and float.
    params = [p for p, _ in network.gradient(y)]
    requires = set(params)
    for node in graph.node:
        # a node whose subgraphs read a value that carries gradient carries it too
        if any(x in requires for x in list(node.input) + subgraph_captures(node) if x):
            requires.update(o for o in node.output if o and info.is_float(o))
    ancestors, stack = set(), [y]
    while stack:
        t = stack.pop()
        if t in ancestors:
            continue
        ancestors.add(t)
        n = producers.get(t)
        if n is not None:
            stack.extend(x for x in n.input if x)

    grads: dict[str, list] = {}

    def grad_of(name):
        parts = grads.get(name)
        if not parts:
            return None
        if len(parts) > 1:
            grads[name] = [b.op("Sum", parts, hint="gsum")]
        return grads[name][0]

    if y in requires:
        ys = info.shape(y)
        if ys is not None and None not in ys:
            seed_grad = b.const(np.ones(ys, info.np_dtype(y)), hint="dy")
        else:
            seed_grad = b.op("ConstantOfShape", [b.shape(y)],
                             value=numpy_helper.from_array(np.ones(1, info.np_dtype(y))))
        grads[y] = [seed_grad]

    missing: list = []  # nodes without a gradient rule
    failed: list = []  # (node, error) of rules that cannot handle their node
    for i in reversed(range(len(graph.node))):
        node = graph.node[i]
        if not any(o in ancestors for o in node.output):
            continue
        need = [bool(x) and x in requires for x in node.input]
        if not any(need) and not any(x in requires for x in subgraph_captures(node)):
            continue
        dys = [grad_of(o) if o else None for o in node.output]
        if all(d is None for d in dys):
            continue
        default_domain = node.domain in ("", "ai.onnx")
        if default_domain and node.op_type in NOT_DIFFERENTIABLE:
            continue
        rule = RULES.get(node.op_type) if default_domain else custom_rule(node)
        try:
            if rule is None:
                missing.append(node)
            else:
                result = rule(RuleContext(b, node, dys, need, saved[i]))
        except UnsupportedOperatorError as e:
            failed.append((node, e))
            rule = None
        if rule is None:  # a stand-in gradient, so that nodes further up are checked too
            result = [b.zeros_like(x) if nd else None for x, nd in zip(node.input, need)]
        for x, g, nd in zip(node.input, result, need):
            if nd and g is not None:
                grads.setdefault(x, []).append(g)

    _raise_missing(missing, failed)

    gradient_outputs = {}
    for p in params:
        g = grad_of(p)
        if g is None:
            g = b.const(np.zeros_like(values[p]), hint="zero_grad")
        gradient_outputs[p] = b.op("Identity", [g], outputs=[gradient_name(p)])

    # Assemble the model.
    float_inits = [k for k, v in values.items() if np.asarray(v).dtype.kind == "f"]
    other_inits = [k for k in values if k not in set(float_inits)]
    inputs = [vi for vi in graph.input if vi.name not in values]
    inputs += [helper.make_tensor_value_info(m, onnx.TensorProto.BOOL, list(shape))
               for m, (shape, _) in b.masks.items()]
    for k in float_inits:
        v = np.asarray(values[k])
        inputs.append(helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
    outputs = list(graph.output)
    out_names = [o.name for o in outputs]
    if y not in out_names:
        outputs.append(helper.make_tensor_value_info(y, info.types.get(y, 0), None)
                       if y in info.types else helper.ValueInfoProto(name=y))
        out_names.append(y)
    for p, g in gradient_outputs.items():
        v = np.asarray(values[p])
        outputs.append(helper.make_tensor_value_info(g, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
    # Statistics computed in the graph (BatchNormalization over a weight, for weight
    # standardization) are not state: only stored tensors are updated.
    running = {stat: upd for stat, upd in running.items() if stat in values}
    for stat, upd in running.items():
        v = np.asarray(values[stat])
        outputs.append(helper.make_tensor_value_info(upd, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
    used = {x for n in b.nodes for x in n.input} | {o.name for o in outputs}
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in b.nodes for a in n.attribute):
        used.update(other_inits)  # subgraphs may read outer constants
    # Constants only the replaced forward nodes read (a Dropout ratio) are left out.
    inits = [numpy_helper.from_array(np.asarray(values[k]), k) for k in other_inits if k in used] + b.inits
    new_graph = helper.make_graph(b.nodes, f"{graph.name or 'graph'}_training", inputs, outputs,
                                  initializer=inits)
    model = helper.make_model(new_graph, opset_imports=list(network._model.opset_import),
                              producer_name="deep500lite.autodiff", ir_version=network._model.ir_version)
    return TrainingGraph(model=model, outputs=network.outputs, y=y, gradients=gradient_outputs,
                         running_stats=running, param_inputs=float_inits, feed_inputs=network.inputs,
                         dropout_masks=dict(b.masks))


def _raise_missing(missing: list, failed: list) -> None:
    """Raise one UnsupportedOperatorError naming every node the backward pass could not handle.

    Its ``nodes`` attribute lists ``(node name, op type)`` of every such node.
    """
    if not missing and not failed:
        return
    nodes = [(node_name(n), n.op_type) for n in missing + [n for n, _ in failed]]
    if not missing and len(failed) == 1:
        failed[0][1].nodes = nodes
        raise failed[0][1]
    parts = []
    if missing:
        listed = ", ".join(f"operator '{n.op_type}' (node '{node_name(n)}')" for n in missing)
        parts.append(f"deep500lite's ONNX autodiff has no gradient for {len(missing)} node(s) on the path to "
                     f"the loss: {listed}")
    parts.extend(str(e) for _, e in failed)
    ops = sorted({n.op_type for n in missing})
    err = UnsupportedOperatorError(
        "; ".join(parts) + ". Operators with gradients: " + ", ".join(differentiable_operators())
        + ". Received: " + (f"op_types {ops}" if ops else f"{len(failed)} node(s) the rules could not handle"))
    err.nodes = nodes
    raise err


def build_training_model(network: Network, y: str = "loss", seed: int = 0) -> onnx.ModelProto:
    """Build the ONNX training model of ``network``: the forward pass in training mode, then backward.

    Args:
        network: the forward network (a :class:`~deep500lite.Network`, opset >= 13).
        y: the scalar tensor to differentiate (the loss); computed even if it is not an output.
        seed: seed of the Dropout masks drawn inside the graph.

    Returns:
        An ``onnx.ModelProto`` whose inputs are the network's inputs, its floating-point
        initializers and the boolean Dropout masks, and whose outputs are the network's
        outputs, ``y``, ``"<param>_grad"`` for every parameter of ``network.gradient(y)`` and
        ``"<running stat>__updated"`` for every BatchNormalization running statistic.

    Raises:
        UnsupportedOperatorError: operators on the path from the parameters to ``y`` have no
            gradient rule, or rules that cannot handle their node (one error names every such
            node and its operator; its ``nodes`` attribute lists ``(node name, op type)`` pairs).
        ModelError: ``y`` is not a tensor of the network, or the opset is below 13.
        UserError: ``y`` is known not to be a scalar.
    """
    return training_graph(network, y, seed).model


def save_backward_graph(network: Network, y: str, path: str | os.PathLike, seed: int = 0) -> None:
    """Write the training model of :func:`build_training_model` to ``path`` for inspection.

    Args:
        network: the forward network.
        y: the scalar tensor to differentiate.
        path: the ONNX file to write (atomically).
        seed: seed of the Dropout masks.
    """
    from deep500lite.utils import atomic_write_bytes

    atomic_write_bytes(path, build_training_model(network, y, seed).SerializeToString())
