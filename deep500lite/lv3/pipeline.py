"""Level 3: pipeline parallelism (GPipe and 1F1B) over a communicator.

An ONNX network is cut into ``P`` consecutive stages, one per rank. Each stage is an ONNX
sub-graph run by a Level 1 executor of any framework. A training step splits the batch into
``M`` equal micro-batches; activations travel forward and activation gradients backward with the
communicator's point-to-point calls, and every stage sums its parameter gradients over the
micro-batches, so the step's gradients equal those of the unsplit network on the whole batch.

How a stage is differentiated with the executors' scalar-loss backprop: the stage's input
activation is held as a parameter of the stage network (fed before each call), so its gradient
comes out with the weights'; a stage that is not the last one backpropagates the scalar
``sum(output * incoming_gradient)``, whose gradients are the vector-Jacobian products. The
backward pass of a micro-batch recomputes its forward pass (GPipe's re-materialization): only the
stage inputs are stashed between the two.

Public names: :func:`partition_network` (cut points, given or balanced), :class:`PipelineStage`,
:class:`PipelineParallel` (one rank's part of the pipeline, with :meth:`PipelineParallel.step`),
:func:`pipeline_schedule`, :func:`bubble_model`, :class:`MomentumSGD` (the per-stage optimizer)
and :func:`run_pipeline` (the entry point a recipe worker calls).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from deep500lite.errors import ModelError, UserError, format_choices
from deep500lite.lv1.network import FLOAT_DTYPES, Network, gradient_name, load_model

__all__ = [
    "SCHEDULES",
    "MomentumSGD",
    "PipelineParallel",
    "PipelineRun",
    "PipelineStage",
    "PipelineStepResult",
    "bubble_model",
    "partition_network",
    "pipeline_schedule",
    "run_pipeline",
]

#: The micro-batch schedules: ``gpipe`` (all forwards, then all backwards) and ``1f1b``
#: (PipeDream-Flush: a warm-up of forwards, then one forward and one backward alternately).
SCHEDULES = ("gpipe", "1f1b")

#: Operators whose training-mode forward differs from the inference forward (or is random): a
#: pipeline stage recomputes its forward pass, so these would not give the unsplit network's result.
_REFUSED_OPS = ("BatchNormalization", "Dropout")

_OBJECTIVE = "d5_pipeline_objective"
_GRAD_IN = "d5_pipeline_output_grad"
_TAG_FORWARD, _TAG_BACKWARD = 7101, 7102


# --------------------------------------------------------------------------- partitioning
@dataclasses.dataclass
class PipelineStage:
    """One stage of a partitioned network.

    Attributes:
        index: the stage number (the rank that runs it).
        nodes: the ONNX nodes of the stage, in graph order (Constant nodes it reads are copied in).
        input: the tensor the stage receives (the network's data input for stage 0).
        output: the tensor it sends on (the loss for the last stage).
        parameters: the float initializers the stage owns.
        feeds: the other graph inputs it reads (labels), fed from the batch.
        cost: its share of the balancing cost (FLOPs or parameter elements).
    """

    index: int
    nodes: list
    input: str
    output: str
    parameters: list[str]
    feeds: list[str]
    cost: float


def _shape_of(vi) -> tuple | None:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    dims = []
    for d in t.shape.dim:
        if not d.HasField("dim_value"):
            return None
        dims.append(d.dim_value)
    return tuple(dims)


def _with_batch(model: onnx.ModelProto, inputs: Sequence[str], batch: int) -> onnx.ModelProto:
    """A copy of ``model`` whose graph inputs ``inputs`` have ``batch`` as first dimension, shapes inferred."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for vi in model.graph.input:
        if vi.name in inputs and vi.type.tensor_type.shape.dim:
            dim = vi.type.tensor_type.shape.dim[0]
            dim.Clear()
            dim.dim_value = batch
    del model.graph.value_info[:]
    for vi in model.graph.output:
        if vi.type.tensor_type.HasField("shape"):
            vi.type.tensor_type.ClearField("shape")
    return shape_inference.infer_shapes(model, data_prop=True)


def _value_infos(model: onnx.ModelProto) -> dict:
    g = model.graph
    return {vi.name: vi for vi in list(g.input) + list(g.value_info) + list(g.output)}


def _node_cost(node, infos, values, balance: str) -> float:
    params = sum(values[n].size for n in node.input if n in values and values[n].dtype in FLOAT_DTYPES)
    if balance == "params":
        return float(params)
    out = infos.get(node.output[0]) if node.output else None
    shape = _shape_of(out) if out is not None else None
    out_size = float(np.prod(shape)) if shape else 0.0
    if node.op_type in ("Gemm", "MatMul", "Conv", "ConvTranspose") and len(node.input) > 1:
        w = values.get(node.input[1])
        if w is not None and w.ndim >= 2:
            # multiply-adds per output element: the reduced length (the weight size over its output channels)
            fan_in = w.size / (w.shape[0] if node.op_type != "MatMul" else w.shape[-1])
            return 2.0 * out_size * fan_in
        a = infos.get(node.input[0])
        a_shape = _shape_of(a) if a is not None else None
        return 2.0 * out_size * (a_shape[-1] if a_shape else 1)
    return out_size


def partition_network(network, stages: int, cuts: Sequence[str] | None = None, input: str | None = None,
                      loss: str = "loss", balance: str = "flops", micro_batch: int = 1) -> list[PipelineStage]:
    """Cut a network into ``stages`` consecutive stages.

    A cut is a point of the graph (in its topological order) where exactly one floating-point
    tensor made before it is read after it; outputs of Constant nodes do not count (they are
    copied into the stages that read them). The data input may be read by stage 0 only.

    Args:
        network: a :class:`~deep500lite.Network` (or anything :func:`~deep500lite.load_model` takes)
            whose scalar ``loss`` is computed in the graph.
        stages: the number of stages ``P`` (at least 1).
        cuts: the ``P - 1`` tensors at which to cut, in graph order; chosen automatically when
            None, minimizing the largest stage cost over all valid cuts (dynamic programming).
        input: the data input (the first graph input when None); other graph inputs (labels) are
            fed to the stages that read them.
        loss: the scalar loss tensor.
        balance: ``flops`` (an estimate of multiply-adds from inferred shapes) or ``params``
            (parameter elements).
        micro_batch: the micro-batch size the shapes are inferred with.

    Returns:
        The stages, in order.

    Raises:
        UserError: too few valid cut points, a cut tensor that is not a valid cut, a parameter
            read in two stages, or an operator that cannot be pipelined (BatchNormalization, Dropout).
    """
    network = load_model(network)
    if not isinstance(stages, int) or stages < 1:
        raise UserError(f"stages must be a positive integer. Received: stages={stages!r}")
    if balance not in ("flops", "params"):
        raise UserError(f"Unknown balance. Allowed values are {format_choices(('flops', 'params'))}. "
                        f"Received: balance={balance!r}")
    model = network.to_onnx()
    graph = model.graph
    nodes = list(graph.node)
    refused = sorted({n.op_type for n in nodes if n.op_type in _REFUSED_OPS})
    if refused:
        raise UserError(f"Pipeline stages recompute their forward pass, so operators whose training forward "
                        f"differs from inference cannot be pipelined ({', '.join(_REFUSED_OPS)}). "
                        f"Received: a network with {refused}")
    values = {n: network.fetch_tensor(n) for n in network.initializers}
    inputs = [n for n in network.inputs if n not in values]
    data = input or inputs[0]
    if data not in inputs:
        raise UserError(f"input must be a graph input of the network ({inputs}). Received: input={data!r}")
    producers = {o: i for i, n in enumerate(nodes) for o in n.output}
    if loss not in producers:
        raise ModelError(f"The loss must be a tensor computed by the network. Received: loss={loss!r}")
    constant = {o for n in nodes if n.op_type == "Constant" for o in n.output}
    n_nodes = producers[loss] + 1
    infos = _value_infos(_with_batch(model, inputs, micro_batch))
    dtypes = {vi.name: vi.type.tensor_type.elem_type for vi in infos.values()}
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)
    last_use: dict[str, int] = {}
    for i, n in enumerate(nodes[:n_nodes]):
        for t in n.input:
            last_use[t] = i
    # valid[k]: the one tensor crossing a cut before nodes[k] (made before it and read at k or later)
    valid: dict[int, str] = {}
    live = {data} if data in last_use else set()
    for k in range(1, n_nodes):
        live |= {o for o in nodes[k - 1].output if o and o not in constant}
        live = {t for t in live if last_use.get(t, -1) >= k}
        if len(live) == 1:
            (t,) = live
            if t != data and dtypes.get(t) in floats:
                valid[k] = t
    if cuts is not None:
        cuts = list(cuts)
        if len(cuts) != stages - 1:
            raise UserError(f"cuts must name stages - 1 = {stages - 1} tensors. Received: cuts={cuts!r}")
        by_name = {t: k for k, t in valid.items()}
        bounds = []
        for t in cuts:
            if t not in by_name:
                raise UserError(f"A cut must be a tensor where exactly one float tensor crosses; valid cuts are "
                                f"{sorted(set(valid.values()), key=lambda x: by_name[x])}. Received: {t!r}")
            # the earliest position: nodes that only read other tensors go to the next stage
            bounds.append(min(k for k, v in valid.items() if v == t))
        if bounds != sorted(bounds) or len(set(bounds)) != len(bounds):
            raise UserError(f"cuts must be distinct and in graph order. Received: cuts={cuts!r}")
    else:
        costs = [_node_cost(n, infos, values, balance) for n in nodes[:n_nodes]]
        bounds = _balance(costs, sorted(valid), stages)
    edges = [0] + bounds + [n_nodes]
    result = []
    owner: dict[str, int] = {}
    for s in range(stages):
        own = nodes[edges[s]:edges[s + 1]]
        read = {t for n in own for t in n.input if t}
        extra = [n for n in nodes[:edges[s]] if n.op_type == "Constant" and set(n.output) & read]
        stage_nodes = sorted(extra + own, key=lambda n: nodes.index(n))
        params = [p for p in network.parameters if p in read]
        for p in params:
            if p in owner:
                raise UserError(f"Parameter '{p}' is read by stages {owner[p]} and {s}; shared parameters cannot "
                                f"be pipelined. Received: cuts at {[valid.get(b) for b in bounds]}")
            owner[p] = s
        feeds = [t for t in inputs if t in read and t != data]
        cost = sum(_node_cost(n, infos, values, balance) for n in own)
        result.append(PipelineStage(s, stage_nodes, data if s == 0 else valid[edges[s]],
                                    loss if s == stages - 1 else valid[edges[s + 1]], params, feeds, cost))
    if data in {t for st in result[1:] for n in st.nodes for t in n.input}:
        raise UserError(f"The data input '{data}' is read after the first cut; cut later. Received: cuts at "
                        f"{[valid.get(b) for b in bounds]}")
    return result


