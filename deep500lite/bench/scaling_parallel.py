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
"""

from __future__ import annotations

import dataclasses

from deep500lite.errors import UserError
from deep500lite.lv3.allreduce import AlphaBeta, allreduce_cost, choose_algorithm

__all__ = ["ParallelPrediction", "predict_pipeline", "predict_spatial", "predict_tensor"]

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
    from deep500lite.lv3.tensor_parallel import allreduce_bytes

    _check(ranks, split_compute=split_compute, replicated_compute=replicated_compute)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise UserError(f"batch must be an integer >= 1. Received: batch={batch!r}")
    sizes = [batch * int(f) * _F32 for pair in pairs for f in pair]
    p = ranks
    comm = sum(_allreduce(n, p, link) for n in sizes)
    sent = float(sum(allreduce_bytes(n, p) for n in sizes))
    compute = split_compute / p + replicated_compute
    return ParallelPrediction("tensor", p, compute + comm, compute, comm, 0.0, sent)
