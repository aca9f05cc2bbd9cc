"""Count the rows within 20% in each run of this folder, as the run printed them and as refitted now.

Run from the repository root: .venv/bin/python docs/results/allreduce-kept-memory-amd-2026-11-27/summary.py
For each rows-nP-I.json (compact.py's shrink of the run's --json): the rows within 20% of 24
(point-to-point algorithms, 64 KiB-64 MiB) with the prediction the run printed, and with the
run's calibration refitted by deep500lite.lv3.costmodel.fit_parameters as it is now; the refit's
misses; the 95% CIs of the 64 MiB rows; how far a row's median moved between the thirds of the rounds
(median over rows); how many rows were more than 20% away from the calibration cell of the same
algorithm and size, timed in the same rounds; and at 2 ranks how far apart the ring and Rabenseifner were at worst: on 2 ranks
they do the same work (one exchange of n/2 each way), so their gap is the machine's own repeatability.
"""

import glob
import json
import os
import re

import numpy as np

from deep500lite.lv3 import costmodel as cm

HERE = os.path.dirname(os.path.abspath(__file__))


def key(path):
    p, i = re.search(r"rows-n(\d+)-(\d+)\.json", path).groups()
    return int(p), int(i)


for path in sorted(glob.glob(os.path.join(HERE, "rows-n*-*.json")), key=key):
    p, i = key(path)
    with open(path) as f:
        data = json.load(f)
    params = cm.fit_parameters([(a, n, p, t) for a, n, t in data["calibration"]["measurements"][str(p)]])
    rows = [r for r in data["rows"] if r["algorithm"] != "auto" and 64 << 10 <= r["bytes"] <= 64 << 20]
    then = sum(abs(r["calibrated"] / r["median"] - 1) <= 0.2 for r in rows)
    errs = [(r, params.seconds(r["algorithm"], r["bytes"], p) / r["median"] - 1) for r in rows]
    # the same algorithm and size was also timed as a calibration cell, in the same rounds
    twin = {(a, n): t for a, n, t in data["calibration"]["measurements"][str(p)]}
    misses = ", ".join(f"{r['algorithm']} {r['bytes'] >> 10} KiB {e * 100:+.1f}% (its calibration cell "
                       f"{twin[r['algorithm'], r['bytes']] / r['median'] - 1:+.0%} from the row)"
                       for r, e in errs if abs(e) > 0.2)
    apart = sum(abs(twin[r["algorithm"], r["bytes"]] / r["median"] - 1) > 0.2 for r in rows)
    big = [r["ci"] for r in rows if r["bytes"] == 64 << 20]
    moved = np.median([max(r["thirds"]) / min(r["thirds"]) - 1 for r in data["rows"]])
    line = (f"{p} ranks, run {i}: then {then} of {len(rows)}, now {sum(abs(e) <= 0.2 for _, e in errs)}; "
            f"64 MiB CIs {min(c[0] for c in big) * 1e3:.0f}-{max(c[1] for c in big) * 1e3:.0f} ms; "
            f"moved {moved * 100:.0f}% between thirds; {apart} rows more than 20% from their calibration cell")
    if p == 2:
        med = {(r["bytes"], r["algorithm"]): r["median"] for r in rows}
        gap = max(max(med[n, "ring"], med[n, "rabenseifner"]) / min(med[n, "ring"], med[n, "rabenseifner"]) - 1
                  for n in {n for n, _ in med})
        line += f"; ring vs rabenseifner up to {gap * 100:.0f}% apart"
    print(line + (f"; missed now: {misses}" if misses else ""))
