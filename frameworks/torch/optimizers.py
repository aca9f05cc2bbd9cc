"""Native PyTorch optimizers: ``torch.optim`` updating the executor's parameters on the device.

Each optimizer's :meth:`~_TorchOptimizer.step` runs ``executor.inference_and_backprop(inputs,
loss)``, which leaves every gradient as the parameter's ``.grad`` on the device, then one
``torch.optim`` step over the live parameter tensors (leaf tensors the executor's generated
function reads, updated in place). Nothing crosses to numpy unless a ``gradient_modifier`` is
given (see below). They work with :class:`~deep500lite.frameworks.torch.TorchExecutor` and
:class:`~deep500lite.frameworks.torch.TorchNativeExecutor`.

Class names and constructor arguments are those of the numpy reference optimizers
(:mod:`deep500lite.frameworks.reference.optimizers`). The exact update each one applies
(``g`` the gradient, ``t`` the step counted from 1, ``lr`` the learning rate at that step):

- ``GradientDescent`` (``torch.optim.SGD``): ``w <- w - lr * g``. Same as the reference.
- ``MomentumOptimizer`` (``torch.optim.SGD(momentum=mu, dampening=0)``): ``b <- mu * b + g``
  (``b = g`` at the first step); ``w <- w - lr * b``, or with ``nesterov=True``
  ``w <- w - lr * (g + mu * b)``. With a constant learning rate this is the reference's
  ``v <- mu * v - lr * g; w <- w + v`` (``v = -lr * b``) and its Nesterov form; when the learning
  rate changes, torch applies the new rate to the whole buffer ``b``, while the reference keeps
  the velocity built with the old rates.
- ``NesterovOptimizer``: ``MomentumOptimizer(nesterov=True)``, named like the reference class.
- ``AdaGradOptimizer`` (``torch.optim.Adagrad``, no decay, zero initial accumulator):
  ``A <- A + g^2``; ``w <- w - lr * g / (sqrt(A) + eps)``.
- ``RMSPropOptimizer`` (``torch.optim.RMSprop(alpha=beta)``, no momentum, not centered):
  ``A <- beta * A + (1 - beta) * g^2``; ``w <- w - lr * g / (sqrt(A) + eps)``.
- ``AdamOptimizer`` (``torch.optim.Adam``): ``m <- b1 * m + (1 - b1) * g``;
  ``v <- b2 * v + (1 - b2) * g^2``; ``w <- w - lr * m_hat / (sqrt(v_hat) + eps)`` with
  ``m_hat = m / (1 - b1^t)``, ``v_hat = v / (1 - b2^t)``.

AdaGrad, RMSProp and Adam add ``eps`` *outside* the square root (torch, Kingma & Ba), as the
reference optimizers do by default (``epsilon_placement="outside"``): at a constant learning rate
every native optimizer here takes the reference's steps. The reference's
``epsilon_placement="inside"`` (the seeds' formulas, ``sqrt(A + eps)``, ``A`` the accumulator,
``v_hat`` for Adam) differs by the factor ``sqrt(A + eps) / (sqrt(A) + eps)``, about
``1 + eps / (2 * A)`` for small ``A``: with ``eps = 1e-8`` and ``A`` near ``g^2``, 5e-5 relative
for gradients of size 1e-2, 0.5% at 1e-3 and about 40% at 1e-4.

``set_parameter(name, value, predicate=None)`` changes a hyperparameter between steps
(``learning_rate`` or Deep500's ``lr``, ``momentum``, ``nesterov``, ``beta``, ``beta1``, ``beta2``,
``epsilon``, ``weight_decay``...): it sets the attribute and the torch optimizer's
``param_groups`` (only the groups for which ``predicate(group)`` is true, when given, as in
Deep500); torch keeps its state (buffers, step counts).

``gradient_modifier(name, param, grad) -> grad`` (Deep500's order; numpy arrays, as for the
reference optimizers) is supported but takes a host round trip: each gradient and parameter is
copied to numpy, the modifier runs, and its result is copied back into ``.grad`` before the
update. Without a modifier nothing leaves the device.

Deep500's call form is accepted too: ``MomentumOptimizer(executor, 'loss', learning_rate,
momentum, dampening, weight_decay, nesterov)``, ``GradientDescent(executor, 'loss',
learning_rate, weight_decay)``, ``AdamOptimizer(executor, 'loss', learning_rate, beta1, beta2,
epsilon, weight_decay)``, ``AdaGradOptimizer(executor, 'loss', learning_rate, lr_decay,
weight_decay, initial_accumulator_value)`` (Deep500's default initial accumulator 0.1 in this
form) and ``RMSPropOptimizer(executor, 'loss', learning_rate, alpha, momentum, epsilon,
weight_decay, centered)`` (``alpha`` is ``beta``; Deep500's default 0.99 in this form), each
also with ``lr=``. ``weight_decay`` (all), ``dampening`` (momentum), ``lr_decay``,
``initial_accumulator_value`` (AdaGrad), ``momentum`` and ``centered`` (RMSProp) are passed to
``torch.optim`` in both forms (weight decay is added by torch after any ``gradient_modifier``).
"""

