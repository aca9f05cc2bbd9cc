"""Level 3: spatial (halo) parallelism: one sample split along its height and width over the ranks.

:class:`SpatialParallelNetwork` runs an ONNX network whose leading part is convolutional (Conv,
MaxPool, AveragePool, BatchNormalization, elementwise) with each NCHW activation split along H
(and W, with a 2-D ``grid`` of ranks) in blocks of ``row_bounds`` (sizes need not divide evenly).
Before each convolution or pool, every rank receives the input rows and columns its output block
reads from the ranks that own them (the halo, corners included) with non-blocking sends and
receives; with ``overlap=True`` it computes the interior of its output, which needs no halo, while
the messages travel. Backward, each rank computes the gradient of its extended input (own block
plus halo) and sends the halo part back to its owner, which adds it; the parameter gradients of
the split part are summed with one allreduce. The rest of the network (Flatten, Gemm, the loss...)
runs on every rank on the gathered (allgather) last split activations, so each rank takes its own
block of that gradient without communication.
The local computations are small ONNX models run by a deep500lite executor of any framework
(:mod:`deep500lite.lv3.spatial_graph` builds them); executors differentiate them through
``inference_and_backprop`` with the inputs made parameters.

BatchNormalization, when training (``batchnorm="batch"``, the default), normalizes with the batch
statistics of the whole sample set (mean and biased variance over N, H, W of every rank's block:
per-channel sums allreduced, two passes) and its backward allreduces the per-channel sums of dy and
dy * xhat, as ONNX's ``training_mode=1``; the new running statistics are returned and kept.
``batchnorm="running"`` applies the running statistics also when training (the statistics fixed).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import onnx

from deep500lite.errors import UserError
from deep500lite.lv1.network import Network, load_model
from deep500lite.lv3.spatial_graph import (_GRAD_INPUT, _LOSS, SpatialPlan, expand_batchnorm,
                                           node_model, plan_spatial, row_bounds, tail_model)

__all__ = ["SpatialParallelNetwork", "SpatialResult", "run_spatial", "expand_batchnorm", "row_bounds",
           "TIME_KEYS", "BATCHNORM_MODES"]

#: The keys of :attr:`SpatialResult.times` (seconds): executor calls and array assembly; halo
#: exchange (posting and waiting, forward and backward); the allreduce of the parameter
#: gradients and of BatchNormalization's per-channel batch sums; the allgather of the split tensors
#: the tail reads; waiting at a barrier before the parameter allreduce (load imbalance); and
#: everything else of the call.
TIME_KEYS = ("compute", "halo", "allreduce", "gather", "idle", "other", "total")

_BN_STATS = {("BatchNormalization", 3), ("BatchNormalization", 4)}
#: The values of the ``batchnorm`` argument.
BATCHNORM_MODES = ("batch", "running")


@dataclasses.dataclass
class SpatialResult:
    """What one call of :class:`SpatialParallelNetwork` returns (the same on every rank except
    ``input_gradient``).

    Attributes:
        outputs: the graph outputs (full tensors).
        gradients: parameter name -> full gradient (after ``forward_backward``; else empty).
        input_gradient: this rank's block of the gradient of the split input (or ``None``).
        times: seconds per :data:`TIME_KEYS` for this rank.
        activation_bytes: bytes of the activations this rank keeps for the backward pass: the
            halo-extended inputs of convolutions and pools, its rows of the elementwise nodes'
            inputs, and the gathered tensors.
        block: ``(row0, row1, col0, col1)``, the block of the input this rank owns.
        running_stats: after a training call with ``batchnorm="batch"``, the new running mean and
            variance of each split BatchNormalization (initializer name -> value, ONNX's rule
            ``running * momentum + batch_stat * (1 - momentum)``, biased batch variance); the
            network keeps them for its next calls. Else empty.
    """

    outputs: dict
    gradients: dict
    input_gradient: np.ndarray | None
    times: dict
    activation_bytes: int
    block: tuple
    running_stats: dict = dataclasses.field(default_factory=dict)


def _intersect(a, b):
    """The intersection of two (row0, row1, col0, col1) rectangles, or None when empty."""
    r = (max(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), min(a[3], b[3]))
    return r if r[1] > r[0] and r[3] > r[2] else None


def _cut(array, origin, rect):
    """The view of ``array`` (whose block starts at ``origin``'s rows/cols) covering ``rect``."""
    return array[:, :, rect[0] - origin[0]:rect[1] - origin[0], rect[2] - origin[2]:rect[3] - origin[2]]


class _Clock:
    def __init__(self):
        self.t = dict.fromkeys(TIME_KEYS, 0.0)

    def add(self, key, start):
        now = time.perf_counter()
        self.t[key] += now - start
        return now


class SpatialParallelNetwork:
    """A network whose convolutional part is split along H over the ranks of ``comm``.

    The ranks form a ``grid = (rows, columns)`` grid (default ``(size, 1)``: height split only);
    rank ``r`` owns block ``divmod(r, columns)`` of every split tensor (:meth:`block`). Every rank
    calls the same methods with the same full feeds (each rank uses its block of the split
    input), or with ``input_is_local=True`` its block only.

    Args:
        comm: a :class:`~deep500lite.lv3.CommunicationNetwork` (MPI or torch.distributed).
        network: a :class:`~deep500lite.Network`, an ``onnx.ModelProto`` or an ONNX file.
        input_name: the NCHW input to split (default: the first graph input that is not an
            initializer).
        framework: the executor that runs the local computations (``torch``, ``reference``,
            ``onnxruntime``, ``tensorflow``, ``jax``, or a variant spelling).
        overlap: compute the output rows that need no halo while the halo is in flight.
        tag: the first message tag used (two per node after it).
        grid: ``(rows, columns)`` of ranks, their product the communicator's size.
        batchnorm: ``"batch"`` (default; the unsplit network's training semantics):
            :meth:`forward_backward` normalizes BatchNormalization with the batch statistics over
            every rank's block and updates the running statistics, :meth:`forward` uses the
            running statistics; ``"running"``: the running statistics in both, never updated.

    >>> spn = SpatialParallelNetwork(MPICommunicator(), "net.onnx")       # doctest: +SKIP
    >>> res = spn.forward_backward({"x": x, "label": y}, "loss")          # doctest: +SKIP
    >>> res.gradients["conv1.weight"], res.times["halo"]                  # doctest: +SKIP
    """

    def __init__(self, comm, network, input_name: str | None = None, framework: str = "torch",
                 overlap: bool = True, tag: int = 1000, grid: tuple | None = None, batchnorm: str = "batch"):
        self.comm = comm
        if batchnorm not in BATCHNORM_MODES:
            raise UserError(f"batchnorm must be one of {', '.join(BATCHNORM_MODES)}. Received: {batchnorm!r}")
        self.batchnorm = batchnorm
        grid = (comm.size, 1) if grid is None else tuple(int(g) for g in grid)
        if len(grid) != 2 or min(grid) < 1 or grid[0] * grid[1] != comm.size:
            raise UserError(f"grid must be (rows, columns) of ranks whose product is the number of ranks, "
                            f"{comm.size}. Received: grid={grid}")
        self.grid = grid
        net = network if isinstance(network, Network) else load_model(network)
        self.model = net.to_onnx()
        inits = {i.name for i in self.model.graph.initializer}
        free = [i.name for i in self.model.graph.input if i.name not in inits]
        if input_name is None:
            if not free:
                raise UserError("The network has no graph input to split. Received: inputs "
                                f"{[i.name for i in self.model.graph.input]}")
            input_name = free[0]
        self.input_name = input_name
        self.framework = framework
        self.overlap = bool(overlap)
        self.tag = int(tag)
        self._plans: dict = {}
        self._executors: dict = {}

    # ------------------------------------------------------------------ setup
    @property
    def rank(self) -> int:
        """This process's rank in ``comm``."""
        return self.comm.rank

    @property
    def size(self) -> int:
        """The number of ranks the activations are split over."""
        return self.comm.size

    def set_parameters(self, values: dict) -> None:
        """Replace parameter values (e.g. after an optimizer step).

        The model, every cached plan and every built executor get the new values in place (fed
        through the executor's network), so a training step does not rebuild executors.
        """
        from onnx import numpy_helper

        for init in self.model.graph.initializer:
            if init.name in values:
                init.CopyFrom(numpy_helper.from_array(np.asarray(values[init.name], dtype=np.float32)
                                                      if init.data_type == onnx.TensorProto.FLOAT
                                                      else np.asarray(values[init.name]), init.name))
        for plan in self._plans.values():
            for k, v in values.items():
                if k in plan.params:
                    plan.params[k] = np.asarray(v, plan.params[k].dtype).reshape(plan.params[k].shape)
        for ex, _ in self._executors.values():
            net = ex.network
            held = set(net.initializers)
            for k, v in values.items():
                if k in held:
                    current = net.fetch_tensor(k)
                    net.feed_tensor(k, np.ascontiguousarray(np.asarray(v, current.dtype).reshape(current.shape)))

    def plan(self, input_shape) -> SpatialPlan:
        """The split for a full input of ``input_shape`` (cached per shape)."""
        key = tuple(int(d) for d in input_shape)
        if key not in self._plans:
            self._plans[key] = plan_spatial(self.model, self.input_name, key, self.grid)
        return self._plans[key]

    def _executor(self, key, build):
        ex = self._executors.get(key)
        if ex is None:
            from deep500lite.registry import executor

            model, reshaped = build()
            ex = (executor(Network._own(model), self.framework), reshaped)
            self._executors[key] = ex
        return ex

    # ------------------------------------------------------------- local calls
    def _stats(self, plan, i, stats):
        """The (C, 1, 1) mean and variance fed to BatchNormalization node ``i``: ``stats`` (the batch
        statistics) or its running statistics; empty for other nodes."""
        node = plan.nodes[i]
        if node.op_type != "BatchNormalization":
            return {}
        if stats is None:
            stats = [plan.params[t] for t in node.input[3:5]]
        return {t: np.ascontiguousarray(np.asarray(v, plan.params[t].dtype).reshape(-1, 1, 1))
                for t, v in zip(node.input[3:5], stats)}

    def _fwd(self, plan, i, inputs: dict, pads=None, stats=None):
        node = plan.nodes[i]
        shape_key = tuple((k, v.shape) for k, v in inputs.items())
        ex, _ = self._executor(("f", i, shape_key, pads),
                               lambda: node_model(node, plan.params, inputs, plan.model.opset_import, pads,
                                                  stats_inputs=True))
        return ex.inference({**inputs, **self._stats(plan, i, stats)})[node.output[0]]

    def _bwd(self, plan, i, inputs: dict, gy: np.ndarray, pads=None, stats=None):
        """Gradients of sum(y * gy) for the split inputs and parameters of node ``i`` (the
        BatchNormalization statistics ``stats``, batch or running, held constant)."""
        node = plan.nodes[i]
        shape_key = tuple((k, v.shape) for k, v in inputs.items())
        ex, reshaped = self._executor(
            ("b", i, shape_key, pads),
            lambda: node_model(node, plan.params, inputs, plan.model.opset_import, pads, grad_shape=gy.shape,
                               stats_inputs=True))
        net = ex.network
        for k, v in inputs.items():
            net.feed_tensor(k, np.ascontiguousarray(v))
        ex.inference_and_backprop({_GRAD_INPUT: np.ascontiguousarray(gy), **self._stats(plan, i, stats)}, _LOSS)
        names = list(inputs) + [t for j, t in enumerate(node.input)
                                if t in plan.params and t not in inputs and (node.op_type, j) not in _BN_STATS]
        grads = dict(zip(names, net.fetch_tensors([n + "_grad" for n in names])))
        for k, shp in reshaped.items():
            if k in grads:
                grads[k] = grads[k].reshape(shp)
        return grads

    # ----------------------------------------------------------------- halo
    def block(self, shape, rank: int | None = None) -> tuple[int, int, int, int]:
        """The block ``(row0, row1, col0, col1)`` of an NCHW tensor of full ``shape`` that ``rank``
        (default: this rank) owns."""
        q = self.rank if rank is None else rank
        qh, qw = divmod(q, self.grid[1])
        rb, cb = row_bounds(shape[2], self.grid[0]), row_bounds(shape[3], self.grid[1])
        return rb[qh], rb[qh + 1], cb[qw], cb[qw + 1]

    def _exchange_plan(self, plan, i):
        """For node ``i``: the input blocks, the output block, the input rectangle this rank needs
        and per peer the rectangles it sends and receives, in global (row0, row1, col0, col1)."""
        gh, gw = plan.geometry[i]
        x_shape = plan.shapes[plan.nodes[i].input[0]]
        y_shape = plan.shapes[plan.nodes[i].output[0]]
        own = [self.block(x_shape, q) for q in range(self.size)]
        out = [self.block(y_shape, q) for q in range(self.size)]
        need = [gh.window(o[0], o[1])[:2] + gw.window(o[2], o[3])[:2] for o in out]
        r = self.rank
        sends, recvs = {}, {}
        for q in range(self.size):
            if q != r:
                s = _intersect(need[q], own[r])
                if s:
                    sends[q] = s
                g = _intersect(need[r], own[q])
                if g:
                    recvs[q] = g
        return own[r], out[r], need[r], sends, recvs

    def _local_call(self, plan, i, src, origin, rect):
        """Node ``i`` on output rows/cols ``rect``, reading ``src`` whose element [0, 0] is global ``origin``."""
        gh, gw = plan.geometry[i]
        a, c, pt, pb = gh.window(rect[0], rect[1])
        a2, c2, pl, pr = gw.window(rect[2], rect[3])
        x = src[:, :, a - origin[0]:c - origin[0], a2 - origin[1]:c2 - origin[1]]
        return self._fwd(plan, i, {plan.nodes[i].input[0]: x}, (pt, pl, pb, pr))

    def _halo_forward(self, plan, i, x_local, clock):
        gh, gw = plan.geometry[i]
        own, out, need, sends, recvs = self._exchange_plan(plan, i)
        t0 = time.perf_counter()
        tag = self.tag + 2 * i
        n, ch = x_local.shape[:2]
        reqs = {q: self.comm.irecv(np.empty((n, ch, g[1] - g[0], g[3] - g[2]), x_local.dtype), q, tag)
                for q, g in recvs.items()}
        sreqs = [self.comm.isend(_cut(x_local, own, g), q, tag) for q, g in sends.items()]
        t0 = clock.add("halo", t0)
        pieces = []
        inner = None
        if self.overlap and reqs:
            u = gh.interior(out[0], out[1], own[0], own[1])
            v = gw.interior(out[2], out[3], own[2], own[3])
            if u[1] > u[0] and v[1] > v[0]:
                inner = u + v
                pieces.append((inner, self._local_call(plan, i, x_local, (own[0], own[2]), inner)))
        t0 = clock.add("compute", t0)
        got = {q: req.wait() for q, req in reqs.items()}
        for req in sreqs:
            req.wait()
        t0 = clock.add("halo", t0)
        ext = np.empty((n, ch, need[1] - need[0], need[3] - need[2]), x_local.dtype)
        mine = _intersect(need, own)
        if mine:
            _cut(ext, need, mine)[...] = _cut(x_local, own, mine)
        for q, g in recvs.items():
            _cut(ext, need, g)[...] = got[q]
        if inner is None:
            rects = [out]
        else:  # the frame around the interior: top and bottom strips, then left and right
            rects = [(out[0], inner[0], out[2], out[3]), (inner[1], out[1], out[2], out[3]),
                     (inner[0], inner[1], out[2], inner[2]), (inner[0], inner[1], inner[3], out[3])]
        for rect in rects:
            if rect[1] > rect[0] and rect[3] > rect[2]:
                pieces.append((rect, self._local_call(plan, i, ext, (need[0], need[2]), rect)))
        if len(pieces) == 1:
            y = pieces[0][1]
        else:
            y = np.empty(pieces[0][1].shape[:2] + (out[1] - out[0], out[3] - out[2]), pieces[0][1].dtype)
            for rect, piece in pieces:
                _cut(y, out, rect)[...] = piece
        clock.add("compute", t0)
        return y, ext

    def _halo_backward(self, plan, i, ext, gy, clock):
        gh, gw = plan.geometry[i]
        own, out, need, sends, recvs = self._exchange_plan(plan, i)
        t0 = time.perf_counter()
        pads = (gh.window(out[0], out[1])[2], gw.window(out[2], out[3])[2],
                gh.window(out[0], out[1])[3], gw.window(out[2], out[3])[3])
        name = plan.nodes[i].input[0]
        grads = self._bwd(plan, i, {name: ext}, gy, pads)
        dext = grads.pop(name)
        t0 = clock.add("compute", t0)
        tag = self.tag + 2 * i + 1
        n, ch = ext.shape[:2]
        # Reverse of the forward exchange: my halo goes back to its owners, who add it.
        reqs = {q: self.comm.irecv(np.empty((n, ch, g[1] - g[0], g[3] - g[2]), ext.dtype), q, tag)
                for q, g in sends.items()}
        sreqs = [self.comm.isend(_cut(dext, need, g), q, tag) for q, g in recvs.items()]
        dx = np.zeros((n, ch, own[1] - own[0], own[3] - own[2]), ext.dtype)
        mine = _intersect(need, own)
        if mine:
            _cut(dx, own, mine)[...] += _cut(dext, need, mine)
        t0 = clock.add("compute", t0)
        got = {q: req.wait() for q, req in reqs.items()}
        for req in sreqs:
            req.wait()
        t0 = clock.add("halo", t0)
        for q, g in sends.items():
            _cut(dx, own, g)[...] += got[q]
        clock.add("compute", t0)
        return dx, grads

    # ------------------------------------------------------------------ gather
    def gather(self, local: np.ndarray, full_shape) -> np.ndarray:
        """Assemble the full NCHW tensor of ``full_shape`` from every rank's block (collective).

        Args:
            local: this rank's block (see :meth:`block`).
            full_shape: the full tensor's shape.
        """
        blocks = [self.block(full_shape, q) for q in range(self.size)]
        most = (max(b[1] - b[0] for b in blocks), max(b[3] - b[2] for b in blocks))
        padded = np.zeros(local.shape[:2] + most, local.dtype)
        padded[:, :, :local.shape[2], :local.shape[3]] = local
        parts = self.comm.allgather(padded)
        full = np.empty(tuple(local.shape[:2]) + tuple(full_shape[2:]), local.dtype)
        for b, part in zip(blocks, parts):
            full[:, :, b[0]:b[1], b[2]:b[3]] = part[:, :, :b[1] - b[0], :b[3] - b[2]]
        return full

    def _gather(self, plan, name, local, clock):
        t0 = time.perf_counter()
        full = self.gather(local, plan.shapes[name])
        clock.add("gather", t0)
        return full

    # ------------------------------------------------------------------ calls
    def _run(self, feeds: dict, loss: str | None, input_is_local: bool) -> SpatialResult:
        clock = _Clock()
        start = time.perf_counter()
        if self.input_name not in feeds:
            raise UserError(f"The feeds must include the split input {self.input_name!r}. "
                            f"Received: {sorted(feeds)}")
        x = np.asarray(feeds[self.input_name])
        full_shape = list(x.shape)
        if x.ndim != 4:
            raise UserError(f"The split input {self.input_name!r} must be NCHW (4-D). Received: shape {full_shape}")
        if input_is_local:
            qh, qw = divmod(self.rank, self.grid[1])
            sizes = np.array([x.shape[2] if qw == 0 else 0, x.shape[3] if qh == 0 else 0], np.int64)
            full_shape[2:] = [int(v) for v in self.comm.allreduce(sizes)]
        plan = self.plan(full_shape)
        block = self.block(full_shape)
        if input_is_local:
            if x.shape[2:] != (block[1] - block[0], block[3] - block[2]):
                raise UserError(f"Rank {self.rank} owns rows {block[0]}..{block[1]} and columns {block[2]}..{block[3]} "
                                f"of {full_shape[2:]}; its local input must be that block. Received: shape "
                                f"{list(x.shape)}")
            local = {self.input_name: x}
        else:
            local = {self.input_name: x[:, :, block[0]:block[1], block[2]:block[3]]}
        saved, batch_stats, running = {}, {}, {}
        t0 = time.perf_counter()
        for i, node in enumerate(plan.nodes):
            data = [t for t in node.input if t in plan.spatial]
            if i in plan.geometry:
                y, ext = self._halo_forward(plan, i, local[data[0]], clock)
                saved[i] = {data[0]: ext}
            elif node.op_type == "BatchNormalization" and loss is not None and self.batchnorm == "batch":
                x_bn = local[data[0]]
                batch_stats[i], new = self._bn_statistics(plan, i, x_bn, clock)
                running.update(new)
                t0 = time.perf_counter()
                y = self._fwd(plan, i, {data[0]: x_bn}, stats=batch_stats[i])
                saved[i] = {data[0]: x_bn}
                clock.add("compute", t0)
            else:
                t0 = time.perf_counter()
                inputs = {t: local[t] for t in data}
                y = self._fwd(plan, i, inputs)
                saved[i] = inputs
                clock.add("compute", t0)
            local[node.output[0]] = y
        gathered = {t: self._gather(plan, t, local[t], clock) for t in plan.gathered}
        # What stays alive for the backward pass: the saved inputs of every node and the gathered tensors.
        kept = {id(v): v.nbytes for d in saved.values() for v in d.values()}
        kept.update({id(v): v.nbytes for v in gathered.values()})
        activation_bytes = sum(kept.values())
        del local
        outputs, gradients, dx = {}, {}, None
        t0 = time.perf_counter()
        other = {k: np.asarray(v) for k, v in feeds.items() if k != self.input_name}
        tail_inputs = {k: v for k, v in other.items() if any(k in n.input for n in plan.tail_nodes)}
        if loss is None:
            if plan.tail_nodes:
                tail = self._tail_executor(plan, gathered, False)
                outputs = tail.inference({**gathered, **tail_inputs})
            outputs.update({o.name: gathered[o.name] for o in plan.model.graph.output if o.name in gathered})
            clock.add("compute", t0)
        else:
            tail = self._tail_executor(plan, gathered, True)
            for k, v in gathered.items():
                tail.network.feed_tensor(k, v)
            outputs = tail.inference_and_backprop(tail_inputs, loss)
            tail_params = [p for p, _ in tail.network.gradient(loss)]
            values = dict(zip(tail_params, tail.network.fetch_tensors([p + "_grad" for p in tail_params])))
            grad_local = {}
            for k in gathered:
                if k in values:
                    b = self.block(plan.shapes[k])
                    grad_local[k] = np.ascontiguousarray(values.pop(k)[:, :, b[0]:b[1], b[2]:b[3]])
            clock.add("compute", t0)
            partial = self._backward(plan, saved, grad_local, clock, batch_stats)
            dx = grad_local.get(self.input_name)
            t0 = time.perf_counter()
            if self.size > 1:
                self.comm.barrier()
            t0 = clock.add("idle", t0)
            if partial:
                names = sorted(partial)
                flat = np.concatenate([partial[k].reshape(-1).astype(np.float32) for k in names])
                flat = self.comm.allreduce(flat, "sum") if self.size > 1 else flat
                off = 0
                for k in names:
                    n = partial[k].size
                    gradients[k] = flat[off:off + n].reshape(partial[k].shape).astype(partial[k].dtype)
                    off += n
            t0 = clock.add("allreduce", t0)
            for k, v in values.items():
                gradients[k] = gradients[k] + v if k in gradients else v
        if running:
            self._keep_statistics(running)
        total = time.perf_counter() - start
        clock.t["total"] = total
        clock.t["other"] = max(0.0, total - sum(clock.t[k] for k in TIME_KEYS if k not in ("other", "total")))
        return SpatialResult(outputs, gradients, dx, dict(clock.t), int(activation_bytes), block, running)

    # ------------------------------------------------------ batch normalization
    def _sum_over_ranks(self, x, clock, t0):
        """``x`` summed over the ranks (float64), timed as allreduce from ``t0``."""
        t0 = clock.add("compute", t0)
        if self.size > 1:
            x = self.comm.allreduce(np.ascontiguousarray(x, np.float64), "sum")
        clock.add("allreduce", t0)
        return x

    def _bn_statistics(self, plan, i, x, clock):
        """The batch mean and biased variance of BatchNormalization node ``i`` over every rank's
        block (two passes: the mean, then the centred sum of squares; float32 elements summed in
        float64), and the new running statistics by ONNX's rule."""
        node = plan.nodes[i]
        full = plan.shapes[node.input[0]]
        count = float(np.prod(full)) / full[1]
        axes = (0,) + tuple(range(2, x.ndim))
        t0 = time.perf_counter()
        mean = self._sum_over_ranks(x.sum(axis=axes, dtype=np.float64), clock, t0) / count
        t0 = time.perf_counter()
        centred = x - mean.astype(x.dtype).reshape((1, -1) + (1,) * (x.ndim - 2))
        var = self._sum_over_ranks(np.square(centred).sum(axis=axes, dtype=np.float64), clock, t0) / count
        t0 = time.perf_counter()
        momentum = 0.9
        for a in node.attribute:
            if a.name == "momentum":
                momentum = float(onnx.helper.get_attribute_value(a))
        new = {}
        for t, stat in zip(node.input[3:5], (mean, var)):
            old = plan.params[t]
            new[t] = (old.astype(np.float64) * momentum + stat.reshape(old.shape) * (1 - momentum)).astype(old.dtype)
        clock.add("compute", t0)
        return (mean, var), new

    def _bn_backward(self, plan, i, x, gy, stats, clock):
        """The gradients of BatchNormalization node ``i`` with batch statistics: the executor's
        gradients with the statistics held constant, then the input's gradient corrected by the
        per-channel sums of dy and dy * xhat over every rank (the statistics' dependence on x)."""
        node = plan.nodes[i]
        t0 = time.perf_counter()
        grads = self._bwd(plan, i, {node.input[0]: x}, gy, stats=stats)
        full = plan.shapes[node.input[0]]
        count = float(np.prod(full)) / full[1]
        axes = (0,) + tuple(range(2, x.ndim))
        shape = (1, -1) + (1,) * (x.ndim - 2)
        eps = 1e-5
        for a in node.attribute:
            if a.name == "epsilon":
                eps = float(onnx.helper.get_attribute_value(a))
        mean, var = (np.asarray(v, x.dtype) for v in stats)
        inv_std = (1 / np.sqrt(var + x.dtype.type(eps))).astype(x.dtype)
        xhat = (x - mean.reshape(shape)) * inv_std.reshape(shape)
        sums = np.concatenate([gy.sum(axis=axes, dtype=np.float64), (gy * xhat).sum(axis=axes, dtype=np.float64)])
        sums = self._sum_over_ranks(sums, clock, t0).astype(x.dtype)
        t0 = time.perf_counter()
        c = mean.size
        k = (np.asarray(plan.params[node.input[1]], x.dtype).reshape(-1) * inv_std / x.dtype.type(count)).reshape(shape)
        dx = grads[node.input[0]] - k * (sums[:c].reshape(shape) + xhat * sums[c:].reshape(shape))
        grads[node.input[0]] = dx.astype(x.dtype, copy=False)
        clock.add("compute", t0)
        return grads

    def _keep_statistics(self, values: dict) -> None:
        """Store new running statistics in the model and every cached plan (the BatchNormalization
        models read them as inputs, so no executor is rebuilt)."""
        from onnx import numpy_helper

        for init in self.model.graph.initializer:
            if init.name in values:
                init.CopyFrom(numpy_helper.from_array(values[init.name], init.name))
        for plan in self._plans.values():
            for k, v in values.items():
                if k in plan.params:
                    plan.params[k] = v

    def _backward(self, plan, saved, grad_local, clock, batch_stats):
        partial: dict = {}
        for i in range(len(plan.nodes) - 1, -1, -1):
            node = plan.nodes[i]
            gy = grad_local.pop(node.output[0], None)
            if gy is None:
                continue
            if i in plan.geometry:
                (ext,) = saved[i].values()
                dx, grads = self._halo_backward(plan, i, ext, gy, clock)
                grads[node.input[0]] = dx
            elif i in batch_stats:
                grads = self._bn_backward(plan, i, saved[i][node.input[0]], gy, batch_stats[i], clock)
            else:
                t0 = time.perf_counter()
                grads = self._bwd(plan, i, saved[i], gy)
                clock.add("compute", t0)
            for k, g in grads.items():
                target = grad_local if k in plan.spatial else partial
                target[k] = target[k] + g if k in target else g
        return partial

    def _tail_executor(self, plan, gathered, trainable):
        key = ("t", trainable, tuple((k, v.shape) for k, v in gathered.items()))
        ex, _ = self._executor(key, lambda: (tail_model(plan, gathered, trainable), {}))
        return ex

    def forward(self, feeds: dict, input_is_local: bool = False) -> SpatialResult:
        """Run the network forward (inference mode); returns outputs and the time split."""
        return self._run(feeds, None, input_is_local)

    def forward_backward(self, feeds: dict, loss: str = "loss", input_is_local: bool = False) -> SpatialResult:
        """Run forward and backward from the scalar ``loss`` (a tensor of the tail).

        Returns:
            A :class:`SpatialResult` with every parameter's full gradient (summed over ranks for
            the split part) and this rank's block of the split input's gradient.
        """
        return self._run(feeds, loss, input_is_local)


def run_spatial(comm, network, batches, framework: str = "torch", loss: str | None = "loss",
                input_name: str | None = None, overlap: bool = True, grid: tuple | None = None,
                batchnorm: str = "batch") -> tuple[list, dict]:
    """Run ``network`` spatially split over ``comm`` on each batch (the entry point for workers).

    Args:
        comm: the communicator (every rank calls this with the same batches).
        network: a :class:`~deep500lite.Network`, ONNX model or file.
        batches: an iterable of feed dicts (full tensors).
        framework: the executor of the local computations.
        loss: the scalar to backpropagate from, or ``None`` for inference only.
        input_name: the input to split (default: the first graph input).
        overlap: overlap the interior computation with the halo exchange.
        grid: ``(rows, columns)`` of ranks (default: split the height only).
        batchnorm: ``"batch"`` or ``"running"`` statistics when training (see
            :class:`SpatialParallelNetwork`).

    Returns:
        ``(results, times)``: one :class:`SpatialResult` per batch and the summed time split
        (:data:`TIME_KEYS`) of this rank.
    """
    spn = SpatialParallelNetwork(comm, network, input_name, framework, overlap, grid=grid, batchnorm=batchnorm)
    results = []
    totals = dict.fromkeys(TIME_KEYS, 0.0)
    for feeds in batches:
        res = spn.forward(feeds) if loss is None else spn.forward_backward(feeds, loss)
        results.append(res)
        for k in TIME_KEYS:
            totals[k] += res.times[k]
    return results, totals
