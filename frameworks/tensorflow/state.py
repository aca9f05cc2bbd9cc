"""TensorFlow's part of seeds and checkpoints: the global seed, the native optimizers' and the executor's state.

:mod:`deep500lite.lv2.checkpoint` asks the spec's ``state_hook`` (this module) for the state of a
TensorFlow optimizer or executor and gets numpy values only: the Keras optimizer's variables and
the executor's ``tf.random.Generator`` state.
"""

from __future__ import annotations

import tensorflow as tf

from deep500lite.errors import CheckpointError

__all__ = ["seed", "optimizer_state", "restore_optimizer_state", "rng_state", "restore_rng_state"]


def seed(value: int) -> None:
    """``tf.random.set_seed``."""
    try:
        tf.random.set_seed(value)
    except AttributeError:  # a partially imported tensorflow
        pass


def optimizer_state(opt) -> dict | None:
    """The Keras optimizer variables of a native optimizer (None: not one)."""
    if not hasattr(opt, "_prepare"):
        return None
    opt._prepare()
    return {"keras_variables": [v.numpy() for v in opt.keras_optimizer.variables]}


def restore_optimizer_state(opt, state: dict) -> None:
    """Assign :func:`optimizer_state`'s variables back (the step function is rebuilt first)."""
    opt._built_for = None  # rebuild the step function with the restored hyperparameters
    opt._prepare()
    variables = opt.keras_optimizer.variables
    if len(variables) != len(state["keras_variables"]):
        raise CheckpointError(f"The checkpoint holds {len(state['keras_variables'])} Keras optimizer variables; this "
                              f"optimizer has {len(variables)}. Received: {len(state['keras_variables'])}")
    for var, value in zip(variables, state["keras_variables"]):
        var.assign(value)


def rng_state(executor) -> dict | None:
    """The dropout generator's state of a :class:`~deep500lite.frameworks.tensorflow.TensorFlowExecutor`."""
    generator = getattr(executor, "_rng", None)
    if generator is None or not hasattr(generator, "reset"):
        return None
    return {"tf_generator": generator.state.numpy()}


def restore_rng_state(executor, state: dict) -> None:
    """Restore :func:`rng_state`'s value."""
    executor._rng.reset(state["tf_generator"])
