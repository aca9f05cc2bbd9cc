"""Level 3: the graph half of spatial (halo) parallelism.

Splits an ONNX network into its leading spatial part (Conv, MaxPool, AveragePool, BatchNormalization
and elementwise nodes on NCHW tensors, whose inputs are split along height and width over a grid
of ranks) and the tail computed on gathered tensors; computes the geometry of each convolution or
pool along each axis (which input rows or columns a rank needs for its output, the halo); and
builds the small ONNX models,
one per node and local shape, that a framework executor runs on each rank
(:mod:`deep500lite.lv3.spatial` runs them). ``onnx.shape_inference`` gives every tensor's shape.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import helper, numpy_helper

from deep500lite.errors import UserError

__all__ = ["HALO_OPS", "ELEMENTWISE_OPS", "SPATIAL_OPS", "row_bounds", "HaloGeometry", "SpatialPlan",
           "plan_spatial", "node_model", "tail_model", "expand_batchnorm"]

#: Operators whose output rows need input rows of the neighbours (a halo).
HALO_OPS = ("Conv", "MaxPool", "AveragePool")
#: Operators computed row by row with no communication (one output, NCHW in and out).
ELEMENTWISE_OPS = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Identity", "Add", "Sub", "Mul", "Div",
                   "BatchNormalization")
SPATIAL_OPS = HALO_OPS + ELEMENTWISE_OPS

_GRAD_INPUT = "__spatial_gy"
_LOSS = "__spatial_loss"


def row_bounds(n: int, parts: int) -> list[int]:
    """Block boundaries of ``n`` rows over ``parts`` ranks: rank ``r`` owns ``[b[r], b[r+1])``.

    Blocks differ by at most one row (uneven splits allowed).
    """
    return [r * n // parts for r in range(parts + 1)]


@dataclasses.dataclass(frozen=True)
class HaloGeometry:
    """The geometry of one convolution or pool along one axis (height or width).

    Written for rows; the width axis is the same with columns.

    Attributes:
        h_in: input size. h_out: output size.
        extent: ``(kernel - 1) * dilation + 1``, the rows one output row reads.
        stride: the stride. pad_top, pad_bottom: the node's padding at the start and end.
    """

    h_in: int
    h_out: int
    extent: int
    stride: int
    pad_top: int
    pad_bottom: int

    def window(self, first: int, last: int) -> tuple[int, int, int, int]:
        """Input rows for output rows ``[first, last)``.

        Returns:
            ``(lo, hi, pad_top, pad_bottom)``: the input rows ``[lo, hi)`` inside the tensor and
            the padding rows above and below them that the local computation adds.
        """
        lo = first * self.stride - self.pad_top
        hi = (last - 1) * self.stride - self.pad_top + self.extent
        a, c = max(lo, 0), min(hi, self.h_in)
        return a, c, a - lo, hi - c

    def interior(self, first: int, last: int, own_lo: int, own_hi: int) -> tuple[int, int]:
        """The output rows of ``[first, last)`` computable from input rows ``[own_lo, own_hi)`` alone.

        Returns a range ``[u0, u1)`` (empty when ``u0 >= u1``).
        """
        rows = [o for o in range(first, last)
                if self.window(o, o + 1)[0] >= own_lo and self.window(o, o + 1)[1] <= own_hi]
        return (rows[0], rows[-1] + 1) if rows else (first, first)


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _geometry(node, x_shape, w_shape) -> tuple[HaloGeometry, HaloGeometry]:
    where = f"node {node.name or node.output[0]!r} ({node.op_type})"
    if len(x_shape) != 4:
        raise UserError(f"Spatial parallelism splits 2-D (NCHW) convolutions and pools only; {where} has a "
                        f"{len(x_shape)}-D input. Received: shape {list(x_shape)}")
    auto_pad = _attr(node, "auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad not in ("NOTSET", ""):
        raise UserError(f"Spatial parallelism needs explicit pads; {where} uses auto_pad. Allowed: NOTSET. "
                        f"Received: auto_pad={auto_pad!r}")
    if _attr(node, "ceil_mode", 0):
        raise UserError(f"Spatial parallelism supports ceil_mode=0 only; {where}. Received: ceil_mode=1")
    kernel = _attr(node, "kernel_shape") or (list(w_shape[2:]) if w_shape is not None else None)
    if kernel is None:
        raise UserError(f"{where}: the kernel size is unknown (no kernel_shape and no static weight shape). "
                        f"Received: kernel_shape=None")
    strides = _attr(node, "strides") or [1, 1]
    dilations = _attr(node, "dilations") or [1, 1]
    pads = _attr(node, "pads") or [0, 0, 0, 0]
    geos = []
    for ax in (0, 1):
        size = int(x_shape[2 + ax])
        extent = (kernel[ax] - 1) * dilations[ax] + 1
        out = (size + pads[ax] + pads[ax + 2] - extent) // strides[ax] + 1
        geos.append(HaloGeometry(size, out, extent, int(strides[ax]), int(pads[ax]), int(pads[ax + 2])))
    return geos[0], geos[1]


@dataclasses.dataclass
class SpatialPlan:
    """How a network is split for spatial parallelism.

    Attributes:
        input: the name of the split graph input (NCHW).
        nodes: the spatial nodes in order.
        geometry: per spatial node index, its (height, width) :class:`HaloGeometry` pair (halo
            operators only).
        spatial: every split tensor (the input and the spatial nodes' outputs).
        shapes: the shape of every tensor shape inference knows (for the fed batch).
        params: the initializer values the spatial nodes read.
        gathered: the split tensors the tail (or the graph's outputs) reads; gathered onto every rank.
        tail_nodes: the rest of the graph, run on every rank on gathered tensors.
        model: the original model (initializer values included).
    """

    input: str
    nodes: list
    geometry: dict
    spatial: set
    shapes: dict
    params: dict
    gathered: list
    tail_nodes: list
    model: onnx.ModelProto


def _shapes(model: onnx.ModelProto, input_name: str, input_shape) -> dict:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in m.graph.input:
        if vi.name == input_name:
            dims = vi.type.tensor_type.shape.dim
            del dims[:]
            for d in input_shape:
                dims.add().dim_value = int(d)
    inferred = onnx.shape_inference.infer_shapes(m, data_prop=True)
    shapes = {}
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shapes[vi.name] = tuple(d.dim_value for d in tt.shape.dim)
    for init in model.graph.initializer:
        shapes[init.name] = tuple(init.dims)
    return shapes


def plan_spatial(model: onnx.ModelProto, input_name: str, input_shape, parts) -> SpatialPlan:
    """Split ``model`` over a grid of ranks: the leading spatial part and the gathered tail.

    The spatial part is the longest prefix (in graph order) of nodes in :data:`SPATIAL_OPS` whose
    tensor inputs are split tensors or initializers (an initializer must broadcast along each split
    axis, i.e. have size 1 there).

    Args:
        model: the ONNX model (with initializer values).
        input_name: the NCHW graph input split along its height.
        input_shape: the full shape of that input for this batch.
        parts: the number of ranks (height split only) or a ``(rows, columns)`` grid of ranks.

    Raises:
        UserError: the input is not a 4-D graph input, no node can be split, a convolution or pool
            uses options spatial parallelism does not support, or some rank would own no rows.
    """
    graph = model.graph
    names = [i.name for i in graph.input]
    if input_name not in names:
        raise UserError(f"The split input must be a graph input; inputs: {names}. Received: {input_name!r}")
    if len(input_shape) != 4:
        raise UserError(f"The split input must be NCHW (4-D). Received: shape {list(input_shape)}")
    grid = (int(parts), 1) if np.ndim(parts) == 0 else tuple(int(g) for g in parts)
    shapes = _shapes(model, input_name, input_shape)
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    spatial = {input_name}
    nodes, geometry, params = [], {}, {}
    for node in graph.node:
        if node.op_type not in SPATIAL_OPS or len(node.output) != 1 or node.domain not in ("", "ai.onnx"):
            break
        data = [t for t in node.input if t]
        if not data or data[0] not in spatial:
            break
        ok = True
        for t in data[1:]:
            if t in spatial:
                if shapes.get(t) != shapes.get(data[0]):
                    ok = False
            elif t in inits:
                shp = inits[t].shape
                if node.op_type in ("Add", "Sub", "Mul", "Div") and (
                        (len(shp) >= 2 and shp[-2] != 1) or (grid[1] > 1 and len(shp) >= 1 and shp[-1] != 1)):
                    ok = False
            else:
                ok = False
        if not ok or node.output[0] not in shapes:
            break
        idx = len(nodes)
        if node.op_type in HALO_OPS:
            w = shapes.get(node.input[1]) if node.op_type == "Conv" else None
            geos = _geometry(node, shapes[data[0]], w)
            for geo, n_parts, what in zip(geos, grid, ("rows", "columns")):
                where = f"node {node.name or node.output[0]!r} ({node.op_type})"
                if geo.h_in < n_parts or geo.h_out < n_parts:
                    raise UserError(f"Spatial parallelism over {n_parts} ranks along the {what} needs at least "
                                    f"{n_parts} {what} in and out of {where}. "
                                    f"Received: {geo.h_in} {what} in, {geo.h_out} out")
                bounds = row_bounds(geo.h_out, n_parts)
                for r in range(n_parts):
                    a, c, _, _ = geo.window(bounds[r], bounds[r + 1])
                    if c <= a:
                        raise UserError(f"Block {r}'s output {what} of {where} read only padding; use fewer ranks or "
                                        f"a larger input. Received: {n_parts} ranks along the {what}, size {geo.h_in}")
            geometry[idx] = geos
        nodes.append(node)
        spatial.add(node.output[0])
        for t in data[1:]:
            if t in inits:
                params[t] = inits[t]
    if not nodes:
        raise UserError(f"No node after {input_name!r} can be split spatially (allowed: {', '.join(SPATIAL_OPS)}). "
                        f"Received: first node {graph.node[0].op_type if len(graph.node) else None}")
    tail_nodes = list(graph.node)[len(nodes):]
    used = {t for n in tail_nodes for t in n.input} | {o.name for o in graph.output}
    gathered = [t for t in [input_name] + [n.output[0] for n in nodes] if t in used]
    return SpatialPlan(input_name, nodes, geometry, spatial, shapes, params, gathered, tail_nodes, model)


def _dtype(arr: np.ndarray) -> int:
    return helper.np_dtype_to_tensor_dtype(arr.dtype)


def _bn_nodes(node, x, out, params, values, stats_as_inputs=False):
    """BatchNormalization as Sub/Div/Sqrt/Mul/Add (an affine map per channel) with given statistics.

    The mean and variance are the node's running statistics (initializers in ``values``), or with
    ``stats_as_inputs`` graph inputs of shape ``(C, 1, 1)`` that the caller feeds (the batch
    statistics when training, the running ones otherwise); they are never differentiated.
    """
    scale, bias, mean, var = node.input[1:5]
    eps = float(_attr(node, "epsilon", 1e-5))
    for name in (scale, bias) if stats_as_inputs else (scale, bias, mean, var):
        values[name] = np.asarray(params[name]).reshape(-1, 1, 1)
    eps_name = f"{out}__eps"
    values[eps_name] = np.array(eps, dtype=np.asarray(params[var]).dtype)
    p = f"{out}__bn"
    return [helper.make_node("Add", [var, eps_name], [p + "v"]),
            helper.make_node("Sqrt", [p + "v"], [p + "s"]),
            helper.make_node("Sub", [x, mean], [p + "c"]),
            helper.make_node("Div", [p + "c", p + "s"], [p + "n"]),
            helper.make_node("Mul", [p + "n", scale], [p + "m"]),
            helper.make_node("Add", [p + "m", bias], [out])]


def _local_node(node, pads_local):
    """A copy of a halo node with its padding replaced by ``pads_local`` (top, left, bottom, right)."""
    new = onnx.NodeProto()
    new.CopyFrom(node)
    pads = [int(v) for v in pads_local]
    for a in list(new.attribute):
        if a.name == "pads":
            new.attribute.remove(a)
    new.attribute.append(helper.make_attribute("pads", pads))
    return new


def _model(nodes, inputs, outputs, initializers, opset_imports) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "spatial_part", inputs, outputs,
                              [numpy_helper.from_array(np.ascontiguousarray(v), k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=list(opset_imports))
    model.ir_version = min(model.ir_version, 10)
    return model


def node_model(node, params: dict, spatial_inputs: dict, opset_imports, pads=None,
               grad_shape=None, stats_inputs: bool = False) -> tuple[onnx.ModelProto, dict]:
    """A one-node ONNX model for the local computation of a spatial node.

    Args:
        node: the node. params: initializer values it reads.
        spatial_inputs: name -> example array (the local shape and dtype) of its split inputs.
        opset_imports: the original model's opsets.
        pads: (top, left, bottom, right) padding for a halo operator's local call.
        grad_shape: ``None`` for the forward model; else the shape of the output gradient: the
            model then takes the split inputs as initializers (so executors differentiate them)
            and a graph input ``__spatial_gy``, and outputs the scalar ``__spatial_loss`` =
            sum(output * gy), whose gradients are the vector-Jacobian products.
        stats_inputs: for BatchNormalization, take the mean and variance as graph inputs of
            shape ``(C, 1, 1)`` (named as the node's mean and variance inputs) instead of
            initializers, so one model serves batch and running statistics.

    Returns:
        ``(model, reshaped)``: the model, and the parameters whose value shape in the model
        differs from the original (BatchNormalization's per-channel vectors), name -> original shape.
    """
    out = node.output[0]
    values: dict = {}
    stats = []
    if node.op_type == "BatchNormalization":
        nodes = _bn_nodes(node, node.input[0], out, params, values, stats_inputs)
        if stats_inputs:
            channels = int(np.asarray(params[node.input[1]]).size)
            stats = [helper.make_tensor_value_info(t, _dtype(np.asarray(params[t])), [channels, 1, 1])
                     for t in node.input[3:5]]
    elif pads is not None:
        nodes = [_local_node(node, pads)]
    else:
        nodes = [node]
    fed = {t for t in node.input[3:5]} if stats else set()
    for t in node.input:
        if t in params and t not in values and t not in fed:
            values[t] = params[t]
    reshaped = {k: np.asarray(params[k]).shape for k in values if k in params and values[k].shape != params[k].shape}
    example = next(iter(spatial_inputs.values()))
    outputs = [helper.make_tensor_value_info(out, _dtype(example), None)]
    if grad_shape is None:
        inputs = [helper.make_tensor_value_info(k, _dtype(v), list(v.shape)) for k, v in spatial_inputs.items()] + stats
    else:
        inputs = [helper.make_tensor_value_info(_GRAD_INPUT, _dtype(example), list(grad_shape))] + stats
        values.update({k: np.zeros(v.shape, v.dtype) for k, v in spatial_inputs.items()})
        nodes = nodes + [helper.make_node("Mul", [out, _GRAD_INPUT], [_LOSS + "_m"]),
                         helper.make_node("ReduceSum", [_LOSS + "_m"], [_LOSS], keepdims=0)]
        outputs.append(helper.make_tensor_value_info(_LOSS, _dtype(example), []))
    return _model(nodes, inputs, outputs, values, opset_imports), reshaped


def tail_model(plan: SpatialPlan, gathered: dict, trainable: bool) -> onnx.ModelProto:
    """The tail of the network as its own model, reading the gathered split tensors.

    Args:
        plan: the split. gathered: name -> full example array of each gathered tensor.
        trainable: make the gathered tensors initializers (so their gradients are computed)
            instead of graph inputs.
    """
    model = plan.model
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    used = {t for n in plan.tail_nodes for t in n.input}
    inputs = [vi for vi in graph.input if vi.name in used and vi.name not in plan.spatial and vi.name not in inits]
    values = {k: numpy_helper.to_array(v) for k, v in inits.items() if k in used}
    if trainable:
        values.update(gathered)
    else:
        inputs = [helper.make_tensor_value_info(k, _dtype(v), list(v.shape)) for k, v in gathered.items()] + inputs
    return _model(plan.tail_nodes, inputs, list(graph.output), values, model.opset_import)


def expand_batchnorm(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with every BatchNormalization written as its inference-mode affine map.

    With ``batchnorm="running"`` the spatial network applies BatchNormalization with its running
    statistics (inference mode) also when training, so its scale and bias get gradients and the
    statistics stay fixed; this gives the unsplit network with the same semantics, to compare
    against. The per-channel initializers become shape ``(C, 1, 1)``.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    params = {i.name: numpy_helper.to_array(i) for i in out.graph.initializer}
    new_nodes, values = [], {}
    for node in out.graph.node:
        if node.op_type == "BatchNormalization":
            new_nodes.extend(_bn_nodes(node, node.input[0], node.output[0], params, values))
        else:
            new_nodes.append(node)
    del out.graph.node[:]
    out.graph.node.extend(new_nodes)
    kept = [i for i in out.graph.initializer if i.name not in values]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept + [numpy_helper.from_array(v, k) for k, v in values.items()])
    return out
