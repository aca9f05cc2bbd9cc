"""The scaling model: predicted step time of synchronous data-parallel training on 1 to thousands of nodes.

A step on ``P`` nodes, each with ``per_node`` accelerators and a per-accelerator batch ``b``, is
modelled as (docs/scaling.md derives each part)::

    step = exposed_io + forward(b) + max(backward(b), allreduce timeline) + update

- **compute** (:func:`layer_time`): a roofline per layer and pass, ``max(FLOP / (peak * eff),
  bytes / bandwidth) + launch``, where ``eff = efficiency * m / (m + m_half)`` falls as the GEMM
  dimension ``m = gemm_m * b`` that grows with the batch shrinks (the seed's "skinny" GEMMs), and
  ``launch`` is a fixed cost per layer and pass; the backward pass of a layer with weights does
  twice the forward FLOP (gradients of the input and of the weights). ``update`` (the optimizer,
  20 bytes per parameter: read weight, gradient, momentum; write weight, momentum) does not shrink
  with ``b``: with the launches it is the Amdahl part that does not scale. Or, layer by layer,
  times measured through an executor (:class:`MeasuredCompute`, from ``model layers``),
  interpolated in the batch (:func:`interpolate_time`), with the executor's per-call cost; by
  default scaled per batch so that they add up to the whole network measured beside them
  (:func:`network_factors`: on a GPU one layer alone is a synchronised call around a few
  microseconds of kernel, while the whole network's launches overlap).
- **communication** (:func:`allreduce_timeline`): the gradients, ready layer by layer in reverse
  order during the backward pass, are fused into buckets of ``fusion_bytes`` (tensor fusion); each
  bucket is allreduced as soon as it is full and the previous one is done (overlap with the
  backward pass), with the algorithm ``auto`` picks (or a named one) and the alpha-beta costs of
  :mod:`deep500lite.lv3.allreduce`. With several accelerators per node the allreduce is
  hierarchical: a ring reduce-scatter and allgather inside the node and, between nodes, each
  accelerator's ``1/per_node`` share with the node's link shared by all of them.
- **I/O** (:class:`IOModel`): each accelerator reads ``b`` samples per step, as one file each
  (``small-files``: a per-file latency) or from packed shards, with the file system's aggregate
  bandwidth shared by all; prefetching hides it behind the step when it is shorter.

Strong scaling keeps the global batch ``B`` (``b = B / (P * per_node)``; below one sample per
accelerator no more nodes can be used: the seed's hard limit ``b > 0``), weak scaling keeps ``b``.
"""

from __future__ import annotations

import dataclasses
import functools
import math

from deep500lite.perfmodel.scaling_networks import Accelerator, Interconnect, ModelDescription
from deep500lite.errors import UserError, format_choices
from deep500lite.perfmodel.alphabeta import P2P_ALGORITHMS, AlphaBeta, allreduce_cost, choose_algorithm

__all__ = ["IOModel", "ScalingSetup", "StepPrediction", "ScalingResult", "IO_PATTERNS", "MODES", "layer_time",
           "MeasuredCompute", "interpolate_time", "network_factors", "compute_times", "allreduce_timeline",
           "predict_step", "scaling_sweep", "parse_nodes", "allreduce_table", "expected_max_normal"]

MODES = ("strong", "weak")
IO_PATTERNS = {"packed": 0.0, "small-files": 1e-3}
_UPDATE_BYTES_PER_PARAM = 20
_F32 = 4


