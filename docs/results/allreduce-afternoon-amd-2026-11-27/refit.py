"""Refit the saved calibrations of this folder with two other transport terms; count the rows within 20%.

Run from the repository root: .venv/bin/python docs/results/allreduce-afternoon-amd-2026-11-27/refit.py

- current: deep500lite.lv3.costmodel as it is (alpha + beta per byte, one cache regime by buffer size);
- per-message: the same, but each message's bytes take the cache regime of that message's size;
- exchange table: the wire time of each message is read from exchange-*.json (a pairwise exchange or a
  one-way message of that size, timed with every rank busy, right after the bench run), in place of
  beta; the fit scales it and keeps overhead, alpha, gamma and delta.
"""
import json
import math
import re
from pathlib import Path

import numpy as np

from deep500lite.lv3 import costmodel as cm
from deep500lite.lv3.allreduce import _core_ranks

HERE = Path(__file__).resolve().parent
UNIT = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
SIZE = {"KiB": 1 << 10, "MiB": 1 << 20}
ROW = re.compile(r"^(\d+) (KiB|MiB)\s+(ring|recursive_doubling|rabenseifner|tree)\s+([\d.]+) (us|ms|s)\s")


def measured_rows(path):
    rows = {}
    for line in path.read_text().splitlines():
        m = ROW.match(line)
        if m:
            rows[(m[3], int(m[1]) * SIZE[m[2]])] = float(m[4]) * UNIT[m[5]]
    return rows


def transfers(alg, n, p):
    """(kind, bytes) of each message on the critical path: 'x' an exchange with a partner, 'o' one way."""
    if alg == "ring":
        return [("x", n / p)] * (2 * (p - 1))
    if alg == "tree":
        return [("o", n)] * (2 * math.ceil(math.log2(p)))
    q, rem = _core_ranks(p)
    levels = q.bit_length() - 1
    fold = [("o", n)] * 2 if rem else []
    if alg == "recursive_doubling":
        return fold + [("x", n)] * levels
    return fold + [("x", n / 2 ** k) for k in range(1, levels + 1) for _ in range(2)]


def per_message(alg, n, p, cache):
    t = cm.cost_terms(alg, n, p)
    col = np.zeros(8)
    col[:2] = t[:2]
    wire, reduced = t[2], t[3]
    for kind, m in transfers(alg, float(n), p):  # spread wire and reduced bytes over the messages by size
        share = m / sum(mm for _, mm in transfers(alg, float(n), p))
        phi = cm.memory_fraction(m, cache)
        col[2] += (1 - phi) * wire * share
        col[5] += phi * wire * share
        col[3] += (1 - phi) * reduced * share
        col[6] += phi * reduced * share
    phi = cm.memory_fraction(n, cache)
    col[4], col[7] = (1 - phi) * t[4], phi * t[4]
    return col


def table_design(table):
    sizes = np.array(sorted(int(k) for k in table))

    def wire(kind, m):
        times = np.array([table[str(s)][0 if kind == "x" else 1] for s in sizes])
        if m <= sizes[0]:
            return times[0]
        if m >= sizes[-1]:
            return times[-1] * m / sizes[-1]
        return float(np.exp(np.interp(np.log(m), np.log(sizes), np.log(times))))

    def design(alg, n, p, cache):
        t = cm.cost_terms(alg, n, p)
        phi = cm.memory_fraction(n, cache)
        w = sum(wire(kind, m) for kind, m in transfers(alg, float(n), p))
        return np.array([t[0], t[1], w, (1 - phi) * t[3], (1 - phi) * t[4], phi * t[3], phi * t[4]])
    return design


def fit(cells, design, p):
    t = np.array([s for _, _, s in cells])
    best = None
    for cache in cm.CACHE_CANDIDATES:
        x = np.array([design(a, n, p, cache) for a, n, _ in cells])
        coef = cm._nnls(x / t[:, None], np.ones(len(t)))
        sse = float(np.sum((x @ coef / t - 1) ** 2))
        if best is None or sse < (0.9 * best[0] - 1e-9 if best[2] == 0 else best[0]):
            best = (sse, coef, cache)
    return best[1], best[2]


def main():
    for p in (2, 4):
        for k in ("k1", "k2", "k3"):
            cells = json.loads((HERE / f"model-{k}-n{p}.json").read_text())["measurements"][str(p)]
            rows = {key: s for key, s in measured_rows(HERE / f"bench-{k}-n{p}.txt").items()
                    if 64 << 10 <= key[1] <= 64 << 20}
            table = json.loads((HERE / f"exchange-{k}-n{p}.json").read_text())
            line = []
            for name, design in (("current", lambda a, n, pp, c: cm._design(cm.cost_terms(a, n, pp), n, c)),
                                 ("per-message", per_message), ("exchange table", table_design(table))):
                coef, cache = fit(cells, design, p)
                ok = sum(abs(design(a, n, p, cache) @ coef / s - 1) <= 0.2 for (a, n), s in rows.items())
                line.append(f"{name} {ok} of {len(rows)}")
            print(f"{p} ranks, {k}: " + ", ".join(line))


if __name__ == "__main__":
    main()
