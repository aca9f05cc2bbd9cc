"""One cell of the zoo's matrix (a case on an executor, one check), shared by :mod:`.zoo` and :mod:`.zoo_graphs`."""

from __future__ import annotations

import dataclasses

from deep500lite.errors import Deep500Error

__all__ = ["Cell", "one_line"]


@dataclasses.dataclass
class Cell:
    """One check of one case on one executor.

    Attributes:
        status: ``pass``, ``fail`` (ran, too far from the producer), ``error`` (raised),
            ``known`` (fails for the cause in :data:`KNOWN_FAILURES`), ``export`` (the producer's
            exporter failed, nothing ran) or ``skip`` (the producer gives no gradients).
        error: the relative error (see the module docstring), when it ran.
        producer_error: the producer's own float32 relative error, for scale.
        detail: why it failed, or which parameter was worst.
        floor: the rule's float32 noise floor for this cell: the reference executor's own error
            on it (None for the reference executor's own cells, judged by the producer's error).
        compile_seconds: the part of ``seconds`` the executor spent compiling.
        extra: what a graph case records besides (the compile seconds each input shape added,
            how many greedy tokens a decoder chose alike).
    """

    case: str
    executor: str
    check: str
    status: str
    error: float | None = None
    producer_error: float | None = None
    detail: str = ""
    seconds: float = 0.0
    floor: float | None = None
    compile_seconds: float = 0.0
    extra: dict = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status in ("pass", "known", "skip")


def one_line(exc: BaseException, limit: int = 400) -> str:
    """An exception as one line: its type and its message's meaningful lines."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = " ".join(lines) if lines else ""
    text = f"{type(exc).__name__}: {text}" if not isinstance(exc, Deep500Error) else text
    return text if len(text) <= limit else text[: limit - 3] + "..."
