"""``model scaling --step-from`` and ``--check``: reading the ``results.json`` of ``deep500lite run`` jobs,
and measured steps put beside the predicted ones.

A multi-rank run's step is the slowest rank's (``distributed.aggregate.step_time``, what its ``job:``
line prints), a 1-rank run's its own. :func:`compare_runs` puts each run beside the prediction for
its rank count, :func:`repeatability` groups the runs of one rank count, and the notes name runs
that had more ranks than cores. Used by :mod:`deep500lite.cli.model_cmd`; see docs/scaling.md.
"""

from __future__ import annotations

import json
import os
import statistics

__all__ = ["step_from_run", "measured_from_run", "compare_runs", "repeatability", "oversubscribed_note"]


def _read_json(path: str, flag: str, what: str):
    """The JSON in ``path`` given with ``flag``; a file that cannot be read is a :class:`UserError` saying ``what`` it should be."""
    from deep500lite.errors import UserError

    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise UserError(f"{flag} must name {what}; {path!r} cannot be read as JSON ({exc}). "
                        f"Received: {flag} {path!r}") from None


def _run_results(path: str, flag: str) -> tuple[dict, int]:
    """``(results, ranks)`` of the ``results.json`` of a ``deep500lite run`` given with ``flag``."""
    from deep500lite.errors import UserError

    data = _read_json(path, flag, "the results.json of a 'deep500lite run' (in its --out folder)")
    dist = data.get("distributed") if isinstance(data, dict) else None
    ranks = dist.get("ranks", 1) if isinstance(dist, dict) else 1
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1:
        raise UserError(f"{flag}: the run's rank count must be a positive integer. Received: {flag} {path!r} with "
                        f"distributed.ranks {ranks!r}")
    return data, ranks


def _run_step(data, ranks: int, path: str, flag: str, keys: tuple) -> dict:
    """The step-time summary of a run: the slowest rank's (``distributed.aggregate.step_time``, what
    a multi-rank run's ``job:`` line prints) or a 1-rank run's own (``summaries.step_time``), with
    ``keys`` numeric and a positive median; a :class:`UserError` names what is missing."""
    if ranks == 1:
        where, parent = "summaries.step_time", data.get("summaries") if isinstance(data, dict) else None
    else:
        where, parent = "distributed.aggregate.step_time", data["distributed"].get("aggregate")
    return _checked_step((parent or {}).get("step_time"), where, data, path, flag, keys)


def _checked_step(step, where: str, data, path: str, flag: str, keys: tuple, missing: str = "") -> dict:
    """``step`` (the summary found at ``where``) if it has ``keys`` numeric and a positive median, else a
    :class:`UserError`; ``missing`` replaces the default message's explanation when the summary is absent."""
    from deep500lite.errors import UserError

    if not isinstance(step, dict) or not all(isinstance(step.get(k), (int, float)) for k in keys):
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise UserError(missing or f"{flag} must name the results.json of a 'deep500lite run': it has no {where} with "
                        f"{', '.join(keys[:-1])} and {keys[-1]}. Received: {flag} {path!r} with keys {got}")
    if not step["median"] > 0:
        raise UserError(missing or f"{flag}: the run's median step must be positive. Received: {flag} {path!r} with "
                        f"median {step['median']!r}")
    return step


def _step_from(path: str) -> tuple[float, float, int]:
    """:func:`step_from_run`'s two figures and the run's rank count."""
    data, ranks = _run_results(path, "--step-from")
    keys = ("median", "q1", "q3")
    if ranks == 1:
        step = _run_step(data, 1, path, "--step-from", keys)
    else:
        baseline = data["distributed"].get("baseline")
        step = _checked_step(
            baseline.get("step_time") if isinstance(baseline, dict) else None, "distributed.baseline.step_time",
            data, path, "--step-from", keys,
            missing=f"--step-from needs a 1-rank run, or a run on more ranks with the 1-rank baseline it timed after "
                    f"them (distributed.baseline.step_time with a positive median, q1 and q3; a run without "
                    f"--no-baseline has it). Received: --step-from {path!r}, a run on {ranks} ranks without it")
    median = float(step["median"])
    return median, max(0.0, float(step["q3"] - step["q1"])) / 1.349 / median, ranks


def step_from_run(path: str) -> tuple[float, float]:
    """``(median step seconds, robust coefficient of variation)`` of the 1-rank step in a run's ``results.json``.

    A 1-rank run gives its own steps. A multi-rank run gives the 1-rank baseline it timed right
    after its ranks finished (``distributed.baseline.step_time``: the same recipe on one rank, for
    as many steps as each rank took), the 1-rank step closest in time to that job. The spread is
    the interquartile range over 1.349 (a normal distribution's standard deviation, unmoved by a
    few very slow steps) divided by the median. A :class:`UserError` names what is wrong.
    """
    return _step_from(path)[:2]


