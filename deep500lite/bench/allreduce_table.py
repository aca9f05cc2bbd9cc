"""``bench allreduce`` tables in nccl-tests' format, and the alpha-beta model's table with one unit per column.

:func:`nccl_table` lays a :class:`~deep500lite.bench.allreduce.AllreduceBenchmark` out as NVIDIA's
nccl-tests print ``all_reduce_perf``: size in bytes, count in elements, type, reduction, root (-1
for an allreduce), then for the out-of-place and the in-place operation the time in microseconds,
the algorithm bandwidth ``algbw = size / time`` and the bus bandwidth ``busbw = algbw * 2 (n - 1) /
n`` in GB/s (10^9 bytes per second), and the number of wrong elements; one row per size and
algorithm (nccl-tests runs one algorithm), and ``# Avg bus bandwidth`` per algorithm, the mean
busbw over its rows. The time is the median of the slowest rank's calls (nccl-tests prints a
mean). deep500lite's allreduce returns a new array (out-of-place); the in-place columns read
``N/A``, as nccl-tests writes a value it did not measure.

:func:`model_table` puts each row's measured median beside the alpha-beta model's predictions,
every time in microseconds. Both render as text, Markdown or CSV (plain numbers, units in the
headers) through :class:`~deep500lite.metrics.tables.UnitTable`.
"""

from __future__ import annotations

from deep500lite.metrics.tables import NOISE_THRESHOLD, Column, UnitTable, noise_flag, noise_footer, relative_spread

__all__ = ["nccl_table", "model_table", "average_bus_bandwidth", "render_nccl"]

_GB = 1e9
_US = 1e-6


def _name(row: dict) -> str:
    return row["algorithm"] if row["algorithm"] != "auto" else f"auto->{row['chosen']}"


def nccl_table(bench) -> UnitTable:
    """The nccl-tests columns of every row (see the module documentation)."""
    cols = [Column("size", "B", "d"), Column("count", "elements", "d"), Column("type"), Column("redop"),
            Column("root", fmt="d"), Column("algorithm"),
            Column("time", "us", ".2f"), Column("algbw", "GB/s", ".2f"), Column("busbw", "GB/s", ".2f"),
            Column("#wrong", fmt="d"),
            Column("in-place time", "us", ".2f"), Column("in-place algbw", "GB/s", ".2f"),
            Column("in-place busbw", "GB/s", ".2f"), Column("in-place #wrong"),
            Column("IQR/median", "%", ".0f", only="csv")]
    table = UnitTable(cols)
    noisy = False
    for i, (row, s, algbw, busbw) in enumerate(bench.summaries()):
        spread = relative_spread(s.q1, s.median, s.q3)
        table.rows.append([int(row["bytes"]), int(row["bytes"]) // 4, "float", "sum", -1, _name(row),
                           s.median / _US, algbw / _GB, busbw / _GB, int(row["wrong"]),
                           None, None, None, "N/A", None if spread is None else spread * 100])
        flag = noise_flag(spread)
        if flag:
            table.flags[(i, 6)] = flag
            noisy = True
    table.footer += [f"# {line}" for line in average_bus_bandwidth(bench)]
    table.footer.append(f"# time: median of the slowest rank's calls on {bench.ranks} ranks; busbw = algbw * 2(n-1)/n "
                        "(nccl-tests' allreduce factor); in-place: N/A (deep500lite's allreduce is out-of-place)")
    if noisy:
        table.footer.append("# " + noise_footer(NOISE_THRESHOLD, "a row's calls"))
    return table


def average_bus_bandwidth(bench) -> list[str]:
    """nccl-tests' closing line, ``Avg bus bandwidth    : X``, once per algorithm (GB/s, mean over sizes)."""
    per: dict[str, list[float]] = {}
    for row, _, _, busbw in bench.summaries():
        per.setdefault(_name(row) if row["algorithm"] != "auto" else "auto", []).append(busbw / _GB)
    return [f"Avg bus bandwidth    : {sum(v) / len(v):.4g} ({name})" for name, v in per.items()]


def render_nccl(bench, fmt: str = "table") -> str:
    """:func:`nccl_table` as text in nccl-tests' layout (right-aligned, ``#`` headers), Markdown or CSV."""
    table = nccl_table(bench)
    if fmt != "table":
        return table.render(fmt)
    shown = [c for c in table.columns if c.shown("table")]
    names = ["size", "count", "type", "redop", "root", "algorithm", "time", "algbw", "busbw", "#wrong",
             "time", "algbw", "busbw", "#wrong"]
    units = ["(B)", "(elements)", "", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""]
    cells = []
    for i, row in enumerate(table.rows):
        line = []
        for j, column in enumerate(shown):
            text = table._text(row[j], column) if row[j] is not None else "N/A"
            mark = table.flags.get((i, j))
            line.append(f"{text} {mark}" if mark else text)
        cells.append(line)
    widths = [max([len(n), len(u)] + [len(c[j]) for c in cells]) for j, (n, u) in enumerate(zip(names, units))]
    widths[0] = max(widths[0], 10)
    oop = sum(widths[6:10]) + 3 * 2
    head = "#" + " " * (sum(widths[:6]) + 2 * 6) + "out-of-place".center(oop) + "  " + "in-place".center(oop)
    out = [head.rstrip(),
           "# " + "  ".join(n.rjust(w) for n, w in zip(names, widths)),
           "# " + "  ".join(u.rjust(w) for u, w in zip(units, widths)).rstrip()]
    out += ["  " + "  ".join(c.rjust(w) for c, w in zip(line, widths)) for line in cells]
    return "\n".join(out + table.footer)


def model_table(bench) -> UnitTable:
    """Each row's measured median beside the alpha-beta predictions, all in microseconds."""
    drift = bench.passes() > 1
    cols = [Column("size", "B", "d"), Column("algorithm"), Column("median", "us", ".2f"),
            Column("CI low", "us", ".2f"), Column("CI high", "us", ".2f"), Column("alpha-beta model", "us", ".2f"),
            Column("calibrated model", "us", ".2f"), Column("calibrated error", "%", "+.1f"),
            Column("#wrong", fmt="d")]
    if drift:
        cols.insert(5, Column("moved between thirds" if bench.rounds else "moved between passes", "%", ".0f"))
    table = UnitTable(cols)
    from deep500lite.bench.allreduce import pass_spread

    for row, s, _, _ in bench.summaries():
        cal = row.get("calibrated")
        err = None if cal is None or not s.median > 0 else (cal / s.median - 1) * 100
        cells = [int(row["bytes"]), _name(row), s.median / _US, s.ci_low / _US, s.ci_high / _US,
                 None if row["predicted"] is None else row["predicted"] / _US,
                 None if cal is None else cal / _US, err, int(row["wrong"])]
        if drift:
            spread = pass_spread(row)
            cells.insert(5, None if spread is None else spread * 100)
        table.rows.append(cells)
    what = "median of passes [range]" if drift and not bench.rounds else "median [95% CI]"
    table.footer.append(f"times: {what} of the slowest rank's calls")
    return table
