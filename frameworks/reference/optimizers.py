"""Reference optimizers in numpy: they work on every executor through ``fetch_tensors`` and
``feed_tensor`` (one host round trip per parameter and step), and define the formulas the
native optimizers of each framework are compared with.

Formulas (``g`` the gradient, ``t`` the step counted from 1, all state starting at zero):

- GradientDescent: ``w <- w - lr * g``
- MomentumOptimizer (Qian 1999): ``v <- momentum * v - lr * g``; ``w <- w + v``
  (that is ``w_{t+1} = w_t + momentum * (w_t - w_{t-1}) - lr * g``)
- NesterovOptimizer: ``v <- momentum * v - lr * g``; ``w <- w + momentum * v - lr * g``
  (Sutskever et al.'s form of Nesterov's look-ahead, with the gradient at the current ``w``)
- AdaGradOptimizer (Duchi et al. 2011): ``A <- A + g^2``; ``w <- w - lr * g / D``
- RMSPropOptimizer (Hinton 2012): ``A <- beta * A + (1 - beta) * g^2``; ``w <- w - lr * g / D``
- AdamOptimizer (Kingma & Ba 2015): ``m <- b1 * m + (1 - b1) * g``; ``v <- b2 * v + (1 - b2) * g^2``;
  ``m_hat = m / (1 - b1^t)``, ``v_hat = v / (1 - b2^t)``; ``w <- w - lr * m_hat / D``
- AcceleGradOptimizer (Levy, Yurtsever & Cevher 2018): weights ``alpha_t = 1`` for ``t <= 2``, else
  ``(t + 1) / 4``; ``tau = 1 / alpha_t``; before the gradient is taken the parameter is moved to
  ``x = tau * z + (1 - tau) * y``; then ``S <- S + alpha_t^2 * ||g||^2``,
  ``eta = 2 * diameter / sqrt(G^2 + S)``, ``z <- z - alpha_t * eta * g``, ``y <- x - eta * g``,
  and the parameter becomes ``y``.

Where epsilon goes in AdaGrad's, RMSProp's and Adam's denominator ``D`` is chosen by the
``epsilon_placement`` argument (``A`` the accumulator; for Adam ``v_hat``):

- ``"outside"`` (the default): ``D = sqrt(A) + eps``. This is ``torch.optim``'s ``Adagrad``
  (with ``initial_accumulator_value=0``, ``lr_decay=0``), ``RMSprop`` (``alpha=beta``, no
  momentum, not centered) and ``Adam``, computed in the same order, and Kingma & Ba's Algorithm 1:
  by default the reference and ONNX Runtime optimizers take the same steps as torch's.
- ``"inside"``: ``D = sqrt(A + eps)``, the seeds' formulas (Ben-Nun, Deep500 tutorial). For
  AdaGrad and RMSProp this is Keras 3's ``Adagrad`` and ``RMSprop`` (``rho=beta``, no momentum,
  not centered), which add epsilon inside the root.
- ``"keras"`` (Adam only): Keras 3's ``Adam``, Kingma & Ba's "efficient" form with epsilon added
  to ``sqrt(v)`` before bias correction:
  ``w <- w - lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)``, that is
  ``D = sqrt(v_hat) + eps / sqrt(1 - b2^t)``.

So torch and Keras do not agree with each other: no single form matches both. The forms differ
where the accumulator is comparable to epsilon (``A`` near ``eps`` inside, ``sqrt(A)`` near
``eps`` outside): with ``eps=1e-8`` and ``A`` near ``g^2``, "inside" and "outside" steps differ
by about 5e-5 relative for gradients near 1e-2, 0.5% near 1e-3 and a factor of about 1.4 near
1e-4; Keras's Adam differs from torch's by ``eps * (1 / sqrt(1 - b2^t) - 1) / sqrt(v_hat)``
relative, largest at the first steps (about 30 * eps / |g| at ``t = 1`` with ``b2 = 0.999``).

Deep500's call form, ``Optimizer(executor, 'loss', <hyperparameters>)`` with ``lr=`` for
``learning_rate`` (and ``eps=`` for ``epsilon``), is accepted too (see
:func:`~deep500lite.lv2.optimizer.deep500_arguments`); in that form the defaults are Deep500's
reference ones where they differ: ``MomentumOptimizer`` ``lr=0.01, momentum=0.1``,
``AdaGradOptimizer`` ``lr=1e-2, eps=1e-6``, ``AdamOptimizer`` ``epsilon_placement="inside"``
(Deep500's formula; its second-moment decay used ``beta1`` by mistake, here it is ``beta2`` as
Deep500 documented).
"""

