"""``bench allreduce``'s tables: nccl-tests' columns and average bus bandwidth, one unit per column, numeric CSV."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from deep500lite.bench.allreduce import AllreduceBenchmark
from deep500lite.bench.allreduce_table import average_bus_bandwidth, model_table, nccl_table, render_nccl

RANKS = 4


def _bench():
    rng = np.random.default_rng(0)
    rows = []
    for n in (4, 1024, 1 << 20):
        for algorithm, scale in (("ring", 1.0), ("tree", 1.3)):
            base = (5e-6 + n * 2e-10) * scale
            spread = 0.5 if n == 1024 and algorithm == "tree" else 0.01  # one noisy row
            samples = (base * (1 + spread * rng.random(41))).tolist()
            rows.append({"bytes": n, "algorithm": algorithm, "chosen": algorithm, "samples": samples,
                         "predicted": base, "calibrated": base * 1.1, "wrong": 0, "bytes_sent": n})
    return AllreduceBenchmark(ranks=RANKS, model={"alpha": 5e-6, "beta": 2e-10, "gamma": 1e-11}, rows=rows)


def test_nccl_columns_follow_nccl_tests_definitions():
    bench = _bench()
    table = nccl_table(bench)
    headers = [c.header for c in table.columns if c.shown("csv")]
    assert headers[:10] == ["size (B)", "count (elements)", "type", "redop", "root", "algorithm", "time (us)",
                            "algbw (GB/s)", "busbw (GB/s)", "#wrong"]
    assert headers[10:14] == ["in-place time (us)", "in-place algbw (GB/s)", "in-place busbw (GB/s)",
                              "in-place #wrong"]
    frame = pytest.importorskip("pandas").read_csv(io.StringIO(table.render("csv")))
    for column in ("size (B)", "count (elements)", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong"):
        assert frame[column].dtype.kind in "if", column
    for i, row in enumerate(bench.rows):
        median = float(np.median(row["samples"]))
        algbw = row["bytes"] / median / 1e9  # nccl-tests: size / time, GB/s = 1e9 bytes per second
        assert frame["size (B)"][i] == row["bytes"] and frame["count (elements)"][i] == row["bytes"] // 4
        assert frame["time (us)"][i] == pytest.approx(median * 1e6)
        assert frame["algbw (GB/s)"][i] == pytest.approx(algbw)
        assert frame["busbw (GB/s)"][i] == pytest.approx(algbw * 2 * (RANKS - 1) / RANKS)  # allreduce's factor
        assert frame["type"][i] == "float" and frame["redop"][i] == "sum" and frame["root"][i] == -1
        assert np.isnan(frame["in-place #wrong"][i]) and np.isnan(frame["in-place time (us)"][i])  # not measured


def test_average_bus_bandwidth_line_per_algorithm():
    bench = _bench()
    lines = average_bus_bandwidth(bench)
    assert [line.rsplit("(", 1)[1] for line in lines] == ["ring)", "tree)"]
    for line, name in zip(lines, ("ring", "tree")):
        busbw = [r["bytes"] / np.median(r["samples"]) * 2 * (RANKS - 1) / RANKS / 1e9
                 for r in bench.rows if r["algorithm"] == name]
        assert line.startswith("Avg bus bandwidth    : ")
        assert float(line.split(":")[1].split()[0]) == pytest.approx(np.mean(busbw), rel=1e-3)


def test_text_layout_reads_like_nccl_tests_and_flags_the_noisy_row():
    text = render_nccl(_bench(), "table")
    lines = text.splitlines()
    assert "out-of-place" in lines[0] and "in-place" in lines[0] and lines[0].startswith("#")
    assert lines[1].split()[1:] == ["size", "count", "type", "redop", "root", "algorithm", "time", "algbw",
                                    "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"]
    assert "(us)" in lines[2] and "(GB/s)" in lines[2] and "(B)" in lines[2]
    body = [line for line in lines[3:] if not line.startswith("#")]
    assert len(body) == 6
    noisy = [line for line in body if "(! " in line]
    assert len(noisy) == 1 and noisy[0].split()[:6] == ["1024", "256", "float", "sum", "-1", "tree"]
    for line in body:
        fields = line.replace(noisy[0][noisy[0].index("(!"):noisy[0].index("%)") + 2] if "(!" in line else "",
                              "").split()
        assert len(fields) == 14 and fields[10:] == ["N/A"] * 4
    assert any(line.startswith("# Avg bus bandwidth    : ") for line in lines)
    assert any("(! XX%)" in line for line in lines)  # the footer explains the flag


def test_model_table_has_one_unit_per_column():
    bench = _bench()
    rows = list(csv.DictReader(io.StringIO(model_table(bench).render("csv"))))
    assert list(rows[0])[:5] == ["size (B)", "algorithm", "median (us)", "CI low (us)", "CI high (us)"]
    for row, raw in zip(rows, bench.rows):
        median = float(np.median(raw["samples"]))
        assert float(row["median (us)"]) == pytest.approx(median * 1e6)
        assert float(row["calibrated error (%)"]) == pytest.approx((raw["calibrated"] / median - 1) * 100)
        assert float(row["alpha-beta model (us)"]) == pytest.approx(raw["predicted"] * 1e6)
