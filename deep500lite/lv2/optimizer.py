"""Level 2: optimizers (Deep500's ``Optimizer``, ``ThreeStepOptimizer``, ``UpdateRuleOptimizer``)."""

from __future__ import annotations

import abc
from typing import Callable

import numpy as np

from deep500lite.errors import UserAttributeError

__all__ = ["Optimizer", "ThreeStepOptimizer", "UpdateRuleOptimizer"]

GradientModifier = Callable[[str, np.ndarray, np.ndarray], np.ndarray]


class Optimizer(abc.ABC):
    """Updates an executor's parameters from minibatches.

    Args:
        executor: the :class:`~deep500lite.GraphExecutor` whose network is trained.
        loss: the name of the scalar loss tensor.
        gradient_modifier: optional ``f(param_name, grad, param) -> grad`` applied to every
            gradient before the update (weight decay, clipping).
    """

    def __init__(self, executor, loss: str = "loss", gradient_modifier: GradientModifier | None = None):
        self.executor = executor
        self.network = executor.network
        self.loss = loss
        self.gradient_modifier = gradient_modifier

    @abc.abstractmethod
    def step(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one training step on a minibatch.

        Args:
            inputs: feeds for the network's inputs (samples and labels).

        Returns:
            The network's outputs for this minibatch (the loss included), before the update.
        """

    def set_parameter(self, name: str, value) -> None:
        """Change a hyperparameter (for example ``learning_rate``) between steps.

        Raises:
            UserAttributeError: the optimizer has no such hyperparameter (an ``AttributeError``).
        """
        if not hasattr(self, name) or name.startswith("_") or callable(getattr(self, name)):
            raise UserAttributeError(f"{type(self).__name__} has no hyperparameter '{name}'; its hyperparameters are "
                                     "its public, non-callable attributes, such as learning_rate. "
                                     f"Received: {name!r}")
        setattr(self, name, value)


class ThreeStepOptimizer(Optimizer, abc.ABC):
    """An optimizer written as three hooks, run by :meth:`step` on numpy arrays (as in Deep500)::

        new_input()
        for each trainable param of network.gradient(loss):
            prepare_param(param)            # may move the parameter before the gradient is taken
        outputs = executor.inference_and_backprop(inputs, loss)
        for each (param, grad) of network.gradient(loss):
            param <- update_rule(gradient_modifier(grad), param, param_name)
    """

    @abc.abstractmethod
    def new_input(self) -> None:
        """Called once per step, before the forward pass (e.g. to advance a step counter)."""

    @abc.abstractmethod
    def prepare_param(self, param_name: str) -> None:
        """Called for each parameter before the forward pass (create its state on first use; an
        optimizer such as AcceleGrad may also move the parameter with ``network.feed_tensor``)."""

    @abc.abstractmethod
    def update_rule(self, grad: np.ndarray, old_param: np.ndarray, param_name: str) -> np.ndarray:
        """Return the new value of a parameter.

        Args:
            grad: the gradient of the loss with respect to the parameter.
            old_param: the parameter's current value (do not modify it in place).
            param_name: the parameter's name, for per-parameter state.
        """

    def step(self, inputs):
        self.new_input()
        pairs = self.network.gradient(self.loss)
        for pname, _ in pairs:
            self.prepare_param(pname)
        outputs = self.executor.inference_and_backprop(inputs, self.loss)
        values = self.network.fetch_tensors([n for pair in pairs for n in pair])
        for i, (pname, _) in enumerate(pairs):
            param, grad = values[2 * i], values[2 * i + 1]
            if self.gradient_modifier is not None:
                grad = self.gradient_modifier(pname, grad, param)
            self.network.feed_tensor(pname, np.asarray(self.update_rule(grad, param, pname), dtype=param.dtype))
        return outputs


class UpdateRuleOptimizer(ThreeStepOptimizer, abc.ABC):
    """A :class:`ThreeStepOptimizer` that needs only :meth:`update_rule`."""

    def new_input(self) -> None:
        """No per-step state by default."""

    def prepare_param(self, param_name: str) -> None:
        """No per-parameter preparation by default."""
