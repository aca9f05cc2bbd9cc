"""Level 2: optimizers (Deep500's ``Optimizer``, ``ThreeStepOptimizer``, ``UpdateRuleOptimizer``).

Also the pieces every optimizer shares to accept Deep500's call forms next to deep500lite's:
:func:`deep500_arguments` (``loss`` as the second positional argument, ``lr=``), the ``lr``
attribute, ``set_parameter(name, value, predicate)`` and ``Optimizer.train(iterations, sampler,
events)``.

``gradient_modifier(name, param, grad) -> grad`` is called in Deep500's order: the parameter's
name, its value, then its gradient (numpy arrays), and returns the gradient to use.
"""

from __future__ import annotations

import abc
import functools
from typing import Callable, Sequence

import numpy as np

from deep500lite.errors import UserAttributeError, UserError, UserTypeError

__all__ = ["Optimizer", "ThreeStepOptimizer", "UpdateRuleOptimizer", "deep500_arguments", "GradientModifier"]

GradientModifier = Callable[[str, np.ndarray, np.ndarray], np.ndarray]
"""``f(param_name, param, grad) -> new grad`` (Deep500's argument order)."""

_ALIASES = {"lr": "learning_rate"}


def _rename(owner: str, kwargs: dict, aliases: dict) -> dict:
    out = dict(kwargs)
    for old, new in aliases.items():
        if old in out:
            if new in out:
                raise UserTypeError(f"{owner}: give {new}= or {old}= (the same argument), not both. "
                                    f"Received: {old}={out[old]!r}, {new}={out[new]!r}")
            out[new] = out.pop(old)
    return out


def deep500_arguments(order: Sequence[str], defaults: dict | None = None, aliases: dict | None = None):
    """Let an optimizer's ``__init__(self, executor, ...)`` also take Deep500's call forms.

    Deep500's optimizers take ``(executor, loss, <hyperparameters in Deep500's order>)``; when
    the argument after the executor is a string it is that ``loss``, the positional arguments
    after it are named by ``order``, and ``defaults`` (Deep500's own defaults, where they differ)
    fill what is not given. Keywords ``lr`` (and any other of ``aliases``) are renamed to
    deep500lite's names in both forms. Any other call goes to ``__init__`` unchanged.

    Args:
        order: the names, in deep500lite's spelling, of Deep500's positional hyperparameters.
        defaults: Deep500's defaults for the Deep500 form (deep500lite names).
        aliases: Deep500 keyword -> deep500lite keyword, besides ``lr`` -> ``learning_rate``.
    """
    names, fill, renames = tuple(order), dict(defaults or {}), {**_ALIASES, **(aliases or {})}

    def decorate(init):
        @functools.wraps(init)
        def wrapper(self, executor, *args, **kwargs):
            owner = type(self).__name__
            kwargs = _rename(owner, kwargs, renames)
            if args and isinstance(args[0], str):
                if "loss" in kwargs:
                    raise UserTypeError(f"{owner}: the loss was given twice, as the second positional argument "
                                        f"and as loss=. Received: {args[0]!r} and loss={kwargs['loss']!r}")
                rest = args[1:]
                if len(rest) > len(names):
                    raise UserTypeError(f"{owner}(executor, loss, ...) takes at most {len(names)} positional "
                                        f"hyperparameters ({', '.join(names)}). Received: {len(rest)}")
                for name, value in zip(names, rest):
                    if name in kwargs:
                        raise UserTypeError(f"{owner}: {name} was given positionally and as a keyword. "
                                            f"Received: {value!r} and {name}={kwargs[name]!r}")
                    kwargs[name] = value
                for name, value in fill.items():
                    kwargs.setdefault(name, value)
                kwargs["loss"], args = args[0], ()
            return init(self, executor, *args, **kwargs)
        return wrapper
    return decorate


