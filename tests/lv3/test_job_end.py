"""Multi-rank jobs end, always: real mpiexec jobs where one rank exits, raises, segfaults or is killed
(before and after MPI initialisation), and jobs whose command gets SIGINT, SIGTERM, SIGHUP or SIGKILL.

After each case the process tree is listed (every process the command started carries a tag in
its environment, :mod:`process_tree`): nothing may be left, not mpiexec, not hydra's proxy (which
starts in a session of its own), not a rank. Whatever happens, the tagged processes are killed on
the way out, so a failing case leaves nothing running either.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from process_tree import describe, process_tag, tagged, tagged_env, wait_untagged
from support import REPO, requires_mpi

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "job_end_check.py")
# A job that hangs is caught by this limit (the launcher's own start-up timeout is 300 s): far above the few
# seconds a failed job takes to end, so a slow shared machine does not fail a correct case.
HANG = 120

pytestmark = [pytest.mark.mpi, requires_mpi]


class Command:
    """``python -m deep500lite ARGV`` in its own session, its output read as it comes."""

    def __init__(self, tag: str, *argv: str, cwd=REPO):
        self.proc = subprocess.Popen([sys.executable, "-m", "deep500lite", *argv], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, cwd=cwd, env=tagged_env(tag),
                                     start_new_session=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, needle: str, count: int = 1, within: float = HANG) -> None:
        deadline = time.monotonic() + within
        while self.text.count(needle) < count:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"never saw {needle!r} {count} times: {self.text[-3000:]}")
            time.sleep(0.05)

    def finish(self, within: float = HANG) -> int:
        try:
            rc = self.proc.wait(timeout=within)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the command did not end within {within} s (a hang): {self.text[-3000:]}")
        self.reader.join(timeout=10)
        return rc


def launch(tag: str, *args: str) -> tuple[int, str]:
    cmd = Command(tag, "launch", "-n", "2", SCRIPT, *args)
    rc = cmd.finish()
    return rc, cmd.text


# (how rank 1 ends, when) -> (the exit status of `launch`, what its one line says happened)
CASES = {
    ("exit3", "before"): (3, "exited with status 3 before MPI initialisation"),
    ("exit3", "after"): (3, "exited with status 3 after MPI initialisation"),
    ("raise", "before"): (1, "failed before MPI initialisation: RuntimeError: planned failure on rank 1"),
    ("raise", "after"): (1, "failed after MPI initialisation: RuntimeError: planned failure on rank 1"),
    ("segv", "before"): (139, "was killed by SIGSEGV (segmentation fault) before MPI initialisation"),
    ("segv", "after"): (139, "was killed by SIGSEGV (segmentation fault) after MPI initialisation"),
    ("kill9", "before"): (137, "was killed by SIGKILL (killed) before MPI initialisation"),
    ("kill9", "after"): (137, "was killed by SIGKILL (killed) after MPI initialisation"),
    ("os_exit0", "before"): (1, "ended before MPI initialisation without its code having ended"),
    ("os_exit0", "after"): (1, "ended after MPI initialisation without its code having ended"),
    ("exit0", "before"): (1, "ended (exit status 0) before MPI initialisation while rank 0 had initialised MPI"),
}


@pytest.mark.parametrize("how,when", list(CASES), ids=[f"{h}-{w}" for h, w in CASES])
def test_a_rank_that_ends_early_ends_the_job_in_one_line(how, when):
    status, what = CASES[(how, when)]
    with process_tag() as tag:
        rc, text = launch(tag, how, when, "1")
        left = tagged(tag)
        assert not left, f"left running after the command ended:\n{describe(left)}\n{text}"
    last = text.strip().splitlines()[-1]
    assert last.startswith(f"deep500lite launch: error: rank 1 of 2 {what}") and \
        last.endswith("so the whole job was ended"), text
    assert rc == status, text
    assert "passed the barrier" not in text, text  # rank 0 never got past its wait for rank 1: it was ended
    # one line, not MPICH's multi-line block, and a traceback only for the rank that raised (once)
    assert "BAD TERMINATION" not in text and "=====" not in text, text
    assert text.count("Traceback (most recent call last)") == (how == "raise"), text


def test_a_rank_that_is_killed_from_outside_ends_the_job():
    with process_tag() as tag:
        cmd = Command(tag, "launch", "-n", "2", SCRIPT, "sleep", "after", "-1")
        cmd.wait_for("initialised MPI", 2)
        ranks = [pid for pid in tagged(tag) if _is_rank(pid)]
        assert len(ranks) == 2, describe(tagged(tag))
        os.kill(ranks[0], signal.SIGKILL)
        rc = cmd.finish()
        left = tagged(tag)
        assert not left, f"left running after the command ended:\n{describe(left)}\n{cmd.text}"
    assert rc == 137, cmd.text
    assert "was killed by SIGKILL (killed) after MPI initialisation, so the whole job was ended" in \
        cmd.text.strip().splitlines()[-1], cmd.text


def _is_rank(pid: int) -> bool:
    """A rank itself (the supervisor's child): it runs the script, and its parent does too."""
    def cmdline(p):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                return f.read()
        except OSError:
            return b""

    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return False
    return all(b"rank_start.py" in cmdline(p) for p in (pid, ppid))


# SIGINT goes to the command's process group, as Ctrl-C in a terminal does; the others to its process.
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
@pytest.mark.parametrize("moment", ["starting", "running"])
def test_a_signal_to_the_command_ends_the_whole_job(signum, moment):
    with process_tag() as tag:
        cmd = Command(tag, "launch", "-n", "2", SCRIPT, "sleep", "after", "-1")
        if moment == "running":
            cmd.wait_for("initialised MPI", 2)
        else:  # mpiexec has started; the ranks are on their way to MPI initialisation
            deadline = time.monotonic() + HANG
            while len(tagged(tag)) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
        if signum == signal.SIGINT:
            os.killpg(cmd.proc.pid, signum)
        else:
            os.kill(cmd.proc.pid, signum)
        rc = cmd.finish()
        left = tagged(tag)
        assert not left, f"left running after the command ended:\n{describe(left)}\n{cmd.text}"
    assert rc == 128 + signum, cmd.text
    last = cmd.text.strip().splitlines()[-1]
    assert last == ("deep500lite: interrupted" if signum == signal.SIGINT else
                    f"deep500lite launch: stopped by {signum.name} ({signal.strsignal(signum).lower()})"), cmd.text


@pytest.mark.parametrize("moment", ["starting", "running"])
def test_sigkill_of_the_command_leaves_no_process(moment):
    with process_tag() as tag:
        cmd = Command(tag, "launch", "-n", "2", SCRIPT, "sleep", "after", "-1")
        if moment == "running":
            cmd.wait_for("initialised MPI", 2)
        else:
            deadline = time.monotonic() + HANG
            while len(tagged(tag)) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
        os.kill(cmd.proc.pid, signal.SIGKILL)
        cmd.finish()
        # Nothing can clean up after SIGKILL: mpiexec dies with the command (PR_SET_PDEATHSIG), each rank's
        # supervisor sees the command's connection close and kills its rank, and the ranks die with them.
        left = wait_untagged(tag, 15)
        assert not left, f"left running 15 s after the command was killed:\n{describe(left)}"


def test_mpi_fork_raises_deep500s_error_naming_the_failed_rank(tmp_path):
    script = tmp_path / "fork.py"
    script.write_text(
        "import subprocess\n"
        "import deep500lite as d5\n"
        "try:\n"
        "    with d5.mpi_fork(2) as role:\n"
        "        if role == 'child':\n"
        "            comm = d5.CommunicationNetwork()\n"
        "            if comm.rank == 1:\n"
        "                raise SystemExit(5)\n"
        "            comm.barrier()\n"
        "except subprocess.CalledProcessError as exc:\n"
        "    print('parent caught', exc.returncode, exc.stderr)\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for name in ("D500_IN_MPI", "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        env.pop(name, None)
    with process_tag() as tag:
        env.update(tagged_env(tag))
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=HANG)
        left = tagged(tag)
        assert not left, f"left running after the script ended:\n{describe(left)}"
    assert out.returncode == 0, out.stderr
    assert "parent caught 5 rank 1 of 2 exited with status 5 after MPI initialisation" in out.stdout, out
