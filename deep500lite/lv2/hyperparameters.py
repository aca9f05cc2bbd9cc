"""The checks of optimizer hyperparameters that every optimizer (reference and native) shares.

Each hyperparameter has a declared type (:data:`HYPERPARAMETERS`, types of :mod:`deep500lite.options`);
every number is finite. A learning rate is > 0; ``momentum``, ``beta``, ``beta1`` and ``beta2`` are
in [0, 1) (a momentum of 1 or more makes the velocity grow without bound); ``dampening`` is in
[0, 1]; ``diameter`` (AcceleGrad) is > 0; the other numeric hyperparameters (weight decay,
epsilon, learning-rate decay, ...) are >= 0; ``nesterov`` and ``centered`` are booleans. A wrong
value is a :class:`~deep500lite.errors.UserError` (a wrong kind of object a
:class:`~deep500lite.errors.UserTypeError`) naming the hyperparameter, what is allowed and what was
received.
"""

from __future__ import annotations

import numpy as np

from deep500lite.errors import UserError, UserTypeError
from deep500lite.lv2.optimizer import deep500_arguments
from deep500lite.options import Flag, Number

__all__ = ["check_number", "check_hyperparameter", "set_hyperparameters", "nesterov_variant", "BOOLEAN_OPTIONS",
           "FRACTIONS", "HYPERPARAMETERS"]

#: Hyperparameters that are switches.
BOOLEAN_OPTIONS = ("nesterov", "centered")
#: Hyperparameters in [0, 1) (decay rates of running averages, momentum).
FRACTIONS = ("beta", "beta1", "beta2", "momentum")

_BELOW_ONE = Number(minimum=0, maximum=1, max_open=True, wording="a finite number >= 0 and < 1")
_NONNEGATIVE = Number(minimum=0, wording="a finite number >= 0")
#: The declared type of each hyperparameter name; a name not listed is a finite number >= 0.
HYPERPARAMETERS = {
    "learning_rate": Number(minimum=0, min_open=True, wording="a finite number > 0"),
    "momentum": _BELOW_ONE, "beta": _BELOW_ONE, "beta1": _BELOW_ONE, "beta2": _BELOW_ONE,
    "dampening": Number(minimum=0, maximum=1, wording="a finite number from 0 to 1"),
    "diameter": Number(minimum=0, min_open=True, wording="a finite number > 0"),
    "nesterov": Flag(), "centered": Flag(),
}


def check_number(name: str, value, allow_zero: bool = True, below_one: bool = False) -> float:
    """``value`` as a float, checked: >= 0 (> 0 unless ``allow_zero``), and < 1 with ``below_one``.

    Raises:
        UserTypeError: not a number (a bool is not one).
        UserError: out of range.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise UserTypeError(f"{name} must be a number. Received: {value!r}")
    try:
        value = float(value)
    except OverflowError:  # an integer too large for a float
        value = float("inf")
    ok = np.isfinite(value) and (value >= 0 if allow_zero else value > 0) and (value < 1 or not below_one)
    if not ok:
        allowed = (">= 0" if allow_zero else "> 0") + (" and < 1" if below_one else "")
        raise UserError(f"{name} must be a finite number {allowed}. Received: {value!r}")
    return value


def check_hyperparameter(name: str, value):
    """``value`` checked by the declared type of ``name`` (:data:`HYPERPARAMETERS`, else a finite number >= 0);
    a number comes back as a float."""
    return HYPERPARAMETERS.get(name, _NONNEGATIVE).check(value, name)


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
        # keywords only: a positional str would read as Deep500's (executor, loss, ...) form
        momentum_class.__init__(self, executor, learning_rate=learning_rate, momentum=momentum, nesterov=True,
                                loss=loss, gradient_modifier=gradient_modifier, dampening=dampening,
                                weight_decay=weight_decay)

    doc = f":class:`{momentum_class.__name__}` with ``nesterov=True`` (the reference's class name)."
    return type(name, (momentum_class,), {"__init__": __init__, "__doc__": doc,
                                          "__module__": momentum_class.__module__,
                                          "__qualname__": name})
