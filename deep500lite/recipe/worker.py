"""The recipe worker: one run of a recipe in this process, the unit ``compare`` and ``run -n`` start.

::

    python -m deep500lite.recipe.worker RECIPE --out DIR [--set KEY=VALUE ...] [--seed N]
        [--progress auto|bar|lines|none] [--divergence] [--rank-job [--max-steps N]]

:func:`deep500lite.recipe.compare.run_comparison` starts one worker per framework and run, each
in a fresh process; :func:`deep500lite.recipe.distributed.run_distributed` starts one per MPI
rank (``mpiexec -n N python -m mpi4py -m deep500lite.recipe.worker ... --rank-job``). A worker
trains the recipe once and writes ``DIR/results.json`` (``DIR/rank<r>/`` on ``P > 1`` ranks).

A single run prints what ``deep500lite run`` prints (:func:`run_single`, which the CLI calls in
its own process) and exits 0 when every acceptable metric holds, 1 when one does not, and 2 on a
:class:`~deep500lite.errors.Deep500Error`, printed in one line without a traceback (any other
error is a bug: its traceback, then one line ``internal error: ...``, exit status 1). A rank job
(:func:`run_rank`) prints nothing of its own: the parent judges the aggregated results; an error
on any rank names the rank and ends the whole MPI job.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from deep500lite.errors import Deep500Error
from deep500lite.recipe.loading import load_recipe, parse_set
from deep500lite.recipe.resolution import ResolvedRecipe
from deep500lite.recipe.running import RecipeRun, train_recipe
from deep500lite.recipe.staging import staged_folder
from deep500lite.utils import nonnegative_int, positive_int

__all__ = ["main", "run_single", "run_rank", "header_line", "PROGRESS"]

#: The ``--progress`` choices.
PROGRESS = ("auto", "bar", "lines", "none")

_PREFIX = "deep500lite run"


def header_line(resolved: ResolvedRecipe, seed: int, sets: Sequence[str] = ()) -> str:
    """The first line a run prints: the recipe, its framework, the seed and the ``--set`` overrides."""
    return f"recipe {resolved.name}: {resolved.framework}, seed {seed}" + (f", set {', '.join(sets)}" if sets else "")


def run_single(resolved: ResolvedRecipe, seed: int, out, *, sets: Sequence[str] = (), progress: str | None = None,
               divergence: bool = False, mllog=None, events: Sequence = (), plots: bool = False,
               staged: bool = False, mlperf: dict | None = None) -> RecipeRun:
    """Train a resolved recipe once and print what ``deep500lite run`` prints.

    Prints :func:`header_line`, the progress, one line per acceptable metric, the first step's
    differences from the reference executor (with ``divergence``) and where the results went.

    Args:
        resolved: the recipe.
        seed: the run seed.
        out: the results folder.
        sets: the ``--set`` texts, for the first line.
        progress: as for :func:`~deep500lite.recipe.running.train_recipe`.
        divergence: also measure the first step against the reference executor.
        mllog: a file for an MLPerf training log, or None (a file inside ``out`` is staged with it); it
            is checked with mlperf-logging's compliance checker when that is installed.
        mlperf: the log's submission fields (:func:`deep500lite.recipe.mlperf.submission_fields`).
        events: more training events.
        plots: also write ``loss.png`` and ``accuracy.png`` to ``out``.
        staged: write every output into a staging folder that replaces ``out`` whole at the end
            (:func:`deep500lite.recipe.staging.staged_folder`), so an interrupted run leaves the old
            results as they were.

    Returns:
        The :class:`~deep500lite.recipe.running.RecipeRun`.
    """
    print(header_line(resolved, seed, sets), flush=True)

    def train(folder):
        log = mllog
        if mllog is not None and folder != out and _inside(mllog, out):
            log = os.path.join(folder, os.path.relpath(os.path.abspath(mllog), os.path.abspath(out)))
        more = list(events)
        if plots:
            from deep500lite.lv2.events import PlotWriter

            more.append(PlotWriter(folder, target=resolved.accuracy_target(), label=_variant_label(resolved)))
        run = train_recipe(resolved, seed, progress=progress, out=folder, mllog=log, divergence=divergence,
                           events=more, mlperf=mlperf)
        if log is not None:
            checked[0] = _compliance_line(log)
        return run

    checked = [None]

    if staged and out is not None:
        with staged_folder(out) as work:
            result = train(work)
        result.results_path = os.path.join(os.fspath(out), "results.json")
    else:
        result = train(out)
    for line in result.lines():
        print(line)
    div = result.results.get("divergence")
    if div and div.get("error"):
        print(f"first step vs {div['reference']}: not measured ({div['error']})")
    elif div and not div.get("is_reference"):
        print(f"first step vs {div['reference']}: max |outputs diff| {div['outputs']:.3g}, "
              f"max |gradients diff| {div['gradients']:.3g} ({div['worst_gradient']})")
    if checked[0]:
        print(checked[0])
    print(f"results: {result.results_path}" + (f"; MLPerf log: {mllog}" if mllog else ""), flush=True)
    return result


def _variant_label(resolved: ResolvedRecipe) -> str:
    """The executor variant's spelling (``torch:compile``), or the framework key: the plots' colour key."""
    ex = resolved.config.get("executor")
    if isinstance(ex, str) and ":" in ex:
        from deep500lite.registry import canonical_executor_spelling

        return canonical_executor_spelling(ex)
    return resolved.framework


def _compliance_line(log) -> str:
    """One line: the MLPerf log checked by mlperf-logging's compliance checker (or why it was not)."""
    import importlib.util

    if importlib.util.find_spec("mlperf_logging") is None:
        return "MLPerf compliance: not checked (pip install 'deep500lite[mlperf]' brings the checker)"
    from deep500lite.recipe.mlperf import check_log

    report = check_log(log)
    line = report.line()
    if not report.passed:
        line += ": " + " | ".join(" ".join(m.split())[:300] for m in report.messages[:3])
    return line