@dataclasses.dataclass(frozen=True)
class IOModel:
    """Reading the training samples.

    Attributes:
        sample_bytes: bytes per sample on disk.
        pattern: ``packed`` (shards read sequentially: no per-file cost) or ``small-files`` (one
            file per sample, opened at random: ``file_latency`` each).
        file_latency: seconds per file opened (metadata and seek); default per pattern
            (:data:`IO_PATTERNS`: 0 and 1 ms, an assumption for a parallel file system).
        node_bandwidth: bytes/s one accelerator can read (its node's link or disk share).
        fs_bandwidth: aggregate bytes/s of the shared file system (divided among all accelerators).
    """

    sample_bytes: float = 110_000
    pattern: str = "packed"
    file_latency: float | None = None
    node_bandwidth: float = math.inf
    fs_bandwidth: float = math.inf

    @classmethod
    def from_dataset_bench(cls, data: dict, pattern: str = "packed", sample_bytes: float | None = None,
                           fs_bandwidth: float = math.inf) -> "IOModel":
        """An I/O model from ``deep500lite bench dataset --json`` output (measured on this machine).

        The shard's warm throughput gives the bandwidth per accelerator (its bytes per sample times
        samples per second); the difference of the per-sample times of the small files and of the
        shard gives the per-file latency.

        Args:
            data: the JSON of ``bench dataset``.
            pattern: ``packed`` or ``small-files``.
            sample_bytes: bytes per sample of the network modelled (default: the benchmark's).
            fs_bandwidth: aggregate file-system bytes/s.
        """
        try:
            rate = data["throughput_samples_per_s"]
            files, shard = float(rate["files"]["median"]), float(rate["shard"]["median"])
            per_sample = float(data["bytes"]["shard"]) / float(data["samples"])
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"Not the JSON of 'deep500lite bench dataset --json': missing {exc}. Received: "
                            f"{format_choices(sorted(map(str, data))) if isinstance(data, dict) else data!r}"
                            ) from None
        return cls(sample_bytes=per_sample if sample_bytes is None else sample_bytes, pattern=pattern,
                   file_latency=max(0.0, 1 / files - 1 / shard) if pattern == "small-files" else 0.0,
                   node_bandwidth=per_sample * shard,
                   fs_bandwidth=fs_bandwidth)

    def seconds(self, batch: float, accelerators: int) -> float:
        """Seconds to read ``batch`` samples on each of ``accelerators`` at once."""
        if self.pattern not in IO_PATTERNS:
            raise UserError(f"Unknown I/O pattern. Allowed values are {format_choices(IO_PATTERNS)}. "
                            f"Received: {self.pattern!r}")
        latency = IO_PATTERNS[self.pattern] if self.file_latency is None else self.file_latency
        bw = min(self.node_bandwidth, self.fs_bandwidth / max(accelerators, 1))
        per_sample = latency + (0.0 if math.isinf(bw) else self.sample_bytes / bw)
        return batch * per_sample


@dataclasses.dataclass(frozen=True)
class ScalingSetup:
    """Everything but the node count and the batch.

    Attributes:
        model: the network.
        network: the interconnect between nodes.
        accelerator: one accelerator.
        per_node: accelerators per node.
        intra: the link between the accelerators of one node (used when ``per_node > 1``).
        algorithm: ``auto`` or one of :data:`~deep500lite.lv3.allreduce.P2P_ALGORITHMS`.
        fusion_bytes: tensor-fusion bucket size (0: one allreduce per layer; default 25 MiB, PyTorch
            DDP's ``bucket_cap_mb``; Horovod's fusion buffer is 64 MiB).
        overlap: allreduce buckets while the backward pass goes on (False: all after it).
        io: the :class:`IOModel`.
        compute_scale: factor on every compute time (1: the roofline; a measured step divided by
            the roofline's prediction calibrates the compute model to a real executor).
        allreduce_model: a fitted :class:`~deep500lite.perfmodel.allreduce.CalibratedModel` (or None):
            when given, allreduces cost what it predicts for the node count instead of the
            network's alpha-beta figures (for predicting runs on the machine it was fitted on); a
            bucket that waited for compute is a cold call, with the model's measured cold cost.
        host_cores: None, or the cores of the one host every rank runs on (predicting ``run -n P``
            on one machine): with more ranks than cores they time-share them, and each rank's
            compute takes ``accelerators / host_cores`` times as long.
        measured: None, or a :class:`MeasuredCompute`: layers it holds take their measured
            forward and backward times instead of the roofline's (``model scaling --compute-from``).
        jitter: the coefficient of variation (standard deviation / mean) of one accelerator's
            compute per step (system noise, uneven work). A synchronous step waits for the slowest
            of its ``P`` accelerators: ``jitter * compute * E[max of P standard normals]`` is added
            to each step with more than one accelerator (0: no such wait).
    """

    model: ModelDescription
    network: Interconnect
    accelerator: Accelerator
    per_node: int = 1
    intra: Interconnect | None = None
    algorithm: str = "auto"
    fusion_bytes: int = 25 << 20
    overlap: bool = True
    io: IOModel = IOModel()
    compute_scale: float = 1.0
    allreduce_model: object = None
    host_cores: int | None = None
    measured: MeasuredCompute | None = None
    jitter: float = 0.0

    def __post_init__(self):
        if not (self.jitter >= 0 and math.isfinite(self.jitter)):
            raise UserError(f"jitter is a coefficient of variation, a finite number >= 0 (0.05 means 5%). "
                            f"Received: {self.jitter!r}")
        if self.algorithm != "auto" and self.algorithm not in P2P_ALGORITHMS:
            raise UserError(f"Unknown allreduce algorithm. Allowed values are "
                            f"{format_choices(('auto',) + P2P_ALGORITHMS)}. Received: {self.algorithm!r}")
        if self.per_node < 1 or self.fusion_bytes < 0:
            raise UserError(f"per_node must be >= 1 and fusion_bytes >= 0. Received: per_node={self.per_node}, "
                            f"fusion_bytes={self.fusion_bytes}")