from __future__ import annotations

import numpy as np
import torch

from deep500lite.errors import UserAttributeError, UserError, UserTypeError
from deep500lite.lv2.hyperparameters import check_hyperparameter, nesterov_variant, set_hyperparameters
from deep500lite.lv2.optimizer import Optimizer, deep500_arguments
from deep500lite.frameworks.torch.executor import TorchExecutor
from deep500lite.frameworks.torch.native import TorchNativeExecutor
from deep500lite.frameworks.torch.dtypes import to_numpy

__all__ = ["GradientDescent", "MomentumOptimizer", "NesterovOptimizer", "AdamOptimizer",
           "AdaGradOptimizer", "RMSPropOptimizer"]


def _check_executor(executor) -> None:
    if not isinstance(executor, (TorchExecutor, TorchNativeExecutor)):
        raise UserTypeError("The native torch optimizers need a torch executor (TorchExecutor or "
                            "TorchNativeExecutor); use the reference optimizers (deep500lite.frameworks.reference) "
                            f"for other executors. Received: {type(executor).__name__}")


def _live_parameter(executor, name: str) -> torch.Tensor:
    """The executor's own tensor for parameter ``name`` (no copy)."""
    if isinstance(executor, TorchExecutor):
        return executor.torch_tensor(name)
    return executor._params[name]  # TorchNativeExecutor: the module's parameters


class _TorchOptimizer(Optimizer):
    """A :class:`~deep500lite.Optimizer` running one ``torch.optim`` optimizer (see module docstring).

    Subclasses set :attr:`_hyper` (attribute name -> ``param_groups`` key) and implement
    :meth:`_make` (the torch optimizer for a list of tensors) and, where needed,
    :meth:`_group_value` (an attribute's value as the group stores it).

    Attributes:
        torch_optimizer: the ``torch.optim.Optimizer``, created at the first step (``None`` before).
    """

    _hyper: dict[str, str] = {"learning_rate": "lr"}

    def __init__(self, executor, loss="loss", gradient_modifier=None):
        _check_executor(executor)
        super().__init__(executor, loss, gradient_modifier)
        self.torch_optimizer: torch.optim.Optimizer | None = None
        self._names: list[str] = []
        self._version = None

    def _make(self, params: list[torch.Tensor]) -> torch.optim.Optimizer:
        raise NotImplementedError

    def _group_value(self, name: str):
        return getattr(self, name)

    def _optimizer(self) -> torch.optim.Optimizer:
        version = getattr(self.network, "version", 0)
        if self.torch_optimizer is None or version != self._version:
            names = [p for p, _ in self.network.gradient(self.loss)]
            if self.torch_optimizer is None or names != self._names:
                # A changed network with other parameters starts from fresh optimizer state.
                self.torch_optimizer = self._make([_live_parameter(self.executor, n) for n in names])
                self._names = names
            self._version = version
        return self.torch_optimizer

    def step(self, inputs):
        """Forward and backward on the device, then one in-place ``torch.optim`` update.

        Returns:
            The network's outputs for this minibatch (before the update), as numpy arrays.
        """
        outputs = self.executor.inference_and_backprop(inputs, self.loss)
        opt = self._optimizer()
        if self.gradient_modifier is not None:
            self._modify_gradients()
        opt.step()
        return outputs

    def _modify_gradients(self) -> None:
        # The one host round trip: the modifier takes and returns numpy arrays.
        for name in self._names:
            p = _live_parameter(self.executor, name)
            if p.grad is None:
                continue
            grad = to_numpy(p.grad, copy=True)
            new = self.gradient_modifier(name, to_numpy(p, copy=True), grad)
            new = np.asarray(new, dtype=grad.dtype)
            if new.shape != grad.shape:
                raise UserError(f"gradient_modifier must return an array of the gradient's shape "
                                f"{list(grad.shape)} for '{name}'. Received: shape {list(new.shape)}")
            with torch.no_grad():
                p.grad.copy_(torch.from_numpy(np.ascontiguousarray(new)))

    def set_parameter(self, name, value, predicate=None):
        """Change a hyperparameter between steps (see the module docstring).

        ``lr`` is ``learning_rate``; with ``predicate``, only the ``param_groups`` for which
        ``predicate(group)`` is true are changed (Deep500's parameter-group filter).

        Raises:
            UserAttributeError: the optimizer has no such hyperparameter (an ``AttributeError``).
            UserError: the value is out of range (a ``ValueError``).
            UserTypeError: the value is not a number (a bool for ``nesterov``).
        """
        name = "learning_rate" if name == "lr" else name
        if name not in self._hyper:
            raise UserAttributeError(f"{type(self).__name__} has no hyperparameter '{name}'. "
                                     f"Hyperparameters: {sorted(self._hyper)}. Received: {name!r}")
        self._check(name, value)
        setattr(self, name, value)
        if self.torch_optimizer is not None:
            key = self._hyper[name]
            for group in self.torch_optimizer.param_groups:
                if predicate is None or predicate(group):
                    group[key] = self._group_value(name)

    def _check(self, name, value):
        check_hyperparameter(name, value)


