"""Shrink a `bench allreduce --json` file to its rows' medians (the raw calls stay out of the repository).

.venv/bin/python compact.py bench-n4-1.json rows-n4-1.json
Keeps, per row: bytes, algorithm, what auto ran, the number of calls, the median with its 95% CI, the
medians of the three thirds of the rounds, and both predictions; and the calibration and the allocator.
"""
import json
import sys

from deep500lite.bench.allreduce import AllreduceBenchmark

src, dst = sys.argv[1:3]
with open(src) as f:
    data = json.load(f)
rows = []
for row, s, _, _ in AllreduceBenchmark.from_dict(data).summaries():
    rows.append({"bytes": row["bytes"], "algorithm": row["algorithm"], "chosen": row["chosen"],
                 "calls": len(row["samples"]), "median": s.median, "ci": [s.ci_low, s.ci_high],
                 "thirds": row["pass_medians"], "calibrated": row["calibrated"], "predicted": row["predicted"]})
keep = {k: data[k] for k in ("ranks", "rounds", "mpi_library", "allocator", "calibration")}
with open(dst, "w") as f:
    json.dump(dict(keep, rows=rows), f, indent=0)
