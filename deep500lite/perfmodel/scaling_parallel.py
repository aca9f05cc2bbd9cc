"""The scaling model for the schemes beyond data parallelism: pipeline, spatial and tensor parallelism.

Each function predicts one training step on ``P`` ranks from the single-process compute time of
the step and the bytes the scheme moves, with the alpha-beta costs of
:mod:`deep500lite.lv3.allreduce` (a message of ``n`` bytes costs ``alpha + beta * n``; an allreduce
uses the algorithm :func:`~deep500lite.lv3.allreduce.choose_algorithm` picks):

- **pipeline** (GPipe / 1F1B with ``M`` equal micro-batches on ``P`` equal stages): a stage does
  ``compute / (P M)`` per micro-batch and sends the cut activation of a micro-batch (and receives
  its gradient); the schedule takes ``M + P - 1`` slots, so
  ``step = (M + P - 1) (compute / (P M) + 2 (alpha + beta a / M))`` with ``a`` the cut activation's
  bytes for the whole batch, and the idle part (the bubble) is ``(P - 1) / (M + P - 1)`` of it.
- **spatial** (activations split along the height): ``compute / P`` plus, per convolution or pool
  with a halo, a message to and from each of two neighbours forward and backward
  (``4 (alpha + beta h)`` for ``h`` halo bytes), one allreduce of the split part's weight gradients
  and an allgather of the last split activation (``(P - 1)(alpha + beta g / P)`` for ``g`` bytes).
- **tensor** (Megatron pairs of fully connected layers): ``split / P + replicated`` compute plus,
  per pair, an allreduce of its ``B x out`` float32 output (forward) and one of its ``B x in``
  input gradient (backward), as :class:`~deep500lite.lv3.tensor_parallel.ParallelMLP` does.

The figures are ideal (equal stages and blocks, no contention); what they leave out is stated in
each function. ``deep500lite run RECIPE -n N`` measures the same split (compute / communication /
idle) to compare with.

:func:`predict_model` and :func:`sweep` apply these to a network of the data-parallel scaling model
(a :class:`~deep500lite.perfmodel.scaling_networks.ModelDescription`, its per-layer roofline compute
from :func:`deep500lite.perfmodel.scaling.compute_times`); ``deep500lite model scaling --scheme
pipeline|spatial|tensor`` prints them.
"""

from __future__ import annotations

import dataclasses

from deep500lite.errors import UserError
from deep500lite.perfmodel.alphabeta import AlphaBeta, allreduce_bytes, allreduce_cost, choose_algorithm

__all__ = ["ParallelPrediction", "predict_pipeline", "predict_spatial", "predict_tensor", "MODEL_SCHEMES",
           "balanced_cuts", "predict_model", "sweep"]

#: The schemes :func:`predict_model` predicts for a network.
MODEL_SCHEMES = ("pipeline", "spatial", "tensor")

_F32 = 4


@dataclasses.dataclass(frozen=True)
class ParallelPrediction:
    """A predicted step of a parallel scheme.

    Attributes:
        scheme: ``pipeline``, ``spatial`` or ``tensor``.
        ranks: ``P``.
        step: seconds per step.
        compute: seconds of computation per step on one rank.
        communication: seconds of messages and collectives per step on one rank.
        idle: seconds waiting (the pipeline bubble; 0 for the other schemes).
        bytes_per_rank: bytes one rank sends per step.
    """

    scheme: str
    ranks: int
    step: float
    compute: float
    communication: float
    idle: float
    bytes_per_rank: float

    @property
    def idle_fraction(self) -> float:
        """``idle / step``."""
        return self.idle / self.step if self.step > 0 else 0.0


def _check(ranks, **values) -> None:
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise UserError(f"ranks must be an integer >= 1. Received: ranks={ranks!r}")
    for name, v in values.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v >= 0:
            raise UserError(f"{name} must be a number >= 0. Received: {name}={v!r}")


def _allreduce(nbytes: float, ranks: int, link: AlphaBeta) -> float:
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return allreduce_cost(choose_algorithm(int(nbytes), ranks, link), int(nbytes), ranks, link)


def predict_pipeline(compute: float, ranks: int, micro_batches: int, activation_bytes: float,
                     link: AlphaBeta) -> ParallelPrediction:
    """One pipeline-parallel step (equal stages; the message of a slot does not overlap its compute).

    Args:
        compute: seconds of one single-process step (forward and backward of the whole batch).
        ranks: ``P``, one stage each.
        micro_batches: ``M``.
        activation_bytes: bytes of the cut activation for the whole batch (the gradient is as large).
        link: the alpha-beta costs of a point-to-point message.
    """
    _check(ranks, compute=compute, activation_bytes=activation_bytes)
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1:
        raise UserError(f"micro_batches must be an integer >= 1. Received: micro_batches={micro_batches!r}")
    m, p = micro_batches, ranks
    work = compute / (p * m)
    message = 2 * (link.alpha + link.beta * activation_bytes / m) if p > 1 else 0.0
    step = (m + p - 1) * (work + message)
    idle = step * (p - 1) / (m + p - 1)
    return ParallelPrediction("pipeline", p, step, m * work, m * message, idle,
                              float(activation_bytes) if p > 1 else 0.0)


