"""Distributed recipe runs: ``deep500lite run RECIPE -n N``.

The command starts ``mpiexec -n N python -m mpi4py -m deep500lite.recipe.worker RECIPE ... --rank-job``
(:mod:`deep500lite.recipe.worker`); every rank builds the recipe (its ``distributed`` optimizer
over an MPI communicator), trains on its shard and writes ``OUT/rank<r>/results.json``. Then,
unless told not to, the same recipe runs on one rank for as many steps as each rank took
(``OUT/baseline/results.json``), which gives the 1-rank step time. :func:`aggregate` combines the
files into ``OUT/results.json``:

- ``per_rank``: each rank's median step time, its compute and communication parts, bytes sent
  per step, final accuracy and loss, and whether its acceptable metrics held;
- ``aggregate``: the slowest rank's step time (``step_time``: the summary of the steps after the
  warm-up of the rank with the largest median; ``slowest_rank`` names it), its communication time,
  the communication share, bytes per step over all ranks, the global batch and the job's
  throughput (global batch / the slowest rank's median step). In synchronous training every
  rank's step holds its wait for the others, so the slowest rank's step is the job's pace.
  ``step_time_per_step_max`` keeps the median over steps of the largest of the ranks' times in
  that step, the figure before 2026-11-27: when ranks run out of phase (more ranks than cores)
  it picks up whichever rank began each step earliest and overstates the job's step;
- ``baseline``, ``speedup`` (job throughput / 1-rank throughput) and ``scaling_efficiency``
  (speedup / N). Data parallelism is weak scaling (the batch per rank is fixed); a model-parallel
  scheme recorded in the results (``distributed.scheme``: spatial, pipeline, tensor, hybrid) splits
  the same global batch over the ranks, which is strong scaling; :func:`describe` says which.

The job passes when every rank's acceptable metrics hold. Every job has a job timeout and a
start-up timeout (:func:`deep500lite.lv3.launch.resolve_timeouts`); when the baseline fails or
times out, the N-rank results are still aggregated and written, without the scaling figures.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys

import numpy as np

from deep500lite.errors import UserError, format_choices
from deep500lite.recipe.parallelism import MODEL_SCHEMES

__all__ = ["DistributedRun", "aggregate", "run_distributed", "check_job", "run_job", "rank_command", "scaling_label",
           "DEFAULT_COMM_TIMEOUT"]

#: Seconds one communication may wait in a ``run -n`` job before the job ends with an error naming it.
DEFAULT_COMM_TIMEOUT = 300.0


@dataclasses.dataclass
class DistributedRun:
    """The outcome of :func:`run_distributed`.

    Attributes:
        passed: every rank's acceptable metrics held.
        results: the aggregated results dict (also written to ``OUT/results.json``).
        results_path: where it was written.
    """

    passed: bool
    results: dict
    results_path: str

    def lines(self) -> list[str]:
        """The per-rank table, the job's figures and the verdicts, for the terminal."""
        from deep500lite.recipe.parallel_training import describe_lines  # spatial/pipeline/tensor: each rank's split

        return describe(self.results) + describe_lines(self.results, self.results_path)


def rank_command(recipe: str, sets, seed: int, out: str, progress: str | None, max_steps: int | None = None) -> list:
    """The per-rank command line: the recipe worker under ``python -m mpi4py``."""
    cmd = [sys.executable, "-m", "mpi4py", "-m", "deep500lite.recipe.worker", recipe, "--seed", str(seed),
           "--out", out, "--progress", progress or "none", "--rank-job"]
    for text in sets:
        cmd += ["--set", text]
    if max_steps is not None:
        cmd += ["--max-steps", str(max_steps)]
    return cmd


def _read(path: str, what: str) -> dict:
    from deep500lite.recipe.results import read_results

    if not os.path.exists(path):
        raise UserError(f"The {what} wrote no results file: {path} is missing (its errors are printed above); a "
                        f"rank that finishes writes one. Received: no file at {path!r}")
    return read_results(path)