def _balance(costs: list[float], candidates: list[int], stages: int) -> list[int]:
    """Cut positions (from ``candidates``) splitting ``costs`` into ``stages`` runs with the least largest sum."""
    if len(candidates) < stages - 1:
        raise UserError(f"The network has {len(candidates)} valid cut points (places where one tensor crosses); "
                        f"{stages} stages need {stages - 1}. Received: stages={stages}")
    prefix = np.concatenate([[0.0], np.cumsum(costs)])
    points = [0] + candidates
    n = len(costs)
    # best[j][i]: the least largest cost of cutting nodes[:points[i]] into j stages
    inf = float("inf")
    best = [[inf] * len(points) for _ in range(stages)]
    back = [[-1] * len(points) for _ in range(stages)]
    for i in range(1, len(points)):
        best[0][i] = prefix[points[i]]
    for j in range(1, stages - 1):
        for i in range(1, len(points)):
            for h in range(1, i):
                value = max(best[j - 1][h], prefix[points[i]] - prefix[points[h]])
                if value < best[j][i]:
                    best[j][i], back[j][i] = value, h
    if stages == 1:
        return []
    last, idx = inf, -1
    for i in range(1, len(points)):
        value = max(best[stages - 2][i], prefix[n] - prefix[points[i]])
        if value < last:
            last, idx = value, i
    chosen = [idx]
    for j in range(stages - 2, 0, -1):
        idx = back[j][idx]
        chosen.append(idx)
    return [points[i] for i in reversed(chosen)]


