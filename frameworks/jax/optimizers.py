"""Native JAX optimizers: optax updates fused with forward and backward into one compiled step.

Each optimizer's :meth:`~_JaxOptimizer.step` calls ``executor.train_step``: one XLA executable
computes the outputs, the loss, the gradients (``jax.value_and_grad``), the optax update and the
new parameters, which replace the old ones on the device. Nothing crosses to numpy unless a
``gradient_modifier`` is given (then the gradients are fetched, modified in numpy and applied by
a second compiled function). They work with :class:`~deep500lite.frameworks.jax.JaxExecutor`.

Class names and constructor arguments are those of the torch and reference optimizers
(:mod:`deep500lite.frameworks.torch.optimizers`, :mod:`deep500lite.frameworks.reference.optimizers`).
The update each one applies (``g`` the gradient, ``t`` the step counted from 1):

- ``GradientDescent`` (``optax.sgd``): ``w <- w - lr * g``.
- ``MomentumOptimizer`` (``optax.sgd(momentum=mu)``): ``b <- mu * b + g``; ``w <- w - lr * b``,
  or with ``nesterov=True`` ``w <- w - lr * (g + mu * b)``: torch's ``SGD`` and, at a constant
  learning rate, the reference's ``v <- mu * v - lr * g; w <- w + v`` (``v = -lr * b``).
- ``NesterovOptimizer``: ``MomentumOptimizer(nesterov=True)``.
- ``AdaGradOptimizer`` (written in ``jax.numpy``): ``A <- A + g^2``;
  ``w <- w - lr * g / (sqrt(A) + eps)``. ``optax.adagrad`` computes ``g / sqrt(A + eps)``
  (epsilon inside the root), which is not torch's nor the reference's default formula.
- ``RMSPropOptimizer`` (``optax.rmsprop(eps_in_sqrt=False)``): ``A <- beta * A + (1 - beta) * g^2``;
  ``w <- w - lr * g / (sqrt(A) + eps)``.
- ``AdamOptimizer`` (``optax.adam(eps_root=0)``): ``m <- b1 * m + (1 - b1) * g``;
  ``v <- b2 * v + (1 - b2) * g^2``; ``w <- w - lr * m_hat / (sqrt(v_hat) + eps)``.

Epsilon is outside the square root everywhere, as in ``torch.optim`` and the reference's default
``epsilon_placement="outside"``.

Hyperparameters live in the optimizer state (``optax.inject_hyperparams``, in the parameters'
widest float dtype), so ``set_parameter(name, value, predicate=None)`` (``learning_rate`` or
``lr``, ``momentum``, ``beta``, ``beta1``, ``beta2``, ``epsilon``, ``weight_decay``, ``lr_decay``)
changes them between steps without recompiling. ``nesterov`` can be switched too (that compiles
a new step); ``centered`` and ``initial_accumulator_value`` are fixed once the state exists.

Torch's extra arguments are accepted in both call forms: ``weight_decay`` (all: ``g + wd * w``
before the update, ``optax.add_decayed_weights``), ``lr_decay`` and ``initial_accumulator_value``
(AdaGrad), ``momentum`` and ``centered`` (RMSProp, as ``optax.rmsprop``, which is torch's
``RMSprop``). Momentum's ``dampening`` must be 0 (optax has no dampening).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from deep500lite.errors import UserAttributeError, UserError, UserTypeError
from deep500lite.lv2.hyperparameters import check_hyperparameter, nesterov_variant, set_hyperparameters
from deep500lite.lv2.hyperparameters import check_number as _number
from deep500lite.lv2.optimizer import Optimizer, deep500_arguments
from deep500lite.frameworks.jax.executor import JaxExecutor

__all__ = ["GradientDescent", "MomentumOptimizer", "NesterovOptimizer", "AdamOptimizer",
           "AdaGradOptimizer", "RMSPropOptimizer"]


# ------------------------------------------------------------------ transforms
def _weight_decay(weight_decay, decayed: bool) -> optax.GradientTransformation:
    """``g + wd * w``, or the identity when the optimizer's weight decay is 0.

    ``weight_decay`` is a traced hyperparameter of the compiled step, so XLA cannot drop a
    multiply-add by zero; ``decayed`` is static. Both have an empty state, so switching keeps
    the optimizer state.
    """
    return optax.add_decayed_weights(weight_decay) if decayed else optax.identity()


def _sgd(learning_rate, weight_decay, momentum=None, nesterov=False, decayed=True):
    return optax.chain(_weight_decay(weight_decay, decayed), optax.sgd(learning_rate, momentum, nesterov))


class _AdaGradState(NamedTuple):
    count: jax.Array
    accumulator: optax.Updates


def _scale_by_adagrad(eps, lr_decay, initial_accumulator_value) -> optax.GradientTransformation:
    """``-g / (sqrt(A) + eps) / (1 + (t - 1) * lr_decay)`` with ``A <- A + g^2`` (torch's Adagrad)."""
    def init(params):
        return _AdaGradState(jnp.zeros([], jnp.int32),
                             jax.tree.map(lambda p: jnp.full_like(p, initial_accumulator_value), params))

    def update(grads, state, params=None):
        acc = jax.tree.map(lambda a, g: a + g * g, state.accumulator, grads)
        decay = 1 + state.count.astype(jnp.result_type(lr_decay)) * lr_decay
        out = jax.tree.map(lambda g, a: g / (jnp.sqrt(a) + eps) / decay.astype(g.dtype), grads, acc)
        return out, _AdaGradState(state.count + 1, acc)
    return optax.GradientTransformation(init, update)


def _adagrad(learning_rate, weight_decay, eps, lr_decay, initial_accumulator_value, decayed=True):
    return optax.chain(_weight_decay(weight_decay, decayed),
                       _scale_by_adagrad(eps, lr_decay, initial_accumulator_value),
                       optax.scale_by_learning_rate(learning_rate))


def _rmsprop(learning_rate, weight_decay, decay, eps, momentum, centered=False, decayed=True):
    return optax.chain(_weight_decay(weight_decay, decayed),
                       optax.rmsprop(learning_rate, decay=decay, eps=eps, eps_in_sqrt=False, centered=centered,
                                     momentum=momentum))


def _adam(learning_rate, weight_decay, b1, b2, eps, decayed=True):
    return optax.chain(_weight_decay(weight_decay, decayed),
                       optax.adam(learning_rate, b1=b1, b2=b2, eps=eps, eps_root=0.0))


# ------------------------------------------------------------------ optimizers
class _JaxOptimizer(Optimizer):
    """A :class:`~deep500lite.Optimizer` running one optax transformation (see module docstring).

    Subclasses set :attr:`_factory` (an optax factory), :attr:`_hyper` (attribute name -> the
    factory's hyperparameter name) and :attr:`_static` (attributes passed as static arguments).

    Attributes:
        opt_state: the optax state (``None`` before the first step or after the trained
            parameters changed).
    """

    _factory = staticmethod(_sgd)
    _hyper: dict[str, str] = {"learning_rate": "learning_rate", "weight_decay": "weight_decay"}
    _static: dict[str, str] = {}
    _fixed: tuple = ()  # attributes that cannot change once the state exists

    def __init__(self, executor, loss="loss", gradient_modifier=None):
        if not isinstance(executor, JaxExecutor):
            raise UserTypeError("The native jax optimizers need a JaxExecutor; use the reference optimizers "
                                "(deep500lite.frameworks.reference) for other executors. "
                                f"Received: {type(executor).__name__}")
        super().__init__(executor, loss, gradient_modifier)
        self.opt_state = None
        self._transform = None
        self._names: list[str] | None = None

    def transform(self) -> optax.GradientTransformation:
        """The optax transformation (``optax.inject_hyperparams`` over the factory), built once."""
        if self._transform is None:
            static = {arg: getattr(self, attr) for attr, arg in self._static.items()}
            static["decayed"] = self.weight_decay != 0
            hyper = {arg: getattr(self, attr) for attr, arg in self._hyper.items()}
            self._transform = optax.inject_hyperparams(type(self)._factory, static_args=tuple(static))(
                **static, **hyper)
        return self._transform

    def _trained(self) -> list[str]:
        names = self.executor._gradient_split(self.loss)[1]
        if names != self._names:
            # A changed network with other parameters starts from fresh optimizer state.
            self.opt_state, self._names = None, names
        return names

    def step(self, inputs):
        """Forward, backward and update in one compiled step on the device.

        Returns:
            The network's outputs for this minibatch (before the update), as numpy arrays.
        """
        names = self._trained()
        if self.gradient_modifier is None:
            outputs, self.opt_state = self.executor.train_step(inputs, self.loss, self.transform(), self.opt_state)
            return outputs
        outputs = self.executor.inference_and_backprop(inputs, self.loss)
        grads = {}
        for name in names:
            grad = self.executor.fetch_tensor(name + "_grad")
            new = np.asarray(self.gradient_modifier(name, self.executor.fetch_tensor(name), grad), dtype=grad.dtype)
            if new.shape != grad.shape:
                raise UserError(f"gradient_modifier must return an array of the gradient's shape "
                                f"{list(grad.shape)} for '{name}'. Received: shape {list(new.shape)}")
            grads[name] = new
        self.opt_state = self.executor.apply_gradients(self.transform(), self.opt_state, grads)
        return outputs

    def set_parameter(self, name, value, predicate=None):
        """Change a hyperparameter between steps (see the module docstring).

        ``lr`` is ``learning_rate``; with ``predicate``, the value is set only when
        ``predicate(current value)`` is true (Deep500's filter).

        Raises:
            UserAttributeError: the optimizer has no such hyperparameter (an ``AttributeError``).
            UserError: the value is out of range, or the hyperparameter is fixed once training started.
            UserTypeError: the value is not a number (a bool for ``nesterov``/``centered``).
        """
        name = "learning_rate" if name == "lr" else name
        known = {**self._hyper, **self._static}
        if name not in known and name not in self._fixed:
            raise UserAttributeError(f"{type(self).__name__} has no hyperparameter '{name}'. "
                                     f"Hyperparameters: {sorted(set(known) | set(self._fixed))}. Received: {name!r}")
        if predicate is not None and not predicate(getattr(self, name)):
            return
        self._check(name, value)
        if name in self._fixed and self.opt_state is not None and value != getattr(self, name):
            raise UserError(f"{type(self).__name__}: {name} is fixed once the optimizer state exists (after the "
                            f"first step). Received: {name}={value!r}")
        old = getattr(self, name)
        setattr(self, name, value)
        if name == "weight_decay" and (old != 0) != (value != 0):
            self._transform = None  # the static 'decayed' flag changes; the state's structure does not
        if name in self._static or name in self._fixed:
            self._transform = None
        elif self.opt_state is not None:
            hyper = self.opt_state.hyperparams
            key = self._hyper[name]
            hyper[key] = jnp.asarray(value, dtype=hyper[key].dtype)
        else:
            self._transform = None

    def _check(self, name, value):
        check_hyperparameter(name, value)


class GradientDescent(_JaxOptimizer):
    """Gradient descent, ``w <- w - lr * g`` (``optax.sgd``).

    Args:
        executor: a :class:`JaxExecutor`.
        learning_rate: ``lr``.
        loss: the name of the scalar loss tensor.
        gradient_modifier: optional ``f(name, param, grad) -> grad`` (numpy; a host round trip).
        weight_decay: added to the gradient as ``wd * w``.
    """

    @deep500_arguments(["learning_rate", "weight_decay"])
    def __init__(self, executor, learning_rate: float = 0.1, loss: str = "loss", gradient_modifier=None,
                 weight_decay: float = 0.0):
        super().__init__(executor, loss, gradient_modifier)
        set_hyperparameters(self, learning_rate=learning_rate, weight_decay=weight_decay)


class MomentumOptimizer(_JaxOptimizer):
    """Momentum (``optax.sgd(momentum=...)``): ``b <- mu * b + g; w <- w - lr * b``.

    With ``nesterov=True``: ``w <- w - lr * (g + mu * b)``.

    Args:
        executor: a :class:`JaxExecutor`.
        learning_rate: ``lr``.
        momentum: ``mu``.
        nesterov: use Nesterov's look-ahead form.
        loss: the name of the scalar loss tensor.
        gradient_modifier: optional ``f(name, param, grad) -> grad`` (numpy; a host round trip).
        dampening: must be 0 (accepted for torch's and Deep500's call forms).
        weight_decay: added to the gradient as ``wd * w``.

    Raises:
        UserError: ``dampening`` is not 0, or ``nesterov=True`` with ``momentum=0``.
    """

    _hyper = {"learning_rate": "learning_rate", "weight_decay": "weight_decay", "momentum": "momentum"}
    _static = {"nesterov": "nesterov"}

    @deep500_arguments(["learning_rate", "momentum", "dampening", "weight_decay", "nesterov"])
    def __init__(self, executor, learning_rate: float = 0.1, momentum: float = 0.9, nesterov: bool = False,
                 loss: str = "loss", gradient_modifier=None, dampening: float = 0.0, weight_decay: float = 0.0):
        super().__init__(executor, loss, gradient_modifier)
        set_hyperparameters(self, learning_rate=learning_rate, momentum=momentum)
        if _number("dampening", dampening) != 0:
            raise UserError("The jax MomentumOptimizer has no dampening (optax's momentum has none); use "
                            f"dampening=0 or the torch optimizer. Received: dampening={dampening!r}")
        set_hyperparameters(self, weight_decay=weight_decay)
        self._check("nesterov", nesterov)
        if nesterov and self.momentum == 0:
            raise UserError("nesterov=True needs momentum > 0. Received: momentum=0")
        self.nesterov = nesterov


NesterovOptimizer = nesterov_variant(MomentumOptimizer)


class AdaGradOptimizer(_JaxOptimizer):
    """AdaGrad (``jax.numpy``): ``A <- A + g^2; w <- w - lr * g / (sqrt(A) + eps)``.

    Args:
        executor: a :class:`JaxExecutor`.
        learning_rate: ``lr``.
        epsilon: ``eps`` (outside the root).
        loss: the name of the scalar loss tensor.
        gradient_modifier: optional ``f(name, param, grad) -> grad`` (numpy; a host round trip).
        lr_decay: the step ``t`` uses ``lr / (1 + (t - 1) * lr_decay)`` (torch's).
        weight_decay: added to the gradient as ``wd * w``.
        initial_accumulator_value: the accumulator's start value.
    """

    _factory = staticmethod(_adagrad)
    _hyper = {"learning_rate": "learning_rate", "weight_decay": "weight_decay", "epsilon": "eps",
              "lr_decay": "lr_decay"}
    _static = {"initial_accumulator_value": "initial_accumulator_value"}
    _fixed = ("initial_accumulator_value",)

    @deep500_arguments(["learning_rate", "lr_decay", "weight_decay", "initial_accumulator_value"],
                       defaults={"initial_accumulator_value": 0.1}, aliases={"eps": "epsilon"})
    def __init__(self, executor, learning_rate: float = 0.1, epsilon: float = 1e-8, loss: str = "loss",
                 gradient_modifier=None, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0):
        super().__init__(executor, loss, gradient_modifier)
        set_hyperparameters(self, learning_rate=learning_rate, epsilon=epsilon, lr_decay=lr_decay,
                            weight_decay=weight_decay, initial_accumulator_value=initial_accumulator_value)


class RMSPropOptimizer(_JaxOptimizer):
    """RMSProp (``optax.rmsprop(eps_in_sqrt=False)``): ``A <- beta * A + (1 - beta) * g^2;
    w <- w - lr * g / (sqrt(A) + eps)``.

    Args:
        executor: a :class:`JaxExecutor`.
        learning_rate: ``lr``.
        beta: the decay of the squared-gradient average (torch's ``alpha``).
        epsilon: ``eps`` (outside the root).
        loss: the name of the scalar loss tensor.
        gradient_modifier: optional ``f(name, param, grad) -> grad`` (numpy; a host round trip).
        momentum: torch's RMSprop momentum (``b <- mu * b + g / (sqrt(A) + eps)``; ``w <- w - lr * b``).
        weight_decay: added to the gradient as ``wd * w``.
        centered: divide by the centered root ``sqrt(A - mean(g)^2) + eps``.
    """

    _factory = staticmethod(_rmsprop)
    _hyper = {"learning_rate": "learning_rate", "weight_decay": "weight_decay", "beta": "decay",
              "epsilon": "eps", "momentum": "momentum"}
    _static = {"centered": "centered"}
    _fixed = ("centered",)

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


class AdamOptimizer(_JaxOptimizer):
    """Adam (``optax.adam(eps_root=0)``) with bias-corrected moments (see the module docstring).

    Args:
        executor: a :class:`JaxExecutor`.
        learning_rate: ``lr``.
        beta1: decay of the first moment.
        beta2: decay of the second moment.
        epsilon: ``eps`` (outside the root).
        loss: the name of the scalar loss tensor.
        gradient_modifier: optional ``f(name, param, grad) -> grad`` (numpy; a host round trip).
        weight_decay: added to the gradient as ``wd * w`` (torch's ``Adam``, not AdamW).
    """

    _factory = staticmethod(_adam)
    _hyper = {"learning_rate": "learning_rate", "weight_decay": "weight_decay", "beta1": "b1", "beta2": "b2",
              "epsilon": "eps"}

    @deep500_arguments(["learning_rate", "beta1", "beta2", "epsilon", "weight_decay"], aliases={"eps": "epsilon"})
    def __init__(self, executor, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, loss: str = "loss", gradient_modifier=None, weight_decay: float = 0.0):
        super().__init__(executor, loss, gradient_modifier)
        set_hyperparameters(self, learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon,
                            weight_decay=weight_decay)
