"""Small helpers shared by the core and the frameworks (no framework imports here)."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import tempfile

from deep500lite.errors import UserError

__all__ = [
    "atomic_write_bytes", "atomic_write_text", "is_package_available", "package_version", "positive_int",
    "nonnegative_int",
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


# The one integer argument type of every command line (the CLI's and the recipe worker's).
def _integer_at_least(text: str, minimum: int, wording: str) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        value = None
    if value is None or value < minimum:
        raise argparse.ArgumentTypeError(f"must be {wording}. Received: {text!r}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1.

    Args:
        text: the command-line value.

    Returns:
        The integer.

    Raises:
        argparse.ArgumentTypeError: anything else (argparse reports it as a usage error).
    """
    return _integer_at_least(text, 1, "a positive integer (1, 2, 3, ...)")


def nonnegative_int(text: str) -> int:
    """An argparse type: an integer >= 0 (a seed, a count that may be zero).

    Args:
        text: the command-line value.

    Returns:
        The integer.

    Raises:
        argparse.ArgumentTypeError: anything else (argparse reports it as a usage error).
    """
    return _integer_at_least(text, 0, "an integer >= 0 (0, 1, 2, ...)")