# --------------------------------------------------------------------------- stage networks
def _stage_model(stage: PipelineStage, last: bool, network: Network, infos: dict,
                 opsets, extra_outputs: Sequence[str]) -> onnx.ModelProto:
    """The ONNX model a rank runs: the stage input as a parameter, feeds as inputs, a scalar objective."""
    in_vi = infos.get(stage.input)
    in_shape = _shape_of(in_vi) if in_vi is not None else None
    if in_shape is None:
        raise ModelError(f"The shape of the cut tensor '{stage.input}' could not be inferred; choose another cut. "
                         f"Received: cut {stage.input!r}")
    dtype = onnx.helper.tensor_dtype_to_np_dtype(in_vi.type.tensor_type.elem_type)
    read = {t for n in stage.nodes for t in n.input}
    initializers = [numpy_helper.from_array(np.zeros(in_shape, dtype), stage.input)]
    initializers += [numpy_helper.from_array(network.fetch_tensor(t), t)
                     for t in network.initializers if t in read and t != stage.input]
    graph_inputs = [infos[t] for t in stage.feeds]
    nodes = list(stage.nodes)
    if last:
        outputs = [infos[t] if t in infos else helper.make_tensor_value_info(t, onnx.TensorProto.UNDEFINED, None)
                   for t in [stage.output, *extra_outputs]]
    else:
        out_vi = infos.get(stage.output)
        out_shape = _shape_of(out_vi) if out_vi is not None else None
        if out_shape is None:
            raise ModelError(f"The shape of the cut tensor '{stage.output}' could not be inferred; choose another "
                             f"cut. Received: cut {stage.output!r}")
        grad_vi = helper.make_tensor_value_info(_GRAD_IN, out_vi.type.tensor_type.elem_type, list(out_shape))
        graph_inputs.append(grad_vi)
        nodes += [helper.make_node("Mul", [stage.output, _GRAD_IN], ["d5_pipeline_weighted"]),
                  helper.make_node("ReduceSum", ["d5_pipeline_weighted"], [_OBJECTIVE], keepdims=0)]
        outputs = [helper.make_tensor_value_info(stage.output, out_vi.type.tensor_type.elem_type, list(out_shape))]
    graph = helper.make_graph(nodes, f"stage{stage.index}", graph_inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=list(opsets))