def layer_time(layer, batch: float, acc: Accelerator, backward: bool = False) -> float:
    """Roofline seconds of one layer's forward (or backward) pass on ``batch`` samples (see the module docstring)."""
    flops = 2.0 * layer.macs * batch
    moved = (layer.in_elems + layer.out_elems) * batch * _F32 + layer.params * _F32
    if backward:
        flops *= 2.0 if layer.params else 1.0
        moved = 2 * moved + layer.params * _F32
    eff = acc.efficiency
    if layer.kind in ("conv", "fc"):
        m = layer.gemm_m * batch
        eff *= m / (m + acc.m_half)
    compute = flops / (acc.flops * eff) if flops else 0.0
    return max(compute, moved / acc.bandwidth) + acc.launch


def interpolate_time(batches, times, batch: float, shape) -> float:
    """A layer's time at ``batch`` from its times measured at ``batches``.

    Between two measured batches: linear in log(batch)-log(time) (linear in batch where one of the
    two times is 0). Outside them: the nearest measured time scaled by ``shape(batch) /
    shape(nearest)`` (the roofline's dependence on the batch); likewise with one measured batch.

    Args:
        batches: increasing measured batches.
        times: the measured seconds (None: not measured at that batch, left out).
        batch: the batch wanted.
        shape: ``shape(b)``, the model's seconds at ``b`` (the roofline), used outside the range.
    """
    pts = [(float(b), float(t)) for b, t in zip(batches, times) if t is not None]
    if not pts:
        raise UserError(f"A layer needs at least one measured time to interpolate. Received: times={list(times)}")
    lo, hi = pts[0], pts[-1]
    if batch <= lo[0] or batch >= hi[0]:
        b0, t0 = lo if batch <= lo[0] else hi
        ref = shape(b0)
        return t0 * shape(batch) / ref if ref > 0 else t0
    for (b0, t0), (b1, t1) in zip(pts, pts[1:]):
        if b0 <= batch <= b1:
            if t0 > 0 and t1 > 0:
                w = math.log(batch / b0) / math.log(b1 / b0)
                return math.exp(math.log(t0) + w * math.log(t1 / t0))
            return t0 + (t1 - t0) * (batch - b0) / (b1 - b0)
    raise AssertionError("unreachable: batch lies between two measured batches")


@dataclasses.dataclass(frozen=True)
class MeasuredCompute:
    """Per-layer forward and backward seconds measured through an executor (``model layers --json``).

    Attributes:
        batches: the measured per-node batches, increasing.
        layers: layer name -> ``(forward seconds per batch, backward seconds per batch)``.
        overhead_forward, overhead_backward: the executor's per-call cost of each pass: a part of
            the step that does not shrink with the batch (Amdahl's serial part).
        framework, device: where they were measured.
        source: the file they come from.
        update: None, or the optimizer update's seconds per batch measured on the whole network
            (its ``optimizer.step`` minus ``inference_and_backprop``); None keeps the roofline's.
        model: the name of the network measured.
        network_forward, network_backward: None, or the whole network's forward and backward
            seconds per batch, measured beside the layers (None entries: not measured).
        layer_sum: keep the layers' times as measured even with the whole network's at hand
            (``--layer-sum``); otherwise they are scaled to it (see :attr:`mode`).
    """

    batches: tuple
    layers: dict
    overhead_forward: float = 0.0
    overhead_backward: float = 0.0
    framework: str = ""
    device: str = ""
    source: str = ""
    update: tuple | None = None
    model: str = ""
    network_forward: tuple | None = None
    network_backward: tuple | None = None
    layer_sum: bool = False

    @property
    def mode(self) -> str:
        """``network``: each pass's measured layers scaled, per batch, so that with the roofline layers and the
        per-call cost they add up to the whole network measured (:func:`network_factors`); ``layer-sum``: the
        layers as measured (``layer_sum`` set, or no whole-network times)."""
        return "layer-sum" if self.layer_sum or self.network_forward is None else "network"

    @classmethod
    def from_layer_times(cls, data: dict, source: str = "", layer_sum: bool = False) -> "MeasuredCompute":
        """From the dict of :func:`deep500lite.perfmodel.layers.measure_layers` (checked beforehand).

        Args:
            data: the ``model layers --json`` dict.
            source: the file it was read from.
            layer_sum: sum the layers as measured instead of scaling them to the whole network.
        """
        layers = {la["name"]: (tuple(la["forward"]), tuple(la["backward"])) for la in data["layers"]
                  if la["status"] == "measured"}
        over = data["overhead"]
        net = data["network"]
        update = net.get("update")
        fwd = tuple(net["forward"])
        bwd = net.get("backward") or [None if f is None or s is None else max(0.0, s - f)
                                      for f, s in zip(fwd, net["step"])]
        return cls(tuple(int(b) for b in data["batches"]), layers, float(over["forward"]),
                   float(over["backward"]), str(data.get("framework", "")), str(data.get("device", "")), source,
                   tuple(update) if update and any(u is not None for u in update) else None,
                   str(data.get("model", "")), fwd, tuple(bwd), bool(layer_sum))

    def matched(self, model: ModelDescription) -> int:
        """How many of ``model``'s layers have measured times."""
        return sum(layer.name in self.layers for layer in model.layers)


