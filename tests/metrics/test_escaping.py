"""Strings from files and arguments are escaped for where they go: the terminal, Markdown, CSV and HTML.

One test per output kind of :mod:`deep500lite.escaping`, one per table format of
:func:`~deep500lite.metrics.tables.format_table`, and ``deep500lite report`` end to end in every
format on a results file whose string fields hold what a hostile or careless writer could put
there (the dashboard's HTML is checked in a real browser by tests/results/test_dashboard.py).
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deep500lite.escaping import csv_cell, has_control, html_text, markdown_cell, one_line, plot_text, terminal
from deep500lite.metrics.tables import TABLE_FORMATS, format_table

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "data" / "scaling_check" / "run1.json"
ANSI = "red\x1b[31m\x1b[2J"
FORMULA = "=cmd|' /C calc'!A0"
MARKUP = "a|b<script>alert(1)</script>"
HOSTILE = [ANSI, "two\nlines", "nul\x00", "\u202eevil", "bad\udcffbyte", FORMULA, "+1+cmd", "@SUM(A1)", "-2+3",
           MARKUP]


def test_terminal_shows_control_characters_as_escapes():
    assert terminal(ANSI) == "red\\x1b[31m\\x1b[2J"
    assert terminal("two\nlines\tand\r") == "two\\nlines\\tand\\r"
    assert terminal("\u202eevil") == "\\u202eevil"
    assert terminal("bad\udcffbyte") == "bad\\xffbyte"  # a byte that was not UTF-8
    assert terminal("C:\\path") == "C:\\path"
    for text in HOSTILE:
        assert not has_control(terminal(text)), text


def test_one_line_keeps_both_ends_of_a_long_message():
    text = "start " + "x" * 5000 + " Received: end"
    out = one_line(text, limit=300)
    assert len(out) < 400 and out.startswith("start ") and out.endswith("Received: end")


def test_markdown_cell_escapes_pipes_markup_and_line_breaks():
    out = markdown_cell(MARKUP + "\nnext")
    assert out == "a\\|b&lt;script&gt;alert(1)&lt;/script&gt;\\nnext"
    assert "<" not in out and "\n" not in out and not re.search(r"(?<!\\)\|", out)


def test_csv_cell_never_starts_a_formula():
    assert csv_cell(FORMULA) == "'" + FORMULA
    assert csv_cell("+1+cmd") == "'+1+cmd"
    assert csv_cell("@SUM(A1)") == "'@SUM(A1)"
    assert csv_cell("-2+3") == "'-2+3"
    for number in ("-1.5", "+3", "-inf", "1e-05", "-", "-12%"):
        assert csv_cell(number) == number


def test_html_and_plot_text_escape_markup():
    assert html_text('<img src=x onerror="y">') == "&lt;img src=x onerror=&quot;y&quot;&gt;"
    assert plot_text("<b>x</b> & 'y'") == "&lt;b&gt;x&lt;/b&gt; &amp; 'y'"


@pytest.mark.parametrize("fmt", TABLE_FORMATS)
def test_every_table_format_escapes_every_cell(fmt):
    headers = ["name", "value"]
    rows = [[text, "1.5"] for text in HOSTILE]
    out = format_table(headers, rows, fmt)
    assert not has_control(out.replace("\n", "")), repr(out)
    lines = out.split("\n")
    if fmt == "csv":
        parsed = list(csv.reader(io.StringIO(out)))
        assert len(parsed) == len(rows) + 1 and all(len(r) == 2 for r in parsed)
        assert all(not r[0].startswith(("=", "+", "@")) for r in parsed[1:])
        assert parsed[1 + HOSTILE.index("-2+3")][0] == "'-2+3"
    elif fmt == "markdown":
        assert len(lines) == len(rows) + 2
        for line in lines:  # a row has exactly its columns' separators: no | from a cell
            assert len(re.findall(r"(?<!\\)\|", line)) == len(headers) + 1, line
        assert "<script>" not in out
    else:
        assert len(lines) == len(rows) + 2  # header, rule, one line a row


def _hostile_results(tmp_path: Path, value: str) -> Path:
    data = json.loads(RESULTS.read_text())
    data["executor_variant"] = value
    out = tmp_path / "run" / "results.json"
    out.parent.mkdir()
    out.write_text(json.dumps(data))
    return out


def _report(path: Path, fmt: str):
    exe = shutil.which("deep500lite") or str(Path(sys.executable).with_name("deep500lite"))
    return subprocess.run([exe, "report", str(path), "--format", fmt], capture_output=True, text=True,
                          timeout=300, errors="surrogateescape")


@pytest.mark.parametrize("fmt", TABLE_FORMATS)
def test_report_escapes_a_hostile_string_field_in_every_format(tmp_path, fmt):
    value = FORMULA + MARKUP
    proc = _report(_hostile_results(tmp_path, value), fmt)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not has_control(proc.stdout.replace("\n", "")), proc.stdout
    shown = {"csv": "'" + value, "markdown": markdown_cell(value), "table": value}[fmt]
    assert shown in proc.stdout, proc.stdout  # the field is in the report, escaped for the format
    if fmt == "csv":
        cells = [c for row in csv.reader(io.StringIO(proc.stdout)) for c in row]
        assert not any(c.startswith(("=", "+", "@")) for c in cells), cells
    if fmt == "markdown":
        assert "<script>" not in proc.stdout
        table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
        counts = {len(re.findall(r"(?<!\\)\|", line)) for line in table}
        assert len(counts) == 1, table


def test_report_never_sends_control_characters_to_the_terminal(tmp_path):
    proc = _report(_hostile_results(tmp_path, "variant" + ANSI + "\nsplit"), "table")
    # refused as a bad results file (exit 2, one line) or shown escaped: never raw
    assert proc.returncode in (0, 2), proc.stderr[-2000:]
    assert not has_control(proc.stdout.replace("\n", "")) and not has_control(proc.stderr.replace("\n", ""))
    if proc.returncode == 0:
        assert "variant" + terminal(ANSI + "\nsplit") in proc.stdout, proc.stdout
    else:
        assert proc.stderr.count("\n") == 1 and "Received" in proc.stderr, proc.stderr
