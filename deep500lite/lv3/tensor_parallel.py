"""Level 3: tensor (model) parallelism for fully connected layers.

A fully connected layer ``y = x W^T + b`` (``W`` of shape ``(out, in)``, the ONNX ``Gemm`` with
``transB=1``, as torch's ``Linear``) has its weight split across the ``P`` ranks of a
communicator:

- :class:`ColumnParallelLinear` splits ``W`` by output features: each rank computes its slice
  of ``y`` from the whole ``x`` without communicating; backward, each rank's ``dy_r W_r`` is a
  partial sum of ``dx``, added up with one allreduce.
- :class:`RowParallelLinear` splits ``W`` by input features: each rank holds the matching slice
  ``x_r`` of the input and computes a partial ``x_r W_r^T``; forward, one allreduce adds them.
  Backward, ``dx_r = dy W_r`` needs no communication.
- :class:`ParallelMLP` pairs them as Megatron-LM does: column-split first layer, an element-wise
  activation on the slice, row-split second layer; one allreduce forward and one backward.

Shards may be uneven (``numpy.array_split``'s sizes). A bias split by output features stays
with its shard; the bias of a row-split layer is added by rank 0 only (it owns it and its
gradient), so the allreduce sums it in once. Local computation is a small ONNX graph per rank
run by a Level 1 executor (``torch`` by default); as in :mod:`deep500lite.lv3.pipeline`, its
input is held as a parameter so the executor's backprop also returns the input gradient, and the
backward pass recomputes the forward. Each layer records the bytes it communicated per pass
(:attr:`ColumnParallelLinear.bytes`), to compare with :func:`allreduce_bytes`.

:class:`TensorParallelMLP` and :func:`run_tensor_parallel` (the entry point a recipe worker calls)
apply the Megatron pairing to the leading fully connected layers of a whole network.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import onnx
from onnx import helper, numpy_helper

from deep500lite.errors import UserError, format_choices
from deep500lite.lv1.network import gradient_name, load_model
from deep500lite.perfmodel.alphabeta import allreduce_bytes

__all__ = [
    "ACTIVATIONS",
    "ColumnParallelLinear",
    "ParallelMLP",
    "RowParallelLinear",
    "TensorParallelMLP",
    "TensorParallelRun",
    "allreduce_bytes",
    "gather_shards",
    "run_tensor_parallel",
    "shard_bounds",
]

#: Element-wise activations :class:`ParallelMLP` accepts between its two layers (ONNX operators).
ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "Identity")

_X, _DY, _OBJ = "d5_tp_input", "d5_tp_output_grad", "d5_tp_objective"


def shard_bounds(n: int, parts: int) -> list[tuple[int, int]]:
    """The ``[start, stop)`` of each of ``parts`` shards of ``n`` features (sizes as ``numpy.array_split``).

    Raises:
        UserError: fewer features than parts (a shard would be empty).
    """
    if n < parts:
        raise UserError(f"Cannot split {n} features over {parts} ranks: every rank needs at least one. "
                        f"Received: {n} features, {parts} ranks")
    sizes = [n // parts + (1 if r < n % parts else 0) for r in range(parts)]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    return [(int(starts[r]), int(starts[r + 1])) for r in range(parts)]


def gather_shards(comm, shard: np.ndarray, bounds: list[tuple[int, int]], axis: int) -> np.ndarray:
    """Concatenate every rank's ``shard`` along ``axis`` (uneven shards padded to the largest for the allgather)."""
    shard = np.ascontiguousarray(shard)
    width = max(stop - start for start, stop in bounds)
    pad = [(0, 0)] * shard.ndim
    pad[axis] = (0, width - shard.shape[axis])
    parts = comm.allgather(np.ascontiguousarray(np.pad(shard, pad)))
    return np.concatenate([np.take(p, range(stop - start), axis=axis) for p, (start, stop) in zip(parts, bounds)],
                          axis=axis)