class Optimizer(abc.ABC):
    """Updates an executor's parameters from minibatches.

    Args:
        executor: the :class:`~deep500lite.GraphExecutor` whose network is trained.
        loss: the name of the scalar loss tensor.
        gradient_modifier: optional ``f(param_name, param, grad) -> grad`` (Deep500's order)
            applied to every gradient before the update (weight decay, clipping).

    Attributes:
        lr: Deep500's name of ``learning_rate`` (reads it; setting it calls
            ``set_parameter("learning_rate", value)`` once the rate exists).
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

    @property
    def lr(self):
        """Deep500's name of the learning rate: reads and sets ``learning_rate``."""
        try:
            return self.learning_rate
        except AttributeError:
            raise UserAttributeError(f"{type(self).__name__} has no learning rate (no learning_rate attribute). "
                                     "Received: a read of lr") from None

    @lr.setter
    def lr(self, value):
        if "learning_rate" in vars(self):  # through set_parameter, which native optimizers pass on to their framework
            self.set_parameter("learning_rate", value)
        else:  # a subclass's constructor setting its rate first (Deep500's samples write self.lr = lr)
            self.learning_rate = value

    def train(self, iterations: int, sampler, events: Sequence = ()):
        """Deep500's ``Optimizer.train``: run ``iterations`` steps on batches from ``sampler``.

        Args:
            iterations: the number of steps; 0 runs until the sampler is exhausted.
            sampler: a :class:`~deep500lite.Sampler` (or any iterator of feed dicts, or a callable
                returning one per call); it is not reset here.
            events: Deep500 optimizer events: objects with ``before_optimizer_step(executor,
                optimizer, inputs)`` and/or ``after_optimizer_step(executor, optimizer, outputs, loss)``.

        Returns:
            The last step's loss value (None when no step ran).
        """
        if isinstance(iterations, bool) or not isinstance(iterations, (int, np.integer)) or iterations < 0:
            raise UserError(f"iterations must be an integer >= 0 (0: until the sampler ends). Received: {iterations!r}")
        fetch = (lambda: next(sampler)) if hasattr(sampler, "__next__") else sampler
        if not callable(fetch):
            fetch = functools.partial(next, iter(sampler))
        out, t = {}, 0
        while iterations == 0 or t < iterations:
            try:
                batch = fetch()
            except StopIteration:
                break
            for e in events:
                if hasattr(e, "before_optimizer_step"):
                    e.before_optimizer_step(self.executor, self, batch)
            out = self.step(batch)
            for e in events:
                if hasattr(e, "after_optimizer_step"):
                    e.after_optimizer_step(self.executor, self, out, out.get(self.loss))
            t += 1
        return out.get(self.loss)

    def set_parameter(self, name: str, value, predicate: Callable | None = None) -> None:
        """Change a hyperparameter (for example ``learning_rate``, or Deep500's ``lr``) between steps.

        Args:
            name: the hyperparameter.
            value: its new value.
            predicate: Deep500's filter: when given, the value is set only if
                ``predicate(current value)`` is true.

        Raises:
            UserAttributeError: the optimizer has no such hyperparameter (an ``AttributeError``).
        """
        name = _ALIASES.get(name, name)
        if not hasattr(self, name) or name.startswith("_") or callable(getattr(self, name)):
            raise UserAttributeError(f"{type(self).__name__} has no hyperparameter '{name}'; its hyperparameters are "
                                     "its public, non-callable attributes, such as learning_rate. "
                                     f"Received: {name!r}")
        if predicate is not None and not predicate(getattr(self, name)):
            return
        setattr(self, name, value)


class ThreeStepOptimizer(Optimizer, abc.ABC):
    """An optimizer written as three hooks, run by :meth:`step` on numpy arrays (as in Deep500)::

        new_input()
        for each trainable param of network.gradient(loss):
            prepare_param(param)            # may move the parameter before the gradient is taken
        outputs = executor.inference_and_backprop(inputs, loss)
        for each (param, grad) of network.gradient(loss):
            param <- update_rule(gradient_modifier(param_name, param, grad), param, param_name)

    As in Deep500, :meth:`new_input` and :meth:`prepare_param` do nothing unless overridden.
    """

    def new_input(self) -> None:
        """Called once per step, before the forward pass (e.g. to advance a step counter)."""

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
        # an executor may run the whole step itself (ONNX Runtime: the update fused into its graph)
        fused = getattr(self.executor, "fused_optimizer_step", None)
        outputs = fused(self, inputs) if fused is not None else None
        if outputs is not None:
            return outputs
        self.new_input()
        pairs = self.network.gradient(self.loss)
        for pname, _ in pairs:
            self.prepare_param(pname)
        outputs = self.executor.inference_and_backprop(inputs, self.loss)
        values = self.network.fetch_tensors([n for pair in pairs for n in pair])
        for i, (pname, _) in enumerate(pairs):
            param, grad = values[2 * i], values[2 * i + 1]
            if self.gradient_modifier is not None:
                grad = self.gradient_modifier(pname, param, grad)
            self.network.feed_tensor(pname, np.asarray(self.update_rule(grad, param, pname), dtype=param.dtype))
        return outputs


class UpdateRuleOptimizer(ThreeStepOptimizer, abc.ABC):
    """A :class:`ThreeStepOptimizer` that needs only :meth:`update_rule`."""

    def new_input(self) -> None:
        """No per-step state by default."""

    def prepare_param(self, param_name: str) -> None:
        """No per-parameter preparation by default."""
