"""``deep500lite bench distributed``: distributed training schemes against the engines users would otherwise pick.

Each row is one MPI job on this machine that times two pieces of work in alternation, each with
its own warm-up, and reports the ratio deep500lite/native with its 95% CI (the median of the
per-pair ratios, as ``bench overhead``), checked against the row's target. Before timing, the job
checks that both sides compute the same thing; a row whose check fails gets the verdict
``wrong`` whatever its times.

The rows live in :data:`ROWS`, a registry: a row is a :class:`DistributedRow` naming its worker
module (run on every rank as ``mpiexec -n P python -m mpi4py -m MODULE CONFIG``) and the options
it takes. A new row (spatial against sample parallelism, a pipeline's bubble) is one worker module
and one :func:`register_row` call; the worker reads the JSON configuration written here and, on
rank 0, writes the JSON that :func:`worker_result` describes.

Built-in rows:

- ``ddp`` (:mod:`deep500lite.bench.distributed_ddp`): a deep500lite data-parallel training step
  (``ConsistentDecentralized`` over MPI, overlapped gradient buckets) against torch
  ``DistributedDataParallel`` over gloo, on the same network, batch and optimizer.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
import tempfile

from deep500lite.errors import JobTimeout, RankFailure, StartupTimeout, UserError, format_choices
from deep500lite.lv3.launch import find_mpiexec, run_job
from deep500lite.metrics.timing import Measurement, PairedMeasurement

__all__ = ["DistributedRow", "DistributedResult", "ROWS", "register_row", "run_distributed_benchmark",
           "worker_result", "DEFAULT_ROWS"]


@dataclasses.dataclass(frozen=True)
class DistributedRow:
    """One row of ``bench distributed``.

    Attributes:
        name: the row's name on the command line (``--rows``).
        what: what is measured, one line for the table.
        target: the largest acceptable ratio deep500lite/native.
        worker: the module every rank runs (``python -m mpi4py -m WORKER CONFIG``).
        options: the option names the row reads from the command line (passed in its
            configuration; the others are left out).
        default_ranks: the rank count when none is given.
    """

    name: str
    what: str
    target: float
    worker: str
    options: tuple = ()
    default_ranks: int = 2


#: name -> :class:`DistributedRow`, in the order the rows print.
ROWS: dict[str, DistributedRow] = {}


def register_row(row: DistributedRow) -> DistributedRow:
    """Add ``row`` to :data:`ROWS` (replacing a row of the same name); returns it."""
    if not isinstance(row, DistributedRow):
        raise UserError(f"register_row takes a DistributedRow. Received: {type(row).__name__}")
    ROWS[row.name] = row
    return row


register_row(DistributedRow(
    "ddp", "data-parallel step: deep500lite run -n P (ConsistentDecentralized) / torch DDP (gloo)", 1.10,
    "deep500lite.bench.distributed_ddp",
    options=("model", "batch_size", "bucket_mb", "communicator", "max_time", "min_pairs", "warmup", "seed")))

#: The rows run when none are named.
DEFAULT_ROWS = ("ddp",)


@dataclasses.dataclass
class DistributedResult:
    """One row's outcome.

    Attributes:
        row: the :class:`DistributedRow`.
        ranks: the rank count.
        paired: the :class:`~deep500lite.metrics.timing.PairedMeasurement` (``a`` deep500lite,
            ``b`` native; each time the slowest rank's).
        checked: whether both sides computed the same thing (the row's check, such as equal
            first-step gradients).
        check: what was checked and the largest differences found.
        detail: the row's notes for the table (configuration, buckets overlapped, ...).
        extra: everything else the worker reported.
        failed: why the row's job failed (then ``paired`` is None), else None.
    """

    row: DistributedRow
    ranks: int
    paired: PairedMeasurement | None
    checked: bool
    check: str
    detail: str
    extra: dict
    failed: str | None = None

    @property
    def verdict(self) -> str:
        """``failed`` (the job failed), ``wrong`` (the sides differ), ``meets`` (CI upper bound <= target),
        ``likely`` (median <= target) or ``misses``."""
        if self.failed is not None:
            return "failed"
        if not self.checked:
            return "wrong"
        r = self.paired.ratio
        if r.ci_high <= self.row.target:
            return "meets"
        return "likely" if r.median <= self.row.target else "misses"

    def to_dict(self) -> dict:
        """JSON-ready form with every raw time."""
        if self.paired is None:
            return {"row": self.row.name, "what": self.row.what, "ranks": self.ranks, "target": self.row.target,
                    "verdict": self.verdict, "failed": self.failed}
        return {"row": self.row.name, "what": self.row.what, "ranks": self.ranks, "target": self.row.target,
                "verdict": self.verdict, "checked": self.checked, "check": self.check, "detail": self.detail,
                "deep500lite": self.paired.a.to_dict(), "native": self.paired.b.to_dict(),
                "ratios": list(self.paired.ratios), "ratio": self.paired.ratio.to_dict(), "extra": self.extra}


def worker_result(a_times, b_times, warmup: int, stopped_by: str, checked: bool, check: str, detail: str,
                  **extra) -> dict:
    """The JSON a row's worker writes on rank 0 (the only contract between a worker and this module).

    Args:
        a_times, b_times: seconds of each deep500lite and native step, pair by pair (the slowest rank's).
        warmup: untimed steps of each side before the pairs.
        stopped_by: why the timing stopped (``"ci"``, ``"max_time"``, ``"max_pairs"``).
        checked: whether both sides computed the same thing.
        check: what was checked, with the largest differences.
        detail: notes for the table.
        extra: anything else JSON can hold.
    """
    return {"a": [float(t) for t in a_times], "b": [float(t) for t in b_times], "warmup": int(warmup),
            "stopped_by": stopped_by, "checked": bool(checked), "check": check, "detail": detail, "extra": extra}


def _parse_result(row: DistributedRow, ranks: int, data: dict) -> DistributedResult:
    a = Measurement("deep500lite", tuple(data["a"]), data["warmup"], data["stopped_by"])
    b = Measurement("native", tuple(data["b"]), data["warmup"], data["stopped_by"])
    return DistributedResult(row, ranks, PairedMeasurement(a, b), data["checked"], data["check"], data["detail"],
                             data.get("extra", {}))


def run_distributed_benchmark(rows=DEFAULT_ROWS, ranks: int | None = None, options: dict | None = None,
                              threads: int | None = None, mpiexec: str | None = None,
                              job_timeout: float | None = 1800, progress=None) -> list[DistributedResult]:
    """Run each row's MPI job and return its result.

    Args:
        rows: names from :data:`ROWS`.
        ranks: ranks of every job (None: each row's ``default_ranks``); at least 2.
        options: option name -> value; each row receives those it lists in ``options``.
        threads: intra-op threads per rank (``OMP_NUM_THREADS``; default: CPU count // ranks, at least 1).
        mpiexec: the MPI launcher (default: the one beside this Python, else PATH).
        job_timeout: seconds after which a job is killed.
        progress: optional ``callable(str)`` told what runs.

    Returns:
        One :class:`DistributedResult` per row; a row whose job failed has ``failed`` set (its
        ranks' errors are printed above) and the next rows still run.

    Raises:
        UserError: an unknown row, fewer than 2 ranks, or no ``mpiexec``.
    """
    rows = list(rows)
    unknown = [r for r in rows if r not in ROWS]
    if unknown or not rows:
        raise UserError(f"bench distributed has the rows {format_choices(ROWS)}. Received: {format_choices(rows)}")
    if ranks is not None and (isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 2):
        raise UserError(f"bench distributed needs at least 2 ranks (-n). Received: {ranks!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise UserError(f"--threads must be a whole number >= 1. Received: {threads!r}")
    options = dict(options or {})
    configs = {}
    for name in rows:  # bad options: one clear error before any job starts
        row = ROWS[name]
        configs[name] = {k: options[k] for k in row.options if options.get(k) is not None}
        check = getattr(importlib.import_module(row.worker), "check_config", None)
        if check is not None:
            check(configs[name])
    launcher = find_mpiexec(mpiexec, "bench distributed")
    results = []
    with tempfile.TemporaryDirectory(prefix="d5-distributed-") as tmp:
        for name in rows:
            row = ROWS[name]
            p = ranks or row.default_ranks
            output = os.path.join(tmp, f"{name}.json")
            config = dict(configs[name], output=output)
            path = os.path.join(tmp, f"{name}-config.json")
            with open(path, "w") as f:
                json.dump(config, f)
            env = dict(os.environ)
            env["OMP_NUM_THREADS"] = str(threads or max(1, (os.cpu_count() or 1) // p))
            cmd = [launcher, "-n", str(p), sys.executable, "-m", "mpi4py", "-m", row.worker, path]
            if progress:
                progress(f"{name}: {p} ranks, {env['OMP_NUM_THREADS']} thread(s) each: {row.what}")
            try:
                rc = run_job(cmd, timeout=job_timeout, env=env)
                why = None if rc == 0 and os.path.exists(output) else (
                    f"exit status {rc} from {' '.join(cmd)} (its ranks' errors are printed above)")
            except (JobTimeout, StartupTimeout, RankFailure) as exc:  # the row fails; the other rows still run
                why = str(exc)
            if why is not None:
                results.append(DistributedResult(row, p, None, False, "", "", {}, failed=why))
                continue
            with open(output) as f:
                results.append(_parse_result(row, p, json.load(f)))
    return results