@dataclasses.dataclass
class PipelineStepResult:
    """What one rank returns from :meth:`PipelineParallel.step`.

    Attributes:
        loss: the batch loss (the mean of the micro-batch losses when ``loss_reduction`` is
            ``mean``, their sum for ``sum``) on the last stage; None on other ranks.
        outputs: on the last stage, the network outputs it computes besides the loss,
            concatenated over the micro-batches along axis 0.
        gradients: this stage's parameter gradients for the whole batch, by parameter name.
        input_gradient: on stage 0, the gradient of the loss with respect to the data input.
        times: seconds of this step: ``step``, ``compute`` (executor calls and gradient
            accumulation), ``p2p`` (sending), ``idle`` (blocked waiting for a neighbour's message),
            ``optimizer`` and ``other`` (the rest).
        stashed_peak: the largest number of micro-batch inputs held between their forward and
            backward passes (the activation memory of the schedule).
        bytes_sent: bytes this rank sent during the step (the communicator's counter).
        bytes_received: bytes it received.
    """

    loss: float | None
    outputs: dict
    gradients: dict
    input_gradient: np.ndarray | None
    times: dict
    stashed_peak: int
    bytes_sent: int
    bytes_received: int

    @property
    def bubble(self) -> float:
        """The measured bubble fraction: idle time over step time."""
        return self.times["idle"] / self.times["step"] if self.times["step"] > 0 else 0.0


