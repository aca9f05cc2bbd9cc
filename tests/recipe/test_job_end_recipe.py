"""``run -n`` and ``compare`` end whole: a rank that cannot load the recipe ends the job in one line; SIGINT,
SIGTERM and SIGKILL of the command leave the earlier results set as it was, no staging folder (SIGKILL aside)
and no process (listed through a tag in the environment, :mod:`process_tree`; killed on the way out, also when
a test fails)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time

import pytest

from process_tree import describe, process_tag, tagged, tagged_env, wait_untagged
from support import REPO, requires_mpi

HERE = os.path.dirname(os.path.abspath(__file__))
HANG = 240

RECIPE = """\
import deep500lite as d5

FIXED = {'dataset': 'digits', 'model': 'mlp', 'model_kwargs': dict(hidden=(16,)), 'epochs': 4,
         'optimizer': 'GradientDescent', 'distributed': 'ConsistentDecentralized'}
MUTABLE = {'batch_size': 16, 'executor': 'reference'}
METRICS = [(d5.TestAccuracy(), None)]
"""


def start(tag: str, *argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "deep500lite", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=REPO, env=tagged_env(tag),
                            start_new_session=True)


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=HANG)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the command did not end within {HANG} s (a hang): {proc.communicate()[0][-3000:]}")
    return proc.returncode, out


def fingerprint(folder) -> dict[str, str]:
    """Every file under ``folder``: relative path -> SHA-256."""
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return found


def staging(folder) -> list[str]:
    return [n for n in os.listdir(folder) if ".d5-" in n] if os.path.isdir(folder) else []


def wait_for_processes(tag: str, count: int) -> None:
    deadline = time.monotonic() + HANG
    while len(tagged(tag)) < count:
        if time.monotonic() > deadline:
            pytest.fail(f"never saw {count} processes: {describe(tagged(tag))}")
        time.sleep(0.05)


@pytest.mark.mpi
@requires_mpi
def test_a_rank_that_cannot_load_the_recipe_ends_the_run_in_one_line(tmp_path):
    with process_tag() as tag:
        rc, text = finish(start(tag, "run", os.path.join(HERE, "recipe_rank1_import_error.py"), "-n", "2",
                                "--no-baseline", "--out", str(tmp_path / "r")))
        left = tagged(tag)
        assert not left, f"left running after the command ended:\n{describe(left)}\n{text}"
    assert rc == 2, text
    last = text.strip().splitlines()[-1]
    assert last.startswith("deep500lite run: error: The 2-rank job failed: rank 1 of 2 failed before MPI "
                           "initialisation: Recipe ") and "rank 1 cannot import this recipe on purpose" in last, text
    assert "Traceback" not in text and text.count("cannot import this recipe") == 1, text
    assert not (tmp_path / "r").exists() and not staging(tmp_path), os.listdir(tmp_path)


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_run_on_ranks_stopped_by_a_signal_keeps_the_old_results(tmp_path, signum):
    recipe, out = tmp_path / "recipe.py", tmp_path / "out"
    recipe.write_text(RECIPE)
    argv = ("run", str(recipe), "-n", "2", "--no-baseline", "--progress", "none", "--out", str(out))
    with process_tag() as tag:
        rc, text = finish(start(tag, *argv))
        assert rc in (0, 1), text
        before = fingerprint(out)
        assert "results.json" in before and "rank1/results.json" in before, before
        proc = start(tag, *argv)
        # the ranks are training: two supervisors with a rank each, mpiexec, its proxy and the command
        wait_for_processes(tag, 6)
        time.sleep(1.0)
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)  # Ctrl-C in a terminal: the command's process group
        else:
            os.kill(proc.pid, signum)
        rc, text = finish(proc)
        left = tagged(tag)
        assert not left, f"left running after the command ended:\n{describe(left)}\n{text}"
    assert rc == 128 + signum, text
    assert fingerprint(out) == before, text  # the old set, whole: nothing of the stopped run in it
    assert not staging(tmp_path), os.listdir(tmp_path)


def test_compare_stopped_by_sigint_keeps_each_old_framework_folder(tmp_path):
    recipe, out = tmp_path / "recipe.py", tmp_path / "cmp"
    recipe.write_text(RECIPE)
    argv = ("compare", str(recipe), "--frameworks", "reference", "--no-plots", "--out", str(out))
    with process_tag() as tag:
        rc, text = finish(start(tag, *argv))
        assert rc in (0, 1), text
        before = fingerprint(out / "reference")
        assert "results.json" in before and "epochs.csv" in before, before
        proc = start(tag, *argv)
        wait_for_processes(tag, 2)  # the command and its worker
        time.sleep(1.5)
        os.killpg(proc.pid, signal.SIGINT)
        rc, text = finish(proc)
        left = tagged(tag)
        assert not left, f"left running after the command ended:\n{describe(left)}\n{text}"
    assert rc == 130, text
    assert fingerprint(out / "reference") == before, text
    assert not staging(out) and not staging(tmp_path), (os.listdir(out), os.listdir(tmp_path))


def test_the_worker_of_a_killed_compare_dies_with_it(tmp_path):
    recipe, out = tmp_path / "recipe.py", tmp_path / "cmp"
    recipe.write_text(RECIPE)
    with process_tag() as tag:
        proc = start(tag, "compare", str(recipe), "--frameworks", "reference", "--no-plots", "--out", str(out))
        wait_for_processes(tag, 2)
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGKILL)
        finish(proc)
        left = wait_untagged(tag, 15)  # PR_SET_PDEATHSIG: the worker gets SIGKILL when the command dies
        assert not left, f"left running 15 s after compare was killed:\n{describe(left)}"
    assert not (out / "reference").exists()  # a killed run's staging folder is never swapped in


def test_a_failed_rerun_of_compare_keeps_the_earlier_framework_folder_and_tables(tmp_path):
    recipe, out = tmp_path / "recipe.py", tmp_path / "cmp"
    recipe.write_text(RECIPE.replace("'optimizer': 'GradientDescent', ", "").replace(
        "MUTABLE = {", "MUTABLE = {'optimizer': 'GradientDescent', "))
    argv = ("compare", str(recipe), "--frameworks", "reference", "--no-plots", "--out", str(out))
    with process_tag() as tag:
        rc, text = finish(start(tag, *argv))
        assert rc in (0, 1), text
        before = fingerprint(out)
        assert {"reference/results.json", "comparison.json", "comparison.md"} <= set(before), before
        rc, text = finish(start(tag, *argv, "--set", "optimizer=reference.NoSuchOptimizer"))
    assert rc == 1 and "[reference] FAILED (exit status 2)" in text, text
    after = fingerprint(out)
    log = after.pop("reference.stderr.log")  # the failed run's log, beside the folder it did not replace
    assert log and "has no native optimizer 'NoSuchOptimizer'" in (out / "reference.stderr.log").read_text()
    assert after == before  # the earlier comparison whole: its framework folder and its tables
    assert f"(log: {out / 'reference.stderr.log'})" in text, text
    assert not staging(out) and not staging(tmp_path), (os.listdir(out), os.listdir(tmp_path))
