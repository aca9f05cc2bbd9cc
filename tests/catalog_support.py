"""Shared checks for the bad-input catalog (tests/reliability/test_catalog_*.py).

Every catalog case feeds one wrong input to the CLI or the Python API and asserts the outcome
DESIGN.md promises: a :class:`~deep500lite.errors.Deep500Error` (exit status 2 from the CLI, in one
line, no traceback, never "internal error") whose message names the field or node and shows what
was received. ``docs/reliability.md`` gives the catalog's counts; count them with::

    .venv/bin/python -m pytest --collect-only -q tests/reliability -k catalog | tail -1

Cases run the CLI in-process (:func:`cli_error`) where they can, and in a fresh interpreter
(:func:`cli_error_subprocess`) where the command starts processes or must not share state.
"""

from __future__ import annotations

import io
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

import pytest

from deep500lite.errors import Deep500Error

__all__ = ["api_error", "assert_clean_message", "cli_error", "cli_error_subprocess"]

# Raw library messages a user should never see as the whole of an error line.
_RAW_MARKERS = ("Traceback (most recent call last)", "internal error", "object has no attribute",
                "object is not subscriptable", "unsupported operand", "referenced before assignment",
                "UnicodeDecodeError", "'NoneType'")


def assert_clean_message(message: str, *needles: str) -> None:
    """``message`` is one user-facing line that contains every needle (case-insensitive)."""
    assert message.strip(), "empty error message"
    for marker in _RAW_MARKERS:
        assert marker not in message, f"raw library text {marker!r} in: {message}"
    low = message.lower()
    for needle in needles:
        assert needle.lower() in low, f"{needle!r} not named in: {message}"


def cli_error(*argv, needles=(), capsys=None) -> str:
    """Run ``deep500lite ARGV`` in this process; assert exit 2 and one clean line; return it.

    Args:
        *argv: the command-line arguments (converted with ``str``).
        needles: substrings the error line must contain (the field, node or received value).
    """
    from deep500lite.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse usage errors exit through SystemExit
            code = exc.code
    text = err.getvalue().strip()
    assert code == 2, f"exit status {code}, expected 2; stderr:\n{text}\nstdout:\n{out.getvalue()[-2000:]}"
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, "no error message on stderr"
    last = lines[-1]
    assert "error:" in last, f"not an error line: {last}"
    assert_clean_message(last, *needles)
    return last


def cli_error_subprocess(*argv, needles=(), cwd=None, env=None, timeout=120) -> str:
    """Like :func:`cli_error` but in a fresh interpreter (for commands that start processes)."""
    import os

    full_env = dict(os.environ, **(env or {}))
    proc = subprocess.run([sys.executable, "-m", "deep500lite", *map(str, argv)], capture_output=True,
                          text=True, cwd=cwd, env=full_env, timeout=timeout)
    text = proc.stderr.strip()
    assert proc.returncode == 2, f"exit status {proc.returncode}, expected 2; stderr:\n{text[-3000:]}"
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, "no error message on stderr"
    assert "Traceback" not in text, f"traceback printed:\n{text[-3000:]}"
    assert_clean_message(lines[-1], *needles)
    return lines[-1]


def api_error(fn, *args, expected=Deep500Error, needles=(), **kwargs) -> Deep500Error:
    """Call ``fn(*args, **kwargs)``; assert it raises ``expected`` (a Deep500Error) with a clean message."""
    with pytest.raises(expected) as info:
        fn(*args, **kwargs)
    assert isinstance(info.value, Deep500Error), f"{type(info.value).__name__} is not a Deep500Error"
    assert_clean_message(str(info.value), *needles)
    return info.value
