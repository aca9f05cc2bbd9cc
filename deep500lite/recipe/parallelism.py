"""Recipes beyond data parallelism: the ``distributed`` key's parallel schemes and their per-rank training.

A recipe's ``distributed`` key names a Level 3 distributed optimizer (data parallelism, e.g.
``'ConsistentDecentralized'``) or one of :data:`SCHEMES`:

- ``data``: data parallelism with ``ConsistentDecentralized`` (the same as naming it);
- ``spatial``: every sample split along its height (and width, ``grid``) over the ranks, with
  halo exchanges (:class:`~deep500lite.lv3.spatial.SpatialParallelNetwork`);
- ``pipeline``: the network cut into one stage per rank, micro-batches streamed GPipe or 1F1B
  (:class:`~deep500lite.lv3.pipeline.PipelineParallel`);
- ``tensor``: the leading fully connected layers split Megatron-style
  (:class:`~deep500lite.lv3.tensor_parallel.TensorParallelMLP`);
- ``hybrid``: data x spatial: the ranks in groups of ``spatial_ranks`` consecutive ranks, each group
  spatially parallel on its equal shard of the batch, the groups data-parallel (gradients and
  losses averaged with an allreduce over the ranks at the same place in every group); MPI only
  (the MPI communicator is split with ``MPI.Comm.Split``).

``distributed_kwargs`` holds the scheme's options (:data:`SCHEME_OPTIONS`). With a model-parallel
scheme every rank reads the same batches (the recipe's training sampler, as in a single-process
run) and the parameters are updated with momentum SGD (:class:`~deep500lite.lv3.pipeline.MomentumSGD`,
the rule of the reference ``MomentumOptimizer`` and ``GradientDescent``, the optimizers these
schemes accept), so the losses equal those of the single-process run of the same recipe within
float32 round-off. After each epoch the trained parameters are collected on every rank and the
recipe's executor evaluates the validation set, as the trainer does.

:func:`~deep500lite.recipe.parallel_training.train_parallel` (called by :func:`deep500lite.recipe.running.train_recipe` when the
``distributed`` key names a model-parallel scheme) writes a results file of the shape the
data-parallel ranks write, so :func:`deep500lite.recipe.distributed.aggregate` and
``deep500lite report`` read it: each step record holds ``step_time``, ``compute_time``,
``communication_time`` (``halo_time``, ``p2p_time``, ``allreduce_time``, ``gather_time``: the parts
the scheme has), ``idle_time``, ``bytes_sent`` and ``samples`` (this rank's share of the batch: the
shares sum to the batch, so the job's global batch is the batch). The ``distributed`` section
adds ``scheme``, the options, the summed ``time_split`` and, for a pipeline, ``bubble`` (idle over
step time) beside ``bubble_model`` = (P-1)/(M+P-1);
:func:`~deep500lite.recipe.parallel_training.describe_lines` prints them after a job.

The recipe key ``microbatches`` (:func:`microbatch_network`, :func:`microbatch_optimizer`, called by
:mod:`deep500lite.recipe.components`) runs each step of a single-process or data-parallel run as
``n`` micro-batches with ``d5.transforms.microbatch`` (data parallel: the accumulated gradient is
exchanged once per step).
"""

from __future__ import annotations

import inspect

from deep500lite.errors import UserError, format_choices

__all__ = ["SCHEMES", "MODEL_SCHEMES", "SCHEME_OPTIONS", "scheme_of", "check_distributed", "momentum_rule",
           "microbatch_network", "microbatch_optimizer"]

#: The parallel schemes the ``distributed`` key accepts besides a distributed optimizer's name.
SCHEMES = ("data", "spatial", "pipeline", "tensor", "hybrid")
#: The schemes :func:`train_parallel` runs (``data`` goes through the distributed optimizers).
MODEL_SCHEMES = ("spatial", "pipeline", "tensor", "hybrid")
#: The ``distributed_kwargs`` each scheme takes.
SCHEME_OPTIONS = {
    "spatial": ("overlap", "grid"),
    "pipeline": ("micro_batches", "schedule", "cuts", "balance"),
    "tensor": (),
    "hybrid": ("spatial_ranks", "overlap"),
}
#: The time parts a step record may hold (seconds), besides ``step_time``.
_COMM_PARTS = ("halo", "p2p", "allreduce", "gather")


def scheme_of(config: dict) -> str | None:
    """The model-parallel scheme a recipe configuration selects, or None (single process or data parallel)."""
    value = config.get("distributed")
    return value if isinstance(value, str) and value in MODEL_SCHEMES else None


