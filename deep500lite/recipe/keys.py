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
from deep500lite.options import Integer, check_no_control, short

__all__ = ["RECIPE_KEYS", "COMPONENT_KEYS", "REQUIRED_KEYS", "MAX_EPOCHS", "MAX_BATCH_SIZE", "MAX_BUCKET_MB",
           "KEY_TYPES"]

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
        check_no_control(key, f"{where}: a key")
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

#: The declared types of the recipe keys that hold numbers (:mod:`deep500lite.options`); the component
#: keys hold a name or a callable, ``*_args`` a list, ``*_kwargs`` a dict of identifiers (below).
KEY_TYPES = {
    "epochs": Integer(minimum=0, maximum=MAX_EPOCHS),
    "batch_size": Integer(minimum=1, maximum=MAX_BATCH_SIZE),
    "microbatches": Integer(minimum=1, maximum=MAX_BATCH_SIZE,
                            wording="an integer >= 1 (micro-batches per step) or None"),
}


def _check_value(key: str, value) -> None:
    if key in KEY_TYPES:
        if key == "microbatches" and value is None:
            return
        try:
            KEY_TYPES[key].check(value, f"'{key}'")
        except UserTypeError as exc:  # a float, a string: still the value's fault, said as a ValueError too
            raise UserError(f"{exc}") from None
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
            raise UserError(f"'{key}' must be a dict of keyword arguments (string keys). Received: {_short(value)}")
        bad = [k for k in value if not k.isidentifier()]
        if bad:
            raise UserError(f"'{key}' keys must be Python keyword names (letters, digits, _). Received: the key "
                            f"{_short(bad[0])}")
    elif key == "events":
        if value is not None and not (isinstance(value, (list, tuple, str)) or callable(value)):
            raise UserError(f"'events' must be a list of training events, or an event class, name or callable. "
                            f"Received: {type(value).__name__}")
    elif key in COMPONENT_KEYS:
        if not (isinstance(value, str) or callable(value)) and value is not None:
            raise UserError(f"'{key}' must be a name (string) or a callable that builds it. Received: "
                            f"{type(value).__name__} {_short(value)}")
        if isinstance(value, str):
            if not value or len(value) > 4096:
                raise UserError(f"'{key}' must be a non-empty name of at most 4,096 characters. Received: "
                                f"{_short(value)}")
            check_no_control(value, f"'{key}'")


_short = short  # the one cut-down repr (deep500lite.options.short)


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
