"""The VM's two states in the rounds of a `bench allreduce` run, and the model fitted within each.

Run from the repository root: .venv/bin/python docs/results/allreduce-three-regimes-amd-2026-11-27/states.py

rounds-*.json hold, for each cell of a run (52 calibration cells, then the 30 rows), the median of
its calls in each of the 48 rounds (taken with a temporary patch of the benchmark; the calls
themselves are not kept). A round's speed index is the median, over the cells timed in it, of
the cell's median in that round divided by the cell's median over all rounds. The rounds are
split at the largest gap between sorted indices; each side is one state. Within a state, each
cell's time is the median of its round medians in that state, the model is fitted to the
calibration cells (with one crossover, and as the fit is now) and judged on the 24 rows of
4 algorithms x 64 KiB-64 MiB.
"""
import json
import warnings
from pathlib import Path

import numpy as np

from deep500lite.lv3 import costmodel as cm

HERE = Path(__file__).resolve().parent
P2P = ("ring", "recursive_doubling", "rabenseifner", "tree")
ROWS = {64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}


def fit(cells, one_crossover):
    keep = cm.THREE_REGIME_MIN_SIZES
    if one_crossover:
        cm.THREE_REGIME_MIN_SIZES = 10 ** 9
    try:
        return cm.fit_parameters(cells)
    finally:
        cm.THREE_REGIME_MIN_SIZES = keep


def main():
    warnings.simplefilter("ignore", RuntimeWarning)  # a 64 MiB cell is not timed in every round: all-NaN medians
    for path in sorted(HERE.glob("rounds-*.json")):
        data = json.loads(path.read_text())
        p, cells, med = data["ranks"], data["cells"], np.array(data["round_medians"], dtype=float)
        overall = np.nanmedian(med, axis=1)
        index = np.nanmedian(med / overall[:, None], axis=0)
        order = np.argsort(np.log(index))
        gaps = np.diff(np.log(index[order]))
        cut = int(np.argmax(gaps))
        states = {"fast": order[:cut + 1], "slow": order[cut + 1:]}
        print(f"{path.name}: {p} ranks; largest gap between rounds x{np.exp(gaps[cut]):.2f}; "
              f"fast {len(states['fast'])} rounds (index {np.median(index[states['fast']]):.2f}), "
              f"slow {len(states['slow'])} (index {np.median(index[states['slow']]):.2f})")
        for name, rounds in states.items():
            if len(rounds) < 6:
                continue
            times = np.nanmedian(med[:, rounds], axis=1)
            cal = [(a, n, p, t) for (a, n), t in zip(cells[:52], times[:52]) if np.isfinite(t)]
            rows = {(a, n): t for (a, n), t in zip(cells[52:], times[52:]) if a in P2P and n in ROWS and np.isfinite(t)}
            line = []
            for label, one in (("one crossover", True), ("as now", False)):
                params = fit(cal, one)
                errs = {key: params.seconds(key[0], key[1], p) / t - 1 for key, t in rows.items()}
                miss = ", ".join(f"{a} {n >> 10} KiB {e:+.0%}" for (a, n), e in errs.items() if abs(e) > 0.2)
                line.append(f"{label} {sum(abs(e) <= 0.2 for e in errs.values())}/{len(errs)}" + (f" ({miss})" if miss else ""))
            print(f"  {name}: " + "; ".join(line))


if __name__ == "__main__":
    main()
