"""The one way deep500lite opens a file a user gave it: checked, regular, bounded.

Every file that comes from a user (an ONNX model and its external data, a recipe, a results
file, a dataset file, a feed, a calibration or measurement JSON, a host file, a C++ source)
is opened through :func:`open_input` or read through :func:`read_input_bytes`,
:func:`read_input_text` or :func:`read_input_json`. Before anything is read they check, in
order, and raise one :class:`~deep500lite.errors.UserError` (or the class the caller names)
saying what was wrong, what is allowed and what was received:

1. the argument is a path: a ``str``, ``bytes`` or ``os.PathLike`` (``read_idx(123)`` is a
   :class:`~deep500lite.errors.UserTypeError`, not Python's "expected str, bytes or os.PathLike");
2. it is not empty and holds no NUL byte;
3. it exists, and it is a regular file: a folder, a FIFO (named pipe), a character or block
   device (``/dev/zero``, ``/dev/stdin``) or a socket is refused. The file is opened with
   ``O_NONBLOCK`` and checked with ``fstat`` on the open descriptor, so opening a FIFO never
   blocks and a path swapped between the check and the read is still caught;
4. a whole-file read is bounded: ``limit`` bytes when given, else the memory available
   (:func:`deep500lite.utils.check_allocation`).

:func:`read_input_json` also turns every way JSON can be wrong into one line: not UTF-8, not
JSON (with the line and column), ``NaN``/``Infinity`` literals, nesting too deep for Python's parser,
an integer of more than 4,300 digits (Python's own limit, whose message names no file).

Files deep500lite writes and reads back itself (a worker's output in its own temporary folder,
``/proc``) do not need this; ``tests/reliability/test_input_path.py`` lists every other ``open``
in the source and fails on a new one.
"""

from __future__ import annotations

import json
import os
import stat

from deep500lite.errors import UserError, UserTypeError
from deep500lite.utils import check_allocation

__all__ = ["input_path", "open_input", "read_input_bytes", "read_input_text", "read_input_json", "parse_json_text",
           "JSON_LIMIT", "MAX_INT_DIGITS"]

#: The largest JSON file read whole (results, calibrations, measurements): 256 MiB.
JSON_LIMIT = 256 * 2**20
#: The most digits of an integer in JSON (Python refuses to convert longer ones).
MAX_INT_DIGITS = 4300

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _shown(path) -> str:
    text = repr(path)
    return text if len(text) <= 300 else text[:297] + "..."


def input_path(path, what: str = "file", error=UserError) -> str:
    """``path`` as a string, after the checks 1-2 of the module documentation (nothing is opened).

    Args:
        path: what the caller was given.
        what: what the file is, for messages (``"ONNX model"``, ``"--io-from"``).
        error: the :class:`~deep500lite.errors.UserError` class to raise for a bad value.

    Raises:
        UserTypeError: ``path`` is not a ``str``, ``bytes`` or ``os.PathLike``.
        error: ``path`` is empty or holds a NUL byte.
    """
    if isinstance(path, bool) or not isinstance(path, (str, bytes, os.PathLike)):
        raise UserTypeError(f"{what} must be a path (a str or os.PathLike). Received: {type(path).__name__} "
                            f"{_shown(path)}")
    try:
        text = os.fsdecode(os.fspath(path))
    except TypeError as exc:  # a PathLike whose __fspath__ returns something else
        raise UserTypeError(f"{what} must be a path (a str or os.PathLike). Received: {type(path).__name__}") from exc
    if not text:
        raise error(f"{what} must be a non-empty path. Received: ''")
    if "\x00" in text:
        raise error(f"{what} must be a path without NUL bytes. Received: {_shown(text)}")
    return text


def _check_kind(mode: int, path: str, what: str, error) -> None:
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    hint = "give a file inside it" if kind == "a folder" else (
        "deep500lite reads only regular files: a pipe or a device may block forever or never end")
    raise error(f"{what} {_shown(path)} is {kind}, not a regular file; {hint}. Received: {_shown(path)}")


def _open_fd(path, what: str, error, missing) -> tuple[int, str, os.stat_result]:
    text = input_path(path, what, error)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(text, flags)
    except FileNotFoundError as exc:
        raise (missing or error)(f"{what} {_shown(text)} does not exist; give the path of an existing file. "
                                 f"Received: {_shown(text)}") from exc
    except IsADirectoryError as exc:
        raise error(f"{what} {_shown(text)} is a folder, not a regular file; give a file inside it. Received: "
                    f"{_shown(text)}") from exc
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise error(f"Cannot read {what} {_shown(text)}: {reason}; give a readable file. Received: "
                    f"{_shown(text)}") from exc
    try:
        info = os.fstat(fd)
        _check_kind(info.st_mode, text, what, error)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, text, info


