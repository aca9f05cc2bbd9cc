"""Tables of numbers: one unit per column, numbers only in CSV, the noise flag and its footer."""

from __future__ import annotations

import csv
import io

import pytest

from deep500lite.metrics.tables import Column, UnitTable, noise_flag, relative_spread, time_unit


def test_time_unit_is_the_columns_smallest_value_unit():
    assert time_unit([0.0032, 0.45]) == ("ms", 1e-3)
    assert time_unit([2.5, 30.0]) == ("s", 1.0)
    assert time_unit([4e-6, 1e-3]) == ("us", 1e-6)
    assert time_unit([None, float("nan")]) == ("s", 1.0)


def test_noise_flag_follows_iqr_over_median():
    assert relative_spread(9.0, 10.0, 13.0) == pytest.approx(0.4)
    assert noise_flag(0.4) == "(! 40%)" and noise_flag(0.1) == "" and noise_flag(None) == ""
    assert noise_flag(0.101) == "(! 10%)"


def test_unit_table_text_markdown_csv():
    table = UnitTable([Column("name"), Column("time", "ms", ".2f"), Column("spread", "%", ".0f", only="csv"),
                       Column("note", only="text")])
    table.rows = [["a", 1.23456, 40.0, "slow"], ["b", None, 5.0, "ok"]]
    table.flags[(0, 1)] = "(! 40%)"
    table.footer.append("(! XX%): noisy")
    text = table.render("table")
    lines = text.splitlines()
    assert lines[0].split() == ["name", "time", "(ms)", "note"] and "1.23 (! 40%)" in lines[2]
    assert lines[3].split()[:2] == ["b", "-"] and lines[-1] == "(! XX%): noisy"
    md = table.render("markdown")
    assert md.splitlines()[0].startswith("| name") and md.endswith("(! XX%): noisy")
    rows = list(csv.reader(io.StringIO(table.render("csv"))))
    assert rows[0] == ["name", "time (ms)", "spread (%)"]
    assert rows[1] == ["a", "1.23456", "40.0"] and rows[2] == ["b", "", "5.0"]  # full numbers, no marks