def _layer_times(model: ModelDescription, batch: float, acc: Accelerator, measured: MeasuredCompute | None):
    """Unscaled ``(forward per layer, backward per layer, measured?)`` at ``batch``, without the per-call cost."""
    fwd, bwd, mine = [], [], []
    for layer in model.layers:
        f = layer_time(layer, batch, acc)
        b = layer_time(layer, batch, acc, backward=True)
        hit = False
        if measured is not None and layer.name in measured.layers:
            mf, mb = measured.layers[layer.name]
            if any(t is not None for t in mf):
                f = interpolate_time(measured.batches, mf, batch, lambda x, la=layer: layer_time(la, x, acc))
                b = interpolate_time(measured.batches, mb, batch,
                                     lambda x, la=layer: layer_time(la, x, acc, backward=True))
                hit = True
        fwd.append(f)
        bwd.append(b)
        mine.append(hit)
    return fwd, bwd, mine


def network_factors(model: ModelDescription, acc: Accelerator, measured: MeasuredCompute):
    """Per measured batch, the factors that scale the measured layers to the whole network measured.

    At batch ``b`` the forward factor is ``(whole forward - per-call cost - roofline layers) / (sum of
    the measured layers)``, the backward one likewise: scaled by them, the layers, the roofline
    layers (``model``'s layers the file does not hold, at ``acc``) and the per-call cost add up to
    the whole network measured at ``b``; the split between the layers stays the measured one.

    Args:
        model: the network predicted (its layer names are matched with the file's).
        acc: the accelerator of the roofline layers.
        measured: the measured times, with the whole network's.

    Returns:
        None when ``measured`` has no whole-network times or none of ``model``'s layers is measured;
        else ``(forward factors, backward factors)``, one per measured batch, None where the whole
        network leaves nothing for the measured layers (or was not measured at that batch).
    """
    if measured.network_forward is None or not measured.matched(model):
        return None
    out_f, out_b = [], []
    for i, b in enumerate(measured.batches):
        fwd, bwd, mine = _layer_times(model, b, acc, measured)
        for times, whole, over, out in ((fwd, measured.network_forward[i], measured.overhead_forward, out_f),
                                        (bwd, measured.network_backward[i], measured.overhead_backward, out_b)):
            layers = sum(t for t, m in zip(times, mine) if m)
            left = None if whole is None else whole - over - sum(t for t, m in zip(times, mine) if not m)
            out.append(left / layers if left is not None and left > 0 and layers > 0 else None)
    return tuple(out_f), tuple(out_b)


def _factor(batches, factors, batch: float, what: str, measured: MeasuredCompute) -> float:
    """One pass's factor at ``batch``: interpolated like the times between measured batches, the nearest outside."""
    if all(k is None for k in factors):
        raise UserError(f"--compute-from {measured.source!r}: the whole network measured at batches "
                        f"{', '.join(map(str, batches))} leaves no {what} time for the measured layers once the "
                        f"per-call cost and the roofline layers are taken off; scaling the layers to it needs a "
                        f"whole-network time above those at one batch at least, or --layer-sum sums the layers as "
                        f"measured. Received: whole-network {what} "
                        f"{list(measured.network_forward if what == 'forward' else measured.network_backward)} s")
    return interpolate_time(batches, factors, batch, lambda b: 1.0)


