"""``model allreduce --check FILE``: a ``bench allreduce --json`` file's measured times beside the model's.

Each row of the file (an algorithm at a message size, on the file's rank count) is put beside the
prediction of the model ``model allreduce`` was given: the alpha-beta model of ``--network``
(a link's latency and bandwidth, nothing fitted) or a calibration file (``--allreduce-model``).
A point-to-point algorithm is predicted as itself; ``native`` (MPI's own choice) and ``auto``
(deep500lite's) as the fastest of the four, the one a well-chosen algorithm costs. The rows between
``--min-bytes`` and ``--max-bytes`` are judged at ``--tolerance``; the exit status is 1 when one is
off by more. The crossover lines put where the measured fastest point-to-point algorithm changes
beside where the model's fastest of the same algorithms does (seed 002's latency/bandwidth
crossover, which needs more than two ranks), and a last line where the time of one algorithm
(``native`` if measured) doubles from its smallest size's, measured and modelled: where latency
gives way to bandwidth (:func:`doubling_size`). Used by
:mod:`deep500lite.cli.model_cmd`; see docs/scaling.md.
"""

from __future__ import annotations

import math
import sys

__all__ = ["read_bench_file", "check_rows", "measured_crossovers", "doubling_size", "run_check"]


def read_bench_file(path: str) -> dict:
    """The ``bench allreduce --json`` file at ``path`` (its ``ranks`` and ``rows`` checked).

    Raises:
        UserError: a file that is not JSON or holds no rows with sizes, algorithms and medians.
    """
    from deep500lite.cli.model_check import _read_json
    from deep500lite.errors import UserError

    data = _read_json(path, "--check", "the JSON file of 'deep500lite bench allreduce --json'")
    rows = data.get("rows") if isinstance(data, dict) else None
    ranks = data.get("ranks") if isinstance(data, dict) else None
    good = isinstance(rows, list) and rows and all(
        isinstance(r, dict) and isinstance(r.get("bytes"), int) and isinstance(r.get("algorithm"), str)
        and isinstance((r.get("summary") or {}).get("median"), (int, float)) for r in rows)
    if not good or not isinstance(ranks, int) or ranks < 2:
        raise UserError(f"--check must name the JSON file of 'deep500lite bench allreduce --json' (rank count and "
                        f"rows with bytes, algorithm and a median). Received: --check {path!r} with "
                        f"{'no rows' if not rows else 'rows of another form'}, ranks {ranks!r}")
    return data


def _predicted(model, row: dict, ranks: int) -> tuple[float, str]:
    """``(seconds, algorithm the prediction is of)`` for one row."""
    from deep500lite.lv3.allreduce import P2P_ALGORITHMS, allreduce_cost

    algorithm = row["algorithm"]
    if algorithm in P2P_ALGORITHMS:
        return allreduce_cost(algorithm, row["bytes"], ranks, model), algorithm
    costs = {a: allreduce_cost(a, row["bytes"], ranks, model) for a in P2P_ALGORITHMS}
    best = min(costs, key=costs.get)
    return costs[best], best


def check_rows(data: dict, model, low: int, high: int, tolerance: float) -> list[dict]:
    """One dict per row of ``data``: bytes, algorithm, measured median and CI, predicted, error, judged, within."""
    out = []
    for row in data["rows"]:
        summary = row["summary"]
        predicted, of = _predicted(model, row, data["ranks"])
        measured = float(summary["median"])
        error = predicted / measured - 1 if measured > 0 else math.nan
        judged = low <= row["bytes"] <= high
        out.append({"bytes": row["bytes"], "algorithm": row["algorithm"], "predicted_as": of, "measured": measured,
                    "ci": (summary.get("ci_low"), summary.get("ci_high")), "predicted": predicted, "error": error,
                    "judged": judged, "within": judged and abs(error) <= tolerance})
    return out


def measured_crossovers(checked: list[dict]) -> list[tuple[int, int, str, str]]:
    """Where the measured fastest point-to-point algorithm changes between consecutive sizes.

    Returns:
        ``(bytes_before, bytes_after, fastest_before, fastest_after)`` tuples, over the sizes where
        at least two point-to-point algorithms were measured.
    """
    from deep500lite.lv3.allreduce import P2P_ALGORITHMS

    by_size: dict[int, dict[str, float]] = {}
    for c in checked:
        if c["algorithm"] in P2P_ALGORITHMS:
            by_size.setdefault(c["bytes"], {})[c["algorithm"]] = c["measured"]
    fastest = [(n, min(t, key=t.get)) for n, t in sorted(by_size.items()) if len(t) >= 2]
    return [(a[0], b[0], a[1], b[1]) for a, b in zip(fastest, fastest[1:]) if a[1] != b[1]]


