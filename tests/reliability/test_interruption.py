"""Interrupted runs leave consistent results: the old complete set or the new complete set, never a mix.

A real ``deep500lite run`` subprocess (a small digits recipe with plots and an MLPerf log) gets
SIGINT, SIGTERM or SIGKILL at seeded random moments; after each, the results folder must hold
one whole run whose files agree with each other (results.json, epochs.csv, steps.csv and
mllog.log all from the same seed), and ``report`` must read it. Staging folders left by a killed
run are skipped by ``report`` and removed by the next run (``deep500lite.recipe.staging``).
"""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from support import REPO

from deep500lite.recipe.results import read_results
from deep500lite.recipe.staging import is_staging_name, staged_folder

RECIPE = '''\
from deep500lite.metrics.training import TestAccuracy
FIXED = {"dataset": "digits", "dataset_kwargs": dict(test_fraction=0.5), "model": "mlp",
         "model_kwargs": dict(hidden=(16,)), "epochs": 2}
MUTABLE = {"batch_size": 16, "executor": "reference", "optimizer": "MomentumOptimizer",
           "optimizer_kwargs": dict(learning_rate=0.05, momentum=0.9)}
METRICS = [(TestAccuracy(), 5)]
'''


def _start(recipe, out, seed: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "deep500lite", "run", str(recipe), "--out", str(out), "--seed",
                             str(seed), "--progress", "none", "--plots", "--mllog"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


def _csv(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _check_whole(out) -> int:
    """The folder holds one complete run whose files agree; returns its seed."""
    data = read_results(out / "results.json")  # parses and passes the schema
    seed = data["seeds"]["run"]
    epochs = _csv(out / "epochs.csv")
    assert [float(e["train_loss"]) for e in epochs] == [e["train_loss"] for e in data["samples"]["epochs"]]
    steps = _csv(out / "steps.csv")
    assert [float(s["loss"]) for s in steps] == [s["loss"] for s in data["samples"]["steps"]]
    assert len(epochs) == data["summaries"]["epochs_done"] == 2
    logged = [json.loads(line.split(" ", 1)[1]) for line in (out / "mllog.log").read_text().splitlines()]
    assert [r["value"] for r in logged if r["key"] == "seed"] == [seed]
    assert logged[-1]["key"] == "run_stop"
    for png in ("loss.png", "accuracy.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [n for n in os.listdir(out) if n.startswith(".tmp-")], "a half-written file was left"
    return seed


def _staging(folder, pid: int | None = None) -> list[str]:
    """Staging folders in ``folder`` (of process ``pid`` only, if given)."""
    return [n for n in os.listdir(folder) if is_staging_name(n) and (pid is None or f"-{pid}-" in n)]


def test_signals_at_random_points_keep_a_whole_set(tmp_path):
    """SIGINT, SIGTERM and SIGKILL, two seeded random moments each (as fractions of a whole run's time), in a
    seeded random order."""
    recipe = tmp_path / "small.py"
    recipe.write_text(RECIPE)
    out = tmp_path / "results"
    t0 = time.monotonic()
    first = _start(recipe, out, seed=1)
    assert first.wait(timeout=120) == 0, first.stderr.read().decode()
    duration = time.monotonic() - t0
    assert _check_whole(out) == 1
    rng = random.Random(20)
    # Each signal once early (start-up, loading, training) and once late (training, writing, renaming).
    plan = [(signum, part) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
            for part in ((0.1, 0.6), (0.6, 1.05))]
    rng.shuffle(plan)
    complete = 1
    for seed, (signum, (low, high)) in enumerate(plan, start=2):
        proc = _start(recipe, out, seed)
        time.sleep(rng.uniform(low, high) * duration)
        if proc.poll() is None:
            proc.send_signal(signum)
        status = proc.wait(timeout=120)
        try:
            found = _check_whole(out)
        except Exception as exc:  # noqa: BLE001 - any failure, with what the folder holds
            raise AssertionError(f"{signum.name} (exit status {status}): {exc}; folder {sorted(os.listdir(out))}, "
                                 f"beside it {sorted(os.listdir(tmp_path))}; stderr {proc.stderr.read()[-2000:]!r}")
        # The old whole set, or the new whole set (a signal during the swap arrives after it).
        assert found in (complete, seed), f"{signum.name}: the folder holds seed {found}"
        assert status != 0 or found == seed, f"{signum.name}: the run finished but the folder holds {found}"
        complete = found
        if signum != signal.SIGKILL and status != 0:
            assert status in (130, 128 + signum, -signum), proc.stderr.read().decode()
            # Its own staging folder is gone (one a killed run left may survive if this run was stopped while
            # removing it; the next run removes it, as checked below).
            assert not _staging(tmp_path, proc.pid), f"a run stopped by {signum.name} left its staging folder"
    # report reads the folder's parent without picking up a killed run's staging folder
    shown = subprocess.run([sys.executable, "-m", "deep500lite", "report", str(tmp_path), "--format", "csv"],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert shown.returncode == 0, shown.stderr
    rows = list(csv.DictReader(shown.stdout.splitlines()))
    assert [r["runs"] for r in rows] == ["1"]
    # the next run removes what killed runs left behind
    last = _start(recipe, out, seed=99)
    assert last.wait(timeout=120) == 0
    assert _check_whole(out) == 99 and not _staging(tmp_path)


def _write_set(folder, marker: str) -> None:
    for name in ("results.json", "epochs.csv", "steps.csv"):
        (folder / name).write_text(marker)


def test_staged_folder_replaces_a_run_folder_whole(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    _write_set(out, "old")
    (out / "loss.png").write_text("old plot")
    with staged_folder(out) as work:
        assert is_staging_name(os.path.basename(work)) and not os.listdir(work)
        _write_set(type(out)(work), "new")
    assert sorted(os.listdir(out)) == ["epochs.csv", "results.json", "steps.csv"]  # the old plot went with its set
    assert {(out / n).read_text() for n in os.listdir(out)} == {"new"}
    assert not _staging(tmp_path)


def test_staged_folder_keeps_the_old_set_on_error(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    _write_set(out, "old")
    with pytest.raises(KeyboardInterrupt):
        with staged_folder(out) as work:
            (type(out)(work) / "results.json").write_text("half")
            raise KeyboardInterrupt
    assert {(out / n).read_text() for n in os.listdir(out)} == {"old"}
    assert not _staging(tmp_path)


def test_staged_folder_never_deletes_a_foreign_folder(tmp_path):
    """--out pointing at a folder with the user's own files: the new outputs are moved in, nothing else changes."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    (out / "results.json").write_text("old")
    with staged_folder(out) as work:
        _write_set(type(out)(work), "new")
    assert (out / "notes.txt").read_text() == "keep me"
    assert sorted(os.listdir(out)) == ["epochs.csv", "notes.txt", "results.json", "steps.csv"]
    assert (out / "results.json").read_text() == "new"


def test_stale_staging_of_a_dead_process_is_removed_and_an_old_set_put_back(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    out = tmp_path / "run"
    partial = tmp_path / f".run.d5-partial-{pid}-ab12"
    aside = tmp_path / f".run.d5-old-{pid}-ab12"
    partial.mkdir()
    (partial / "results.json").write_text("half")
    aside.mkdir()
    _write_set(aside, "old")  # a run killed between its two renames: no target, the old set aside
    from deep500lite.recipe.staging import recover

    recover(out)
    assert not _staging(tmp_path)
    assert {(out / n).read_text() for n in os.listdir(out)} == {"old"}


@pytest.mark.parametrize("given", ["parent", "folder"])
def test_report_puts_back_an_old_set_left_aside(tmp_path, given):
    """A run killed between its two renames (systems without an atomic swap) left no folder, only the old
    set aside: ``report`` finds it where it belongs, given the folder itself or its parent."""
    from deep500lite.recipe.results import find_results

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    aside = tmp_path / f".run.d5-old-{int(dead.stdout)}-cd34"
    aside.mkdir()
    _write_set(aside, "old")
    found = find_results([tmp_path if given == "parent" else tmp_path / "run"])
    assert found == [str(tmp_path / "run" / "results.json")]
    assert (tmp_path / "run" / "results.json").read_text() == "old" and not aside.exists()
