"""Refit every saved `bench allreduce` calibration in docs/results with one crossover and as the fit is now.

Run from the repository root: .venv/bin/python docs/results/allreduce-three-regimes-amd-2026-11-27/refit.py

For each saved pair (the calibration file a run wrote with --save-model, and the table it printed)
it fits the calibration's medians twice with deep500lite.lv3.costmodel.fit_parameters: once with
three regimes switched off (THREE_REGIME_MIN_SIZES set out of reach: one crossover, as before
2026-11-27 15:30 UTC) and once as it is, and counts the table's rows (4 algorithms x 64 KiB-64 MiB)
that each predicts within 20%.
"""
import json
import re
from pathlib import Path

from deep500lite.lv3 import costmodel as cm

RESULTS = Path(__file__).resolve().parent.parent
UNIT = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
SIZE = {"KiB": 1 << 10, "MiB": 1 << 20}
ROW = re.compile(r"^(\d+) (KiB|MiB)\s+(ring|recursive_doubling|rabenseifner|tree)\s+([\d.]+) (us|ms|s)\s")


def measured_rows(path):
    rows = {}
    for line in path.read_text().splitlines():
        m = ROW.match(line)
        if m and 64 << 10 <= int(m[1]) * SIZE[m[2]] <= 64 << 20:
            rows[(m[3], int(m[1]) * SIZE[m[2]])] = float(m[4]) * UNIT[m[5]]
    return rows


def pairs():
    """(name, calibration file, table file, ranks) of every saved run with both."""
    here = RESULTS / "allreduce-three-regimes-amd-2026-11-27"
    aft = RESULTS / "allreduce-afternoon-amd-2026-11-27"
    inter = RESULTS / "allreduce-interleaved-amd-2026-11-27"
    c16 = RESULTS / "mpi-16core-2026-11-27"
    out = [(f"afternoon {k} n{p}", aft / f"model-{k}-n{p}.json", aft / f"bench-{k}-n{p}.txt", p)
           for k in ("k1", "k2", "k3") for p in (2, 4)]
    for f in sorted(inter.glob("*-model-n*-*.json")):
        name = f.name.replace("-model", "").replace(".json", "")
        out.append((f"interleaved {name}", f, inter / f"{name}.txt", int(re.search(r"-n(\d)-", f.name)[1])))
    for f in sorted(here.glob("before-model-*.json")):
        name = f.name.replace("before-model-", "").replace(".json", "")
        out.append((f"before {name}", f, here / f"before-{name}.txt", int(name[-1])))
    out += [(f"16-core n{p}", c16 / "ar-large.json", c16 / f"allreduce-n{p}.txt", p) for p in (2, 4, 8)]
    return out


def within(params, rows, p):
    return sum(abs(params.seconds(a, n, p) / t - 1) <= 0.2 for (a, n), t in rows.items())


def main():
    totals = {"one crossover": [0, 0], "as now": [0, 0]}
    count = 0
    print(f"{'run':34s} {'sizes':>5s} {'one crossover':>13s} {'as now':>7s}  crossovers now")
    for name, model, table, p in pairs():
        cells = [(a, n, p, t) for a, n, t in json.loads(model.read_text())["measurements"][str(p)]]
        rows = measured_rows(table)
        keep = cm.THREE_REGIME_MIN_SIZES
        cm.THREE_REGIME_MIN_SIZES = 10 ** 9
        one = cm.fit_parameters(cells)
        cm.THREE_REGIME_MIN_SIZES = keep
        now = cm.fit_parameters(cells)
        a, b = within(one, rows, p), within(now, rows, p)
        count += 1
        for key, ok in (("one crossover", a), ("as now", b)):
            totals[key][0] += ok
            totals[key][1] += ok == len(rows)
        cross = f"{int(now.cache_bytes) >> 10} KiB" + (f", {int(now.memory_bytes) >> 10} KiB, k = {now.sharpness:g}"
                                                     if now.memory_bytes else "")
        print(f"{name:34s} {len({c[1] for c in cells}):5d} {a:10d}/{len(rows)} {b:4d}/{len(rows)}  {cross}")
    for key, (ok, full) in totals.items():
        print(f"{key}: {ok} rows within 20% in all; every row within 20% in {full} of {count} runs")


if __name__ == "__main__":
    main()
