"""``deep500lite launch``: real mpiexec jobs through ``deep500lite.cli.launch_cmd.main``.

Each job runs in a child Python (its own process group, with a hard timeout), so no test can hang
even if the launcher's own timeout were broken.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from deep500lite.cli import launch_cmd
from deep500lite.errors import UserError
from deep500lite.lv3 import launch as launch_module
from support import REPO, requires_mpi

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "launch_check.py")


def launch(*argv: str, timeout: float = 60):
    """Run ``deep500lite launch ARGV`` in a child process; returns (exit status, output, seconds)."""
    code = "import sys; from deep500lite.cli.launch_cmd import main; sys.exit(main(sys.argv[1:]))"
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=REPO, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"launch {' '.join(argv)} did not end within {timeout} s: {proc.communicate()[0][-3000:]}")
    return proc.returncode, out, time.monotonic() - start


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("p", [1, 3])
def test_launch_runs_a_script_on_every_rank(p):
    rc, out, _ = launch("-n", str(p), SCRIPT, "ok", "--flag")
    assert rc == 0, out
    for r in range(p):
        assert f"rank {r} of {p} started with ['ok', '--flag']" in out and f"rank {r} finished" in out, out
    # more ranks than this machine's cores: the launcher says that the ranks take turns
    cores = len(os.sched_getaffinity(0))
    assert (f"note: {p} ranks share {cores} core" in out) == (p > cores), out


def test_the_oversubscription_note_follows_the_usable_cores():
    cores = len(os.sched_getaffinity(0))
    assert launch_module.usable_cores() == cores
    assert launch_module.oversubscription_note(cores) is None
    note = launch_module.oversubscription_note(cores + 1, "allreduce")
    assert note.startswith(f"note: {cores + 1} ranks share {cores} core")
    assert f"so the allreduce is not that of {cores + 1} ranks with a core each" in note


@pytest.mark.mpi
@requires_mpi
def test_launch_a_module_and_a_plain_program():
    rc, out, _ = launch("-n", "2", "--", "-m", "mpi4py.bench", "helloworld")
    assert rc == 0 and out.count("Hello, World!") == 2, out
    rc, out, _ = launch("-n", "2", "--", "echo", "plain", "program")
    assert rc == 0 and out.count("plain program") == 2, out


@pytest.mark.mpi
@requires_mpi
def test_a_raising_rank_ends_the_launched_job():
    rc, out, seconds = launch("-n", "3", SCRIPT, "raise")
    assert rc != 0, out
    assert "RuntimeError: planned failure on rank 2" in out, out
    assert "finished" not in out and seconds < 20, (seconds, out)


@pytest.mark.mpi
@requires_mpi
def test_launch_forwards_the_exit_status():
    rc, out, _ = launch("-n", "2", SCRIPT, "exit", "7")
    assert rc == 7, out


@pytest.mark.mpi
@requires_mpi
def test_launch_timeout_kills_the_job():
    rc, out, seconds = launch("-n", "2", "--timeout", "2", SCRIPT, "sleep")
    assert rc == launch_cmd.EXIT_TIMEOUT, out
    assert "did not end within 2 s and was killed" in out and seconds < 15, (seconds, out)


def test_launch_rejects_bad_input():
    rc, out, _ = launch("-n", "2", "--mpiexec", "/no/such/mpiexec", SCRIPT, "ok")
    assert rc == 2 and "--mpiexec is not an executable program. Received: --mpiexec '/no/such/mpiexec'" in out, out
    rc, out, _ = launch("-n", "0", SCRIPT, "ok")
    assert rc == 2 and "argument -n/--ranks: must be a positive integer (1, 2, 3, ...). Received: '0'" in out, out
    rc, out, _ = launch("-n", "2")
    assert rc == 2 and "launch needs a command" in out, out


def test_missing_mpiexec_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(launch_module.sys, "executable", "/nonexistent/bin/python")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UserError, match="needs mpiexec: pip install 'deep500lite\\[mpi\\]'"):
        launch_module.find_mpiexec(None, "deep500lite launch")


def test_build_command_runs_python_under_mpi4py():
    py = sys.executable
    assert launch_cmd.build_command(["train.py", "-x"]) == [py, "-m", "mpi4py", "train.py", "-x"]
    assert launch_cmd.build_command(["--", "-m", "pkg.mod", "a"]) == [py, "-m", "mpi4py", "-m", "pkg.mod", "a"]
    assert launch_cmd.build_command(["python3", "t.py"]) == ["python3", "-m", "mpi4py", "t.py"]
    assert launch_cmd.build_command(["python3.11", "-c", "pass"]) == ["python3.11", "-m", "mpi4py", "-c", "pass"]
    assert launch_cmd.build_command(["python", "-m", "mpi4py", "t.py"]) == ["python", "-m", "mpi4py", "t.py"]
    assert launch_cmd.build_command(["hostname"]) == ["hostname"]
    assert launch_cmd.build_command(["pythonista"]) == ["pythonista"]


@requires_mpi
@pytest.mark.parametrize("safe_path", [False, True])
def test_rank_start_finds_modules_where_python_m_mpi4py_does(tmp_path, safe_path):
    """A rank started through rank_start.py imports from the same sys.path as ``python -m mpi4py``:
    the working directory first, or (PYTHONSAFEPATH) the PYTHONPATH entries first, as for a
    deep500lite installed with ``pip --target`` and run outside the checkout."""
    for where in ("site", "cwd"):
        (tmp_path / where).mkdir()
        (tmp_path / where / "d5probe.py").write_text(f"WHERE = {where!r}\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    env["PYTHONPATH"] = str(tmp_path / "site")
    if safe_path:
        env["PYTHONSAFEPATH"] = "1"
    code = "import d5probe; print('from', d5probe.WHERE)"

    def run(*start):
        return subprocess.run([sys.executable, *start, "-c", code], cwd=tmp_path / "cwd", env=env,
                              capture_output=True, text=True, timeout=60)

    native, ours = run("-m", "mpi4py"), run(launch_module.RANK_START)
    assert native.returncode == 0 and ours.returncode == 0, (native.stderr, ours.stderr)
    assert ours.stdout == native.stdout == f"from {'site' if safe_path else 'cwd'}\n"
