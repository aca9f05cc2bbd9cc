"""The checks of optimizer hyperparameters that every framework's native optimizers share.

A learning rate is a number > 0; ``beta``, ``beta1`` and ``beta2`` are in [0, 1); the other
numeric hyperparameters (momentum, dampening, weight decay, epsilon, ...) are >= 0; ``nesterov``
and ``centered`` are booleans. A wrong value is a :class:`~deep500lite.errors.UserError` (a wrong
kind of object a :class:`~deep500lite.errors.UserTypeError`) naming the hyperparameter, what is
allowed and what was received.
"""

from __future__ import annotations

import numpy as np

from deep500lite.errors import UserError, UserTypeError
from deep500lite.lv2.optimizer import deep500_arguments

__all__ = ["check_number", "check_hyperparameter", "set_hyperparameters", "nesterov_variant", "BOOLEAN_OPTIONS",
           "FRACTIONS"]

#: Hyperparameters that are switches.
BOOLEAN_OPTIONS = ("nesterov", "centered")
#: Hyperparameters in [0, 1) (decay rates of running averages).
FRACTIONS = ("beta", "beta1", "beta2")


def check_number(name: str, value, allow_zero: bool = True, below_one: bool = False) -> float:
    """``value`` as a float, checked: >= 0 (> 0 unless ``allow_zero``), and < 1 with ``below_one``.

    Raises:
        UserTypeError: not a number (a bool is not one).
        UserError: out of range.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise UserTypeError(f"{name} must be a number. Received: {value!r}")
    value = float(value)
    ok = (value >= 0 if allow_zero else value > 0) and (value < 1 or not below_one)
    if not ok:
        allowed = (">= 0" if allow_zero else "> 0") + (" and < 1" if below_one else "")
        raise UserError(f"{name} must be a number {allowed}. Received: {value!r}")
    return value


def check_hyperparameter(name: str, value):
    """``value`` checked by the rule of ``name`` (see the module docstring); a number comes back as a float."""
    if name in BOOLEAN_OPTIONS:
        if not isinstance(value, bool):
            raise UserTypeError(f"{name} must be a bool. Received: {value!r}")
        return value
    return check_number(name, value, allow_zero=name != "learning_rate", below_one=name in FRACTIONS)


def set_hyperparameters(optimizer, **values) -> None:
    """Check each of ``values`` (:func:`check_hyperparameter`) and set it as an attribute of ``optimizer``, in order."""
    for name, value in values.items():
        setattr(optimizer, name, check_hyperparameter(name, value))


def nesterov_variant(momentum_class: type, name: str = "NesterovOptimizer") -> type:
    """The ``NesterovOptimizer`` of a framework: its ``momentum_class`` with ``nesterov=True``.

    The class takes ``(executor, learning_rate=0.1, momentum=0.9, loss="loss", gradient_modifier=None,
    dampening=0.0, weight_decay=0.0)`` and Deep500's call form, like the reference's class of that name.
    """
    @deep500_arguments(["learning_rate", "momentum", "dampening", "weight_decay"])
    def __init__(self, executor, learning_rate: float = 0.1, momentum: float = 0.9, loss: str = "loss",
                 gradient_modifier=None, dampening: float = 0.0, weight_decay: float = 0.0):
        momentum_class.__init__(self, executor, learning_rate, momentum, True, loss, gradient_modifier,
                                dampening=dampening, weight_decay=weight_decay)

    doc = f":class:`{momentum_class.__name__}` with ``nesterov=True`` (the reference's class name)."
    return type(name, (momentum_class,), {"__init__": __init__, "__doc__": doc,
                                          "__module__": momentum_class.__module__,
                                          "__qualname__": name})