def compute_times(model: ModelDescription, batch: float, acc: Accelerator, scale: float = 1.0,
                  measured: MeasuredCompute | None = None):
    """``(forward seconds per layer, backward seconds per layer, update seconds)`` for ``batch`` samples,
    each multiplied by ``scale``.

    With ``measured``, the layers it holds take their measured times (:func:`interpolate_time`,
    the roofline giving the shape outside the measured batches) and the executor's per-call cost
    is added to the first layer of each pass; the other layers stay the roofline's, and so does
    the update unless ``measured.update`` holds a measured one (constant outside its batches).
    In ``measured.mode`` ``network`` the measured layers of each pass are multiplied by the factor
    of :func:`network_factors`, interpolated in the batch like the times (log-log between two
    measured batches) and constant outside them (the nearest batch's).
    """
    fwd, bwd, mine = _layer_times(model, batch, acc, measured)
    factors = network_factors(model, acc, measured) if measured is not None and measured.mode == "network" else None
    if factors is not None:
        kf = _factor(measured.batches, factors[0], batch, "forward", measured)
        kb = _factor(measured.batches, factors[1], batch, "backward", measured)
        fwd = [t * kf if m else t for t, m in zip(fwd, mine)]
        bwd = [t * kb if m else t for t, m in zip(bwd, mine)]
    fwd = [scale * t for t in fwd]
    bwd = [scale * t for t in bwd]
    if measured is not None and fwd:
        fwd[0] += scale * measured.overhead_forward
        bwd[0] += scale * measured.overhead_backward
    if measured is not None and measured.update is not None:
        update = scale * interpolate_time(measured.batches, measured.update, batch, lambda b: 1.0)
    else:
        update = scale * (model.params * _UPDATE_BYTES_PER_PARAM / acc.bandwidth + acc.launch)
    return fwd, bwd, update


def _non_scaling(setup: "ScalingSetup", update: float, share: float) -> float:
    """Seconds of the step that do not shrink with the batch: the update, the launches of roofline layers, and
    the measured per-call cost of the executor."""
    layers = setup.model.layers
    scale = setup.compute_scale * share
    measured = setup.measured
    if measured is None:
        return update + 2 * len(layers) * setup.accelerator.launch * scale
    roofline = sum(layer.name not in measured.layers for layer in layers)
    return update + scale * (2 * roofline * setup.accelerator.launch + measured.overhead_forward
                             + measured.overhead_backward)


def _allreduce_seconds(nbytes: float, setup: ScalingSetup, nodes: int, cold: bool = False) -> tuple[float, str]:
    """Seconds and algorithm of one allreduce of ``nbytes`` per accelerator over the whole job.

    ``cold``: the call starts right after compute; a calibrated model then adds its measured cold cost.
    """
    k = setup.per_node
    gamma = 3.0 / setup.accelerator.bandwidth  # a float32 sum reads two and writes one element per element
    total = 0.0
    if k > 1:
        intra = setup.intra
        if intra is None:
            raise UserError("Several accelerators per node need the intra-node link (intra=). Received: intra=None")
        # ring reduce-scatter then allgather inside the node
        total += 2 * (k - 1) * intra.alpha + 2 * (k - 1) / k * nbytes * intra.beta + (k - 1) / k * nbytes * gamma
    name = "-"
    if nodes > 1 and setup.allreduce_model is not None and k == 1:
        model = setup.allreduce_model
        name = choose_algorithm(int(nbytes), nodes, model) if setup.algorithm == "auto" else setup.algorithm
        return model.cost(name, int(nbytes), nodes, cold=cold), name
    if nodes > 1:
        share = nbytes / k
        ab = AlphaBeta(setup.network.alpha, setup.network.beta * k, gamma)
        name = choose_algorithm(int(share), nodes, ab) if setup.algorithm == "auto" else setup.algorithm
        total += allreduce_cost(name, int(share), nodes, ab)
    return total, name


def allreduce_timeline(grad_ready, grad_bytes, backward_end: float, setup: ScalingSetup, nodes: int):
    """Fused, overlapped allreduces of the gradients.

    Args:
        grad_ready: for each layer in backward order, the time its gradient is ready.
        grad_bytes: for each layer in the same order, its gradient's bytes.
        backward_end: when the backward pass ends.
        setup: the :class:`ScalingSetup`.
        nodes: the node count.

    Returns:
        ``(end time of the last allreduce, total allreduce seconds, buckets, algorithms used)``.
    """
    buckets, size, ready = [], 0.0, 0.0
    for t, nbytes in zip(grad_ready, grad_bytes):
        if not nbytes:
            continue
        size += nbytes
        ready = t if setup.overlap else backward_end
        if size >= setup.fusion_bytes:
            buckets.append((ready, size))
            size = 0.0
    if size:
        buckets.append((ready, size))
    end, busy, algorithms = 0.0, 0.0, set()
    for ready, nbytes in buckets:
        # a bucket that waited for compute (the step's first, and any the link was idle for) starts cold
        seconds, name = _allreduce_seconds(nbytes, setup, nodes, cold=ready > end)
        if seconds > 0:
            algorithms.add(name)
            end = max(end, ready) + seconds
            busy += seconds
    return end, busy, len(buckets), sorted(algorithms)