from __future__ import annotations

import numpy as np

from deep500lite.errors import UserError
from deep500lite.lv2.hyperparameters import check_hyperparameter
from deep500lite.lv2.optimizer import ThreeStepOptimizer, UpdateRuleOptimizer, deep500_arguments

__all__ = ["GradientDescent", "MomentumOptimizer", "NesterovOptimizer", "AdaGradOptimizer",
           "RMSPropOptimizer", "AdamOptimizer", "AcceleGradOptimizer"]


def _positive(name, value, allow_zero=False):
    """``value`` checked by the declared type of the hyperparameter ``name`` (deep500lite.lv2.hyperparameters)."""
    return check_hyperparameter(name, value)


_PLACEMENTS = ("outside", "inside")
_ADAM_PLACEMENTS = ("outside", "inside", "keras")


def _placement(owner, value, allowed=_PLACEMENTS):
    if value not in allowed:
        raise UserError(f"{owner}: epsilon_placement must be one of {', '.join(repr(a) for a in allowed)} "
                        f"(where epsilon goes in the denominator; see the module docstring). Received: {value!r}")
    return value


def _denominator(owner, accumulator, epsilon, placement):
    """``sqrt(A) + eps`` ("outside") or ``sqrt(A + eps)`` ("inside")."""
    # checked again here: set_parameter may have changed it after the constructor validated it
    if _placement(owner, placement) == "outside":
        return np.sqrt(accumulator) + epsilon
    return np.sqrt(accumulator + epsilon)


class GradientDescent(UpdateRuleOptimizer):
    """Plain (minibatch stochastic) gradient descent: ``w <- w - lr * g``."""

    @deep500_arguments(["learning_rate"])
    def __init__(self, executor, learning_rate: float = 0.1, loss: str = "loss", gradient_modifier=None):
        super().__init__(executor, loss, gradient_modifier)
        self.learning_rate = _positive("learning_rate", learning_rate)

    def update_rule(self, grad, old_param, param_name):
        return old_param - self.learning_rate * grad


class MomentumOptimizer(UpdateRuleOptimizer):
    """Gradient descent with momentum: ``v <- momentum * v - lr * g``; ``w <- w + v``."""

    @deep500_arguments(["learning_rate", "momentum"], defaults={"learning_rate": 0.01, "momentum": 0.1})
    def __init__(self, executor, learning_rate: float = 0.1, momentum: float = 0.9, loss: str = "loss",
                 gradient_modifier=None):
        super().__init__(executor, loss, gradient_modifier)
        self.learning_rate = _positive("learning_rate", learning_rate)
        self.momentum = _positive("momentum", momentum, allow_zero=True)
        self.velocity: dict[str, np.ndarray] = {}

    def update_rule(self, grad, old_param, param_name):
        v = self.momentum * self.velocity.get(param_name, 0.0) - self.learning_rate * grad
        self.velocity[param_name] = v
        return old_param + v


class NesterovOptimizer(MomentumOptimizer):
    """Nesterov momentum: ``v <- momentum * v - lr * g``; ``w <- w + momentum * v - lr * g``."""

    def update_rule(self, grad, old_param, param_name):
        v = self.momentum * self.velocity.get(param_name, 0.0) - self.learning_rate * grad
        self.velocity[param_name] = v
        return old_param + self.momentum * v - self.learning_rate * grad


