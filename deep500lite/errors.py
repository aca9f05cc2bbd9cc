"""Errors raised by deep500lite.

Every error says what was wrong, what is allowed and what was received. The CLI catches
:class:`UserError` (and the standard ``ValueError``/``TypeError``/``ImportError`` raised for bad
input) once, in :func:`deep500lite.cli.main`, and prints it in one line.
"""

from __future__ import annotations

__all__ = [
    "Deep500Error",
    "UserError",
    "ModelError",
    "FeedError",
    "UnsupportedOperatorError",
    "FrameworkNotAvailableError",
    "DeviceError",
    "format_choices",
]


class Deep500Error(Exception):
    """Base class of every error deep500lite raises on purpose."""


class UserError(Deep500Error, ValueError):
    """A mistake the user can fix: a bad argument, file, name or value."""


class ModelError(UserError):
    """An ONNX model that cannot be read or is not valid (names the file and the fault)."""


class FeedError(UserError):
    """Feeds that do not match the network's declared inputs (name, shape or dtype)."""


class UnsupportedOperatorError(UserError, NotImplementedError):
    """An ONNX operator that an executor cannot run (names the operator, node and alternatives)."""


class FrameworkNotAvailableError(Deep500Error, ImportError):
    """A framework whose Python package is not installed (names the extra to install)."""


class DeviceError(UserError):
    """A device that is malformed or not present on this machine."""


def format_choices(choices) -> str:
    """Format allowed values as ``'a', 'b', 'c'`` for error messages."""
    return ", ".join(repr(c) for c in choices)
