"""A progress line while a compiled executor compiles: ``compiling ...`` then the time it took.

Compiled executors (``torch:compile``, ``tensorflow:xla``, ``jax``) compile when a function first
meets a new input shape, which can take a minute during which nothing else moves. They wrap that
call in :func:`compiling`, which writes one line before (``compiling the training function with
torch.compile (inductor) for inputs [64, 1, 8, 8] ...``) and one after (``compiled in 41.2 s``) to
the stream set with :func:`report_compiling_to` (nothing when none is set: a library user's
program stays quiet). ``deep500lite run`` and the ``compare`` workers set it to their progress
stream.
"""

from __future__ import annotations

import contextlib
import threading
import time

__all__ = ["compiling", "report_compiling_to", "compile_stream"]

_state = threading.local()


def compile_stream():
    """The stream compile lines go to in this thread, or None."""
    return getattr(_state, "stream", None)


@contextlib.contextmanager
def report_compiling_to(stream):
    """Write compile lines to ``stream`` (None: nowhere) inside the ``with`` block."""
    saved = compile_stream()
    _state.stream = stream
    try:
        yield
    finally:
        _state.stream = saved


def _shape_text(shapes) -> str:
    return ", ".join(str(list(s)) for s in shapes)


@contextlib.contextmanager
def compiling(executor, what: str, shapes=(), how: str = ""):
    """Report a compilation of ``what`` (``"the training function"``) by ``executor`` while the block runs.

    The line after reports the increase of ``executor.compile_seconds`` over the block (what the
    executor itself counts as compilation) and the block's wall time.
    """
    stream = compile_stream()
    if stream is None:
        yield
        return
    label = getattr(executor, "variant", None) or executor.framework
    shapes_text = f" for inputs {_shape_text(shapes)}" if shapes else ""
    stream.write(f"compiling {what} ({label}{', ' + how if how else ''}){shapes_text} ...\n")
    stream.flush()
    before, t0 = float(executor.compile_seconds or 0.0), time.perf_counter()
    ok = False
    try:
        yield
        ok = True
    finally:
        spent = float(executor.compile_seconds or 0.0) - before
        wall = time.perf_counter() - t0
        if ok:
            stream.write(f"compiled {what} ({label}) in {spent:.1f} s (first call {wall:.1f} s)\n")
        else:
            stream.write(f"compiling {what} ({label}) failed after {wall:.1f} s\n")
        stream.flush()