class AdaGradOptimizer(UpdateRuleOptimizer):
    """AdaGrad: ``A <- A + g^2``; ``w <- w - lr * g / (sqrt(A) + eps)`` (``sqrt(A + eps)`` "inside").

    Args:
        executor: the executor whose network is trained.
        learning_rate: ``lr``.
        epsilon: ``eps``, added to the denominator.
        loss: the loss tensor's name.
        gradient_modifier: optional ``f(name, param, grad) -> grad``.
        epsilon_placement: ``"outside"`` (``torch.optim.Adagrad``) or ``"inside"`` (the seeds'
            formula and ``keras.optimizers.Adagrad``); see the module docstring.

    Raises:
        UserError: a hyperparameter out of range, or an unknown ``epsilon_placement``.
    """

    @deep500_arguments(["learning_rate", "epsilon"], defaults={"learning_rate": 1e-2, "epsilon": 1e-6},
                       aliases={"eps": "epsilon"})
    def __init__(self, executor, learning_rate: float = 0.1, epsilon: float = 1e-8, loss: str = "loss",
                 gradient_modifier=None, epsilon_placement: str = "outside"):
        super().__init__(executor, loss, gradient_modifier)
        self.learning_rate = _positive("learning_rate", learning_rate)
        self.epsilon = _positive("epsilon", epsilon, allow_zero=True)
        self.epsilon_placement = _placement(type(self).__name__, epsilon_placement)
        self.accumulator: dict[str, np.ndarray] = {}

    def update_rule(self, grad, old_param, param_name):
        a = self.accumulator.get(param_name, 0.0) + grad * grad
        self.accumulator[param_name] = a
        return old_param - self.learning_rate * grad / _denominator(type(self).__name__, a, self.epsilon,
                                                                     self.epsilon_placement)


class RMSPropOptimizer(UpdateRuleOptimizer):
    """RMSProp: ``A <- beta * A + (1 - beta) * g^2``; ``w <- w - lr * g / (sqrt(A) + eps)``
    (``sqrt(A + eps)`` "inside").

    Args:
        executor: the executor whose network is trained.
        learning_rate: ``lr``.
        beta: the decay of the squared-gradient average (torch's ``alpha``, Keras's ``rho``).
        epsilon: ``eps``, added to the denominator.
        loss: the loss tensor's name.
        gradient_modifier: optional ``f(name, param, grad) -> grad``.
        epsilon_placement: ``"outside"`` (``torch.optim.RMSprop``) or ``"inside"`` (the seeds'
            formula and ``keras.optimizers.RMSprop``); see the module docstring.

    Raises:
        UserError: a hyperparameter out of range, or an unknown ``epsilon_placement``.
    """

    @deep500_arguments(["learning_rate", "beta", "epsilon"], aliases={"eps": "epsilon"})
    def __init__(self, executor, learning_rate: float = 0.01, beta: float = 0.9, epsilon: float = 1e-8,
                 loss: str = "loss", gradient_modifier=None, epsilon_placement: str = "outside"):
        super().__init__(executor, loss, gradient_modifier)
        self.learning_rate = _positive("learning_rate", learning_rate)
        self.beta = _positive("beta", beta, allow_zero=True)
        self.epsilon = _positive("epsilon", epsilon, allow_zero=True)
        self.epsilon_placement = _placement(type(self).__name__, epsilon_placement)
        self.accumulator: dict[str, np.ndarray] = {}

    def update_rule(self, grad, old_param, param_name):
        a = self.beta * self.accumulator.get(param_name, 0.0) + (1 - self.beta) * grad * grad
        self.accumulator[param_name] = a
        return old_param - self.learning_rate * grad / _denominator(type(self).__name__, a, self.epsilon,
                                                                     self.epsilon_placement)