def run_distributed(recipe: str, ranks: int, out: str, *, sets=(), seed: int = 0, progress: str | None = "lines",
                    baseline: bool = True, mpiexec: str | None = None, timeout: float | None = None,
                    comm_timeout: float | None = DEFAULT_COMM_TIMEOUT, startup_timeout: float | None = None,
                    oversubscribe: bool = False, hosts=None) -> DistributedRun:
    """Run a recipe with a ``distributed`` component on ``ranks`` MPI ranks and aggregate.

    Args:
        recipe: the recipe file or bundled name (as for ``deep500lite run``).
        ranks: MPI ranks, at least 1.
        out: the results folder.
        sets: ``KEY=VALUE`` overrides of mutable keys.
        seed: the run seed (every rank uses it, so replicas start equal).
        progress: rank 0's progress display (``lines``, ``bar``, ``auto`` or None).
        baseline: also run the 1-rank baseline (for ``ranks > 1``) and compute the scaling
            efficiency.
        mpiexec: the launcher (default: beside this Python, else on PATH).
        timeout: seconds after which a job (the N-rank one, or the baseline) is killed (None:
            ``DEEP500LITE_JOB_TIMEOUT``, else 6 hours).
        comm_timeout: ``DEEP500LITE_COMM_TIMEOUT`` for the ranks (None: wait forever).
        startup_timeout: seconds every rank has to reach MPI initialisation (None:
            ``DEEP500LITE_STARTUP_TIMEOUT``, else 120); a rank that does not is named in the error.
        oversubscribe: allow more than 4 ranks per usable core.
        hosts: the :class:`~deep500lite.lv3.hosts.Hosts` to start the ranks on (None: this
            machine); the 1-rank baseline runs on the first of them. Every host must see ``out``
            (a shared file system), where each rank writes its results.

    Raises:
        UserError: a bad argument, or a job that failed or wrote no results.
    """
    from deep500lite.lv3.hosts import launcher_args
    from deep500lite.lv3.launch import (JobTimeout, RankFailure, StartupTimeout, check_ranks, find_mpiexec,
                                        oversubscription_note, resolve_timeouts, run_job)
    from deep500lite.recipe.results import write_results

    check_ranks(ranks, "-n/--ranks", oversubscribe, hosts)
    timeout, startup_timeout = resolve_timeouts(timeout, startup_timeout)
    launcher = find_mpiexec(mpiexec, "deep500lite run -n")
    env = dict(os.environ)
    if comm_timeout is not None:
        env["DEEP500LITE_COMM_TIMEOUT"] = str(comm_timeout)

    def job(n: int, folder: str, what: str, max_steps: int | None = None, shown: str | None = progress) -> None:
        cmd = [launcher, *launcher_args(hosts), "-n", str(n), *rank_command(recipe, sets, seed, folder, shown,
                                                                             max_steps)]
        try:
            rc = run_job(cmd, timeout=timeout, env=env, startup_timeout=startup_timeout, hosts=hosts)
        except StartupTimeout as exc:
            raise StartupTimeout(f"The {what} was killed: {exc}") from None
        except RankFailure as exc:
            raise RankFailure(f"The {what} failed: {exc}", exc.status, exc.traceback) from None
        except JobTimeout as exc:
            raise UserError(f"The {what} was killed: {exc}. Raise --timeout if it is just slow. "
                            f"Received: --timeout {timeout}") from None
        if rc != 0:
            raise UserError(f"The {what} failed; its ranks' errors are printed above (a job that works exits with "
                            f"status 0). Received: exit status {rc} from {' '.join(cmd)}")

    os.makedirs(out, exist_ok=True)
    print(f"training on {ranks} rank{'s' if ranks > 1 else ''} (mpiexec -n {ranks})"
          + (f" on {hosts.describe(ranks)}" if hosts is not None else ""), flush=True)
    note = oversubscription_note(ranks, "step", hosts)
    if note:
        print(note, flush=True)
    job(ranks, out, f"{ranks}-rank job")
    if ranks == 1:
        per_rank = [_read(os.path.join(out, "results.json"), "1-rank job")]
    else:
        per_rank = [_read(os.path.join(out, f"rank{r}", "results.json"), f"rank {r}") for r in range(ranks)]
    base = None
    if baseline and ranks > 1:
        steps = int(per_rank[0]["summaries"]["steps_done"])
        folder = os.path.join(out, "baseline")
        print(f"baseline: the same recipe on 1 rank for {steps} steps (the steps each rank took)", flush=True)
        try:
            job(1, folder, "1-rank baseline", max_steps=steps, shown=None)
            base = _read(os.path.join(folder, "results.json"), "1-rank baseline")
        except (UserError, JobTimeout, RankFailure) as exc:
            # The N-rank results are complete: keep them, without the scaling figures.
            write_results(os.path.join(out, "results.json"), aggregate(per_rank, None))
            raise type(exc)(f"The {ranks}-rank results were kept, without speedup and scaling efficiency, in "
                            f"{os.path.join(out, 'results.json')}, but: {exc}") from None
    results = aggregate(per_rank, base)
    path = os.path.join(out, "results.json")
    write_results(path, results)
    return DistributedRun(bool(results["passed"]), results, path)