def doubling_size(points) -> float | None:
    """Where the latency-bound regime gives way to the bandwidth-bound one: the size whose time is twice the time
    of the smallest size (Hockney's half-performance length), interpolated log-log between ``(bytes, seconds)``
    points; None when no point reaches twice the first."""
    points = sorted(points)
    if len(points) < 2 or points[0][1] <= 0:
        return None
    target = 2 * points[0][1]
    for (n0, t0), (n1, t1) in zip(points, points[1:]):
        if t1 >= target and t0 > 0:
            if t1 <= t0:
                return float(n1)
            frac = (math.log(target) - math.log(t0)) / (math.log(t1) - math.log(t0))
            return math.exp(math.log(n0) + max(0.0, frac) * (math.log(n1) - math.log(n0)))
    return None


def _approx(n: float) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def run_check(path: str, model, what: str, low: int, high: int, tolerance: float, fmt: str,
              nodes: int | None) -> int:
    """Print the rows of ``path`` beside ``model``'s predictions; returns 1 when a judged row is off, else 0.

    Raises:
        UserError: a bad file, or ``nodes`` given and not the file's rank count.
    """
    from deep500lite.errors import UserError
    from deep500lite.metrics.tables import format_seconds, format_table

    data = read_bench_file(path)
    ranks = data["ranks"]
    if nodes is not None and nodes != ranks:
        raise UserError(f"--check {path!r} was measured on {ranks} ranks; --nodes must be {ranks} or left out. "
                        f"Received: --nodes {nodes}")
    if hasattr(model, "params"):
        model.params(ranks)  # a calibration file without this rank count: one line naming it
    checked = check_rows(data, model, low, high, tolerance)
    text = sys.stderr if fmt == "csv" else sys.stdout
    print(f"measured ({path}, {ranks} ranks) against predicted by {what}", file=text)
    table = []
    for c in checked:
        low_ci, high_ci = c["ci"]
        ci = f" [{format_seconds(low_ci)}, {format_seconds(high_ci)}]" if low_ci is not None else ""
        verdict = ("within" if c["within"] else "off") + f" {tolerance * 100:g}%" if c["judged"] else "not judged"
        shown = c["algorithm"] if c["predicted_as"] == c["algorithm"] else f"{c['algorithm']} (as {c['predicted_as']})"
        table.append([_size(c["bytes"]), shown, format_seconds(c["measured"]) + ci, format_seconds(c["predicted"]),
                      f"{c['error'] * 100:+.1f}%", verdict])
    print(format_table(["size", "algorithm", "measured median [95% CI]", "predicted", "error", "verdict"], table,
                       fmt), flush=True)
    judged = [c for c in checked if c["judged"]]
    good = sum(c["within"] for c in judged)
    if not judged:
        raise UserError(f"No row of --check {path!r} lies between --min-bytes and --max-bytes ({_size(low)} to "
                        f"{_size(high)}), so nothing was judged. Received: sizes {_size(checked[0]['bytes'])} to "
                        f"{_size(checked[-1]['bytes'])} in the file")
    worst = sorted(judged, key=lambda c: -abs(c["error"]))[:3]
    print(f"predicted within {tolerance * 100:g}% of the measured median in {good} of {len(judged)} rows "
          f"({_size(low)} to {_size(high)}); largest errors: "
          + ", ".join(f"{c['algorithm']} {_size(c['bytes'])} {c['error'] * 100:+.0f}%" for c in worst)
          + ("" if good == len(judged) else ": the check fails"), file=text)
    sizes = sorted({c["bytes"] for c in checked})
    measured = measured_crossovers(checked)
    model_cross = measured_crossovers([dict(c, measured=c["predicted"]) for c in checked if c["predicted_as"]
                                       == c["algorithm"]])
    for label, found in (("measured", measured), ("model", model_cross)):
        if found:
            for lo, hi, a, b in found:
                print(f"crossover, {label}: {a} is fastest up to {_size(lo)}, {b} from {_size(hi)}", file=text)
        else:
            print(f"crossover, {label}: none between {_size(sizes[0])} and {_size(sizes[-1])}", file=text)
    # the latency/bandwidth crossover of one algorithm: measured at the file's sizes, the model's on a fine grid
    algorithm = "native" if any(c["algorithm"] == "native" for c in checked) else checked[0]["algorithm"]
    rows = [c for c in checked if c["algorithm"] == algorithm]
    grid = sorted({*(c["bytes"] for c in rows),
                   *(int(rows[0]["bytes"] * (rows[-1]["bytes"] / rows[0]["bytes"]) ** (k / 256)) // 4 * 4 or 4
                     for k in range(257))}) if len(rows) > 1 else []
    template = dict(rows[0])
    measured_half = doubling_size([(c["bytes"], c["measured"]) for c in rows])
    model_half = doubling_size([(n, _predicted(model, dict(template, bytes=n), ranks)[0]) for n in grid])
    shown = [f"{label} {_approx(v) if v is not None else 'beyond ' + _size(rows[-1]['bytes'])}"
             for label, v in (("measured", measured_half), ("model", model_half))]
    print(f"latency/bandwidth crossover of {algorithm} (the size whose time is twice that of "
          f"{_size(rows[0]['bytes'])}): {', '.join(shown)}", file=text)
    return 0 if good == len(judged) else 1