class MomentumSGD:
    """The per-stage optimizer, on numpy arrays: ``v <- momentum * v - lr * g``; ``w <- w + v``.

    The same rule as the reference framework's ``MomentumOptimizer`` (plain gradient descent
    with ``momentum=0``).

    Args:
        learning_rate: the step size (positive).
        momentum: the momentum factor (0 or more).
    """

    def __init__(self, learning_rate: float = 0.01, momentum: float = 0.0):
        if not learning_rate > 0 or not momentum >= 0:
            raise UserError(f"learning_rate must be positive and momentum non-negative. "
                            f"Received: learning_rate={learning_rate!r}, momentum={momentum!r}")
        self.learning_rate, self.momentum = learning_rate, momentum
        self.velocity: dict[str, np.ndarray] = {}

    def __call__(self, grad: np.ndarray, param: np.ndarray, name: str) -> np.ndarray:
        """Return the updated value of parameter ``name``."""
        v = self.momentum * self.velocity.get(name, 0.0) - self.learning_rate * grad
        self.velocity[name] = v
        return (param + v).astype(param.dtype)


def pipeline_schedule(schedule: str, stage: int, stages: int, micro_batches: int) -> list[tuple[str, int]]:
    """The order of work of one stage: a list of ``("F", m)`` and ``("B", m)``.

    ``gpipe``: every forward, then every backward in reverse order. ``1f1b``: ``P - 1 - stage``
    warm-up forwards (at most ``M``), then alternately one forward and one backward, then the
    remaining backwards, each micro-batch's backward in forward order.
    """
    if schedule not in SCHEDULES:
        raise UserError(f"Unknown pipeline schedule. Allowed values are {format_choices(SCHEDULES)}. "
                        f"Received: schedule={schedule!r}")
    m = micro_batches
    if schedule == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in reversed(range(m))]
    warm = min(stages - 1 - stage, m)
    ops = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        ops += [("F", warm + i), ("B", i)]
    return ops + [("B", i) for i in range(m - warm, m)]


def bubble_model(stages: int, micro_batches: int) -> float:
    """The ideal bubble fraction ``(P - 1) / (M + P - 1)`` (equal stages, free communication)."""
    return (stages - 1) / (micro_batches + stages - 1)