def _median(summary) -> float:
    return float(summary["median"]) if summary else math.nan


def aggregate(per_rank: list[dict], baseline: dict | None = None) -> dict:
    """Combine the results dicts of every rank (and of the 1-rank baseline) into one.

    Args:
        per_rank: rank ``r``'s results dict at index ``r`` (from a recipe with ``distributed``).
        baseline: the 1-rank run's results dict, or None.

    Returns:
        Rank 0's results dict with ``passed`` over all ranks, ``verdicts`` per metric over all
        ranks, and ``distributed`` holding ``per_rank``, ``aggregate``, ``baseline``,
        ``speedup`` and ``scaling_efficiency`` (see the module documentation).
    """
    from deep500lite.recipe.results import jsonable
    from deep500lite.recipe.results import summary_of as _summary

    if not per_rank:
        raise UserError("aggregate needs the results of at least one rank. Received: none")
    for r, res in enumerate(per_rank):
        dist = res.get("distributed")
        if not dist:
            raise UserError(f"The results of rank {r} have no 'distributed' section: not a distributed recipe run; "
                            "aggregate takes the per-rank results of one `deep500lite run -n N`. Received: results "
                            f"with the sections {format_choices(sorted(res))}")
        if dist.get("rank") != r or dist.get("ranks") != len(per_rank):
            raise UserError(f"Results file {r} is rank {dist.get('rank')} of {dist.get('ranks')}; expected rank {r} "
                            f"of {len(per_rank)}: give every rank's results of one run, in rank order. "
                            f"Received: rank {dist.get('rank')} of {dist.get('ranks')}")
    p = len(per_rank)
    warmup = int(per_rank[0]["summaries"].get("warmup_steps", 0))
    rows = []
    for r, res in enumerate(per_rank):
        s = res["summaries"]
        rows.append({"rank": r, "step_time": _median(s.get("step_time")),
                     "compute_time": _median(s.get("compute_time")),
                     "communication_time": _median(s.get("communication_time")),
                     "bytes_per_step": _median(s.get("bytes_sent")),
                     "bytes_sent": res["distributed"]["bytes_sent"],
                     "steps": s.get("steps_done"), "final_test_accuracy": s.get("final_test_accuracy"),
                     "final_train_loss": s.get("final_train_loss"), "passed": bool(res.get("passed"))})
    steps = [res["samples"]["steps"] for res in per_rank]
    n = min(len(s) for s in steps)

    def per_step(key, combine):
        return [combine([s[i].get(key, math.nan) for s in steps]) for i in range(warmup, n)]

    # Not the median over steps of the ranks' largest time: that also picks up whichever rank began
    # each step earliest, which ranks running out of phase (more ranks than cores) turn into a bias.
    medians = [row["step_time"] if row["step_time"] is not None and math.isfinite(row["step_time"]) else -math.inf
               for row in rows]
    slowest_rank = int(np.argmax(medians))
    own = per_rank[slowest_rank]["summaries"]
    samples = per_step("samples", sum)
    job_bytes = per_step("bytes_sent", sum)
    step_summary = own.get("step_time")
    global_batch = int(np.median(samples)) if samples else None
    throughput = (global_batch / step_summary["median"]) if step_summary and global_batch else None
    fraction = [c / t for c, t in zip(per_step("communication_time", np.mean), per_step("step_time", np.mean))
                if t > 0 and math.isfinite(c)]
    agg = {"steps": n, "warmup_steps": warmup, "step_time": step_summary, "slowest_rank": slowest_rank,
           "step_time_per_step_max": _summary(per_step("step_time", max)),
           "communication_time": own.get("communication_time"),
           "communication_fraction": float(np.median(fraction)) if fraction else None,
           "bytes_per_step": _summary(job_bytes), "bytes_sent": sum(row["bytes_sent"] for row in rows),
           "global_batch_size": global_batch, "samples_per_second": throughput}
    base = speedup = efficiency = None
    if baseline is not None:
        bs = baseline["summaries"]
        b_steps = baseline["samples"]["steps"][int(bs.get("warmup_steps", 0)):]
        b_time = bs.get("step_time")
        b_batch = int(np.median([s["samples"] for s in b_steps])) if b_steps else None
        b_throughput = (b_batch / b_time["median"]) if b_time and b_batch else None
        base = {"steps": bs.get("steps_done"), "step_time": b_time, "batch_size": b_batch,
                "samples_per_second": b_throughput}
        if throughput and b_throughput:
            speedup = throughput / b_throughput
            efficiency = speedup / p
    verdicts = []
    for i, v in enumerate(per_rank[0].get("verdicts", [])):
        values = [res["verdicts"][i].get("measured") for res in per_rank]
        passes = [res["verdicts"][i].get("passed") for res in per_rank]
        judged = v.get("required") is not None
        verdicts.append({**v, "measured": values[0], "per_rank": values,
                         "failed_ranks": [r for r, ok in enumerate(passes) if judged and not ok],
                         "passed": all(passes) if judged else None})
    out = dict(per_rank[0])
    out["verdicts"] = verdicts
    out["passed"] = all(row["passed"] for row in rows)
    out["error"] = next((res.get("error") for res in per_rank if res.get("error")), None)
    out["distributed"] = {**per_rank[0]["distributed"], "rank": None, "per_rank": rows, "aggregate": agg,
                          "baseline": base, "speedup": speedup, "scaling_efficiency": efficiency,
                          "rank_files": [f"rank{r}/results.json" for r in range(p)] if p > 1 else None}
    return jsonable(out)


