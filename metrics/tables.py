"""Plain tables for the terminal, Markdown and CSV (no third-party dependency)."""

from __future__ import annotations

import csv
import io
from typing import Sequence

from deep500lite.errors import UserError, format_choices

__all__ = ["format_table", "TABLE_FORMATS", "format_seconds", "format_ci"]

TABLE_FORMATS = ("table", "markdown", "csv")


def format_table(headers: Sequence[str], rows: Sequence[Sequence], fmt: str = "table") -> str:
    """Render rows under headers as ``table`` (aligned text), ``markdown`` or ``csv``."""
    if fmt not in TABLE_FORMATS:
        raise UserError(f"Unknown table format. Allowed values are {format_choices(TABLE_FORMATS)}. Received: {fmt!r}")
    cells = [[str(c) for c in row] for row in rows]
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(headers)
        writer.writerows(cells)
        return buf.getvalue().rstrip("\n")
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    if fmt == "markdown":
        line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
        return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
                         + [line(r) for r in cells])
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), "  ".join("-" * w for w in widths)] + [line(r) for r in cells])


def format_seconds(t: float) -> str:
    """A duration with a unit that keeps 3-4 significant digits (``12.3 ms``)."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if abs(t) >= scale or unit == "ns":
            return f"{t / scale:.4g} {unit}"
    return f"{t} s"


def format_ci(median: float, low: float, high: float) -> str:
    """``median [low, high]`` with a shared unit."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if abs(median) >= scale or unit == "ns":
            return f"{median / scale:.4g} {unit} [{low / scale:.4g}, {high / scale:.4g}]"
    return f"{median} [{low}, {high}]"