@dataclasses.dataclass
class StepPrediction:
    """One predicted training step.

    Attributes:
        nodes: node count; ``accelerators`` = nodes * per_node.
        batch: samples per accelerator; ``global_batch`` over the job.
        step: predicted seconds per step.
        forward, backward, update: compute seconds.
        comm: seconds the allreduces take in all; ``comm_exposed``: the part not hidden behind backward.
        io: seconds of reading per step; ``io_exposed``: the part prefetching cannot hide.
        buckets: fused allreduces per step; ``algorithms``: those used.
        non_scaling: seconds of the step that do not shrink with the per-accelerator batch (the
            update and every layer's fixed launch cost): Amdahl's serial part.
        straggler: seconds the step waits for its slowest accelerator (``ScalingSetup.jitter``),
            included in ``step``.
        throughput: samples per second over the job.
    """

    nodes: int
    accelerators: int
    batch: float
    global_batch: float
    step: float
    forward: float
    backward: float
    update: float
    comm: float
    comm_exposed: float
    io: float
    io_exposed: float
    buckets: int
    algorithms: list
    non_scaling: float = 0.0
    straggler: float = 0.0

    @property
    def compute(self) -> float:
        """Forward + backward + update seconds."""
        return self.forward + self.backward + self.update

    @property
    def throughput(self) -> float:
        """Samples per second."""
        return self.global_batch / self.step


def predict_step(setup: ScalingSetup, nodes: int, batch: float) -> StepPrediction:
    """Predict one step on ``nodes`` nodes with ``batch`` samples per accelerator."""
    if nodes < 1 or not batch > 0:
        raise UserError(f"nodes must be >= 1 and the per-accelerator batch > 0. Received: nodes={nodes}, "
                        f"batch={batch}")
    accelerators = nodes * setup.per_node
    share = max(1.0, accelerators / setup.host_cores) if setup.host_cores else 1.0
    fwd, bwd, update = compute_times(setup.model, batch, setup.accelerator, setup.compute_scale * share,
                                     setup.measured)
    forward, backward = sum(fwd), sum(bwd)
    ready, t = [], 0.0
    for seconds in reversed(bwd):
        t += seconds
        ready.append(t)
    grad = [layer.params * _F32 for layer in reversed(setup.model.layers)]
    end, busy, buckets, algorithms = allreduce_timeline(ready, grad, backward, setup, nodes)
    free = setup.allreduce_model is None and setup.network.alpha == 0 and setup.network.beta == 0 and (
        setup.per_node == 1 or (setup.intra.alpha == 0 and setup.intra.beta == 0))
    if accelerators == 1 or free:  # free communication: the seed's "assuming free communication"
        end, busy, buckets, algorithms = 0.0, 0.0, 0, []
    after_forward = max(backward, end) + update
    io = setup.io.seconds(batch, accelerators)
    io_exposed = max(0.0, io - (forward + after_forward))
    fixed = _non_scaling(setup, update, share)
    wait = setup.jitter * (forward + backward + update) * expected_max_normal(accelerators)
    return StepPrediction(nodes, accelerators, batch, batch * accelerators,
                          io_exposed + forward + after_forward + wait, forward, backward, update, busy,
                          max(0.0, end - backward), io, io_exposed, buckets, algorithms, fixed, wait)


@functools.lru_cache(maxsize=None)
def expected_max_normal(n: int) -> float:
    """``E[max(Z_1..Z_n)]`` for ``n`` independent standard normal variables (0 for ``n = 1``).

    The integral of ``z * n * phi(z) * Phi(z)^(n-1)`` by the trapezoid rule on [-12, 12]. Exact
    values to compare: ``1/sqrt(pi)`` for ``n = 2``, ``3 / (2 sqrt(pi))`` for ``n = 3``; it grows
    like ``sqrt(2 ln n)``: about 3.6 at 4,096.
    """
    import numpy as np

    if not isinstance(n, int) or n < 1:
        raise UserError(f"n must be a whole number >= 1. Received: {n!r}")
    if n == 1:
        return 0.0
    z = np.linspace(-12.0, 12.0, 48001)
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
    trapezoid = getattr(np, "trapezoid", None) or np.trapz  # numpy < 2 has only trapz
    return float(trapezoid(z * n * pdf * cdf ** (n - 1), z))


