"""No hangs: real mpiexec jobs where a rank never reaches MPI initialisation, or a job runs too long.

Each job runs in a fresh interpreter with a hard limit of its own (``subprocess`` timeout), so a
broken start-up watch fails the test instead of hanging it. A rank is made to hang before MPI
starts in two ways a user meets: a script that sleeps before importing ``mpi4py.MPI``, and a
``sitecustomize`` on PYTHONPATH that sleeps at interpreter start-up (before any deep500lite code),
chosen by the launcher's ``PMI_RANK``/``PMI_SIZE``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from catalog_support import assert_clean_message, cli_error_subprocess
from support import requires_mpi

pytestmark = [pytest.mark.mpi, requires_mpi]

# Writes its pid to DIR/pid<rank>, then rank STUCK sleeps before MPI starts; the others wait in a barrier.
STUCK_SCRIPT = """\
import os, sys, time
rank = int(os.environ.get("PMI_RANK", "0"))
with open(os.path.join(sys.argv[1], f"pid{rank}"), "w") as f:
    f.write(str(os.getpid()))
if rank == int(sys.argv[2]):
    time.sleep(300)
from mpi4py import MPI
MPI.COMM_WORLD.Barrier()
print("rank", rank, "passed the barrier", flush=True)
if sys.argv[3:] == ["sleep-after"]:
    time.sleep(300)
"""

# Interpreter start-up hang (or failure) for the ranks whose launcher environment matches.
SITECUSTOMIZE = """\
import os, time
if os.environ.get("PMI_RANK") == {rank!r} and os.environ.get("PMI_SIZE") == {size!r}:
    {action}
"""


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DEEP500LITE_JOB_TIMEOUT", "DEEP500LITE_STARTUP_TIMEOUT", "DEEP500LITE_COMM_TIMEOUT")}
    env.update(extra)
    return env


def _gone(pid: int, within: float = 15.0) -> bool:
    """Whether process ``pid`` has ended (no longer exists, or a zombie) within ``within`` seconds."""
    end = time.monotonic() + within
    while True:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.1)


@pytest.fixture()
def stuck(tmp_path):
    (tmp_path / "stuck.py").write_text(STUCK_SCRIPT)
    return tmp_path


def _sitecustomize(folder, rank: str, size: str, action: str = "time.sleep(300)") -> str:
    site = folder / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(rank=rank, size=size, action=action))
    return str(site)


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_launch_names_the_rank_that_never_starts_and_kills_the_job(stuck, how):
    args = ["--startup-timeout", "3"] if how == "flag" else []
    env = _clean_env(**({"DEEP500LITE_STARTUP_TIMEOUT": "3"} if how == "environment" else {}))
    line = cli_error_subprocess("launch", "-n", "2", *args, "stuck.py", str(stuck), "1", cwd=stuck, env=env,
                                timeout=90, needles=("rank 1 of 2 did not start within 3 s",
                                                     "MPI initialisation", "--startup-timeout"))
    assert line.startswith("deep500lite launch: error:"), line
    assert "ranks 0" not in line and "rank 0 " not in line, line
    pids = [int((stuck / f"pid{r}").read_text()) for r in range(2)]
    assert all(_gone(pid) for pid in pids), f"a rank outlived the killed job: {pids}"


def test_launch_job_timeout_from_the_environment_kills_a_job_that_runs_on(stuck):
    proc = subprocess.run([sys.executable, "-m", "deep500lite", "launch", "-n", "2", "stuck.py", str(stuck), "-1",
                           "sleep-after"], capture_output=True, text=True, cwd=stuck, timeout=90,
                          env=_clean_env(DEEP500LITE_JOB_TIMEOUT="4"))
    assert proc.returncode == 124, proc.stderr[-3000:]
    assert proc.stdout.count("passed the barrier") == 2, proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert "did not end within 4 s and was killed" in last, proc.stderr[-3000:]
    pids = [int((stuck / f"pid{r}").read_text()) for r in range(2)]
    assert all(_gone(pid) for pid in pids), f"a rank outlived the killed job: {pids}"


def test_run_n_names_a_rank_stuck_at_interpreter_start(tmp_path):
    site = _sitecustomize(tmp_path, "1", "2")
    out = tmp_path / "out"
    # the previous run's set: the failed job must leave it whole (its outputs are staged)
    (out / "rank0").mkdir(parents=True)
    old = {"results.json": '{"old": true}', "rank0/results.json": '{"old rank": 0}', "epochs.csv": "epoch\n0\n"}
    for name, text in old.items():
        (out / name).write_text(text)
    line = cli_error_subprocess("run", "digits_mlp_distributed", "-n", "2", "--startup-timeout", "3", "--out",
                                out, cwd=tmp_path, timeout=90, env=_clean_env(PYTHONPATH=site),
                                needles=("2-rank job", "rank 1 of 2 did not start within 3 s"))
    assert line.startswith("deep500lite run: error:"), line
    assert {name: (out / name).read_text() for name in old} == old
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")) == []  # no staging left


def test_run_n_keeps_the_n_rank_results_when_the_baseline_fails(tmp_path):
    site = _sitecustomize(tmp_path, "0", "1", "os._exit(3)")  # only the 1-rank baseline fails
    out = tmp_path / "out"
    line = cli_error_subprocess("run", "digits_mlp_distributed", "-n", "2", "--set", "epochs=1", "--set",
                                "executor=reference", "--out", out, cwd=tmp_path, timeout=150,
                                env=_clean_env(PYTHONPATH=site),
                                needles=("results were kept", "1-rank baseline", "exit status 3"))
    assert_clean_message(line)
    assert str(out / "results.json") in line and "d5-partial" not in line  # the final folder, not the staging one
    results = json.loads((out / "results.json").read_text())
    dist = results["distributed"]
    assert [row["rank"] for row in dist["per_rank"]] == [0, 1]
    assert dist["baseline"] is None and dist["speedup"] is None
    assert dist["aggregate"]["steps"] > 0 and results["summaries"]["steps_done"] > 0
    for r in range(2):
        rank = json.loads((out / f"rank{r}" / "results.json").read_text())
        assert rank["distributed"]["rank"] == r


def test_bench_allreduce_names_a_rank_that_never_starts(tmp_path):
    site = _sitecustomize(tmp_path, "1", "2")
    cli_error_subprocess("bench", "allreduce", "-n", "2", "--startup-timeout", "3", "--min-bytes", "4",
                         "--max-bytes", "16", "--no-calibrate", cwd=tmp_path, timeout=90,
                         env=_clean_env(PYTHONPATH=site), needles=("rank 1 of 2 did not start within 3 s",))