def open_input(path, what: str = "file", *, error=UserError, missing=None):
    """Open a user's file for reading in binary mode, after checks 1-3 of the module documentation.

    The file object is a context manager (``with open_input(path) as f:``); the caller closes it.

    Args:
        path: the file.
        what: what the file is, for messages.
        error: the :class:`~deep500lite.errors.UserError` class to raise.
        missing: the class to raise when the file does not exist (default ``error``), e.g.
            :class:`~deep500lite.errors.MissingDatasetError`.

    Returns:
        The open binary file (a regular file: reads end at its end).

    Raises:
        UserTypeError: ``path`` is not a path.
        error: empty, NUL byte, a folder, a FIFO, a device, a socket, unreadable.
    """
    fd, _, _ = _open_fd(path, what, error, missing)
    return os.fdopen(fd, "rb")


def read_input_bytes(path, what: str = "file", *, limit: int | None = None, error=UserError, missing=None) -> bytes:
    """The whole content of a user's file, after checks 1-4 of the module documentation.

    Args:
        path: the file.
        what: what the file is, for messages.
        limit: the most bytes accepted (default: the memory available).
        error: the :class:`~deep500lite.errors.UserError` class to raise.
        missing: the class to raise when the file does not exist (default ``error``).

    Raises:
        UserTypeError: ``path`` is not a path.
        error: as :func:`open_input`, or the file is larger than ``limit``.
    """
    fd, text, info = _open_fd(path, what, error, missing)
    with os.fdopen(fd, "rb") as f:
        size = info.st_size
        if limit is not None and size > limit:
            raise error(f"{what} {_shown(text)} is {size:,} bytes, more than the {limit:,} bytes such a file may "
                        f"have; give the right file. Received: {size:,} bytes")
        check_allocation(size, f"{what} {_shown(text)}", error)
        try:
            data = f.read(size if limit is None else min(size, limit) + 1)
        except OSError as exc:
            raise error(f"Cannot read {what} {_shown(text)}: {exc.strerror or exc}. Received: {_shown(text)}") from exc
    if limit is not None and len(data) > limit:  # the file grew while it was read
        raise error(f"{what} {_shown(text)} is more than the {limit:,} bytes such a file may have. Received: "
                    f"{_shown(text)}")
    return data


def read_input_text(path, what: str = "file", *, limit: int | None = None, error=UserError, missing=None) -> str:
    """A user's UTF-8 text file (see :func:`read_input_bytes`); bytes that are not UTF-8 are an ``error``."""
    data = read_input_bytes(path, what, limit=limit, error=error, missing=missing)
    return _decode(data, _shown(input_path(path, what, error)), what, error)


def _decode(data: bytes, shown: str, what: str, error) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise error(f"{what} {shown} is not UTF-8 text: byte 0x{data[exc.start]:02x} on line {line} (offset "
                    f"{exc.start}) cannot be decoded; give a UTF-8 file. Received: "
                    f"{data[max(0, exc.start - 8):exc.start + 8]!r}") from None


def parse_json_text(text: str, what: str, error=UserError, constants: bool = False):
    """``text`` parsed as JSON, every fault one ``error`` naming ``what``.

    Args:
        text: the JSON text.
        what: what it is (a file, for messages).
        error: the class to raise.
        constants: accept ``NaN``, ``Infinity`` and ``-Infinity`` (Python's extension to JSON).
    """
    def number(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise error(f"{what} holds an integer of {len(digits.lstrip('-')):,} digits, more than the "
                        f"{MAX_INT_DIGITS:,} allowed; no deep500lite field needs one. Received: {digits[:20]}...")
        return int(digits)

    def constant(name: str):
        if constants:
            return float(name.replace("Infinity", "inf"))
        raise error(f"{what} is not valid JSON: it holds the literal {name}; write null or a number. Received: "
                    f"{name}")

    try:
        return json.loads(text, parse_int=number, parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise error(f"{what} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}. Received: "
                    f"{text[max(0, exc.pos - 20):exc.pos + 20]!r}") from None
    except RecursionError:
        raise error(f"{what} is not valid JSON for deep500lite: arrays or objects nested too deeply to be read; no "
                    "deep500lite file does. Received: a deeply nested value") from None


def read_input_json(path, what: str = "file", *, limit: int = JSON_LIMIT, error=UserError, missing=None,
                    constants: bool = False):
    """A user's JSON file, parsed: checks 1-4, then one ``error`` for anything that is not JSON.

    Args:
        path: the file.
        what: what the file is, for messages (``"results file"``); the path is added.
        limit: the most bytes accepted (default :data:`JSON_LIMIT`).
        error: the :class:`~deep500lite.errors.UserError` class to raise.
        missing: the class to raise when the file does not exist (default ``error``).
        constants: accept ``NaN`` and ``Infinity`` literals.

    Raises:
        UserTypeError: ``path`` is not a path.
        error: as :func:`read_input_text`; not JSON; too deep; an integer of more than 4,300 digits.
    """
    text = read_input_text(path, what, limit=limit, error=error, missing=missing)
    return parse_json_text(text, f"{what} {_shown(input_path(path, what, error))}", error, constants)
