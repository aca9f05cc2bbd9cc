"""The training-event protocol: the hooks :class:`~deep500lite.lv2.trainer.Trainer` calls.

It lives in this leaf package because both sides implement it: the training loop (level 2,
:mod:`deep500lite.lv2.events` re-exports :class:`TrainingEvent` and :data:`HOOKS`, and its events
subclass it) and the training metrics of :mod:`deep500lite.metrics.training`, which are events
too. ``deep500lite.metrics`` imports no level, so the base class both derive from is here.
"""

from __future__ import annotations

__all__ = ["TrainingEvent", "HOOKS"]

#: Every hook name, in the order a training step reaches them.
HOOKS = ("before_training", "before_epoch", "before_sampling", "after_sampling", "before_training_batch",
         "before_optimizer_step", "after_optimizer_step", "after_training_batch", "before_test_set",
         "before_test_batch", "after_test_batch", "after_test_set", "after_epoch", "after_training")


class TrainingEvent:
    """Base class of training events: every hook does nothing and returns ``None``.

    Order of the calls for one epoch (``epoch`` and ``step`` count from 0)::

        before_epoch(trainer, stats, epoch)
        for each batch:
            before_sampling(trainer, stats)
            batch = next(train_sampler)                  # data loading (timed)
            after_sampling(trainer, stats, batch)
            before_training_batch(trainer, stats, batch)
            before_optimizer_step(trainer, stats, batch)
            outputs = optimizer.step(batch)              # forward, backward, update (timed)
            after_optimizer_step(trainer, stats, batch, outputs)
            # the trainer records the step in stats.steps (loss, accuracy, times) and
            # checks the loss is finite
            after_training_batch(trainer, stats, batch, outputs)
        before_test_set(trainer, stats)                  # the whole validation set
        for each validation batch:
            before_test_batch(trainer, stats, batch)
            outputs = executor.inference(batch)
            after_test_batch(trainer, stats, batch, outputs)
        after_test_set(trainer, stats, result)           # result: test_accuracy, test_loss, ...
        # the trainer records the epoch in stats.epochs
        after_epoch(trainer, stats, epoch)

    ``before_training(trainer, stats)`` comes before the first epoch and
    ``after_training(trainer, stats)`` after the last one, also when training stopped early or
    on a non-finite loss. Between ``before_training`` and the first ``before_epoch``, the trainer
    evaluates the validation set once with the same four test hooks (Deep500's order; its result
    is ``stats.initial_test``, and ``stats.epochs`` is still empty).

    Returning ``False`` stops training: from ``before_training`` before any epoch, from
    ``before_epoch`` before that epoch, from a sampling, batch or optimizer-step hook after the
    current step (the validation set is still evaluated, so the final accuracy matches the final
    parameters), from a test hook or ``after_epoch`` after the current epoch (during the test
    before training: before the first epoch). What
    ``after_training`` returns is ignored.

    The sampling hooks here are the trainer's; a sampler's own events (``Sampler(events=...)``)
    have Deep500's ``SamplerEvent`` signatures ``before_sampling(sampler, batch_size)`` and
    ``after_sampling(sampler, samples)``.

    Attributes:
        stop_reason: a sentence saying why the event asked to stop (read when a hook returns False).
    """

    stop_reason: str | None = None

    def before_training(self, trainer, stats):
        """Called once, before the first epoch."""

    def after_training(self, trainer, stats):
        """Called once, after the last epoch (also after an early stop)."""

    def before_epoch(self, trainer, stats, epoch: int):
        """Called before the epoch's first batch."""

    def after_epoch(self, trainer, stats, epoch: int):
        """Called after the epoch's validation, once ``stats.epochs[-1]`` describes it."""

    def before_sampling(self, trainer, stats):
        """Called before the next training batch is loaded."""

    def after_sampling(self, trainer, stats, batch):
        """Called after a training batch was loaded (``batch``: the dict of feeds)."""

    def before_training_batch(self, trainer, stats, batch):
        """Called before a training step on ``batch``."""

    def after_training_batch(self, trainer, stats, batch, outputs):
        """Called after a training step, once ``stats.steps[-1]`` describes it."""

    def before_optimizer_step(self, trainer, stats, batch):
        """Called right before ``optimizer.step(batch)`` (after the schedules set hyperparameters)."""

    def after_optimizer_step(self, trainer, stats, batch, outputs):
        """Called right after ``optimizer.step``; ``outputs`` are the network outputs of the step."""

    def before_test_set(self, trainer, stats):
        """Called before the validation set is evaluated."""

    def after_test_set(self, trainer, stats, result: dict):
        """Called after the validation set was evaluated (``result`` as :meth:`Trainer.evaluate` returns)."""

    def before_test_batch(self, trainer, stats, batch):
        """Called before a validation batch is run."""

    def after_test_batch(self, trainer, stats, batch, outputs):
        """Called after a validation batch was run."""
