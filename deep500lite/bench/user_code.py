"""Loading a user's code named as ``FILE.py:NAME`` or ``MODULE:NAME`` (``bench op --custom-op``, ``bench overhead --op``).

A file is imported with its own folder first on ``sys.path`` while it loads, as Python does for a
script, so it can import the files next to it (``from my_kernels import Swish``). It is registered
in ``sys.modules`` under a name of its own, so code that looks a class's module up (dataclasses,
pickle) finds it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys

from deep500lite.errors import UserError

__all__ = ["load_attribute"]


def _import_file(path: str, flag: str, spec: str):
    path = os.path.abspath(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    name = f"deep500lite_user_{stem}_{hashlib.sha256(path.encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    mod_spec = importlib.util.spec_from_file_location(name, path)
    if mod_spec is None or mod_spec.loader is None:
        raise UserError(f"{flag}: {path!r} cannot be imported as a Python module; give a .py file. Received: {spec!r}")
    module = importlib.util.module_from_spec(mod_spec)
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        mod_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    return module


def load_attribute(spec: str, flag: str, expected: str):
    """The object ``NAME`` of ``FILE.py:NAME`` or ``MODULE:NAME``.

    Args:
        spec: the text the user gave.
        flag: the option, for messages (``--custom-op``).
        expected: what ``NAME`` must be, for messages.

    Raises:
        UserError: a malformed spec, a missing file, an import error (with its type and message),
            or no such name.
    """
    if not isinstance(spec, str) or ":" not in spec or spec.endswith(":") or spec.startswith(":"):
        raise UserError(f"{flag} must be MODULE:NAME or FILE.py:NAME. Received: {spec!r}")
    where, attr = spec.rsplit(":", 1)
    try:
        if where.endswith(".py"):
            if not os.path.isfile(where):
                raise UserError(f"{flag}: file {where!r} does not exist; give MODULE:NAME or the path of an "
                                f"existing FILE.py:NAME. Received: {spec!r}")
            module = _import_file(where, flag, spec)
        else:
            module = importlib.import_module(where)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - an error in the user's module is the user's to fix
        raise UserError(f"{flag}: cannot import {where!r}: {type(exc).__name__}: {exc}; give an importable "
                        f"module or .py file. Received: {spec!r}") from exc
    if not hasattr(module, attr):
        raise UserError(f"{flag}: {where!r} has no {attr!r}; NAME must be {expected}, defined in {where!r}. "
                        f"Received: {spec!r}")
    return getattr(module, attr)