def predict_spatial(compute: float, ranks: int, halo_bytes, weight_bytes: float, gathered_bytes: float,
                    link: AlphaBeta) -> ParallelPrediction:
    """One spatially parallel step (height split; an interior rank with two neighbours; no overlap).

    Args:
        compute: seconds of one single-process step.
        ranks: ``P``.
        halo_bytes: per convolution or pool with a halo, the bytes of the halo rows one
            neighbour sends (the batch's, at that layer's input).
        weight_bytes: bytes of the split part's parameter gradients (allreduced).
        gathered_bytes: bytes of the last split activation, gathered on every rank.
        link: the alpha-beta costs.
    """
    halo = [float(h) for h in halo_bytes]
    _check(ranks, compute=compute, weight_bytes=weight_bytes, gathered_bytes=gathered_bytes,
           **{f"halo_bytes[{i}]": h for i, h in enumerate(halo)})
    p = ranks
    if p == 1:
        return ParallelPrediction("spatial", 1, compute, compute, 0.0, 0.0, 0.0)
    exchange = sum(4 * (link.alpha + link.beta * h) for h in halo)
    gather = (p - 1) * (link.alpha + link.beta * gathered_bytes / p)
    comm = exchange + _allreduce(weight_bytes, p, link) + gather
    sent = 4 * sum(halo) + 2 * (p - 1) * weight_bytes / p + (p - 1) * gathered_bytes / p
    return ParallelPrediction("spatial", p, compute / p + comm, compute / p, comm, 0.0, sent)


def predict_tensor(split_compute: float, replicated_compute: float, ranks: int, batch: int, pairs,
                   link: AlphaBeta) -> ParallelPrediction:
    """One tensor-parallel step of Megatron pairs (an allreduce of the output and one of the input gradient each).

    Args:
        split_compute: single-process seconds of the split layers (forward and backward).
        replicated_compute: seconds of the rest (every rank runs it whole).
        ranks: ``P``.
        batch: the batch size.
        pairs: per pair, ``(in_features, out_features)``: its first layer's inputs and its
            second layer's outputs.
        link: the alpha-beta costs.
    """

    _check(ranks, split_compute=split_compute, replicated_compute=replicated_compute)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise UserError(f"batch must be an integer >= 1. Received: batch={batch!r}")
    sizes = [batch * int(f) * _F32 for pair in pairs for f in pair]
    p = ranks
    comm = sum(_allreduce(n, p, link) for n in sizes)
    sent = float(sum(allreduce_bytes(n, p) for n in sizes))
    compute = split_compute / p + replicated_compute
    return ParallelPrediction("tensor", p, compute + comm, compute, comm, 0.0, sent)


# ------------------------------------------------------------------------------ a network of the scaling model
def balanced_cuts(times, ranks: int) -> list[int]:
    """Where to cut a chain of layers into ``ranks`` stages of about equal time.

    Args:
        times: seconds per layer, in forward order.
        ranks: the number of stages (at most the number of layers).

    Returns:
        The index of the last layer of each of the first ``ranks - 1`` stages: stage ``k`` ends at
        the first layer where the running total reaches ``(k + 1) / ranks`` of the whole (every
        stage keeps at least one layer).
    """
    total, cuts, running = float(sum(times)), [], 0.0
    n = len(times)
    for i, t in enumerate(times):
        running += t
        k = len(cuts)
        if k == ranks - 1:
            break
        # cut here when the share is reached, or when the remaining layers are just enough for the stages left
        if (running >= total * (k + 1) / ranks or n - 1 - i == ranks - 1 - k) and n - 1 - i >= ranks - 1 - k:
            cuts.append(i)
    return cuts


def _split_part(model) -> int:
    """The number of leading layers before the first fully connected one (the part a spatial split divides)."""
    return next((i for i, layer in enumerate(model.layers) if layer.kind == "fc"), len(model.layers))


