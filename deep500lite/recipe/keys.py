"""Recipe keys and their checks, and how recipe values are described and copied.

:data:`RECIPE_KEYS` lists every key a recipe may set in ``FIXED`` or ``MUTABLE`` (each of
:data:`COMPONENT_KEYS` with its ``<key>_args`` and ``<key>_kwargs``); :data:`REQUIRED_KEYS` the
keys it must set. ``_normalize_keys`` reads Deep500's singular spellings and rejects an unknown
key with the closest known one; ``_check_value`` checks one key's value. ``_describe`` turns a
value into JSON-ready data for the results file; ``_fresh`` deep-copies one for a run.
"""

from __future__ import annotations

import copy
import difflib
import inspect
import math

import numpy as np

from deep500lite.errors import UserError, UserTypeError, format_choices

__all__ = ["RECIPE_KEYS", "COMPONENT_KEYS", "REQUIRED_KEYS", "MAX_EPOCHS", "MAX_BATCH_SIZE", "MAX_BUCKET_MB"]

#: Keys whose value names or builds a component (each also takes ``<key>_args`` and ``<key>_kwargs``).
COMPONENT_KEYS = ("dataset", "model", "executor", "train_sampler", "validation_sampler", "optimizer", "events",
                  "distributed", "communicator")
#: Every key a recipe may set.
RECIPE_KEYS = ("epochs", "batch_size", "microbatches", "bucket_mb") + COMPONENT_KEYS + tuple(
    f"{c}_{s}" for c in COMPONENT_KEYS for s in ("args", "kwargs"))
#: Keys a recipe must set (in FIXED or MUTABLE).
REQUIRED_KEYS = ("dataset", "model", "executor", "optimizer", "epochs", "batch_size")


def _normalize_keys(d: dict, where: str) -> dict:
    if not isinstance(d, dict):
        raise UserTypeError(f"{where} must be a dict of recipe keys. Received: {type(d).__name__}")
    out: dict = {}
    origin: dict = {}
    for key, value in d.items():
        if not isinstance(key, str):
            raise UserError(f"{where} keys must be strings. Received: the key {key!r}")
        name = key
        for singular, plural in (("_kwarg", "_kwargs"), ("_arg", "_args")):
            if key.endswith(singular) and key[: -len(singular)] in COMPONENT_KEYS:
                name = key[: -len(singular)] + plural
        if name not in RECIPE_KEYS:
            close = difflib.get_close_matches(name, RECIPE_KEYS, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise UserError(f"{where} has the unknown key '{key}'.{hint} Recipe keys: {format_choices(RECIPE_KEYS)}. "
                            f"Received: {key!r}")
        if name in out:
            raise UserError(f"{where} sets '{name}' twice: as '{origin[name]}' and as '{key}'; set it once. "
                            f"Received: {origin[name]!r} and {key!r}")
        out[name], origin[name] = value, key
    return out


#: The most epochs a recipe may ask for: a million epochs of even one step each is days of training;
#: a larger number is a typo (``epochs=10**30``) rather than a plan.
MAX_EPOCHS = 1_000_000
#: The largest ``bucket_mb``: 1 TiB of gradients in one bucket is more than any accelerator holds.
MAX_BUCKET_MB = 1 << 20
#: The largest batch: 2**31 - 1 samples, what the executors' int32 shape fields hold.
MAX_BATCH_SIZE = 2**31 - 1


def _check_value(key: str, value) -> None:
    if key == "epochs":
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= MAX_EPOCHS:
            raise UserError(f"'epochs' must be an integer from 0 to {MAX_EPOCHS:,}. Received: {_short(value)}")
    elif key == "batch_size":
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= MAX_BATCH_SIZE:
            raise UserError(f"'batch_size' must be an integer from 1 to {MAX_BATCH_SIZE:,}. Received: "
                            f"{_short(value)}")
    elif key == "microbatches":  # d5.transforms.microbatch(optimizer, n) (recipe.components)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
            raise UserError(f"'microbatches' must be an integer >= 1 (micro-batches per step). Received: "
                            f"{_short(value)}")
    elif key == "bucket_mb":  # the data-parallel optimizer's bucket_bytes, in MiB (recipe.components)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating))
                                  or not math.isfinite(value) or not 0 <= value <= MAX_BUCKET_MB):
            raise UserError(f"'bucket_mb' must be a number of MiB from 0 to {MAX_BUCKET_MB:,} (the largest gradient "
                            f"bucket of a data-parallel step; 0: one bucket per gradient). Received: {_short(value)}")
    elif key.endswith("_args"):
        if not isinstance(value, (list, tuple)):
            raise UserError(f"'{key}' must be a list or tuple of positional arguments. Received: "
                            f"{type(value).__name__} {value!r}")
    elif key.endswith("_kwargs"):
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise UserError(f"'{key}' must be a dict of keyword arguments (string keys). Received: {value!r}")
    elif key == "events":
        if value is not None and not (isinstance(value, (list, tuple, str)) or callable(value)):
            raise UserError(f"'events' must be a list of training events, or an event class, name or callable. "
                            f"Received: {type(value).__name__}")
    elif key in COMPONENT_KEYS:
        if not (isinstance(value, str) or callable(value)) and value is not None:
            raise UserError(f"'{key}' must be a name (string) or a callable that builds it. Received: "
                            f"{type(value).__name__} {value!r}")


def _short(value, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (an integer with thousands of digits stays readable)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a user object whose repr fails (or an int past the digit limit)
        text = f"a {type(value).__name__}"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _qualified(obj) -> str:
    module = getattr(obj, "__module__", None)
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if qual is None:
        return type(obj).__qualname__
    return f"{module}.{qual}" if module and module != "builtins" else qual


def _describe(value):
    """JSON-ready description of a recipe value (callables by qualified name, objects by class and repr)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else str(v)
    if isinstance(value, dict):
        return {str(k): _describe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    if isinstance(value, np.ndarray):
        return {"array": list(value.shape), "dtype": str(value.dtype)}
    if inspect.isclass(value) or inspect.isfunction(value) or inspect.ismethod(value) or inspect.isbuiltin(value):
        return _qualified(value)
    if inspect.ismodule(value):
        return value.__name__
    if callable(value) and hasattr(value, "__qualname__"):
        return _qualified(value)
    return {"object": _qualified(type(value)), "repr": repr(value)[:500]}


def _fresh(value):
    """A deep copy (so a run never changes the recipe's objects), or the value itself if it cannot be copied."""
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - e.g. an object holding an open stream is used as given
        return value