class AdamOptimizer(ThreeStepOptimizer):
    """Adam with bias-corrected first and second moments (see the module docstring).

    Args:
        executor: the executor whose network is trained.
        learning_rate: ``lr``.
        beta1: ``b1``, the decay of the first moment.
        beta2: ``b2``, the decay of the second moment.
        epsilon: ``eps``, added to the denominator.
        loss: the loss tensor's name.
        gradient_modifier: optional ``f(name, param, grad) -> grad``.
        epsilon_placement: ``"outside"`` (``torch.optim.Adam``:
            ``w <- w - lr * m_hat / (sqrt(v_hat) + eps)``), ``"inside"`` (the seeds' formula,
            ``sqrt(v_hat + eps)``) or ``"keras"`` (``keras.optimizers.Adam``:
            ``w <- w - lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)``).

    Raises:
        UserError: a hyperparameter out of range, or an unknown ``epsilon_placement``.
    """

    @deep500_arguments(["learning_rate", "beta1", "beta2", "epsilon"], defaults={"epsilon_placement": "inside"},
                       aliases={"eps": "epsilon"})
    def __init__(self, executor, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, loss: str = "loss", gradient_modifier=None,
                 epsilon_placement: str = "outside"):
        super().__init__(executor, loss, gradient_modifier)
        self.learning_rate = _positive("learning_rate", learning_rate)
        self.beta1 = _positive("beta1", beta1, allow_zero=True)
        self.beta2 = _positive("beta2", beta2, allow_zero=True)
        self.epsilon = _positive("epsilon", epsilon, allow_zero=True)
        self.epsilon_placement = _placement(type(self).__name__, epsilon_placement, _ADAM_PLACEMENTS)
        self.t = 0
        self.first: dict[str, np.ndarray] = {}
        self.second: dict[str, np.ndarray] = {}

    def new_input(self):
        self.t += 1

    def prepare_param(self, param_name):
        """Adam keeps its moments per parameter; nothing to move before the forward pass."""

    def update_rule(self, grad, old_param, param_name):
        m = self.beta1 * self.first.get(param_name, 0.0) + (1 - self.beta1) * grad
        v = self.beta2 * self.second.get(param_name, 0.0) + (1 - self.beta2) * grad * grad
        self.first[param_name], self.second[param_name] = m, v
        correction1, correction2 = 1 - self.beta1 ** self.t, 1 - self.beta2 ** self.t
        if _placement(type(self).__name__, self.epsilon_placement, _ADAM_PLACEMENTS) == "keras":
            alpha = self.learning_rate * correction2 ** 0.5 / correction1
            return old_param - m * alpha / (np.sqrt(v) + self.epsilon)
        if self.epsilon_placement == "outside":
            # torch.optim.Adam's order of operations: (sqrt(v) / sqrt(1 - b2^t) + eps), lr / (1 - b1^t)
            return old_param - (self.learning_rate / correction1) * m / (np.sqrt(v) / correction2 ** 0.5
                                                                         + self.epsilon)
        return old_param - self.learning_rate * (m / correction1) / np.sqrt(v / correction2 + self.epsilon)


class AcceleGradOptimizer(ThreeStepOptimizer):
    """AcceleGrad (Levy, Yurtsever & Cevher, NeurIPS 2018), unconstrained (see the module docstring).

    Args:
        executor: the executor whose network is trained.
        diameter: ``D``, the assumed diameter of the region holding the solution.
        gradient_bound: ``G``, a scale for the gradients (added to the accumulated norms).
        loss: the loss tensor's name.
        gradient_modifier: optional ``f(name, param, grad) -> grad``.
    """

    @deep500_arguments(["diameter", "gradient_bound"])
    def __init__(self, executor, diameter: float = 10.0, gradient_bound: float = 1.0, loss: str = "loss",
                 gradient_modifier=None):
        super().__init__(executor, loss, gradient_modifier)
        self.diameter = _positive("diameter", diameter)
        self.gradient_bound = _positive("gradient_bound", gradient_bound, allow_zero=True)
        self.t = 0
        self.alpha = 1.0
        self.y: dict[str, np.ndarray] = {}
        self.z: dict[str, np.ndarray] = {}
        self.x: dict[str, np.ndarray] = {}
        self.norms: dict[str, float] = {}

    def new_input(self):
        self.t += 1
        self.alpha = 1.0 if self.t <= 2 else (self.t + 1) / 4.0

    def prepare_param(self, param_name):
        if param_name not in self.y:
            w = self.network.fetch_tensor(param_name).astype(np.float64)
            self.y[param_name], self.z[param_name] = w.copy(), w.copy()
        tau = 1.0 / self.alpha
        x = tau * self.z[param_name] + (1 - tau) * self.y[param_name]
        self.x[param_name] = x
        dtype = self.network.fetch_tensor(param_name).dtype
        self.network.feed_tensor(param_name, x.astype(dtype))

    def update_rule(self, grad, old_param, param_name):
        g = np.asarray(grad, np.float64)
        self.norms[param_name] = self.norms.get(param_name, 0.0) + self.alpha ** 2 * float(np.sum(g * g))
        eta = 2 * self.diameter / np.sqrt(self.gradient_bound ** 2 + self.norms[param_name])
        self.z[param_name] = self.z[param_name] - self.alpha * eta * g
        self.y[param_name] = self.x[param_name] - eta * g
        return self.y[param_name]
