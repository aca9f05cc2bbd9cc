"""Comparing frameworks on one recipe: runs in fresh processes, then statistics over raw samples.

:func:`run_comparison` runs the recipe worker, ``python -m deep500lite.recipe.worker RECIPE --set
executor=FW`` (:mod:`deep500lite.recipe.worker`), once per framework (``repeats`` times each,
interleaved: all frameworks once, then again), every run in a new Python process, so no
framework's threads, caches or allocator state touch another's measurement. Each run writes its results file; :func:`compare_results` reads them back and
computes, per framework:

- final test accuracy, time to the recipe's target accuracy, training throughput, peak memory;
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
import subprocess
import sys
import time
from typing import Sequence

from deep500lite.errors import FrameworkNotAvailableError, UserError, format_choices

__all__ = ["run_comparison", "compare_results", "mann_whitney", "holm", "group_label", "ALPHA"]

#: Significance level of the step-time tests.
ALPHA = 0.05


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of p-values (family-wise error rate), in the given order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


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


def group_label(results: dict, several_recipes: bool) -> str:
    """The label a results file is grouped under: its executor variant or framework (with the recipe
    when several differ)."""
    fw = results.get("executor_variant") or results.get("framework") or "?"
    name = (results.get("recipe") or {}).get("name", "recipe")
    return f"{name}/{fw}" if several_recipes else fw


def _median(values):
    kept = sorted(v for v in values if v is not None)
    if not kept:
        return None
    n = len(kept)
    return kept[n // 2] if n % 2 else (kept[n // 2 - 1] + kept[n // 2]) / 2


def compare_results(results: Sequence[dict], alpha: float = ALPHA) -> dict:
    """Statistics of several runs, grouped by framework.

    Args:
        results: results dicts (:func:`deep500lite.recipe.results.read_results`); repeats of one
            framework are pooled.
        alpha: significance level.

    Returns:
        ``{"rows": [...], "tests": [...], "fastest": label, "alpha": alpha, "target": percent}``.
        Each row: ``label``, ``framework``, ``runs``, ``passed``, ``final_test_accuracy``,
        ``time_to_accuracy`` (seconds; None if not reached or no target), ``throughput``,
        ``step_time`` (a summary dict of the pooled step times), ``step_times`` (the pooled raw
        samples), ``peak_memory_bytes``, ``divergence_outputs``, ``divergence_gradients``,
        ``reference`` (what the divergence is against), ``errors``, ``compile_seconds`` (median
        over the runs; None when no file records it), ``executor_options``. Each test: ``label``,
        ``against``, ``u``, ``p``, ``p_adjusted``, ``effect``, ``ratio`` (median over the
        fastest's median), ``significant``.
    """
    from deep500lite.metrics.statistics import summarize
    from deep500lite.recipe.results import step_times

    names = {(r.get("recipe") or {}).get("name") for r in results}
    several = len(names) > 1
    groups: dict[str, list[dict]] = {}
    for r in results:
        groups.setdefault(group_label(r, several), []).append(r)
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
        div = next((r.get("divergence") for r in runs if r.get("divergence")), None)
        peak = [s.get("peak_memory_bytes") for s in sums if s.get("peak_memory_bytes") is not None]
        rows.append({
            "label": label, "framework": runs[0].get("framework"), "runs": len(runs),
            "passed": all(r.get("passed") for r in runs),
            "final_test_accuracy": _median([s.get("final_test_accuracy") for s in sums]),
            "accuracies": [s.get("final_test_accuracy") for s in sums],
            "time_to_accuracy": _median(reached) if len(reached) == len(runs) and reached else None,
            "time_to_accuracy_target": next((t["target"] for t in ttas if t), None),
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
            "target": next(iter(targets)) if len(targets) == 1 else None}


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
    """Run one child, streaming its stdout with ``prefix``; stderr goes to ``out/stderr.log``."""
    os.makedirs(out, exist_ok=True)
    log_path = os.path.join(out, "stderr.log")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env, bufsize=1)
        try:
            for line in proc.stdout:
                stream.write(prefix + line.rstrip("\n") + "\n")
                stream.flush()
        finally:
            proc.stdout.close()
            code = proc.wait()
    last = ""
    if code != 0:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
        last = lines[-1] if lines else f"exit status {code}"
    return code, last


def run_comparison(recipe, frameworks: Sequence[str], repeats: int = 1, out: str | None = None,
                   sets: Sequence[str] = (), seed: int = 0, stream=None) -> dict:
    """Run a recipe on several frameworks, each run in a fresh process, and compare the results.

    Args:
        recipe: a recipe file or bundled recipe name; its ``executor`` must be a MUTABLE key.
        frameworks: framework keys (``torch``, ``tensorflow``, ``onnxruntime``, ``reference``, ``jax``)
            or variant spellings (``torch:compile``, ``tensorflow:xla``, ``onnxruntime:O0``). A
            framework that is not installed, or whose run fails, is reported in ``failures`` while
            the others run (a UserError only when none of them is installed).
        repeats: runs per framework (interleaved).
        out: the folder for the runs (``out/FW/results.json``, or ``out/FW/run-K/`` with
            repeats) and the plots; default ``d5-results/RECIPE/compare``.
        sets: ``key=value`` overrides of mutable keys for every run.
        seed: the run seed of every run.
        stream: where progress goes (default ``sys.stdout``).

    Returns:
        ``{"comparison": compare_results(...), "results": [results dicts], "failures":
        [{"framework", "run", "status", "error"}], "out": folder, "wall_time": seconds}``.

    Raises:
        UserError: an unknown framework or variant, no installed framework, a fixed ``executor``,
            a bad ``--set``.
    """
    from deep500lite.recipe.loading import load_recipe, parse_set
    from deep500lite.recipe.results import find_results, read_results
    from deep500lite.registry import FRAMEWORKS, canonical_executor_spelling, is_framework_available, \
        split_executor_spelling

    stream = stream if stream is not None else sys.stdout
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise UserError(f"repeats must be an integer >= 1. Received: {repeats!r}")
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
    missing = [k for k in keys if not is_framework_available(split_executor_spelling(k)[0])]
    if len(missing) == len(keys):
        raise UserError(f"Framework(s) {format_choices(missing)} are not installed: pip install "
                        + " ".join(FRAMEWORKS[split_executor_spelling(k)[0]].install.removeprefix("pip install ")
                                   for k in missing)
                        + f", or compare installed frameworks only. Received: --frameworks {','.join(keys)}")
    out = out or os.path.join("d5-results", loaded.name, "compare")
    t0 = time.perf_counter()
    failures, paths = [], []
    width = max(len(k) for k in keys)
    for fw in missing:  # its column only: the installed ones still run
        install = FRAMEWORKS[split_executor_spelling(fw)[0]].install
        failures.append({"framework": fw, "run": 1, "status": None, "log": None,
                         "error": f"not installed: {install}"})
        stream.write(f"[{fw.ljust(width)}] skipped: not installed ({install})\n")
    for r in range(repeats):
        for fw in (k for k in keys if k not in missing):
            # A variant's folder: torch:compile -> torch-compile (no colon in file names).
            name = fw.replace(":", "-")
            folder = os.path.join(out, name) if repeats == 1 else os.path.join(out, name, f"run-{r + 1}")
            prefix = f"[{fw.ljust(width)}] "
            tag = f" (run {r + 1}/{repeats})" if repeats > 1 else ""
            stream.write(f"{prefix}starting{tag} in a new process\n")
            stream.flush()
            started = time.perf_counter()
            cmd = _child_command(loaded.path, fw, folder, sets, seed, divergence=(r == 0))
            code, last = _run_child(cmd, folder, prefix, stream)
            results_file = os.path.join(folder, "results.json")
            if code in (0, 1) and os.path.isfile(results_file):
                paths.append(results_file)
                state = "done" if code == 0 else "done (an acceptable metric failed)"
            else:
                failures.append({"framework": fw, "run": r + 1, "status": code, "error": last,
                                 "log": os.path.join(folder, "stderr.log")})
                state = f"FAILED (exit status {code}): {last}"
            stream.write(f"{prefix}{state} in {time.perf_counter() - started:.1f} s\n")
            stream.flush()
    results = [read_results(p) for p in find_results(paths)] if paths else []
    comparison = compare_results(results) if results else {"rows": [], "tests": [], "fastest": None,
                                                           "alpha": ALPHA, "target": None}
    return {"comparison": comparison, "results": results, "failures": failures, "out": out,
            "wall_time": time.perf_counter() - t0, "frameworks": keys, "recipe": loaded.name}
