"""Native TensorFlow optimizers for :class:`~deep500lite.frameworks.tensorflow.TensorFlowExecutor`.

Each optimizer runs a whole training step as ONE ``tf.function`` on the executor's device: the
training-mode forward pass under ``tf.GradientTape`` (BatchNormalization running statistics are
updated, Dropout is active), the gradients of the loss, and a Keras optimizer's
``apply_gradients`` on the executor's ``tf.Variable`` parameters. Nothing crosses to numpy but the
feeds and the returned outputs. The function is traced once per family of input shapes; the
learning rate is the Keras optimizer's ``learning_rate`` variable, so
``set_parameter("learning_rate", v)`` takes effect without tracing again. Changing any other
hyperparameter (``momentum``, ``beta1``...) sets the Keras optimizer's attribute, which Keras
reads as a Python number while tracing, so the step function is traced once more.

After a step, the gradients it used can be read with ``network.fetch_tensors(["<param>_grad"])``
(they stay on the device until then; set ``keep_gradients = False`` for a step that does not keep
them at all, like a plain Keras step). Parameters and gradients cross the API in the ONNX layout,
whatever layout the executor stores them in (:mod:`.param_layout`); the update rules below are
elementwise, so they do not depend on it.

Class names and constructor arguments are those of the numpy reference optimizers
(:mod:`deep500lite.frameworks.reference.optimizers`). The update rules are Keras 3's, used as
they are (``g`` the gradient, ``t`` the step count from 1, ``lr`` the learning rate at that step,
all state starting at zero):

- :class:`GradientDescent` (``keras.optimizers.SGD``): ``w -= lr * g``. Same as the reference.
- :class:`MomentumOptimizer` (``keras.optimizers.SGD(momentum=mu)``): ``m = mu * m - lr * g``,
  ``w += m``; with ``nesterov=True``: ``w += mu * m - lr * g`` (``m`` already updated). Same as
  the reference (``v <- mu * v - lr * g``), also when the learning rate changes between steps
  (PyTorch's ``b = mu * b + g; w -= lr * b`` differs then).
- :class:`NesterovOptimizer`: ``MomentumOptimizer(nesterov=True)``, the reference's class name.
- :class:`AdaGradOptimizer` (``keras.optimizers.Adagrad``, ``initial_accumulator_value=0``):
  ``A += g**2``, ``w -= lr * g / sqrt(A + epsilon)``. Epsilon inside the square root: the
  reference's ``epsilon_placement="inside"``, not its default (the textbook and PyTorch put it
  outside). Keras's own default initial accumulator is 0.1; the reference's 0 is used unless
  ``initial_accumulator_value`` is given.
- :class:`RMSPropOptimizer` (``keras.optimizers.RMSprop(rho=beta)``):
  ``A = beta * A + (1 - beta) * g**2``, ``w -= lr * g / sqrt(A + epsilon)``. The reference's
  ``epsilon_placement="inside"``, not its default (TensorFlow 1's RMSProp started ``A`` at one;
  Keras 3 and the reference at zero). With the
  extra ``momentum > 0``: ``M = momentum * M + lr * g / sqrt(A + epsilon)``, ``w -= M``.
- :class:`AdamOptimizer` (``keras.optimizers.Adam``): ``m += (g - m) * (1 - beta1)``,
  ``v += (g**2 - v) * (1 - beta2)``, ``w -= lr * sqrt(1 - beta2**t) / (1 - beta1**t) * m /
  (sqrt(v) + epsilon)``: Kingma & Ba's "efficient" form, with epsilon added to ``sqrt(v)``
  *before* bias correction. In terms of ``m_hat = m / (1 - beta1**t)`` and
  ``v_hat = v / (1 - beta2**t)`` the step is ``lr * m_hat / (sqrt(v_hat) + epsilon / sqrt(1 -
  beta2**t))``, where the textbook, PyTorch and the reference's default divide by
  ``sqrt(v_hat) + epsilon`` and the reference's ``epsilon_placement="inside"`` by
  ``sqrt(v_hat + epsilon)``; the reference's ``epsilon_placement="keras"`` is this form. They
  agree where ``v_hat >> epsilon**2`` (inside) and ``sqrt(v_hat) >> epsilon / sqrt(1 - beta2**t)``
  (Keras: about 30 * epsilon at the first step with ``beta2=0.999``); the default
  ``epsilon=1e-8`` is the reference's (Keras's own default is 1e-7). Keras rounds the betas to
  float32 in the bias correction (``ops.cast`` of a Python float): with ``beta2=0.999`` its steps
  are 6.7e-6 relative shorter than the float64 formula, even on float64 variables.

``gradient_modifier(name, param, grad) -> grad`` (Deep500's order) works on numpy arrays, so when it is given the
step takes a slower path: the executor's ``inference_and_backprop`` (one ``tf.function``), the
gradients and parameters copied to the host, the modifier applied there, and the modified
gradients passed to a second ``tf.function`` that runs ``apply_gradients``.

Deep500's call form is accepted too (:func:`~deep500lite.lv2.optimizer.deep500_arguments`):
``GradientDescent(executor, 'loss', learning_rate)``, ``MomentumOptimizer(executor, 'loss',
learning_rate, momentum)``, ``AdamOptimizer(executor, 'loss', learning_rate, beta1, beta2,
epsilon)``, ``AdaGradOptimizer(executor, 'loss', learning_rate, initial_accumulator_value)``
(Deep500's default accumulator 0.1 in this form) and ``RMSPropOptimizer(executor, 'loss',
learning_rate, decay, momentum, epsilon)`` (``decay`` is ``beta``; Deep500's default epsilon
1e-10 in this form), each also with ``lr=``.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from deep500lite.errors import UserAttributeError, UserError, UserTypeError
from deep500lite.frameworks.tensorflow.executor import TensorFlowExecutor, _check_scalar
from deep500lite.lv2.hyperparameters import check_hyperparameter
from deep500lite.lv2.optimizer import Optimizer, deep500_arguments

__all__ = ["TensorFlowOptimizer", "GradientDescent", "MomentumOptimizer", "NesterovOptimizer", "AdamOptimizer",
           "AdaGradOptimizer", "RMSPropOptimizer"]


def _number(owner, name, value):
    """``value`` checked by the declared type of the hyperparameter ``name`` (deep500lite.lv2.hyperparameters)."""
    return check_hyperparameter(name, value)


class TensorFlowOptimizer(Optimizer):
    """Base of the native optimizers: one ``tf.function`` per step around a Keras optimizer.

    Subclasses list their hyperparameters in ``HYPERPARAMETERS`` (constructor name -> Keras
    attribute name) and build the Keras optimizer in :meth:`make_keras_optimizer`.

    Args:
        executor: a :class:`~deep500lite.frameworks.tensorflow.TensorFlowExecutor`.
        learning_rate: the step size.
        loss: the name of the scalar loss tensor.
        gradient_modifier: optional ``f(param_name, param, grad) -> grad`` on numpy arrays
            (slower path; see the module docs).

    Raises:
        UserTypeError: the executor is not a TensorFlowExecutor (a ``TypeError``).
        UserError: a hyperparameter is negative (a ``ValueError``).
    """

    HYPERPARAMETERS: dict = {"learning_rate": "learning_rate"}

    def __new__(cls, executor=None, *args, **kwargs):
        from deep500lite.frameworks.tensorflow.native_graph import GraphOptimizer, TensorflowNativeGraphExecutor

        if isinstance(executor, TensorflowNativeGraphExecutor):  # Deep500's TensorFlow 1 graphs
            return GraphOptimizer(cls.__name__, executor, args, kwargs)
        return super().__new__(cls)

    def __init__(self, executor, learning_rate: float, loss: str = "loss", gradient_modifier=None, **hyper):
        if not isinstance(executor, TensorFlowExecutor):
            raise UserTypeError(f"{type(self).__name__} runs on a TensorFlowExecutor (d5.executor(net, "
                                f"'tensorflow')). Received: {type(executor).__name__}")
        super().__init__(executor, loss, gradient_modifier)
        self.learning_rate = _number(type(self).__name__, "learning_rate", learning_rate)
        for name, value in hyper.items():
            setattr(self, name, _number(type(self).__name__, name, value))
        self._keras = None
        self._pairs = None
        self._variables = []
        self._step_fn = None
        self._apply_fn = None
        self._built_for = None
        self._keep_gradients = True

    # ------------------------------------------------------------------ subclass hook
    def make_keras_optimizer(self) -> keras.optimizers.Optimizer:
        """The Keras optimizer holding the update rule and its state."""
        raise NotImplementedError(f"{type(self).__name__} must implement make_keras_optimizer")

    # ------------------------------------------------------------------ building
    def _prepare(self):
        ex = self.executor
        if self._built_for == ex._build_id:
            return
        pairs, variables = ex._gradient_variables(self.loss)
        if (self._keras is None or [p for p, _ in pairs] != [p for p, _ in self._pairs]
                or any(a is not b for a, b in zip(variables, self._variables))):
            # A new set of parameters (first step, or the network changed) needs new optimizer state.
            with tf.device(ex._tfdev):
                self._keras = self.make_keras_optimizer()
                self._keras.build(variables)
        self._pairs = pairs
        self._variables = variables
        keras_opt, loss = self._keras, self.loss

        keep = self._keep_gradients

        def step(*feeds):
            outs, value, grads = ex._forward_and_gradients(feeds, loss, variables)
            with tf.device(ex._tfdev):
                keras_opt.apply_gradients(zip(grads, variables))
            return outs, value, grads if keep else []

        def apply(grads):
            with tf.device(ex._tfdev):
                keras_opt.apply_gradients(zip(grads, variables))

        self._step_fn = ex._function(step)
        self._apply_fn = tf.function(apply, autograph=False, input_signature=[
            [tf.TensorSpec(v.shape, v.dtype) for v in variables]])
        self._built_for = ex._build_id

    # ------------------------------------------------------------------ contract
    def step(self, inputs):
        """One training step: forward (training mode), backward and update, on the device.

        Returns:
            The network's outputs for this minibatch, computed before the update.
        """
        ex = self.executor
        if self.gradient_modifier is not None:
            return self._modified_step(inputs)
        feeds = self.network.check_feeds(inputs)
        self._prepare()
        outs, value, grads = self._step_fn(*[feeds[name] for name in ex._inputs])
        _check_scalar(self.loss, value)
        ex._grads = {g: t for (_, g), t in zip(self._pairs, grads)}  # empty unless keep_gradients
        return {name: r.numpy() for name, r in zip(ex._outputs, outs)}

    def _modified_step(self, inputs):
        ex = self.executor
        outputs = ex.inference_and_backprop(inputs, self.loss)
        self._prepare()
        names = [n for pair in self._pairs for n in pair]
        values = self.network.fetch_tensors(names)
        grads = []
        for i, (pname, _) in enumerate(self._pairs):
            param, grad = values[2 * i], values[2 * i + 1]
            grad = np.asarray(self.gradient_modifier(pname, param, grad), dtype=param.dtype)
            grads.append(ex._to_stored(pname, grad))  # the variables may be stored in another layout
        self._apply_fn(grads)
        return outputs

    def set_parameter(self, name, value, predicate=None):
        """Change a hyperparameter between steps (``lr`` is ``learning_rate``).

        With Deep500's ``predicate``, the value is set only if ``predicate(current value)`` is true.

        ``learning_rate`` is assigned to the Keras optimizer's variable (no retracing); other
        hyperparameters are set on the Keras optimizer and the step function is traced again.

        Raises:
            UserAttributeError: the optimizer has no such hyperparameter (an ``AttributeError``).
            UserError: a nonzero momentum for an optimizer whose state was built without one.
        """
        name = "learning_rate" if name == "lr" else name
        if name in self.HYPERPARAMETERS and predicate is not None and not predicate(getattr(self, name)):
            return
        if name not in self.HYPERPARAMETERS:
            raise UserAttributeError(f"{type(self).__name__} has no hyperparameter '{name}'. "
                                     f"Hyperparameters: {sorted(self.HYPERPARAMETERS)}. Received: {name!r}")
        if (name == "momentum" and value and self._keras is not None
                and not getattr(self._keras, "momentums", getattr(self._keras, "_momentums", None))):
            raise UserError(f"{type(self).__name__}: momentum was 0 when the optimizer state was built, so "
                            "there is no momentum buffer to use; create the optimizer with a nonzero momentum "
                            f"instead. Received: momentum={value}")
        value = value if isinstance(value, bool) else _number(type(self).__name__, name, value)
        setattr(self, name, value)
        if self._keras is None:
            return
        if name == "learning_rate":
            self._keras.learning_rate = value
        else:
            setattr(self._keras, self.HYPERPARAMETERS[name], value)
            self._built_for = None  # Keras reads this one as a Python number while tracing

    @property
    def keep_gradients(self) -> bool:
        """Whether a step keeps its gradients fetchable as ``"<param>_grad"`` (default True).

        They stay on the device either way (copied to numpy only by ``fetch_tensors``); with
        ``False`` the step function does not return them, as a plain Keras training step, and
        fetching a gradient after a step raises ``UserKeyError``. Setting it traces the step again.
        """
        return self._keep_gradients

    @keep_gradients.setter
    def keep_gradients(self, value: bool):
        if not isinstance(value, bool):
            raise UserTypeError(f"{type(self).__name__}.keep_gradients must be True or False. Received: {value!r}")
        if value != self._keep_gradients:
            self._keep_gradients = value
            self._built_for = None

    @property
    def keras_optimizer(self):
        """The Keras optimizer (``None`` before the first step)."""
        return self._keras


class GradientDescent(TensorFlowOptimizer):
    """Plain SGD, ``w -= lr * g`` (``keras.optimizers.SGD``)."""

    @deep500_arguments(["learning_rate"])
    def __init__(self, executor, learning_rate: float = 0.1, loss: str = "loss", gradient_modifier=None):
        super().__init__(executor, learning_rate, loss, gradient_modifier)

    def make_keras_optimizer(self):
        return keras.optimizers.SGD(learning_rate=self.learning_rate)


class MomentumOptimizer(TensorFlowOptimizer):
    """SGD with (optionally Nesterov) momentum: ``m = mu*m - lr*g; w += m`` (``keras.optimizers.SGD``)."""

    HYPERPARAMETERS = {"learning_rate": "learning_rate", "momentum": "momentum", "nesterov": "nesterov"}

    @deep500_arguments(["learning_rate", "momentum"])
    def __init__(self, executor, learning_rate: float = 0.1, momentum: float = 0.9, nesterov: bool = False,
                 loss: str = "loss", gradient_modifier=None):
        super().__init__(executor, learning_rate, loss, gradient_modifier, momentum=momentum,
                         nesterov=nesterov)

    def make_keras_optimizer(self):
        return keras.optimizers.SGD(learning_rate=self.learning_rate, momentum=self.momentum,
                                    nesterov=self.nesterov)


class NesterovOptimizer(MomentumOptimizer):
    """:class:`MomentumOptimizer` with ``nesterov=True`` (the reference's class name)."""

    @deep500_arguments(["learning_rate", "momentum"])
    def __init__(self, executor, learning_rate: float = 0.1, momentum: float = 0.9, loss: str = "loss",
                 gradient_modifier=None):
        super().__init__(executor, learning_rate=learning_rate, momentum=momentum, nesterov=True, loss=loss,
                         gradient_modifier=gradient_modifier)


class AdamOptimizer(TensorFlowOptimizer):
    """Adam (``keras.optimizers.Adam``; epsilon added before bias correction, see the module docs)."""

    HYPERPARAMETERS = {"learning_rate": "learning_rate", "beta1": "beta_1", "beta2": "beta_2",
                       "epsilon": "epsilon"}

    @deep500_arguments(["learning_rate", "beta1", "beta2", "epsilon"])
    def __init__(self, executor, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, loss: str = "loss", gradient_modifier=None):
        super().__init__(executor, learning_rate, loss, gradient_modifier, beta1=beta1, beta2=beta2,
                         epsilon=epsilon)

    def make_keras_optimizer(self):
        return keras.optimizers.Adam(learning_rate=self.learning_rate, beta_1=self.beta1, beta_2=self.beta2,
                                     epsilon=self.epsilon)


class AdaGradOptimizer(TensorFlowOptimizer):
    """AdaGrad: ``A += g**2; w -= lr * g / sqrt(A + epsilon)`` (``keras.optimizers.Adagrad``).

    ``initial_accumulator_value`` (keyword only in effect) is where ``A`` starts: 0 like the
    reference, where Keras's own default is 0.1.
    """

    HYPERPARAMETERS = {"learning_rate": "learning_rate", "epsilon": "epsilon"}

    @deep500_arguments(["learning_rate", "initial_accumulator_value"], defaults={"initial_accumulator_value": 0.1})
    def __init__(self, executor, learning_rate: float = 0.1, epsilon: float = 1e-8, loss: str = "loss",
                 gradient_modifier=None, initial_accumulator_value: float = 0.0):
        super().__init__(executor, learning_rate, loss, gradient_modifier, epsilon=epsilon)
        self._initial_accumulator_value = _number(type(self).__name__, "initial_accumulator_value",
                                                  initial_accumulator_value)

    def make_keras_optimizer(self):
        return keras.optimizers.Adagrad(learning_rate=self.learning_rate, epsilon=self.epsilon,
                                        initial_accumulator_value=self._initial_accumulator_value)


class RMSPropOptimizer(TensorFlowOptimizer):
    """RMSProp: ``A = beta*A + (1-beta)*g**2; w -= lr * g / sqrt(A + epsilon)`` (``keras.optimizers.RMSprop``).

    ``momentum`` (0 by default, as in the reference, which has none) adds Keras's momentum term.
    """

    HYPERPARAMETERS = {"learning_rate": "learning_rate", "beta": "rho", "momentum": "momentum",
                       "epsilon": "epsilon"}

    @deep500_arguments(["learning_rate", "beta", "momentum", "epsilon"], defaults={"epsilon": 1e-10},
                       aliases={"decay": "beta"})
    def __init__(self, executor, learning_rate: float = 0.01, beta: float = 0.9, epsilon: float = 1e-8,
                 loss: str = "loss", gradient_modifier=None, momentum: float = 0.0):
        super().__init__(executor, learning_rate, loss, gradient_modifier, beta=beta, epsilon=epsilon,
                         momentum=momentum)

    def make_keras_optimizer(self):
        return keras.optimizers.RMSprop(learning_rate=self.learning_rate, rho=self.beta, momentum=self.momentum,
                                        epsilon=self.epsilon)
