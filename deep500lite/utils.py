"""Small helpers shared by the core and the frameworks (no framework imports here)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import tempfile

__all__ = ["atomic_write_bytes", "atomic_write_text", "is_package_available", "package_version"]


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
    half-written file and an interrupted write leaves the old file in place."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        # mkstemp makes the file private (0600); give it the permissions open() would (0666 - umask).
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
