"""Finding every process a test's command started, wherever it ended up in the process tree.

A test gives the command's environment a tag (:func:`tagged_env`); every process below it
(``mpiexec``, hydra's proxies, which start in sessions of their own, the ranks, a comparison's
workers) inherits the variable, so :func:`tagged` finds them in ``/proc`` even after they were
re-parented to init. :func:`process_tag` is a fixture-like context: whatever the test does, also
when it fails, what is left is killed on the way out.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time

__all__ = ["TAG_ENV", "tagged", "tagged_env", "process_tag", "wait_untagged", "describe"]

TAG_ENV = "DEEP500LITE_TEST_PROCESS_TAG"


def tagged(tag: str) -> list[int]:
    """The running processes (zombies left out) whose environment carries ``tag``."""
    needle = f"{TAG_ENV}={tag}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X") and needle in env.split(b"\0"):
            found.append(int(entry))
    return found


def describe(pids) -> str:
    """``PID COMMAND LINE`` of each process, for a failing assertion."""
    lines = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().replace(b"\0", b" ").decode(errors="replace")
            lines.append(f"{pid} {args[:300]}")
        except OSError:
            lines.append(f"{pid} (gone)")
    return "\n".join(lines)


def wait_untagged(tag: str, within: float) -> list[int]:
    """Wait up to ``within`` seconds for the tagged processes to end; returns those still there."""
    deadline = time.monotonic() + within
    while True:
        left = tagged(tag)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def tagged_env(tag: str, **extra) -> dict:
    """This process's environment plus the tag (and ``extra``)."""
    return dict(os.environ, **{TAG_ENV: tag}, **extra)


@contextlib.contextmanager
def process_tag():
    """A new tag; on the way out (the test passed or not) every process still carrying it is killed."""
    tag = secrets.token_hex(8)
    try:
        yield tag
    finally:
        for _ in range(5):
            left = tagged(tag)
            if not left:
                break
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