class GradientDescent(_TorchOptimizer):
    """Gradient descent, ``w <- w - lr * g`` (``torch.optim.SGD``).

    Args:
        executor: a torch executor.
        learning_rate: ``lr``.
        loss: the name of the scalar loss tensor.
        gradient_modifier: optional ``f(name, param, grad) -> grad`` (numpy; a host round trip).
    """

    _hyper = {"learning_rate": "lr", "weight_decay": "weight_decay"}

    @deep500_arguments(["learning_rate", "weight_decay"])
    def __init__(self, executor, learning_rate: float = 0.1, loss: str = "loss", gradient_modifier=None,
                 weight_decay: float = 0.0):
        super().__init__(executor, loss, gradient_modifier)
        set_hyperparameters(self, learning_rate=learning_rate, weight_decay=weight_decay)

    def _make(self, params):
        return torch.optim.SGD(params, lr=self.learning_rate, weight_decay=self.weight_decay)


class MomentumOptimizer(_TorchOptimizer):
    """Momentum (``torch.optim.SGD(momentum=...)``): ``b <- mu * b + g; w <- w - lr * b``.

    With ``nesterov=True``: ``w <- w - lr * (g + mu * b)``. See the module docstring for how this
    relates to the reference's velocity form.

    Args:
        executor: a torch executor.
        learning_rate: ``lr``.
        momentum: ``mu``.
        nesterov: use Nesterov's look-ahead form.
        loss: the name of the scalar loss tensor.
        gradient_modifier: optional ``f(name, param, grad) -> grad`` (numpy; a host round trip).
    """

    _hyper = {"learning_rate": "lr", "momentum": "momentum", "nesterov": "nesterov",
              "dampening": "dampening", "weight_decay": "weight_decay"}

    @deep500_arguments(["learning_rate", "momentum", "dampening", "weight_decay", "nesterov"])
    def __init__(self, executor, learning_rate: float = 0.1, momentum: float = 0.9, nesterov: bool = False,
                 loss: str = "loss", gradient_modifier=None, dampening: float = 0.0, weight_decay: float = 0.0):
        super().__init__(executor, loss, gradient_modifier)
        set_hyperparameters(self, learning_rate=learning_rate, momentum=momentum, dampening=dampening,
                            weight_decay=weight_decay)
        self._check("nesterov", nesterov)
        if nesterov and self.momentum == 0:
            raise UserError("nesterov=True needs momentum > 0. Received: momentum=0")
        self.nesterov = nesterov

    def _make(self, params):
        return torch.optim.SGD(params, lr=self.learning_rate, momentum=self.momentum, nesterov=self.nesterov,
                               dampening=self.dampening, weight_decay=self.weight_decay)


NesterovOptimizer = nesterov_variant(MomentumOptimizer)


