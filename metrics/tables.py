"""Plain tables for the terminal, Markdown and CSV (no third-party dependency).

:func:`format_table` aligns strings. :class:`UnitTable` holds numbers: one unit per column, in the
header (``step median (ms)``), the same numbers written in full to CSV so that pandas and the csv
module read them as numbers, marks such as the noise flag ``(! 34%)`` after a number in text
(:func:`noise_flag`, from the interquartile range over the median as torch.utils.benchmark's
``Compare`` marks a noisy row) and footer lines that explain the marks.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from typing import Sequence

from deep500lite.errors import UserError, format_choices

__all__ = ["format_table", "TABLE_FORMATS", "format_seconds", "format_ci", "UnitTable", "Column", "time_unit",
           "relative_spread", "noise_flag", "noise_footer", "NOISE_THRESHOLD"]

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


# ------------------------------------------------------------------ tables of numbers with units
#: Relative spread (interquartile range over median) above which a row's measurement is flagged.
NOISE_THRESHOLD = 0.10

_TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))


def time_unit(seconds: Sequence[float]) -> tuple[str, float]:
    """The one unit for a column of durations: ``(name, seconds per unit)``.

    The unit is the largest in which the column's smallest positive value is at least 1 (so a column of
    3.2 ms and 450 ms is in ms), the way torch.utils.benchmark's ``Compare`` picks one unit per table.
    """
    finite = [abs(float(t)) for t in seconds if t is not None and math.isfinite(float(t)) and t != 0]
    if not finite:
        return "s", 1.0
    smallest = min(finite)
    for name, scale in _TIME_UNITS:
        if smallest >= scale:
            return name, scale
    return _TIME_UNITS[-1]


def relative_spread(q1: float | None, median: float | None, q3: float | None) -> float | None:
    """Interquartile range over median (None when it cannot be computed)."""
    if q1 is None or median is None or q3 is None or not median:
        return None
    value = (q3 - q1) / abs(median)
    return value if math.isfinite(value) else None


def noise_flag(spread: float | None, threshold: float = NOISE_THRESHOLD) -> str:
    """``"(! 34%)"`` when ``spread`` (IQR/median) is above ``threshold``, else ``""``."""
    if spread is None or spread <= threshold:
        return ""
    return f"(! {spread * 100:.0f}%)"


def noise_footer(threshold: float = NOISE_THRESHOLD, what: str = "a row's samples") -> str:
    """The footer line that explains :func:`noise_flag`'s marks."""
    return (f"(! XX%): the interquartile range of {what} is XX% of its median, above {threshold:.0%}: a noisy "
            "measurement; rerun on a quieter machine or with more repeats")


@dataclasses.dataclass(frozen=True)
class Column:
    """One column of a :class:`UnitTable`: a name, its unit (None: no unit) and how text shows a number.

    Attributes:
        name: the header without the unit.
        unit: the unit of every number in the column (in the header, never in a cell).
        fmt: the format of a number in text and Markdown (CSV writes numbers in full).
        only: ``"csv"`` for a column only CSV has (a number text shows as a mark elsewhere),
            ``"text"`` for one only text and Markdown have (words that CSV splits into numbers).
    """

    name: str
    unit: str | None = None
    fmt: str = ".4g"
    only: str | None = None

    def shown(self, fmt: str) -> bool:
        """Whether the column is part of format ``fmt`` (``only``: ``"csv"`` or ``"text"``, else both)."""
        return self.only is None or (self.only == "csv") == (fmt == "csv")

    @property
    def header(self) -> str:
        """``name (unit)``, or ``name`` without a unit."""
        return f"{self.name} ({self.unit})" if self.unit else self.name


@dataclasses.dataclass
class UnitTable:
    """A table whose columns each carry one unit, in the header; CSV cells are plain numbers.

    Each cell is a number in its column's unit, a string, or None (empty in CSV, ``-`` in text).
    ``flags`` maps ``(row, column)`` to a mark shown after the number in text and Markdown (such
    as :func:`noise_flag`'s ``(! 34%)``); CSV leaves marks out, so keep the value they come from
    in a column of its own. ``footer`` lines follow the table in text and Markdown (CSV has none:
    a CSV file is read by programs such as pandas).
    """

    columns: list
    rows: list = dataclasses.field(default_factory=list)
    flags: dict = dataclasses.field(default_factory=dict)
    footer: list = dataclasses.field(default_factory=list)

    def _text(self, value, column: Column) -> str:
        if value is None:
            return "-"
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if isinstance(value, float) and not math.isfinite(value):
                return "-" if math.isnan(value) else ("inf" if value > 0 else "-inf")
            return format(value, column.fmt)
        return str(value)

    @staticmethod
    def _csv(value) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return ""
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, float):
            return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
        return str(value)

    def render(self, fmt: str = "table") -> str:
        """The table as ``table`` (aligned text), ``markdown`` or ``csv``."""
        keep = [j for j, c in enumerate(self.columns) if c.shown(fmt)]
        headers = [self.columns[j].header for j in keep]
        if fmt == "csv":
            return format_table(headers, [[self._csv(row[j]) for j in keep] for row in self.rows], "csv")
        cells = []
        for i, row in enumerate(self.rows):
            line = []
            for j in keep:
                value, column = row[j], self.columns[j]
                text = self._text(value, column)
                mark = self.flags.get((i, j))
                line.append(f"{text} {mark}" if mark else text)
            cells.append(line)
        out = format_table(headers, cells, fmt)
        if self.footer:
            out += "\n" + ("\n" if fmt == "markdown" else "") + "\n".join(self.footer)
        return out