def _fmt_bytes(n) -> str:
    if n is None or (isinstance(n, float) and not math.isfinite(n)):
        return "n/a"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def _rank_of(agg: dict) -> str:
    r = agg.get("slowest_rank")  # absent from files written before 2026-11-27
    return "" if r is None else f" (rank {r})"


def scaling_label(distributed: dict) -> str:
    """How a job's speedup scales, from the scheme recorded in its ``distributed`` results section.

    Returns:
        ``"strong scaling: ..."`` for a model-parallel scheme (spatial, pipeline, tensor, hybrid:
        the ranks split one global batch), else ``"weak scaling: ..."`` (data parallelism: every
        rank steps its own batch).
    """
    scheme = distributed.get("scheme")
    if scheme in MODEL_SCHEMES:
        return f"strong scaling: the {scheme} ranks split one global batch"
    return "weak scaling: batch per rank fixed"


def describe(results: dict) -> list[str]:
    """Terminal lines for an aggregated results dict: the per-rank table, the job and the verdicts."""
    from deep500lite.metrics.tables import format_seconds, format_table

    def sec(v):
        return format_seconds(v) if v is not None and math.isfinite(v) else "n/a"

    d = results["distributed"]
    rows = [[row["rank"], sec(row["step_time"]), sec(row["compute_time"]), sec(row["communication_time"]),
             _fmt_bytes(row["bytes_per_step"]),
             "n/a" if row["final_test_accuracy"] is None else f"{row['final_test_accuracy']:.2f}%",
             "PASS" if row["passed"] else "FAIL"] for row in d["per_rank"]]
    p = len(d["per_rank"])
    ranks = "rank 0" if p == 1 else f"ranks 0..{p - 1}"
    lines = [format_table(["rank", "step (median)", "compute", "communication", "sent/step", "test acc", "metrics"],
                          rows)]
    agg = d["aggregate"]
    st = agg["step_time"]
    if st:
        lines.append(f"job: {p} rank{'s' if p > 1 else ''}, {d['optimizer'].rsplit('.', 1)[-1]} over "
                     f"{d['communicator'].rsplit('.', 1)[-1]}; slowest rank's step{_rank_of(agg)} {sec(st['median'])} "
                     f"[{sec(st['ci_low'])}, {sec(st['ci_high'])}], communication "
                     f"{100 * (agg['communication_fraction'] or 0):.1f}% of it; "
                     f"{_fmt_bytes(_median(agg['bytes_per_step']))} sent per step (all ranks); global batch "
                     f"{agg['global_batch_size']}, {agg['samples_per_second']:.4g} samples/s")
    base = d.get("baseline")
    if base and base.get("step_time"):
        lines.append(f"1-rank baseline: step {sec(base['step_time']['median'])} (batch {base['batch_size']}), "
                     f"{base['samples_per_second']:.4g} samples/s; speedup {d['speedup']:.3g}x on "
                     f"{len(d['per_rank'])} ranks, scaling efficiency {100 * d['scaling_efficiency']:.1f}% "
                     f"({scaling_label(d)})")
    for v in results.get("verdicts", []):
        values = ", ".join("n/a" if x is None else f"{x:.4g}" for x in v["per_rank"])
        if v.get("required") is None:
            lines.append(f"{v['metric']}: {values} ({ranks}; measured only)")
            continue
        sign = ">=" if v["direction"] == "higher" else "<="
        verdict = "PASS" if v["passed"] else f"FAIL (ranks {', '.join(map(str, v['failed_ranks']))})"
        lines.append(f"{v['metric']}: {values} on {ranks}, required {sign} "
                     f"{v['required']:g}: {verdict}")
    if results.get("error"):
        lines.append(f"training stopped: {results['error']}")
    return lines