@dataclasses.dataclass
class ScalingResult:
    """A sweep over node counts.

    Attributes:
        setup: the :class:`ScalingSetup`.
        mode: ``strong`` or ``weak``.
        batch: the global batch (strong) or the per-accelerator batch (weak).
        rows: one :class:`StepPrediction` per feasible node count.
        infeasible: node counts left out (strong scaling: below one sample per accelerator).
        stop: the node count where scaling stops (None if it never does within the sweep).
        reason: why it stops there.
        min_efficiency: the efficiency below which scaling is taken to have stopped.
        baseline: one accelerator alone (no communication) with the same per-accelerator batch
            (weak) or the whole global batch (strong): what speedups are relative to.
    """

    setup: ScalingSetup
    mode: str
    batch: float
    rows: list
    infeasible: list
    stop: int | None
    reason: str
    min_efficiency: float
    baseline: StepPrediction | None = None

    def speedup(self, row: StepPrediction) -> float:
        """Throughput relative to :attr:`baseline` (one accelerator)."""
        return row.throughput / self.baseline.throughput

    def efficiency(self, row: StepPrediction) -> float:
        """Speedup divided by the number of accelerators."""
        return self.speedup(row) / row.accelerators

    def to_dict(self) -> dict:
        """JSON-ready form."""
        s = self.setup
        return {
            "model": {"name": s.model.name, "params": s.model.params, "gradient_bytes": s.model.gradient_bytes,
                      "forward_macs_per_sample": s.model.macs, "source": s.model.source},
            "network": dataclasses.asdict(s.network) | {"beta": s.network.beta},
            "accelerator": dataclasses.asdict(s.accelerator), "per_node": s.per_node,
            "intra": None if s.intra is None else dataclasses.asdict(s.intra),
            "algorithm": s.algorithm, "fusion_bytes": s.fusion_bytes, "overlap": s.overlap,
            "io": dataclasses.asdict(s.io), "mode": self.mode, "batch": self.batch,
            "compute_from": None if s.measured is None else {
                "source": s.measured.source, "framework": s.measured.framework, "device": s.measured.device,
                "batches": list(s.measured.batches), "layers_measured": s.measured.matched(s.model),
                "layers": len(s.model.layers), "overhead_forward": s.measured.overhead_forward,
                "overhead_backward": s.measured.overhead_backward,
                "update": None if s.measured.update is None else list(s.measured.update),
                "mode": s.measured.mode,
                "network_forward": None if s.measured.network_forward is None else list(s.measured.network_forward),
                "network_backward": (None if s.measured.network_backward is None
                                     else list(s.measured.network_backward)),
                "factors": _factors_dict(s)},
            "min_efficiency": self.min_efficiency, "stop": self.stop, "reason": self.reason,
            "baseline": dataclasses.asdict(self.baseline),
            "infeasible": self.infeasible,
            "rows": [dataclasses.asdict(r) | {"speedup": self.speedup(r), "efficiency": self.efficiency(r),
                                              "throughput": r.throughput} for r in self.rows],
        }


def _factors_dict(setup: ScalingSetup):
    """The JSON of :func:`network_factors` (computed in either mode: in ``layer-sum`` they show what was left)."""
    k = network_factors(setup.model, setup.accelerator, setup.measured)
    return None if k is None else {"forward": list(k[0]), "backward": list(k[1])}


def _reason(setup: ScalingSetup, nxt: StepPrediction | None, mode: str) -> str:
    if nxt is None:
        return ("the per-accelerator batch would fall below one sample (the hard limit b > 0)" if mode == "strong"
                else "end of the sweep")
    compute = nxt.forward + nxt.backward
    if nxt.io_exposed >= max(nxt.comm_exposed, 1e-12) and nxt.io_exposed > 0.1 * nxt.step:
        return f"I/O-bound: {nxt.io_exposed * 1e3:.3g} ms per step of reading not hidden by prefetching"
    if nxt.comm_exposed > 0.25 * compute or nxt.comm_exposed > 0.5 * nxt.step:
        return (f"communication-bound: {nxt.comm * 1e3:.3g} ms of allreduce per step, {nxt.comm_exposed * 1e3:.3g} ms "
                f"of it not hidden behind the {nxt.backward * 1e3:.3g} ms backward pass")
    if mode == "strong":
        return (f"compute stops shrinking: per-accelerator batch {nxt.batch:g} (skinny GEMMs) and "
                f"{nxt.non_scaling * 1e3:.3g} ms per step of update and per-layer launches that do not shrink "
                f"(Amdahl)")
    return "efficiency below the threshold"