class PipelineParallel:
    """One rank's stage of a pipeline-parallel network.

    Every rank builds the same partition and keeps its own stage, run by a Level 1 executor.

    Args:
        comm: a :class:`~deep500lite.lv3.CommunicationNetwork`; rank ``r`` runs stage ``r``.
        network: the whole network (a :class:`~deep500lite.Network`, ONNX model or path) with
            its loss.
        micro_batches: ``M``, the number of micro-batches a batch is split into (equal sizes).
        batch_size: the batch size the steps will be given (a multiple of ``M``).
        schedule: ``gpipe`` or ``1f1b``.
        executor: the framework (or variant spelling) that runs the stage, ``torch`` by default.
        cuts: the ``P - 1`` cut tensors, or None to balance automatically.
        balance: ``flops`` or ``params`` (automatic cuts only).
        input: the data input (the first graph input when None).
        loss: the scalar loss tensor.
        loss_reduction: ``mean`` (the loss is a mean over the batch: the step averages the
            micro-batch losses and gradients) or ``sum`` (they are summed).
        optimizer: a callable ``(grad, param, name) -> new param`` applied by :meth:`step` when
            ``update=True`` (for example :class:`MomentumSGD`).
    """

    def __init__(self, comm, network, micro_batches: int, batch_size: int, schedule: str = "1f1b",
                 executor: str = "torch", cuts: Sequence[str] | None = None, balance: str = "flops",
                 input: str | None = None, loss: str = "loss", loss_reduction: str = "mean",
                 optimizer: Callable | None = None):
        from deep500lite.registry import executor as make_executor

        if not isinstance(micro_batches, int) or micro_batches < 1 or batch_size % micro_batches:
            raise UserError(f"micro_batches must be a positive integer dividing the batch size {batch_size}. "
                            f"Received: micro_batches={micro_batches!r}")
        if loss_reduction not in ("mean", "sum"):
            raise UserError(f"Unknown loss_reduction. Allowed values are 'mean', 'sum'. "
                            f"Received: loss_reduction={loss_reduction!r}")
        pipeline_schedule(schedule, 0, 1, 1)
        network = load_model(network)
        self.comm, self.schedule, self.micro_batches = comm, schedule, micro_batches
        self.micro_batch = batch_size // micro_batches
        self.loss, self.loss_reduction, self.optimizer = loss, loss_reduction, optimizer
        self.stages = partition_network(network, comm.size, cuts, input, loss, balance, self.micro_batch)
        self.stage = self.stages[comm.rank]
        self.first, self.last = comm.rank == 0, comm.rank == comm.size - 1
        model = network.to_onnx()
        inputs = [n for n in network.inputs if n not in network.initializers]
        infos = _value_infos(_with_batch(model, inputs, self.micro_batch))
        produced = {o for n in self.stage.nodes for o in n.output}
        self.extra_outputs = [o for o in network.outputs if o in produced and o != loss] if self.last else []
        stage_model = _stage_model(self.stage, self.last, network, infos, model.opset_import, self.extra_outputs)
        self.network = load_model(stage_model)
        self.executor = make_executor(self.network, executor)
        self.objective = loss if self.last else _OBJECTIVE
        self.in_like = np.zeros(_shape_of(infos[self.stage.input]),
                                onnx.helper.tensor_dtype_to_np_dtype(infos[self.stage.input].type.tensor_type.elem_type))
        if not self.last:
            vi = infos[self.stage.output]
            self.out_like = np.zeros(_shape_of(vi), onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
        self.parameters = list(self.stage.parameters)

    def _micro(self, feeds: dict, name: str, m: int) -> np.ndarray:
        b = self.micro_batch
        return np.ascontiguousarray(feeds[name][m * b:(m + 1) * b])

    def step(self, feeds: dict, update: bool = True) -> PipelineStepResult:
        """One training step on a batch: the schedule's forwards and backwards, then the update.

        Args:
            feeds: the whole batch, every graph input by name (each rank reads what its stage needs).
            update: apply the optimizer to this stage's parameters afterwards.

        Returns:
            A :class:`PipelineStepResult`.
        """
        comm, st, M = self.comm, self.stage, self.micro_batches
        clock = time.perf_counter
        times = dict.fromkeys(("compute", "p2p", "idle", "optimizer"), 0.0)
        sent0, received0 = comm.bytes_sent, comm.bytes_received
        start = clock()
        stash: dict[int, np.ndarray] = {}
        peak = 0
        losses, outputs, pending = [], {o: [] for o in self.extra_outputs}, []
        grads = {p: None for p in self.parameters}
        input_grads: dict[int, np.ndarray] = {}
        grad_names = [gradient_name(p) for p in self.parameters] + [gradient_name(st.input)]
        for kind, m in pipeline_schedule(self.schedule, comm.rank, comm.size, M):
            if kind == "F":
                t = clock()
                x = self._micro(feeds, st.input, m) if self.first else comm.recv(self.in_like, comm.rank - 1,
                                                                                   _TAG_FORWARD)
                times["idle"] += clock() - t
                stash[m] = x
                peak = max(peak, len(stash))
                t = clock()
                self.network.feed_tensor(st.input, x)
                run_feeds = {f: self._micro(feeds, f, m) for f in st.feeds}
                if not self.last:
                    run_feeds[_GRAD_IN] = self.out_like
                out = self.executor.inference(run_feeds)
                times["compute"] += clock() - t
                if self.last:
                    losses.append(float(out[self.loss]))
                    for o in self.extra_outputs:
                        outputs[o].append(out[o])
                else:
                    t = clock()
                    pending.append(comm.isend(np.ascontiguousarray(out[st.output]), comm.rank + 1, _TAG_FORWARD))
                    times["p2p"] += clock() - t
            else:
                t = clock()
                run_feeds = {f: self._micro(feeds, f, m) for f in st.feeds}
                if not self.last:
                    run_feeds[_GRAD_IN] = comm.recv(self.out_like, comm.rank + 1, _TAG_BACKWARD)
                times["idle"] += clock() - t
                t = clock()
                self.network.feed_tensor(st.input, stash.pop(m))
                self.executor.inference_and_backprop(run_feeds, self.objective)
                values = self.network.fetch_tensors(grad_names)
                for p, g in zip(self.parameters, values):
                    grads[p] = g.copy() if grads[p] is None else grads[p] + g
                times["compute"] += clock() - t
                if self.first:
                    input_grads[m] = values[-1]
                else:
                    t = clock()
                    pending.append(comm.isend(np.ascontiguousarray(values[-1]), comm.rank - 1, _TAG_BACKWARD))
                    times["p2p"] += clock() - t
            # retire finished sends without blocking
            pending = [r for r in pending if not r.test()]
        t = clock()
        for r in pending:
            r.wait()
        times["p2p"] += clock() - t
        scale = 1.0 / M if self.loss_reduction == "mean" else 1.0
        t = clock()
        grads = {p: (g * scale).astype(g.dtype) for p, g in grads.items()}
        input_gradient = None
        if self.first:
            input_gradient = np.concatenate([input_grads[m] for m in range(M)]) * scale
        times["compute"] += clock() - t
        if update and self.optimizer is not None:
            t = clock()
            current = self.network.fetch_tensors(self.parameters)
            for p, value in zip(self.parameters, current):
                self.network.feed_tensor(p, self.optimizer(grads[p], value, p))
            times["optimizer"] += clock() - t
        times["step"] = clock() - start
        times["other"] = max(0.0, times["step"] - sum(times[k] for k in ("compute", "p2p", "idle", "optimizer")))
        loss = None
        if self.last:
            loss = float(np.mean(losses) if self.loss_reduction == "mean" else np.sum(losses))
        outs = {o: np.concatenate(v) if np.ndim(v[0]) else np.asarray(v) for o, v in outputs.items()}
        return PipelineStepResult(loss, outs, grads, input_gradient, times, peak,
                                  comm.bytes_sent - sent0, comm.bytes_received - received0)

    def parameter_values(self) -> dict[str, np.ndarray]:
        """This stage's current parameter values, by name."""
        return dict(zip(self.parameters, self.network.fetch_tensors(self.parameters)))


@dataclasses.dataclass
class PipelineRun:
    """What :func:`run_pipeline` returns on every rank.

    Attributes:
        losses: the loss of each step (the same on every rank: broadcast from the last stage).
        steps: this rank's :class:`PipelineStepResult` per step.
        times: this rank's seconds summed over the steps (keys as in ``PipelineStepResult.times``).
        bubble: this rank's idle time over its step time, over all steps.
        bubble_model: ``(P - 1) / (M + P - 1)``.
    """

    losses: list[float]
    steps: list[PipelineStepResult]
    times: dict
    bubble: float
    bubble_model: float


def run_pipeline(comm, network, batches: Iterable[dict], micro_batches: int, schedule: str = "1f1b",
                 executor: str = "torch", cuts: Sequence[str] | None = None, optimizer: Callable | None = None,
                 loss: str = "loss", **kwargs) -> PipelineRun:
    """Train ``network`` pipeline-parallel over ``comm`` on ``batches`` (the entry point for a worker).

    Args:
        comm: the communicator (one stage per rank).
        network: the network with its loss.
        batches: feed dicts of whole batches (the same on every rank; each stage reads its inputs).
        micro_batches: ``M``.
        schedule: ``gpipe`` or ``1f1b``.
        executor: the Level 1 framework that runs each stage.
        cuts: the cut tensors, or None for balanced automatic cuts.
        optimizer: the per-stage update rule (e.g. ``MomentumSGD(0.1)``); None computes gradients only.
        loss: the scalar loss tensor.
        **kwargs: more :class:`PipelineParallel` arguments (``balance``, ``input``, ``loss_reduction``).

    Returns:
        A :class:`PipelineRun`.
    """
    pipe = None
    steps, losses = [], []
    for feeds in batches:
        if pipe is None:
            batch = len(next(iter(feeds.values())))
            pipe = PipelineParallel(comm, network, micro_batches, batch, schedule, executor, cuts,
                                    loss=loss, optimizer=optimizer, **kwargs)
        result = pipe.step(feeds, update=optimizer is not None)
        steps.append(result)
        value = np.array([result.loss if result.loss is not None else 0.0], np.float64)
        losses.append(float(comm.broadcast(value, root=comm.size - 1)[0]))
    keys = ("step", "compute", "p2p", "idle", "optimizer", "other")
    times = {k: float(sum(s.times[k] for s in steps)) for k in keys}
    bubble = times["idle"] / times["step"] if times["step"] > 0 else 0.0
    return PipelineRun(losses, steps, times, bubble, bubble_model(comm.size, micro_batches))