class AdaGradOptimizer(_TorchOptimizer):
    """AdaGrad (``torch.optim.Adagrad``): ``A <- A + g^2; w <- w - lr * g / (sqrt(A) + eps)``.

    Args:
        executor: a torch executor.
        learning_rate: ``lr``.
        epsilon: ``eps`` (outside the root; the reference puts it inside).
        loss: the name of the scalar loss tensor.
        gradient_modifier: optional ``f(name, param, grad) -> grad`` (numpy; a host round trip).
    """

    _hyper = {"learning_rate": "lr", "epsilon": "eps", "weight_decay": "weight_decay", "lr_decay": "lr_decay"}

    @deep500_arguments(["learning_rate", "lr_decay", "weight_decay", "initial_accumulator_value"],
                       defaults={"initial_accumulator_value": 0.1}, aliases={"eps": "epsilon"})
    def __init__(self, executor, learning_rate: float = 0.1, epsilon: float = 1e-8, loss: str = "loss",
                 gradient_modifier=None, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0):
        super().__init__(executor, loss, gradient_modifier)
        set_hyperparameters(self, learning_rate=learning_rate, epsilon=epsilon, lr_decay=lr_decay,
                            weight_decay=weight_decay, initial_accumulator_value=initial_accumulator_value)

    def _make(self, params):
        return torch.optim.Adagrad(params, lr=self.learning_rate, eps=self.epsilon, lr_decay=self.lr_decay,
                                   weight_decay=self.weight_decay,
                                   initial_accumulator_value=self.initial_accumulator_value)


class RMSPropOptimizer(_TorchOptimizer):
    """RMSProp (``torch.optim.RMSprop``): ``A <- beta * A + (1 - beta) * g^2; w <- w - lr * g / (sqrt(A) + eps)``.

    Args:
        executor: a torch executor.
        learning_rate: ``lr``.
        beta: the decay of the squared-gradient average (torch's ``alpha``).
        epsilon: ``eps`` (outside the root; the reference puts it inside).
        loss: the name of the scalar loss tensor.
        gradient_modifier: optional ``f(name, param, grad) -> grad`` (numpy; a host round trip).
    """

    _hyper = {"learning_rate": "lr", "beta": "alpha", "epsilon": "eps", "momentum": "momentum",
              "weight_decay": "weight_decay", "centered": "centered"}

    @deep500_arguments(["learning_rate", "beta", "momentum", "epsilon", "weight_decay", "centered"],
                       defaults={"beta": 0.99}, aliases={"alpha": "beta", "eps": "epsilon"})
    def __init__(self, executor, learning_rate: float = 0.01, beta: float = 0.9, epsilon: float = 1e-8,
                 loss: str = "loss", gradient_modifier=None, momentum: float = 0.0, weight_decay: float = 0.0,
                 centered: bool = False):
        super().__init__(executor, loss, gradient_modifier)
        set_hyperparameters(self, learning_rate=learning_rate, beta=beta, epsilon=epsilon, momentum=momentum,
                            weight_decay=weight_decay)
        self._check("centered", centered)
        self.centered = centered

    def _make(self, params):
        return torch.optim.RMSprop(params, lr=self.learning_rate, alpha=self.beta, eps=self.epsilon,
                                   momentum=self.momentum, weight_decay=self.weight_decay, centered=self.centered)


class AdamOptimizer(_TorchOptimizer):
    """Adam (``torch.optim.Adam``) with bias-corrected moments (see the module docstring).

    Args:
        executor: a torch executor.
        learning_rate: ``lr``.
        beta1: decay of the first moment.
        beta2: decay of the second moment.
        epsilon: ``eps`` (outside the root; the reference puts it inside).
        loss: the name of the scalar loss tensor.
        gradient_modifier: optional ``f(name, param, grad) -> grad`` (numpy; a host round trip).
    """

    _hyper = {"learning_rate": "lr", "beta1": "betas", "beta2": "betas", "epsilon": "eps",
              "weight_decay": "weight_decay"}

    @deep500_arguments(["learning_rate", "beta1", "beta2", "epsilon", "weight_decay"], aliases={"eps": "epsilon"})
    def __init__(self, executor, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, loss: str = "loss", gradient_modifier=None, weight_decay: float = 0.0):
        super().__init__(executor, loss, gradient_modifier)
        set_hyperparameters(self, weight_decay=weight_decay, learning_rate=learning_rate, beta1=beta1, beta2=beta2,
                            epsilon=epsilon)

    def _group_value(self, name):
        if name in ("beta1", "beta2"):
            return (self.beta1, self.beta2)
        return getattr(self, name)

    def _make(self, params):
        return torch.optim.Adam(params, lr=self.learning_rate, betas=(self.beta1, self.beta2), eps=self.epsilon,
                                weight_decay=self.weight_decay)
