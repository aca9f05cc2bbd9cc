"""Three figures for the step of a `deep500lite run -n P` job, from its --out folder's rank files:
the median over steps of the largest of the ranks' step times (the job's step before 2026-11-27),
each rank's median step (the largest is the job's step now), and each rank's median time from the
end of one step to the end of the next (its period: the step, the data loading and any wait for
the scheduler between steps)."""
import json
import sys

import numpy as np

for out in sys.argv[1:]:
    agg = json.load(open(f"{out}/results.json"))
    d = agg["distributed"]
    runs = [json.load(open(f"{out}/{f}")) for f in d["rank_files"]]
    warm = runs[0]["summaries"]["warmup_steps"]
    times = [[s["step_time"] for s in r["samples"]["steps"][warm:]] for r in runs]
    ends = [[s["elapsed"] for s in r["samples"]["steps"][warm:]] for r in runs]
    n = min(map(len, times))
    per_step_max = float(np.median([max(t[i] for t in times) for i in range(n)]))
    medians = [float(np.median(t)) for t in times]
    periods = [float(np.median(np.diff(e))) for e in ends]
    ms = lambda xs: " ".join(f"{x * 1e3:.3f}" for x in xs)  # noqa: E731
    print(f"{out}: {len(runs)} ranks, {n} steps; per-step max {per_step_max * 1e3:.3f} ms; "
          f"rank medians {ms(medians)} ms (job: {max(medians) * 1e3:.3f}, "
          f"as written {d['aggregate']['step_time']['median'] * 1e3:.3f}); rank periods {ms(periods)} ms; "
          f"per-step max / job {per_step_max / max(medians):.3f}")
