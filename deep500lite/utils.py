"""Small helpers shared by the core and the frameworks (no framework imports here)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
import tempfile

from deep500lite.errors import UserError

__all__ = [
    "atomic_write_bytes", "atomic_write_text", "is_package_available", "package_version", "positive_int",
    "nonnegative_int", "check_schema", "check_allocation", "available_memory_bytes", "file_stem",
]


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (/proc/self/status)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (not thread-safe, but only a permission default)
    os.umask(mask)
    return mask


def atomic_write_bytes(path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename, so readers never see a
    half-written file and an interrupted write leaves the old file in place.

    Raises:
        UserError: ``path`` cannot be written (its folder cannot be made or written, ``path`` is a
            folder, the disk is full); the old file, if any, is left as it was.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    except OSError as exc:
        raise _cannot_write(path, exc) from exc
    try:
        # mkstemp makes the file private (0600); give it the permissions open() would (0666 - umask).
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _cannot_write(path, exc) from exc
        raise


def _cannot_write(path: str, exc: OSError) -> UserError:
    return UserError(f"Cannot write '{path}': {exc.strerror or exc}; the path must be a file in a writable folder "
                     f"(with room left on its disk). Received: {path!r}")


def finite_json(value, **dumps_kwargs) -> str:
    """``value`` as standard JSON: non-finite floats (infinity, NaN) become ``null``.

    Python's :mod:`json` writes them as the literals ``Infinity`` and ``NaN``, which no other JSON reader
    (pandas' ``read_json`` in strict mode, PostgreSQL, browsers' ``JSON.parse``) accepts. A command's file
    says "no limit" or "not measured" with ``null`` instead.

    Args:
        value: what to write (dicts, lists, numbers, strings, ...).
        **dumps_kwargs: passed to :func:`json.dumps` (``indent``, ``default``, ...).
    """
    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v
    return json.dumps(clean(value), allow_nan=False, **dumps_kwargs)


def atomic_write_text(path, text: str) -> None:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def is_package_available(name: str) -> bool:
    """Whether a top-level package can be imported, found without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def package_version(dist: str) -> str | None:
    """The installed version of a distribution, or None when it is not installed."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# The one integer argument types of every command line (the CLI's and the recipe worker's): declared
# types of deep500lite.options, kept here under their old names.
from deep500lite.options import nonnegative_int, positive_int  # noqa: E402


def _field_path(path) -> str:
    """A JSON path like ``epochs[3].train_loss`` from jsonschema's deque of keys and indices."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def check_schema(document, schema: dict, what: str, error=UserError) -> None:
    """Validate ``document`` against a JSON Schema (with the ``jsonschema`` library).

    The first error found (jsonschema's ``best_match``) becomes one message naming ``what`` (a file,
    a header), the field's path, the rule it breaks and the value received.

    Args:
        document: the parsed JSON value (dict, list, ...).
        schema: a JSON Schema (draft 2020-12).
        what: what the document is, for the message (``"results file 'a/results.json'"``).
        error: the :class:`~deep500lite.errors.Deep500Error` class to raise (``UserError``).

    Raises:
        error: the document does not match the schema.
    """
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    found = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if found is None:
        return
    received = repr(found.instance)
    if len(received) > 120:
        received = received[:117] + "..."
    rule = found.message
    if len(rule) > 200:
        rule = rule[:197] + "..."
    raise error(f"{what}: field '{_field_path(found.absolute_path)}' is not valid ({found.validator}: "
                f"{rule}). Received: {received}")


def available_memory_bytes() -> int | None:
    """The memory this process could still allocate (Linux ``MemAvailable``), or None when unknown."""
    try:
        with open("/proc/meminfo") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def file_stem(name: str, limit: int = 80) -> str:
    """A file-name-safe stem for a user-given name (an op, node or model name).

    Characters other than letters, digits, ``_``, ``.`` and ``-`` become ``_``; a name that had to
    change or is longer than ``limit`` is cut and given a hash suffix, so two names never share a
    stem and no file name exceeds the file system's 255-byte limit.
    """
    import hashlib
    import re

    text = str(name)
    safe = re.sub(r"[^A-Za-z0-9_.\-]", "_", text).lstrip(".") or "_"
    if safe == text and len(safe) <= limit:
        return safe
    return f"{safe[:limit]}-{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"


def check_allocation(nbytes: int, what: str, error=UserError) -> None:
    """Refuse, before allocating, a buffer larger than the memory available.

    Args:
        nbytes: the size the buffer would have, in bytes (may be astronomically large: a product of
            declared dimensions).
        what: what would be allocated, for the message (``"IDX file 'x' (dims 60000x28x28x4096)"``).
        error: the :class:`~deep500lite.errors.Deep500Error` class to raise.

    Raises:
        error: ``nbytes`` is negative or more than the available memory.
    """
    available = available_memory_bytes()
    if nbytes < 0 or (available is not None and nbytes > available):
        limit = f"{available / 2**30:.1f} GiB available" if available is not None else "memory"
        raise error(f"{what} needs {nbytes:,} bytes, more than this machine can hold ({limit}); "
                    f"a declared size is wrong or the data is too large. Received: {nbytes} bytes")