def scaling_sweep(setup: ScalingSetup, nodes, batch: float, mode: str = "strong",
                  min_efficiency: float = 0.5, min_gain: float = 1.05) -> ScalingResult:
    """Predict every node count in ``nodes`` and find where scaling stops.

    Scaling stops at the last node count before one where the efficiency falls below
    ``min_efficiency``, or where the next node count gains less than ``min_gain`` times the
    speedup, or (strong scaling) where the next node count would leave less than one sample per
    accelerator.

    Args:
        setup: the :class:`ScalingSetup`.
        nodes: increasing node counts.
        batch: the global batch (strong) or the per-accelerator batch (weak).
        mode: ``strong`` or ``weak``.
        min_efficiency: see above.
        min_gain: see above.
    """
    if mode not in MODES:
        raise UserError(f"Unknown scaling mode. Allowed values are {format_choices(MODES)}. Received: {mode!r}")
    nodes = sorted(set(int(n) for n in nodes))
    if not nodes or nodes[0] < 1 or not batch > 0:
        raise UserError(f"Node counts must be >= 1 and the batch > 0. Received: nodes={nodes}, batch={batch}")
    rows, infeasible = [], []
    for n in nodes:
        per_acc = batch / (n * setup.per_node) if mode == "strong" else batch
        if per_acc < 1:
            infeasible.append(n)
            continue
        rows.append(predict_step(setup, n, per_acc))
    if not rows:
        raise UserError(f"No node count leaves at least one sample per accelerator. Received: batch={batch}, "
                        f"nodes={nodes}")
    single = dataclasses.replace(setup, per_node=1)
    baseline = predict_step(single, 1, batch)
    result = ScalingResult(setup, mode, batch, rows, infeasible, None, "", min_efficiency, baseline)
    for prev, nxt in zip(rows, rows[1:] + [None]):
        if nxt is None:
            if infeasible:
                result.stop, result.reason = prev.nodes, _reason(setup, None, mode)
            else:
                result.reason = "scales over the whole sweep"
            break
        if result.efficiency(nxt) < min_efficiency or result.speedup(nxt) < min_gain * result.speedup(prev):
            result.stop, result.reason = prev.nodes, _reason(setup, nxt, mode)
            break
    return result


#: The most nodes a sweep may name (a million) and the most counts in one sweep.
MAX_NODES, MAX_COUNTS = 2**20, 64


def parse_nodes(text: str) -> list[int]:
    """``"1..4096"`` (1, 2, 4, ... 4096: LOW doubled up to HIGH, and HIGH), ``"1,2,8"`` or ``"16"``.

    Raises:
        UserError: ``LOW..HIGH`` out of order, a count below 1 or above :data:`MAX_NODES`, more than
            :data:`MAX_COUNTS` counts, or not numbers.
    """
    text = str(text).strip()
    wording = (f"--nodes must be LOW..HIGH (LOW <= HIGH: LOW, twice LOW, ... up to HIGH, and HIGH), a "
               f"comma-separated list of at most {MAX_COUNTS} counts or one count, each from 1 to {MAX_NODES:,}")
    try:
        if ".." in text:
            lo, hi = (int(x) if len(x.strip()) <= 20 else -1 for x in text.split(".."))
            if not 1 <= lo <= hi <= MAX_NODES:
                raise ValueError
            out, n = [], lo
            while n <= hi:
                out.append(n)
                n *= 2
            return out if out[-1] == hi else out + [hi]
        out = [int(x) if len(x.strip()) <= 20 else -1 for x in text.split(",") if x.strip()]
        if not out or min(out) < 1 or max(out) > MAX_NODES or len(out) > MAX_COUNTS:
            raise ValueError
        return sorted(set(out))
    except ValueError:
        raise UserError(f"{wording}. Received: {text!r}") from None


def allreduce_table(model, nodes: int, sizes) -> tuple[list, list]:
    """Predicted allreduce seconds of every algorithm per size, and where the best algorithm changes.

    Args:
        model: an :class:`~deep500lite.lv3.allreduce.AlphaBeta` or a fitted
            :class:`~deep500lite.perfmodel.allreduce.CalibratedModel`.
        nodes: ranks.
        sizes: message sizes in bytes, increasing.

    Returns:
        ``(rows, crossovers)``: rows of ``(bytes, {algorithm: seconds}, best)``, and
        ``(bytes_before, bytes_after, best_before, best_after)`` for each change of the best
        algorithm between consecutive sizes (the latency/bandwidth crossover of seed 002).
    """
    rows = []
    for n in sizes:
        costs = {a: allreduce_cost(a, int(n), nodes, model) for a in P2P_ALGORITHMS}
        rows.append((int(n), costs, choose_algorithm(int(n), nodes, model)))
    cross = [(a[0], b[0], a[2], b[2]) for a, b in zip(rows, rows[1:]) if a[2] != b[2]]
    return rows, cross
