"""Comparing frameworks on one recipe: runs in fresh processes, then statistics over raw samples.

:func:`run_comparison` runs the recipe worker, ``python -m deep500lite.recipe.worker RECIPE --set
executor=FW`` (:mod:`deep500lite.recipe.worker`), once per framework (``repeats`` times each,
interleaved: all frameworks once, then again; or ``runs`` times each with the seeds ``seed``,
``seed + 1``, ...), every run in a new Python process, so no framework's threads, caches or
allocator state touch another's measurement. Each run writes its folder whole: into a staging
folder swapped in at its end (:mod:`deep500lite.recipe.staging`), so a run that fails or is
interrupted leaves the framework's previous results as they were; the worker dies with the
comparison (Ctrl-C, SIGTERM, even SIGKILL of it). :func:`compare_results` reads the results files
back and computes, per framework:

- final test accuracy, time to the recipe's target accuracy (compilation left out) and, over
  three or more seeds, MLPerf's score of it (the fastest and slowest runs dropped, the mean of
  the rest), training throughput, peak memory;
- the step latency: the median of every training step's time (``optimizer.step`` with the
  device synchronized; the first step of each run left out as warm-up), with its exact
  distribution-free 95% confidence interval (order statistics of the binomial, see
  :mod:`deep500lite.metrics.statistics`), pooled over repeats;
- the largest difference of the first step's outputs and gradients from the reference executor;
- the compile time (``compile_seconds`` of the results file: the executor's tracing and
  compilation over the run, median over repeats), which step times leave out.

Frameworks may be variant spellings (``torch:compile``, ``tensorflow:xla``, ``onnxruntime:O0``;
:data:`deep500lite.registry.EXECUTOR_VARIANTS`): each is its own row, labelled by its spelling.

Step times are compared with the two-sided Mann–Whitney U test (``scipy.stats.mannwhitneyu``),
each framework against the fastest one (lowest median). The p-values are adjusted for the
number of comparisons with Holm's step-down method; a difference is called significant when the
adjusted p-value is below ``alpha`` (0.05), otherwise the two are indistinguishable at that level.
The test assumes independent samples; consecutive steps of one run are not strictly independent
(caches, clock changes, other load), so more repeats (``--repeats``) give more trustworthy
p-values than more steps.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import Sequence

from deep500lite.errors import FrameworkNotAvailableError, UserError, format_choices
from deep500lite.metrics.statistics import holm

__all__ = ["run_comparison", "compare_results", "mann_whitney", "holm", "group_label", "ALPHA", "GROUP_BY"]

#: Significance level of the step-time tests.
ALPHA = 0.05
#: What results can be grouped by (``report --group-by``); ``framework`` is the executor variant.
GROUP_BY = ("framework", "label", "commit", "machine")


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> dict:
    """Two-sided Mann–Whitney U test of two samples (``scipy.stats.mannwhitneyu``).

    Returns:
        ``{"u": U of a, "p": p-value, "effect": U / (len(a) * len(b))}``: ``effect`` is the
        probability that a random step of ``a`` takes longer than one of ``b`` (ties count half).
    """
    try:
        from scipy.stats import mannwhitneyu
    except ImportError as exc:
        raise FrameworkNotAvailableError("The comparison's significance tests need scipy, which is not installed: "
                                         "pip install scipy (or pip install 'deep500lite[stats]')") from exc
    if len(a) < 1 or len(b) < 1:
        raise UserError("mann_whitney needs samples on both sides (at least one each). "
                        f"Received: {len(a)} and {len(b)} samples")
    res = mannwhitneyu(a, b, alternative="two-sided")
    return {"u": float(res.statistic), "p": float(res.pvalue), "effect": float(res.statistic) / (len(a) * len(b))}


def group_label(results: dict, several_recipes: bool, by: str = "framework", several_frameworks: bool = True) -> str:
    """The label a results file is grouped under: its executor variant or framework (with the recipe
    when several differ).

    With ``by`` = ``label``, ``commit`` or ``machine``, the file's label, git commit (12 digits) or
    machine (:func:`deep500lite.results.extract.identity`) comes first, then `` / FRAMEWORK`` when
    ``several_frameworks``: ``baseline / torch`` against ``candidate / torch``.
    """
    fw = results.get("executor_variant") or results.get("framework") or "?"
    name = (results.get("recipe") or {}).get("name", "recipe")
    if by != "framework":
        if by not in GROUP_BY:
            raise UserError(f"Results group by {format_choices(GROUP_BY)}. Received: {by!r}")
        from deep500lite.results.extract import identity

        value = identity(results)[{"label": "label", "commit": "git_commit", "machine": "machine"}[by]]
        value = (value[:12] if by == "commit" else value) if value else f"(no {by})"
        fw = f"{value} / {fw}" if several_frameworks else value
    return f"{name}/{fw}" if several_recipes else fw


def _median(values):
    kept = sorted(v for v in values if v is not None)
    if not kept:
        return None
    n = len(kept)
    return kept[n // 2] if n % 2 else (kept[n // 2 - 1] + kept[n // 2]) / 2


def compare_results(results: Sequence[dict], alpha: float = ALPHA, group_by: str = "framework") -> dict:
    """Statistics of several runs, grouped by framework.

    Args:
        results: results dicts (:func:`deep500lite.recipe.results.read_results`); repeats of one
            framework are pooled.
        alpha: significance level.
        group_by: ``framework`` (the executor variant), or ``label``, ``commit`` or ``machine``
            (with the framework when several differ; :func:`group_label`).

    Returns:
        ``{"rows": [...], "tests": [...], "fastest": label, "alpha": alpha, "target": percent}``.
        Each row: ``label``, ``framework``, ``runs``, ``passed``, ``final_test_accuracy``,
        ``time_to_accuracy`` (seconds, compilation left out; the median over runs, None if one did
        not reach it or without a target), ``times_to_accuracy`` (each run's), ``seeds`` (how many
        different run seeds), ``time_to_accuracy_score`` (MLPerf's score over three or more seeds:
        :func:`deep500lite.recipe.mlperf.mlperf_score`; else None), ``throughput``,
        ``step_time`` (a summary dict of the pooled step times), ``step_times`` (the pooled raw
        samples), ``peak_memory_bytes``, ``divergence_outputs``, ``divergence_gradients``,
        ``reference`` (what the divergence is against), ``errors``, ``compile_seconds`` (median
        over the runs; None when no file records it), ``executor_options``. Each test: ``label``,
        ``against``, ``u``, ``p``, ``p_adjusted``, ``effect``, ``ratio`` (median over the
        fastest's median), ``significant``.
    """
    from deep500lite.metrics.statistics import summarize
    from deep500lite.recipe.mlperf import mlperf_score
    from deep500lite.recipe.results import step_times

    names = {(r.get("recipe") or {}).get("name") for r in results}
    several = len(names) > 1
    several_fw = len({r.get("executor_variant") or r.get("framework") for r in results}) > 1
    groups: dict[str, list[dict]] = {}
    for r in results:
        groups.setdefault(group_label(r, several, group_by, several_fw), []).append(r)
    rows = []
    targets = set()
    for label, runs in groups.items():
        pooled = []
        for r in runs:
            pooled.extend(step_times(r))
        sums = [r.get("summaries") or {} for r in runs]
        ttas = [s.get("time_to_accuracy") for s in sums]
        for t in ttas:
            if t is not None and t.get("target") is not None:
                targets.add(t["target"])
        reached = [t["seconds"] for t in ttas if t is not None and t.get("seconds") is not None]
        per_run = [t.get("seconds") if t is not None else None for t in ttas]
        run_seeds = {(r.get("seeds") or {}).get("run") for r in runs}
        div = next((r.get("divergence") for r in runs if r.get("divergence")), None)
        peak = [s.get("peak_memory_bytes") for s in sums if s.get("peak_memory_bytes") is not None]
        rows.append({
            "label": label, "framework": runs[0].get("framework"), "runs": len(runs),
            "passed": all(r.get("passed") for r in runs),
            "final_test_accuracy": _median([s.get("final_test_accuracy") for s in sums]),
            "accuracies": [s.get("final_test_accuracy") for s in sums],
            "time_to_accuracy": _median(reached) if len(reached) == len(runs) and reached else None,
            "time_to_accuracy_target": next((t["target"] for t in ttas if t), None),
            "times_to_accuracy": per_run, "seeds": len(run_seeds),
            "time_to_accuracy_score": mlperf_score(per_run) if len(run_seeds) >= 3 and any(t for t in ttas) else None,
            "throughput": _median([(s.get("throughput") or {}).get("samples_per_second") for s in sums]),
            "step_time": summarize(pooled).to_dict() if pooled else None,
            "step_times": pooled,
            "peak_memory_bytes": max(peak) if peak else None,
            "divergence_outputs": None if div is None else div.get("outputs"),
            "divergence_gradients": None if div is None else div.get("gradients"),
            "reference": None if div is None else div.get("reference"),
            "errors": [r.get("error") for r in runs if r.get("error")],
            "compile_seconds": _median([r.get("compile_seconds") for r in runs]),
            "executor_options": runs[0].get("executor_options") or {},
            "verdicts": runs[0].get("verdicts") or [],
        })
    timed = [r for r in rows if r["step_time"] is not None]
    tests = []
    fastest = None
    if len(timed) >= 2:
        fastest_row = min(timed, key=lambda r: r["step_time"]["median"])
        fastest = fastest_row["label"]
        others = [r for r in timed if r is not fastest_row]
        raw = [mann_whitney(r["step_times"], fastest_row["step_times"]) for r in others]
        adjusted = holm([t["p"] for t in raw])
        for r, t, p_adj in zip(others, raw, adjusted):
            tests.append({"label": r["label"], "against": fastest, "u": t["u"], "p": t["p"], "p_adjusted": p_adj,
                          "effect": t["effect"], "ratio": r["step_time"]["median"] / fastest_row["step_time"]["median"],
                          "significant": p_adj < alpha, "n": len(r["step_times"]),
                          "n_against": len(fastest_row["step_times"])})
    return {"rows": rows, "tests": tests, "fastest": fastest, "alpha": alpha,
            "target": next(iter(targets)) if len(targets) == 1 else None, "group_by": group_by}


def _child_command(recipe_path: str, framework: str, out: str, sets: Sequence[str], seed: int,
                   divergence: bool) -> list[str]:
    cmd = [sys.executable, "-m", "deep500lite.recipe.worker", recipe_path, "--set", f"executor={framework}"]
    for s in sets:
        cmd += ["--set", s]
    cmd += ["--seed", str(seed), "--out", out, "--progress", "lines"]
    if divergence:
        cmd.append("--divergence")
    return cmd


def _run_child(cmd: list[str], out: str, prefix: str, stream) -> tuple[int, str]:
    """Run one worker, streaming its stdout with ``prefix``; stderr goes to ``out/stderr.log``.

    The worker runs in a session of its own and dies with this process (``PR_SET_PDEATHSIG``):
    whatever ends this function (Ctrl-C, SIGTERM, SIGHUP, an error) kills the worker and every
    process below it, and ``kill -9`` of this process kills the worker.
    """
    from deep500lite.processes import die_with_parent, kill_tree, signals_held

    log_path = os.path.join(out, "stderr.log")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env, bufsize=1,
                                start_new_session=True, preexec_fn=die_with_parent())
        try:
            for line in proc.stdout:
                stream.write(prefix + line.rstrip("\n") + "\n")
                stream.flush()
            code = proc.wait()
        except BaseException:
            with signals_held():
                kill_tree(proc.pid)
                proc.wait()
            raise
        finally:
            proc.stdout.close()
    last = ""
    if code != 0:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
        last = lines[-1] if lines else f"exit status {code}"
    return code, last


def _run_staged(cmd_for, folder: str, prefix: str, stream) -> tuple[int, str, str | None]:
    """One worker run into a staging folder that replaces ``folder`` whole when the run wrote its results.

    A failed or interrupted run leaves ``folder`` as it was; a failed run's log is kept beside it
    (``FOLDER.stderr.log``, which a later successful run removes).

    Returns:
        ``(exit status, last line of stderr, the failed run's log or None)``.
    """
    from deep500lite.recipe.staging import staged_folder

    failed_log = os.path.normpath(folder) + ".stderr.log"
    with staged_folder(folder) as work:
        code, last = _run_child(cmd_for(work), work, prefix, stream)
        if code not in (0, 1) or not os.path.isfile(os.path.join(work, "results.json")):
            shutil.copyfile(os.path.join(work, "stderr.log"), failed_log)
            shutil.rmtree(work)  # the failed run is dropped: nothing is swapped in
            return code, last or f"exit status {code} and no results.json", failed_log
    if os.path.exists(failed_log):
        os.remove(failed_log)
    return code, last, None


#: Files of a comparison folder besides the frameworks' folders (``compare`` writes them when runs succeeded).
COMPARISON_FILES = ("comparison.md", "comparison.csv", "comparison.json", "step_times.png", "loss.png",
                    "accuracy.png")


def _is_comparison_folder(path: str) -> bool:
    """Whether ``path`` holds only what a comparison writes (so it may be replaced whole)."""
    from deep500lite.recipe.staging import RUN_OUTPUTS, is_staging_name

    def framework_folder(folder: str) -> bool:
        return all(n in RUN_OUTPUTS or n.startswith(("run-", "seed-", ".tmp-")) or is_staging_name(n)
                   for n in os.listdir(folder))

    for name in os.listdir(path):
        full = os.path.join(path, name)
        if name in COMPARISON_FILES or name.endswith(".stderr.log") or name.startswith(".tmp-") \
                or is_staging_name(name):
            continue
        if not (os.path.isdir(full) and not os.path.islink(full) and framework_folder(full)):
            return False
    return True


def _carry_kept(old: str, new: str) -> None:
    """Into the new comparison folder: the old folders of frameworks whose run failed this time (nothing computed
    is lost), and the old comparison files when the new comparison has none (every run failed)."""
    from deep500lite.recipe.staging import is_staging_name

    compared = os.path.exists(os.path.join(new, "comparison.json"))
    for name in os.listdir(old):
        if os.path.lexists(os.path.join(new, name)) or is_staging_name(name) or name.startswith(".tmp-"):
            continue
        if compared and name in COMPARISON_FILES:
            continue
        if name.endswith(".stderr.log") and os.path.isdir(os.path.join(new, name[:-len(".stderr.log")])):
            continue  # that framework's run succeeded this time
        os.rename(os.path.join(old, name), os.path.join(new, name))


def run_comparison(recipe, frameworks: Sequence[str], repeats: int = 1, out: str | None = None,
                   sets: Sequence[str] = (), seed: int = 0, stream=None, runs: int = 1, plots: bool = True,
                   finish=None) -> dict:
    """Run a recipe on several frameworks, each run in a fresh process, and compare the results.

    Everything the comparison needs is checked before the first run starts: the frameworks, the
    dataset's loader package, scipy (for two or more frameworks) and matplotlib (with ``plots``);
    what is missing is named once, with the pip extra that brings it.

    Args:
        recipe: a recipe file or bundled recipe name; its ``executor`` must be a MUTABLE key.
        frameworks: framework keys (``torch``, ``tensorflow``, ``onnxruntime``, ``reference``, ``jax``)
            or variant spellings (``torch:compile``, ``tensorflow:xla``, ``onnxruntime:O0``). A
            framework whose run fails is reported in ``failures`` while the others run.
        repeats: runs per framework with the same seed (interleaved).
        out: the folder for the runs (``out/FW/results.json``, ``out/FW/run-K/`` with repeats,
            ``out/FW/seed-S/`` with runs) and the plots; default ``d5-results/RECIPE/compare``.
        sets: ``key=value`` overrides of mutable keys for every run.
        seed: the run seed of every run (the first seed with ``runs``).
        stream: where progress goes (default ``sys.stdout``).
        runs: runs per framework with the seeds ``seed, seed + 1, ...`` (interleaved), for MLPerf's
            score of the time to accuracy (:func:`deep500lite.recipe.mlperf.mlperf_score`); at least
            3 when more than 1. Not with ``repeats``.
        plots: the caller will draw plots (matplotlib is then checked up front).
        finish: ``finish(outcome)``, called with the outcome (its ``out`` the staging folder)
            before the comparison's folder is swapped in, to write the tables and plots into it.

    The whole comparison folder is one set: it is written into a staging folder that replaces
    ``out`` when every run has ended and ``finish`` has returned (:mod:`deep500lite.recipe.staging`),
    so an interrupted comparison leaves the previous one whole. The old folder of a framework
    whose run failed this time is kept in the new set (and its log beside it).

    Returns:
        ``{"comparison": compare_results(...), "results": [results dicts], "failures":
        [{"framework", "run", "status", "error"}], "out": folder, "wall_time": seconds}``.

    Raises:
        UserError: an unknown framework or variant, a fixed ``executor``, a bad ``--set``, bad
            ``runs`` or ``repeats``.
        FrameworkNotAvailableError: a framework or another optional part is not installed.
    """
    from deep500lite.recipe.loading import load_recipe, parse_set
    from deep500lite.recipe.requirements import dataset_name, missing_parts, require_parts
    from deep500lite.recipe.staging import published_path, staged_folder
    from deep500lite.registry import FRAMEWORKS, canonical_executor_spelling

    stream = stream if stream is not None else sys.stdout
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise UserError(f"repeats must be an integer >= 1. Received: {repeats!r}")
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1 or runs == 2:
        raise UserError("runs (seeds per framework) must be 1, or at least 3 for MLPerf's score (the fastest and the "
                        f"slowest dropped, the mean of the rest). Received: {runs!r}")
    if runs > 1 and repeats > 1:
        raise UserError(f"--runs varies the seed and --repeats repeats one seed; give one of them. Received: --runs "
                        f"{runs} --repeats {repeats}")
    loaded = load_recipe(recipe)
    overrides = dict(parse_set(s) for s in sets)
    resolved = loaded.resolve(overrides)
    if "executor" not in resolved.mutable_keys:
        raise UserError(f"Recipe '{loaded.name}' has 'executor' in FIXED; compare sets it for each framework, so it "
                        f"must be a MUTABLE key. Received: FIXED['executor']={loaded.fixed.get('executor')!r}")
    if not frameworks:
        raise UserError(f"--frameworks needs at least one framework: {format_choices(FRAMEWORKS)}. "
                        f"Received: {list(frameworks or [])!r}")
    keys = list(dict.fromkeys(canonical_executor_spelling(f) for f in frameworks))
    seeds = [seed + k for k in range(runs)]
    require_parts("deep500lite compare", missing_parts(frameworks=keys, dataset=dataset_name(resolved.config),
                                                       stats=len(keys) > 1, plots=plots, plots_flag="the plots"),
                  hint="Or compare the installed frameworks only, and pass --no-plots to skip the plots.")
    out = out or os.path.join("d5-results", loaded.name, "compare")
    with staged_folder(out, ours=_is_comparison_folder, carry=_carry_kept) as work:
        outcome = _run_all(loaded, keys, work, sets, seeds, repeats, runs, stream)
        if finish is not None:
            finish(outcome)
    final = os.path.abspath(out)
    outcome["out"] = final
    for failure in outcome["failures"]:
        if failure.get("log"):
            failure["log"] = published_path(failure["log"])
    return outcome


def _run_all(loaded, keys, out, sets, seeds, repeats, runs, stream) -> dict:
    """Every run of a comparison into ``out``, then the comparison of their results."""
    from deep500lite.recipe.results import find_results, read_results

    seed = seeds[0]
    t0 = time.perf_counter()
    failures, paths = [], []
    width = max(len(k) for k in keys)
    rounds = [(r, seed) for r in range(repeats)] if runs == 1 else [(k, s_) for k, s_ in enumerate(seeds)]
    total = len(rounds)
    for r, run_seed in rounds:
        for fw in keys:
            # A variant's folder: torch:compile -> torch-compile (no colon in file names).
            name = fw.replace(":", "-")
            if total == 1:
                folder = os.path.join(out, name)
            else:
                folder = os.path.join(out, name, f"seed-{run_seed}" if runs > 1 else f"run-{r + 1}")
            prefix = f"[{fw.ljust(width)}] "
            tag = f" (run {r + 1}/{total}{f', seed {run_seed}' if runs > 1 else ''})" if total > 1 else ""
            stream.write(f"{prefix}starting{tag} in a new process\n")
            stream.flush()
            started = time.perf_counter()
            code, last, failed_log = _run_staged(
                lambda work, fw=fw, run_seed=run_seed, r=r: _child_command(loaded.path, fw, work, sets, run_seed,
                                                                            divergence=(r == 0)),
                folder, prefix, stream)
            if failed_log is None:
                paths.append(os.path.join(folder, "results.json"))
                state = "done" if code == 0 else "done (an acceptable metric failed)"
            else:
                failures.append({"framework": fw, "run": r + 1, "status": code, "error": last, "log": failed_log})
                state = f"FAILED (exit status {code}): {last}"
            stream.write(f"{prefix}{state} in {time.perf_counter() - started:.1f} s\n")
            stream.flush()
    results = [read_results(p) for p in find_results(paths)] if paths else []
    comparison = compare_results(results) if results else {"rows": [], "tests": [], "fastest": None,
                                                           "alpha": ALPHA, "target": None}
    return {"comparison": comparison, "results": results, "failures": failures, "out": out,
            "wall_time": time.perf_counter() - t0, "frameworks": keys, "recipe": loaded.name, "seeds": seeds,
            "runs": total}