def predict_model(model, scheme: str, ranks: int, batch: float, accelerator, link: AlphaBeta, *,
                  micro_batches: int = 4, activation_bytes: float | None = None, halo_bytes=None,
                  gathered_bytes: float | None = None, compute_scale: float = 1.0) -> ParallelPrediction:
    """One step of ``scheme`` on ``ranks`` ranks for a network of the scaling model.

    The single-process compute is the roofline of :func:`deep500lite.perfmodel.scaling.compute_times`
    for the whole ``batch`` (forward, backward and update), times ``compute_scale``.

    Args:
        model: a :class:`~deep500lite.perfmodel.scaling_networks.ModelDescription`.
        scheme: ``pipeline``, ``spatial`` or ``tensor``.
        ranks: ``P``.
        batch: the global batch (every scheme splits this one batch: strong scaling).
        accelerator: a :class:`~deep500lite.perfmodel.scaling_networks.Accelerator`.
        link: the alpha-beta costs of a message between ranks.
        micro_batches: pipeline: ``M``.
        activation_bytes: pipeline: bytes of a cut activation per sample; None: the mean of the
            outputs of the layers the stages are cut after (balanced by compute time, float32).
        halo_bytes: spatial (required): per convolution or pool with a halo, the bytes one
            neighbour sends per sample.
        gathered_bytes: spatial: bytes per sample of the last split activation; None: the output
            of the last layer before the first fully connected one (float32).
        compute_scale: multiplies the roofline compute (a measured step over the roofline's).

    The weights the spatial scheme allreduces are the parameters before the first fully connected
    layer; the tensor scheme splits the fully connected layers two by two (Megatron pairs, a
    last odd one replicated) and their share of the update; the rest runs replicated.

    Raises:
        UserError: an unknown scheme, a pipeline with more stages than layers, a spatial
            prediction without ``halo_bytes``, or a tensor prediction for a network with fewer than
            two fully connected layers.
    """
    from deep500lite.perfmodel.scaling import compute_times
    from deep500lite.errors import format_choices

    if scheme not in MODEL_SCHEMES:
        raise UserError(f"scheme must be one of {format_choices(MODEL_SCHEMES)}. Received: {scheme!r}")
    _check(ranks, batch=batch, compute_scale=compute_scale)
    fwd, bwd, update = compute_times(model, batch, accelerator, compute_scale)
    per_layer = [f + b for f, b in zip(fwd, bwd)]
    compute = sum(per_layer) + update
    layers = model.layers
    if scheme == "pipeline":
        if ranks > len(layers):
            raise UserError(f"A pipeline of {model.name} has at most one stage per layer ({len(layers)}). "
                            f"Received: {ranks} stages")
        if activation_bytes is None:
            cuts = balanced_cuts(per_layer, ranks)
            activation_bytes = (sum(layers[c].out_elems for c in cuts) / len(cuts)) * _F32 if cuts else 0.0
        return predict_pipeline(compute, ranks, micro_batches, float(activation_bytes) * batch, link)
    if scheme == "spatial":
        if halo_bytes is None:
            raise UserError("The spatial prediction needs halo_bytes: per convolution or pool, the bytes of the "
                            "halo rows one neighbour sends per sample (e.g. 2 rows x width x channels x 4). "
                            "Received: halo_bytes=None")
        head = _split_part(model)
        weights = sum(layer.params for layer in layers[:head]) * _F32
        if gathered_bytes is None:
            gathered_bytes = layers[head - 1].out_elems * _F32 if head > 0 else 0.0
        return predict_spatial(compute, ranks, [float(h) * batch for h in halo_bytes], float(weights),
                               float(gathered_bytes) * batch, link)
    fcs = [i for i, layer in enumerate(layers) if layer.kind == "fc"]
    split = fcs[:len(fcs) - len(fcs) % 2]
    if not split:
        raise UserError(f"Tensor parallelism splits pairs of fully connected layers; {model.name} has "
                        f"{len(fcs)}. Received: model {model.name!r}")
    pairs = [(layers[a].in_elems, layers[b].out_elems) for a, b in zip(split[0::2], split[1::2])]
    split_params = sum(layers[i].params for i in split)
    split_update = update * split_params / model.params if model.params else 0.0
    split_compute = sum(per_layer[i] for i in split) + split_update
    if not float(batch).is_integer():
        raise UserError(f"batch must be a whole number of samples. Received: batch={batch!r}")
    return predict_tensor(split_compute, compute - split_compute, ranks, int(batch), pairs, link)


def sweep(model, scheme: str, ranks, batch: float, accelerator, link: AlphaBeta, **options) -> list:
    """:func:`predict_model` for each rank count.

    Returns:
        A list of ``(P, ParallelPrediction)``; a pipeline's P larger than the number of layers is
        left out.
    """
    rows = []
    for p in ranks:
        if scheme == "pipeline" and p > len(model.layers):
            continue
        rows.append((p, predict_model(model, scheme, p, batch, accelerator, link, **options)))
    return rows