def measured_from_run(path: str) -> dict:
    """The measured step of a ``deep500lite run`` of any rank count, for ``--check``.

    A multi-rank run's step is the slowest rank's, a 1-rank run's its own (see :func:`_run_step`).
    Returns a dict with ``file``, ``ranks``, ``median``, ``ci_low`` and ``ci_high`` (seconds), and
    ``usable_cores``: the cores the run could use, from its recorded environment (None when the
    file does not say); a file that is not such a results.json is a :class:`UserError` naming what
    it lacks.
    """
    data, ranks = _run_results(path, "--check")
    step = _run_step(data, ranks, path, "--check", ("median", "ci_low", "ci_high"))
    cpu = (data.get("environment") or {}).get("cpu")
    cores = cpu.get("usable_cores") if isinstance(cpu, dict) else None
    return {"file": path, "ranks": ranks, "median": float(step["median"]), "ci_low": float(step["ci_low"]),
            "ci_high": float(step["ci_high"]),
            "usable_cores": cores if isinstance(cores, int) and not isinstance(cores, bool) and cores > 0 else None}


def _check_files(values) -> list[str]:
    return [p.strip() for v in values or () for p in v.split(",") if p.strip()]


def compare_runs(result, runs: list[dict], tolerance: float, calibration: str | None = None) -> list[dict]:
    """Each measured run of :func:`measured_from_run` beside the sweep's prediction for its rank count.

    Returns one dict per run: the run's fields plus ``predicted`` (seconds), ``error`` (predicted /
    measured - 1) and ``verdict``: ``"within"`` or ``"outside"`` the tolerance, or ``"calibration
    point"`` for the file the step was scaled to (``calibration``, the ``--step-from`` file).
    """
    by_count = {r.accelerators: r for r in result.rows}
    out = []
    for run in runs:
        row = by_count[run["ranks"]]
        error = row.step / run["median"] - 1
        # only a 1-rank run is its own calibration point; a P-rank run lent its baseline, not its P-rank step
        same = run["ranks"] == 1 and calibration is not None and os.path.exists(calibration) \
            and os.path.samefile(run["file"], calibration)
        verdict = "calibration point" if same else ("within" if abs(error) <= tolerance else "outside")
        out.append(dict(run, predicted=row.step, error=error, verdict=verdict))
    return out


def repeatability(checks: list[dict], tolerance: float) -> list[dict]:
    """How far apart the checked runs of one rank count are, for each count with two runs or more.

    A prediction ``x`` is within ``tolerance`` of a run ``m`` when ``m`` lies between
    ``x / (1 + tolerance)`` and ``x / (1 - tolerance)``, so one prediction can be within it of every
    run only when the slowest run took at most ``(1 + tolerance) / (1 - tolerance)`` times the
    fastest (1.5 at 0.2). When they are further apart, the machine did not repeat the job well
    enough for the check, whatever the model predicts.

    Args:
        checks: :func:`compare_runs`' dicts; calibration points are left out.
        tolerance: the check's relative tolerance.

    Returns:
        One dict per rank count with two judged runs or more, in rank order: ``ranks``, ``runs``,
        ``fastest`` and ``slowest`` (their median steps, seconds), ``ratio`` (slowest / fastest),
        ``band`` (the widest ratio one prediction can cover; None, no limit, from a tolerance of 1 up),
        ``repeats`` (``ratio <= band``), ``median`` (the median of the runs' medians), ``predicted``
        and ``error`` (predicted / that median - 1).
    """
    band = (1 + tolerance) / (1 - tolerance) if tolerance < 1 else None
    by_count: dict[int, list[dict]] = {}
    for c in checks:
        if c["verdict"] != "calibration point":
            by_count.setdefault(c["ranks"], []).append(c)
    out = []
    for ranks in sorted(by_count):
        runs = by_count[ranks]
        if len(runs) < 2:
            continue
        medians = sorted(c["median"] for c in runs)
        middle = float(statistics.median(medians))
        out.append({"ranks": ranks, "runs": len(runs), "fastest": medians[0], "slowest": medians[-1],
                    "ratio": medians[-1] / medians[0], "band": band,
                    "repeats": band is None or medians[-1] / medians[0] <= band,
                    "median": middle, "predicted": runs[0]["predicted"],
                    "error": runs[0]["predicted"] / middle - 1})
    return out


def oversubscribed_note(check: dict, host_cores: int | None) -> str | None:
    """A note for a checked run that had more ranks than usable cores (None for any other run).

    Such ranks take turns on the cores. The model slows each rank's compute by ranks / cores
    (``--host-cores``) but does not predict the waits for partners the scheduler has not run yet,
    beyond what the calibration's cold calls catch: on the 2-core VM of docs/scaling.md five 4-rank
    runs in a row were up to 1.9 times apart and the prediction 30-60% from their median. The cores
    are those of the host that recorded the run's environment, where ``deep500lite run -n P`` starts
    every rank.
    """
    cores = check.get("usable_cores")
    if cores is None or check["ranks"] <= cores:
        return None
    hint = (f"; give --host-cores {cores} so that the prediction at least shares the cores" if host_cores is None
            else "")
    return (f"note: {check['file']} ran {check['ranks']} ranks on {cores} usable core{'s' if cores > 1 else ''}: "
            f"they took turns on the cores, and the model does not predict their waits for ranks the scheduler had "
            f"not run yet (docs/scaling.md, 'Where the 4-rank step goes'){hint}")