def check_distributed(config: dict) -> None:
    """Check a recipe's ``distributed`` key and, for a scheme, its ``distributed_kwargs``, before any rank starts.

    Raises:
        UserError: an unknown scheme or distributed optimizer (naming the schemes and optimizers),
            an option the scheme does not take, or ``hybrid`` (not implemented yet).
    """
    from deep500lite.recipe.resolution import _distributed_class

    value = config.get("distributed")
    if value is None or not isinstance(value, str) or value == "data":
        return
    if value not in MODEL_SCHEMES:
        _distributed_class(value)
        return
    kwargs = config.get("distributed_kwargs") or {}
    if value == "hybrid":
        s = kwargs.get("spatial_ranks")
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise UserError("The 'hybrid' scheme needs distributed_kwargs.spatial_ranks, an integer >= 1: the ranks "
                            f"of each spatial group (the groups are data-parallel). Received: spatial_ranks={s!r}")
        if config.get("communicator") not in (None, "mpi"):
            raise UserError("The 'hybrid' scheme splits the MPI communicator into groups; it runs with "
                            f"communicator='mpi'. Received: communicator={config.get('communicator')!r}")
    allowed = SCHEME_OPTIONS[value]
    unknown = sorted(k for k in kwargs if k not in allowed)
    if unknown:
        raise UserError(f"'distributed_kwargs' of the '{value}' scheme take {format_choices(allowed) or 'nothing'}. "
                        f"Received: {format_choices(unknown)}")
    if config.get("bucket_mb") is not None:
        raise UserError(f"'bucket_mb' sizes the gradient buckets of data parallelism; the '{value}' scheme has none. "
                        f"Received: bucket_mb={config['bucket_mb']!r}")
    if config.get("microbatches") not in (None, 1):
        raise UserError("'microbatches' applies to single-process and data-parallel runs; the "
                        f"'{value}' scheme steps the whole batch (a pipeline takes distributed_kwargs.micro_batches). "
                        f"Received: microbatches={config.get('microbatches')!r}")


def momentum_rule(resolved):
    """The per-parameter update rule equal to the recipe's optimizer (reference momentum SGD or gradient descent).

    Raises:
        UserError: another optimizer (the model-parallel schemes update parameters shard by shard).
    """
    from deep500lite.lv3.pipeline import MomentumSGD
    from deep500lite.recipe.resolution import _optimizer_class

    cls = _optimizer_class(resolved.config["optimizer"], resolved.framework)
    name = getattr(cls, "__name__", type(cls).__name__)
    module = getattr(cls, "__module__", "") or ""
    reference = module.startswith("deep500lite.frameworks.reference")
    if name not in ("MomentumOptimizer", "GradientDescent") or not reference:
        raise UserError("The model-parallel schemes train with the reference 'MomentumOptimizer' or "
                        "'GradientDescent' (their rule runs on each rank's parameter shards). Received: optimizer "
                        f"{module}.{name}")
    if resolved.config.get("optimizer_args"):
        raise UserError("Give the optimizer's options as 'optimizer_kwargs' (learning_rate, momentum) for a "
                        f"model-parallel scheme. Received: optimizer_args={resolved.config['optimizer_args']!r}")
    sig = inspect.signature(cls)
    opts = {k: p.default for k, p in sig.parameters.items() if k in ("learning_rate", "momentum")}
    opts.update({k: v for k, v in (resolved.config.get("optimizer_kwargs") or {}).items()
                 if k in ("learning_rate", "momentum")})
    other = sorted(k for k in (resolved.config.get("optimizer_kwargs") or {}) if k not in ("learning_rate", "momentum"))
    if other:
        raise UserError(f"A model-parallel scheme's optimizer takes learning_rate and momentum. Received: "
                        f"optimizer_kwargs {format_choices(other)}")
    return MomentumSGD(float(opts.get("learning_rate", 0.1)), float(opts.get("momentum", 0.0)))


def microbatch_network(network, config: dict):
    """The network of a recipe with ``microbatches`` > 1: its batch dimension freed (micro-batches are smaller)."""
    if config.get("microbatches") in (None, 1):
        return network
    from deep500lite.lv2.microbatch import relax_batch_dimension

    return relax_batch_dimension(network, int(config["batch_size"]))


def microbatch_optimizer(optimizer, config: dict):
    """``d5.transforms.microbatch(optimizer, n)`` for a recipe's ``microbatches: n`` (n > 1), else ``optimizer``.

    With a data-parallel ``distributed`` optimizer (which then wraps the returned optimizer) this is
    gradient accumulation under data parallelism: each rank sums its ``n`` micro-batches'
    gradients, the distributed optimizer exchanges the sum once per step, then one update runs
    (:meth:`~deep500lite.lv2.microbatch.MicrobatchOptimizer.exchange_step`).
    """
    n = config.get("microbatches")
    if n in (None, 1):
        return optimizer
    from deep500lite.lv2.microbatch import microbatch

    return microbatch(optimizer, int(n))


# ------------------------------------------------------------------------------ the schemes' runners


def __getattr__(name: str):
    """The old home of :func:`train_parallel` and :func:`describe_lines` (now in
    :mod:`deep500lite.recipe.parallel_training`, which builds on this module)."""
    if name in ("train_parallel", "describe_lines"):
        import importlib

        return getattr(importlib.import_module("deep500lite.recipe.parallel_training"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