def _inside(path, folder) -> bool:
    path, folder = os.path.abspath(os.fspath(path)), os.path.abspath(os.fspath(folder))
    return os.path.commonpath([path, folder]) == folder


def run_rank(resolved: ResolvedRecipe, seed: int, out, *, progress: str | None = None,
             max_steps: int | None = None) -> int:
    """One rank of a ``run -n`` job (under ``python -m mpi4py``): train and write the results.

    Under deep500lite's launcher (:mod:`deep500lite.lv3.rank_start`), a Deep500Error is reported
    to it in one line (:func:`~deep500lite.lv3.rank_start.report_failure`), which names the rank
    and ends the job, and any other error propagates (the launcher prints its traceback once).
    Under another launcher, any error ends every rank of the job (``MPI.COMM_WORLD.Abort(2)``)
    after one line naming this rank and the error (with the traceback when it is not a
    Deep500Error), so no rank is left waiting for a dead peer.

    Returns:
        0 (2 after a reported Deep500Error); the parent judges the ranks' results.
    """
    from deep500lite.lv2.events import StepBudgetStop
    from deep500lite.lv3.rank_start import report_failure

    try:
        events = [StepBudgetStop(max_steps)] if max_steps else []
        train_recipe(resolved, seed, progress=progress, out=out, events=events)
    except Deep500Error as exc:
        if report_failure(str(exc)):
            return 2
        _abort_job(exc)
    except BaseException as exc:  # noqa: BLE001 - any failure must end every rank, not leave them waiting
        from deep500lite.lv3.rank_start import is_watched

        if is_watched():
            raise  # the launcher watches: it names the rank and prints the traceback once
        _abort_job(exc)
    return 0


def _abort_job(exc: BaseException) -> None:
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    detail = str(exc) if not isinstance(exc, KeyboardInterrupt) else "interrupted"
    print(f"{_PREFIX}: rank {world.Get_rank()} of {world.Get_size()}: error: {type(exc).__name__}: "
          f"{detail}", file=sys.stderr, flush=True)
    if not isinstance(exc, (Deep500Error, KeyboardInterrupt)):
        import traceback

        traceback.print_exc()
    world.Abort(2)


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line and exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The worker's argument parser."""
    p = _Parser(prog="python -m deep500lite.recipe.worker",
                description="Run one recipe once in this process and write DIR/results.json (what deep500lite "
                            "compare and deep500lite run -n start; use deep500lite run yourself).")
    p.add_argument("recipe", metavar="RECIPE", help="a recipe file (.py) or a bundled recipe name")
    p.add_argument("--out", metavar="DIR", required=True, help="the folder for results.json, epochs.csv, steps.csv")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="change a MUTABLE key (repeatable), as for deep500lite run")
    p.add_argument("--seed", type=nonnegative_int, default=0, metavar="N", help="the run seed (default 0)")
    p.add_argument("--progress", choices=PROGRESS, default="auto", help="progress display (default auto)")
    p.add_argument("--divergence", action="store_true",
                   help="also record the first step's differences from the reference executor")
    p.add_argument("--rank-job", action="store_true",
                   help="one rank of an MPI job (under python -m mpi4py): an error ends every rank")
    p.add_argument("--max-steps", type=positive_int, default=None, metavar="N",
                   help="with --rank-job: stop training after N steps (the 1-rank baseline of run -n)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the worker; returns the exit status (0 passed, 1 a metric failed, 2 a Deep500Error)."""
    args = build_parser().parse_args(argv)
    progress = None if args.progress == "none" else args.progress
    try:
        resolved = load_recipe(args.recipe).resolve(dict(parse_set(text) for text in args.sets))
        if args.rank_job:
            return run_rank(resolved, args.seed, args.out, progress=progress, max_steps=args.max_steps)
        result = run_single(resolved, args.seed, args.out, sets=args.sets, progress=progress,
                            divergence=args.divergence)
    except Deep500Error as exc:
        from deep500lite.lv3.rank_start import report_failure

        # a rank of a watched job: the launcher names the rank and shows the line once for the job
        if not (args.rank_job and report_failure(str(exc))):
            print(f"{_PREFIX}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{_PREFIX}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - a bug: the traceback for the log, then one line to end it
        from deep500lite.lv3.rank_start import is_watched

        if args.rank_job and is_watched():
            raise  # the launcher names the rank and prints the traceback once for the job
        import traceback

        traceback.print_exc()
        print(f"{_PREFIX}: internal error: {type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
