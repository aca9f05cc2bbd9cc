"""Escaping by output kind: every string that came from a file or an argument, made safe for where it goes.

A node name, a recipe name, an ``executor_variant`` read from a results file or a label given on
the command line may hold anything: control characters (a newline that splits a line or a table
row, an ANSI escape sequence that recolours or rewrites the terminal), a ``|`` that breaks a
Markdown table, ``<script>``, a ``=cmd|' /C calc'!A0`` that a spreadsheet runs as a formula, bytes
that are not UTF-8 (kept by Python as lone surrogates, which cannot be printed). One function per
output kind:

=========================  ===============================================================================
:func:`terminal`           control characters shown as escapes (``\\x1b``, ``\\n``, ``\\t``); lone
                           surrogates as the byte they stand for (``\\xff``); Unicode direction overrides
                           and line separators as ``\\u202e``
:func:`markdown_cell`      :func:`terminal`, then ``|`` as ``\\|`` and ``&``, ``<``, ``>`` as entities
:func:`csv_cell`           :func:`terminal`, then a cell that starts with ``=``, ``+``, ``-``, ``@``
                           and is not a number gets a leading ``'`` (OWASP's advice against formula
                           injection), so a spreadsheet shows it as text
:func:`html_text`          ``html.escape`` (quotes too): for HTML text and attribute values
:func:`plot_text`          ``html.escape`` without quotes: for Plotly names and hover texts
=========================  ===============================================================================

The CLI's one-line error printer, :func:`deep500lite.metrics.tables.format_table` (every table of
``report``, ``compare``, ``history``, ``db list``, ``regress``, ``bench`` and ``model``) and the
dashboard's pages (:mod:`deep500lite.results.pages`) call these; nothing else needs to.
"""

from __future__ import annotations

import html
import re

__all__ = ["terminal", "markdown_cell", "csv_cell", "html_text", "plot_text", "has_control", "one_line",
           "CONTROL"]

# C0 controls, DEL, C1 controls; the Unicode line and paragraph separators; the direction marks,
# embeddings, overrides and isolates that can reorder what a terminal shows (Trojan Source);
# lone surrogates (bytes that were not UTF-8, kept by ``surrogateescape``).
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf|nan)%?", re.IGNORECASE)


def _visible(match: re.Match) -> str:
    ch = match.group(0)
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (os.fsdecode, surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def has_control(text: str) -> bool:
    """Whether ``text`` holds a character :func:`terminal` would escape."""
    return CONTROL.search(text) is not None


def terminal(text) -> str:
    """``text`` for a terminal line: control characters and lone surrogates shown as escapes.

    A backslash is kept as it is, so a Windows path stays readable; the escapes are what Python's
    ``repr`` would show for the same characters.

    >>> terminal("relu\\x1b[2J\\nnext")
    'relu\\\\x1b[2J\\\\nnext'
    """
    return CONTROL.sub(_visible, "" if text is None else str(text))


def one_line(text, limit: int = 2000) -> str:
    """:func:`terminal` of ``text`` cut in the middle to at most about ``limit`` characters.

    The start (what was wrong) and the end (``Received: ...``) of a message are kept.
    """
    out = terminal(text)
    if len(out) <= limit:
        return out
    head, tail = out[: limit * 2 // 3], out[-(limit // 3):]
    return f"{head} [... {len(out) - len(head) - len(tail):,} characters left out ...] {tail}"


def markdown_cell(text) -> str:
    """``text`` for one cell of a Markdown table: one line, ``|`` escaped, no HTML.

    >>> markdown_cell("a|b<script>")
    'a\\\\|b&lt;script&gt;'
    """
    out = terminal(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return out.replace("|", "\\|")


def csv_cell(text) -> str:
    """``text`` for one CSV cell: one line, and never read as a formula by a spreadsheet.

    Numbers (``-1.5``, ``+3``, ``-inf``) and a lone ``-`` stay as they are; any other cell that
    starts with ``=``, ``+``, ``-`` or ``@`` gets a leading ``'``.

    >>> csv_cell("=HYPERLINK(1)"), csv_cell("-0.25")
    ("'=HYPERLINK(1)", '-0.25')
    """
    out = terminal(text)
    if len(out) > 1 and out[0] in ("=", "+", "-", "@") and not _NUMBER.fullmatch(out):
        return "'" + out
    return out


def html_text(text) -> str:
    """``text`` for HTML text and attribute values (``html.escape`` with quotes)."""
    return html.escape("" if text is None else str(text), quote=True)


def plot_text(text) -> str:
    """``text`` for a Plotly name, title or hover text: shown as written, never read as markup."""
    return html.escape("" if text is None else str(text), quote=False)