def check_job(resolved, ranks: int) -> None:
    """Refuse a multi-rank job of a recipe without a ``distributed`` component, or with a bad scheme or option."""
    from deep500lite.recipe.parallelism import check_distributed

    if resolved.config.get("distributed") is None:
        raise UserError(f"-n {ranks} needs a recipe with a 'distributed' component (a distributed optimizer such "
                        f"as 'ConsistentDecentralized'; see recipes/digits_mlp_distributed.py). Received: recipe "
                        f"{resolved.name} has none")
    check_distributed(resolved.config)  # a bad scheme or option: one line before any rank starts


def run_job(resolved, recipe: str, ranks: int, out: str, *, sets=(), seed: int = 0, progress: str | None = "lines",
            baseline: bool = True, mpiexec: str | None = None, timeout: float | None = None,
            comm_timeout: float | None = None, startup_timeout: float | None = None,
            oversubscribe: bool = False, hosts=None) -> tuple:
    """``deep500lite run -n N``: check the job, run it in a staging folder swapped in at the end, read it back.

    What refuses the job (a recipe without a ``distributed`` component, a bad scheme or option, a bad
    rank count or timeout, no ``mpiexec``) is checked before a rank starts or the results folder is
    touched. The job writes into a staging folder that replaces ``out`` at the end (as a one-process
    run does), so an interrupted or failed job leaves the previous results whole; a job whose ranks
    finished but whose baseline failed has written its results, which are swapped in before its
    error is raised (naming ``out``, not the staging folder).

    Args:
        resolved: the resolved recipe (its ``distributed`` component is checked).
        recipe: the recipe's path or name, as the ranks load it.
        ranks: the number of MPI ranks.
        out: the results folder.
        sets, seed, progress, baseline, mpiexec, timeout, comm_timeout, startup_timeout, oversubscribe, hosts:
            as for :func:`run_distributed` (``comm_timeout`` None: :data:`DEFAULT_COMM_TIMEOUT`).

    Returns:
        ``(DistributedRun, lines)``: the job and its report lines, with paths under ``out``.
    """
    from deep500lite.errors import Deep500Error
    from deep500lite.lv3.launch import check_ranks, find_mpiexec, resolve_timeouts
    from deep500lite.recipe.staging import staged_folder

    check_job(resolved, ranks)
    check_ranks(ranks, "-n/--ranks", oversubscribe, hosts)
    resolve_timeouts(timeout, startup_timeout)
    find_mpiexec(mpiexec, "deep500lite run -n")
    kept = None
    with staged_folder(out) as work:
        try:
            result = run_distributed(recipe, ranks, work, sets=sets, seed=seed, progress=progress,
                                     baseline=baseline, mpiexec=mpiexec, timeout=timeout,
                                     comm_timeout=DEFAULT_COMM_TIMEOUT if comm_timeout is None else comm_timeout,
                                     startup_timeout=startup_timeout, oversubscribe=oversubscribe, hosts=hosts)
            lines = result.lines()  # reads the rank folders: before they move
        except Deep500Error as exc:
            if not os.path.isfile(os.path.join(work, "results.json")):
                raise
            kept = exc
    if kept is not None:
        message = str(kept).replace(work, os.path.abspath(out))
        try:
            renamed = type(kept)(message)
        except Exception:  # noqa: BLE001 - an error class with another constructor is raised as it was
            raise kept from None
        raise renamed from None
    return result, [line.replace(work, os.path.abspath(out)) for line in lines]
