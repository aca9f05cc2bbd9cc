"""Reference optimizers in numpy: they work on every executor through ``fetch_tensors`` and
``feed_tensor`` (one host round trip per parameter and step), and define the formulas the
native optimizers of each framework are compared with.

Formulas (``g`` the gradient, ``t`` the step counted from 1), as listed in the seeds (Ben-Nun,
Deep500 tutorial):

- GradientDescent: ``w <- w - lr * g``
- MomentumOptimizer (Qian 1999): ``v <- momentum * v - lr * g``; ``w <- w + v``
  (that is ``w_{t+1} = w_t + momentum * (w_t - w_{t-1}) - lr * g``)
- NesterovOptimizer: ``v <- momentum * v - lr * g``; ``w <- w + momentum * v - lr * g``
  (Sutskever et al.'s form of Nesterov's look-ahead, with the gradient at the current ``w``)
- AdaGradOptimizer (Duchi et al. 2011): ``A <- A + g^2``; ``w <- w - lr * g / sqrt(A + eps)``
- RMSPropOptimizer (Hinton 2012): ``A <- beta * A + (1 - beta) * g^2``; ``w <- w - lr * g / sqrt(A + eps)``
- AdamOptimizer (Kingma & Ba 2015): ``m <- b1 * m + (1 - b1) * g``; ``v <- b2 * v + (1 - b2) * g^2``;
  ``w <- w - lr * m_hat / sqrt(v_hat + eps)`` with ``m_hat = m / (1 - b1^t)``,
  ``v_hat = v / (1 - b2^t)`` (epsilon inside the root, as in the seeds; Kingma & Ba and
  ``torch.optim.Adam`` add it outside: with ``eps=1e-8`` the two steps differ by about 5e-5
  relative for gradients near 1e-2, 0.5% near 1e-3, and a factor of about 1.4 near 1e-4)
- AcceleGradOptimizer (Levy, Yurtsever & Cevher 2018): weights ``alpha_t = 1`` for ``t <= 2``, else
  ``(t + 1) / 4``; ``tau = 1 / alpha_t``; before the gradient is taken the parameter is moved to
  ``x = tau * z + (1 - tau) * y``; then ``S <- S + alpha_t^2 * ||g||^2``,
  ``eta = 2 * diameter / sqrt(G^2 + S)``, ``z <- z - alpha_t * eta * g``, ``y <- x - eta * g``,
  and the parameter becomes ``y``.
"""

from __future__ import annotations

import numpy as np

from deep500lite.errors import UserError
from deep500lite.lv2.optimizer import ThreeStepOptimizer, UpdateRuleOptimizer

__all__ = ["GradientDescent", "MomentumOptimizer", "NesterovOptimizer", "AdaGradOptimizer",
           "RMSPropOptimizer", "AdamOptimizer", "AcceleGradOptimizer"]


def _positive(name, value, allow_zero=False):
    number = isinstance(value, (int, float, np.floating)) and not isinstance(value, bool)
    if not number or not (value >= 0 if allow_zero else value > 0):
        raise UserError(f"{name} must be a number {'>= 0' if allow_zero else '> 0'}. Received: {value!r}")
    return float(value)


class GradientDescent(UpdateRuleOptimizer):
    """Plain (minibatch stochastic) gradient descent: ``w <- w - lr * g``."""

    def __init__(self, executor, learning_rate: float = 0.1, loss: str = "loss", gradient_modifier=None):
        super().__init__(executor, loss, gradient_modifier)
        self.learning_rate = _positive("learning_rate", learning_rate)

    def update_rule(self, grad, old_param, param_name):
        return old_param - self.learning_rate * grad


class MomentumOptimizer(UpdateRuleOptimizer):
    """Gradient descent with momentum: ``v <- momentum * v - lr * g``; ``w <- w + v``."""

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
    """AdaGrad: ``A <- A + g^2``; ``w <- w - lr * g / sqrt(A + eps)``."""

    def __init__(self, executor, learning_rate: float = 0.1, epsilon: float = 1e-8, loss: str = "loss",
                 gradient_modifier=None):
        super().__init__(executor, loss, gradient_modifier)
        self.learning_rate = _positive("learning_rate", learning_rate)
        self.epsilon = _positive("epsilon", epsilon, allow_zero=True)
        self.accumulator: dict[str, np.ndarray] = {}

    def update_rule(self, grad, old_param, param_name):
        a = self.accumulator.get(param_name, 0.0) + grad * grad
        self.accumulator[param_name] = a
        return old_param - self.learning_rate * grad / np.sqrt(a + self.epsilon)


class RMSPropOptimizer(UpdateRuleOptimizer):
    """RMSProp: ``A <- beta * A + (1 - beta) * g^2``; ``w <- w - lr * g / sqrt(A + eps)``."""

    def __init__(self, executor, learning_rate: float = 0.01, beta: float = 0.9, epsilon: float = 1e-8,
                 loss: str = "loss", gradient_modifier=None):
        super().__init__(executor, loss, gradient_modifier)
        self.learning_rate = _positive("learning_rate", learning_rate)
        self.beta = _positive("beta", beta, allow_zero=True)
        self.epsilon = _positive("epsilon", epsilon, allow_zero=True)
        self.accumulator: dict[str, np.ndarray] = {}

    def update_rule(self, grad, old_param, param_name):
        a = self.beta * self.accumulator.get(param_name, 0.0) + (1 - self.beta) * grad * grad
        self.accumulator[param_name] = a
        return old_param - self.learning_rate * grad / np.sqrt(a + self.epsilon)


class AdamOptimizer(ThreeStepOptimizer):
    """Adam with bias-corrected first and second moments (see the module docstring)."""

    def __init__(self, executor, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, loss: str = "loss", gradient_modifier=None):
        super().__init__(executor, loss, gradient_modifier)
        self.learning_rate = _positive("learning_rate", learning_rate)
        self.beta1 = _positive("beta1", beta1, allow_zero=True)
        self.beta2 = _positive("beta2", beta2, allow_zero=True)
        self.epsilon = _positive("epsilon", epsilon, allow_zero=True)
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
        m_hat = m / (1 - self.beta1 ** self.t)
        v_hat = v / (1 - self.beta2 ** self.t)
        return old_param - self.learning_rate * m_hat / np.sqrt(v_hat + self.epsilon)


class AcceleGradOptimizer(ThreeStepOptimizer):
    """AcceleGrad (Levy, Yurtsever & Cevher, NeurIPS 2018), unconstrained (see the module docstring).

    Args:
        executor: the executor whose network is trained.
        diameter: ``D``, the assumed diameter of the region holding the solution.
        gradient_bound: ``G``, a scale for the gradients (added to the accumulated norms).
        loss: the loss tensor's name.
        gradient_modifier: optional ``f(name, grad, param) -> grad``.
    """

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