class _LocalGraph:
    """A rank's local computation: an ONNX graph with its input held as a parameter, one executor per batch size."""

    def __init__(self, build, params: dict[str, np.ndarray], in_features: int, out_features: int, executor: str):
        self.build, self.params, self.framework = build, dict(params), executor
        self.in_features, self.out_features = in_features, out_features
        self._by_batch: dict[int, tuple] = {}

    def _get(self, batch: int):
        if batch not in self._by_batch:
            from deep500lite.registry import executor as make_executor

            nodes = self.build(_X, "d5_tp_out")
            nodes += [helper.make_node("Mul", ["d5_tp_out", _DY], ["d5_tp_weighted"]),
                      helper.make_node("ReduceSum", ["d5_tp_weighted"], [_OBJ], keepdims=0)]
            inits = [numpy_helper.from_array(np.zeros((batch, self.in_features), np.float32), _X)]
            inits += [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in self.params.items()]
            graph = helper.make_graph(
                nodes, "tensor_parallel_shard",
                [helper.make_tensor_value_info(_DY, onnx.TensorProto.FLOAT, [batch, self.out_features])],
                [helper.make_tensor_value_info("d5_tp_out", onnx.TensorProto.FLOAT, [batch, self.out_features])],
                inits)
            net = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
            self._by_batch[batch] = (net, make_executor(net, self.framework))
        net, ex = self._by_batch[batch]
        for k, v in self.params.items():
            net.feed_tensor(k, v)
        return net, ex

    def forward(self, x: np.ndarray) -> np.ndarray:
        net, ex = self._get(len(x))
        net.feed_tensor(_X, np.ascontiguousarray(x, np.float32))
        return ex.inference({_DY: np.zeros((len(x), self.out_features), np.float32)})["d5_tp_out"]

    def backward(self, x: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        net, ex = self._get(len(x))
        net.feed_tensor(_X, np.ascontiguousarray(x, np.float32))
        ex.inference_and_backprop({_DY: np.ascontiguousarray(dy, np.float32)}, _OBJ)
        names = list(self.params)
        values = net.fetch_tensors([gradient_name(n) for n in [_X, *names]])
        return values[0], dict(zip(names, values[1:]))


class _ParallelLayer:
    """Shared bookkeeping: the communicator, timing and byte counts of the last pass."""

    def __init__(self, comm):
        self.comm = comm
        self.gradients: dict[str, np.ndarray] = {}
        #: bytes this rank sent in the last ``forward`` and ``backward`` (the communicator's counter)
        self.bytes = {"forward": 0, "backward": 0}
        #: seconds summed over calls: ``compute`` (the executor) and ``allreduce``
        self.times = {"compute": 0.0, "allreduce": 0.0}

    def _allreduce(self, x: np.ndarray) -> np.ndarray:
        t = time.perf_counter()
        out = self.comm.allreduce(np.ascontiguousarray(x), "sum")
        self.times["allreduce"] += time.perf_counter() - t
        return out

    def _compute(self, fn, *args):
        t = time.perf_counter()
        out = fn(*args)
        self.times["compute"] += time.perf_counter() - t
        return out

    def _counted(self, which: str, fn, *args):
        before = self.comm.bytes_sent
        out = fn(*args)
        self.bytes[which] = self.comm.bytes_sent - before
        return out


def _check_weight(weight, bias, name: str):
    weight = np.asarray(weight, np.float32)
    if weight.ndim != 2 or (bias is not None and np.shape(bias) != (weight.shape[0],)):
        raise UserError(f"{name} needs a weight of shape (out, in) and a bias of shape (out,) or None. "
                        f"Received: weight {weight.shape}, bias {None if bias is None else np.shape(bias)}")
    return weight, None if bias is None else np.asarray(bias, np.float32)


def _gemm(x, w, b, out):
    return helper.make_node("Gemm", [x, w] + ([b] if b else []), [out], transB=1)


class ColumnParallelLinear(_ParallelLayer):
    """A fully connected layer split by output features (column-parallel).

    Args:
        comm: the communicator; rank ``r`` holds output features ``bounds[r]``.
        weight: the whole weight, shape ``(out, in)`` (the same on every rank).
        bias: the whole bias, shape ``(out,)``, or None.
        executor: the Level 1 framework of the local computation.

    Attributes:
        bounds: every rank's ``[start, stop)`` of the output features.
        gradients: after :meth:`backward`, this rank's ``weight`` and ``bias`` shard gradients.
    """

    def __init__(self, comm, weight, bias=None, executor: str = "torch"):
        super().__init__(comm)
        weight, bias = _check_weight(weight, bias, "ColumnParallelLinear")
        self.bounds = shard_bounds(weight.shape[0], comm.size)
        lo, hi = self.bounds[comm.rank]
        params = {"weight": weight[lo:hi]}
        if bias is not None:
            params["bias"] = bias[lo:hi]
        self.local = _LocalGraph(lambda x, y: [_gemm(x, "weight", "bias" if bias is not None else "", y)],
                                 params, weight.shape[1], hi - lo, executor)
        self._x = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        """This rank's slice ``x W_r^T + b_r`` (shape ``(batch, stop - start)``); no communication."""
        self._x = x
        return self._counted("forward", self._compute, self.local.forward, x)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        """From this rank's slice of ``dL/dy``, return the whole ``dL/dx`` (one allreduce)."""
        def run():
            dx, self.gradients = self._compute(self.local.backward, self._x, dy)
            return self._allreduce(dx)
        return self._counted("backward", run)


class RowParallelLinear(_ParallelLayer):
    """A fully connected layer split by input features (row-parallel).

    Args:
        comm: the communicator; rank ``r`` holds input features ``bounds[r]``.
        weight: the whole weight, shape ``(out, in)``.
        bias: the whole bias or None; rank 0 adds it (and holds its gradient).
        executor: the Level 1 framework of the local computation.

    Attributes:
        bounds: every rank's ``[start, stop)`` of the input features.
        gradients: after :meth:`backward`, this rank's ``weight`` shard gradient (and ``bias`` on rank 0).
    """

    def __init__(self, comm, weight, bias=None, executor: str = "torch"):
        super().__init__(comm)
        weight, bias = _check_weight(weight, bias, "RowParallelLinear")
        self.bounds = shard_bounds(weight.shape[1], comm.size)
        lo, hi = self.bounds[comm.rank]
        params = {"weight": weight[:, lo:hi]}
        with_bias = bias is not None and comm.rank == 0
        if with_bias:
            params["bias"] = bias
        self.local = _LocalGraph(lambda x, y: [_gemm(x, "weight", "bias" if with_bias else "", y)],
                                 params, hi - lo, weight.shape[0], executor)
        self._x = None

    def forward(self, x_shard: np.ndarray) -> np.ndarray:
        """From this rank's input slice ``x[:, start:stop]``, the whole ``y`` (one allreduce)."""
        self._x = x_shard

        def run():
            return self._allreduce(self._compute(self.local.forward, x_shard))
        return self._counted("forward", run)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        """From the whole ``dL/dy``, this rank's slice of ``dL/dx``; no communication."""
        def run():
            dx, self.gradients = self._compute(self.local.backward, self._x, dy)
            return dx
        return self._counted("backward", run)


class ParallelMLP(_ParallelLayer):
    """Two fully connected layers, column- then row-split (Megatron-LM's MLP): ``act(x W1^T + b1) W2^T + b2``.

    Args:
        comm: the communicator; rank ``r`` holds hidden features ``bounds[r]``.
        w1: shape ``(hidden, in)``; b1: ``(hidden,)`` or None.
        w2: shape ``(out, hidden)``; b2: ``(out,)`` or None (added by rank 0).
        activation: one of :data:`ACTIVATIONS`.
        executor: the Level 1 framework of the local computation.
        input_activation: an element-wise activation applied to the input first (replicated on
            every rank; used to chain blocks), or None.

    Attributes:
        bounds: every rank's ``[start, stop)`` of the hidden features.
        gradients: after :meth:`backward`: ``w1``, ``b1`` (rows ``bounds[r]``), ``w2`` (columns
            ``bounds[r]``) and, on rank 0, ``b2``.
    """

    def __init__(self, comm, w1, b1, w2, b2, activation: str = "Relu", executor: str = "torch",
                 input_activation: str | None = None):
        super().__init__(comm)
        w1, b1 = _check_weight(w1, b1, "ParallelMLP (first layer)")
        w2, b2 = _check_weight(w2, b2, "ParallelMLP (second layer)")
        if w2.shape[1] != w1.shape[0]:
            raise UserError(f"w2 must have as many input features as w1 has outputs. "
                            f"Received: w1 {w1.shape}, w2 {w2.shape}")
        for given in (activation, input_activation or "Identity"):
            if given not in ACTIVATIONS:
                raise UserError(f"Unknown activation. Allowed values are {format_choices(ACTIVATIONS)}. "
                                f"Received: activation={given!r}")
        self.bounds = shard_bounds(w1.shape[0], comm.size)
        lo, hi = self.bounds[comm.rank]
        params = {"w1": w1[lo:hi], "w2": w2[:, lo:hi]}
        if b1 is not None:
            params["b1"] = b1[lo:hi]
        with_b2 = b2 is not None and comm.rank == 0
        if with_b2:
            params["b2"] = b2

        def build(x, y):
            pre = [helper.make_node(input_activation, [x], ["d5_tp_xa"])] if input_activation else []
            first = "d5_tp_xa" if input_activation else x
            return pre + [_gemm(first, "w1", "b1" if b1 is not None else "", "d5_tp_h"),
                    helper.make_node(activation, ["d5_tp_h"], ["d5_tp_a"]),
                    _gemm("d5_tp_a", "w2", "b2" if with_b2 else "", y)]

        self.local = _LocalGraph(build, params, w1.shape[1], w2.shape[0], executor)
        self._x = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        """The whole output from the whole input ``x`` (one allreduce)."""
        self._x = x

        def run():
            return self._allreduce(self._compute(self.local.forward, x))
        return self._counted("forward", run)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        """The whole ``dL/dx`` from the whole ``dL/dy`` (one allreduce)."""
        def run():
            dx, self.gradients = self._compute(self.local.backward, self._x, dy)
            return self._allreduce(dx)
        return self._counted("backward", run)


# --------------------------------------------------------------------------- a network's MLP
@dataclasses.dataclass
class TensorParallelRun:
    """What :func:`run_tensor_parallel` returns on every rank.

    Attributes:
        losses: the loss of each step (computed on every rank; the same everywhere).
        times: seconds summed over the steps: ``step``, ``compute`` (the executors),
            ``allreduce`` and ``other`` (the optimizer and the rest).
        bytes_per_step: bytes this rank sent per step (the communicator's counter, last step).
        gradients: the last step's gradients this rank holds, by the network's parameter names
            (shards of the split weights; whole tensors for the replicated head and the row
            biases, which rank 0 holds).
        owners: per parameter name, ``(axis, bounds)`` for a split parameter (``axis`` 0 rows, 1
            columns), None for one held whole.
    """

    losses: list[float]
    times: dict
    bytes_per_step: int
    gradients: dict
    owners: dict


class TensorParallelMLP:
    """The fully connected part of a network run tensor-parallel; the rest (the head) replicated.

    The network must start, from its data input, with a chain of ``Gemm`` layers (``transB=1``,
    weights and biases as initializers) each optionally followed by one activation of
    :data:`ACTIVATIONS`. Consecutive layers are paired into :class:`ParallelMLP` blocks (the
    activation after a block's second layer is applied by the next block to its input); the
    nodes after the last pair (an odd last layer, the loss) form the head, which every rank runs
    whole on the whole batch.

    Args:
        comm: the communicator.
        network: the network with its loss.
        batch_size: the batch size of the steps.
        executor: the Level 1 framework of the local computation.
        input: the data input (the first graph input when None).
        loss: the scalar loss tensor.
    """

    def __init__(self, comm, network, batch_size: int, executor: str = "torch", input: str | None = None,
                 loss: str = "loss"):
        from deep500lite.lv3 import pipeline as _pl
        from deep500lite.registry import executor as make_executor

        network = load_model(network)
        model = network.to_onnx()
        nodes = list(model.graph.node)
        inputs = [n for n in network.inputs if n not in network.initializers]
        data = input or inputs[0]
        values = {n: network.fetch_tensor(n) for n in network.parameters}
        uses: dict[str, int] = {}
        for n in nodes:
            for t in n.input:
                uses[t] = uses.get(t, 0) + 1
        layers, cur, i = [], data, 0
        while i < len(nodes):
            n = nodes[i]
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            if n.op_type != "Gemm" or n.input[0] != cur or n.input[1] not in values or attrs.get("transB") != 1 \
                    or attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0 \
                    or (len(n.input) > 2 and n.input[2] and n.input[2] not in values) or uses.get(cur, 0) != 1:
                break
            bias = n.input[2] if len(n.input) > 2 and n.input[2] else None
            cur, i, act = n.output[0], i + 1, None
            if i < len(nodes) and nodes[i].op_type in ACTIVATIONS and nodes[i].input[0] == cur \
                    and uses.get(cur, 0) == 1:
                act, cur, i = nodes[i].op_type, nodes[i].output[0], i + 1
            layers.append((n.input[1], bias, act, i))
        if len(layers) < 2:
            raise UserError(f"TensorParallelMLP needs the network to start with at least two Gemm layers "
                            f"(transB=1, parameters as initializers) from its input '{data}'. "
                            f"Received: {len(layers)} such layer(s)")
        self.comm, self.loss, self.data = comm, loss, data
        self.blocks: list[tuple[ParallelMLP, tuple]] = []
        self.owners: dict = {}
        pre = None
        for k in range(len(layers) // 2):
            (w1, b1, act1, _), (w2, b2, act2, end) = layers[2 * k], layers[2 * k + 1]
            block = ParallelMLP(comm, values[w1], None if b1 is None else values[b1], values[w2],
                                None if b2 is None else values[b2], act1 or "Identity", executor, pre)
            self.blocks.append((block, (w1, b1, w2, b2)))
            self.owners.update({w1: (0, block.bounds), w2: (1, block.bounds)})
            if b1:
                self.owners[b1] = (0, block.bounds)
            if b2:
                self.owners[b2] = None
            # the pair's output, before act2: the next block (or the head) starts there
            pre, head_start = act2, end - (1 if act2 else 0)
            head_input = nodes[head_start - 1].output[0]
        head_nodes = nodes[head_start:]
        read = {t for n in head_nodes for t in n.input}
        stage = _pl.PipelineStage(1, head_nodes, head_input, loss, [p for p in network.parameters if p in read],
                                  [t for t in inputs if t in read and t != data], 0.0)
        self.owners.update({p: None for p in stage.parameters})
        infos = _pl._value_infos(_pl._with_batch(model, inputs, batch_size))
        self.head = stage
        self.head_network = load_model(_pl._stage_model(stage, True, network, infos, model.opset_import, []))
        self.head_executor = make_executor(self.head_network, executor)
        self.times = {"compute": 0.0, "allreduce": 0.0}

    def step(self, feeds: dict, optimizer=None) -> tuple[float, dict]:
        """Forward and backward on a batch (and the optimizer on this rank's parameters, if given).

        Returns:
            ``(loss, gradients)``: gradients by the network's parameter names (this rank's shards).
        """
        x = np.ascontiguousarray(feeds[self.data], np.float32)
        for block, _ in self.blocks:
            x = block.forward(x)
        t = time.perf_counter()
        self.head_network.feed_tensor(self.head.input, np.ascontiguousarray(x, np.float32))
        out = self.head_executor.inference_and_backprop({f: feeds[f] for f in self.head.feeds}, self.loss)
        names = [*self.head.parameters, self.head.input]
        values = self.head_network.fetch_tensors([gradient_name(n) for n in names])
        self.times["compute"] += time.perf_counter() - t
        grads = dict(zip(self.head.parameters, values[:-1]))
        dy = values[-1]
        for block, (w1, b1, w2, b2) in reversed(self.blocks):
            dy = block.backward(dy)
            g = block.gradients
            grads.update({w1: g["w1"], w2: g["w2"]})
            if b1:
                grads[b1] = g["b1"]
            if b2 and "b2" in g:
                grads[b2] = g["b2"]
        if optimizer is not None:
            for p in self.head.parameters:
                self.head_network.feed_tensor(p, optimizer(grads[p], self.head_network.fetch_tensor(p), p))
            for block, names4 in self.blocks:
                for local, name in zip(("w1", "b1", "w2", "b2"), names4):
                    if name and local in block.local.params:
                        block.local.params[local] = optimizer(grads[name], block.local.params[local], name)
        return float(out[self.loss]), grads


def run_tensor_parallel(comm, network, batches, executor: str = "torch", optimizer=None, input: str | None = None,
                        loss: str = "loss") -> TensorParallelRun:
    """Train a network's leading fully connected layers tensor-parallel over ``comm`` (the entry point for a worker).

    Args:
        comm: the communicator.
        network: the network (see :class:`TensorParallelMLP` for the form it must have).
        batches: feed dicts of whole batches (the same on every rank).
        executor: the Level 1 framework of the local computation.
        optimizer: a callable ``(grad, param, name) -> new param`` (e.g.
            :class:`~deep500lite.lv3.pipeline.MomentumSGD`), or None for gradients only.
        input: the data input (the first graph input when None).
        loss: the scalar loss tensor.

    Returns:
        A :class:`TensorParallelRun`.
    """
    mlp, losses, grads, sent = None, [], {}, 0
    step_time = 0.0
    for feeds in batches:
        if mlp is None:
            network = load_model(network)
            data = input or next(n for n in network.inputs if n not in network.initializers)
            mlp = TensorParallelMLP(comm, network, len(feeds[data]), executor, data, loss)
        before, start = comm.bytes_sent, time.perf_counter()
        loss_value, grads = mlp.step(feeds, optimizer)
        step_time += time.perf_counter() - start
        sent = comm.bytes_sent - before
        losses.append(loss_value)
    if mlp is None:
        raise UserError("run_tensor_parallel needs at least one batch. Received: no batches")
    times = {"step": step_time, "compute": mlp.times["compute"], "allreduce": 0.0}
    for block, _ in mlp.blocks:
        times["compute"] += block.times["compute"]
        times["allreduce"] += block.times["allreduce"]
    times["other"] = max(0.0, step_time - times["compute"] - times["allreduce"])
    return TensorParallelRun(losses, times, sent, grads, mlp.owners)
