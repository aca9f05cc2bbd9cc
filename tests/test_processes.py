"""deep500lite.processes with real processes: trees killed whole (sessions of their own included), children that
die with their parent, SIGTERM and SIGHUP that unwind like Ctrl-C, pids never confused with later processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from deep500lite import processes
from process_tree import describe, process_tag, tagged, tagged_env, wait_untagged

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; PR_SET_PDEATHSIG")

# A parent that starts a child in a session of its own (as hydra starts its proxy and ranks), which starts
# a grandchild; all three sleep. Prints the three pids.
GRANDCHILD = "import time; time.sleep(300)"
CHILD = ("import subprocess, sys, time\n"
         f"g = subprocess.Popen([sys.executable, '-c', {GRANDCHILD!r}])\n"
         "print(g.pid, flush=True)\n"
         "time.sleep(300)\n")
TREE = ("import os, subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', {CHILD!r}], start_new_session=True, stdout=subprocess.PIPE, "
        "text=True)\n"
        "grandchild = child.stdout.readline().strip()\n"
        "print(os.getpid(), child.pid, grandchild, flush=True)\n"
        "time.sleep(300)\n")


def _start_tree(tag):
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True, env=tagged_env(tag))
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 3, pids
    return proc, pids


def test_kill_tree_kills_every_process_below_also_in_other_sessions():
    with process_tag() as tag:
        proc, pids = _start_tree(tag)
        assert sorted(processes.descendants(pids[0])) == sorted(pids[1:])
        killed = processes.kill_tree(pids[0])
        proc.wait(timeout=30)
        assert sorted(killed) == sorted(pids)
        left = wait_untagged(tag, 10)
        assert not left, describe(left)


def test_a_child_started_with_die_with_parent_dies_when_its_parent_is_killed():
    code = textwrap.dedent("""
        import subprocess, sys, time
        from deep500lite.processes import die_with_parent
        c = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True,
                             preexec_fn=die_with_parent())
        print(c.pid, flush=True)
        time.sleep(300)
    """)
    with process_tag() as tag:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=tagged_env(tag))
        child = int(proc.stdout.readline())
        assert child in tagged(tag)
        proc.kill()  # SIGKILL: the parent runs no code of its own to end the child
        proc.wait(timeout=30)
        left = wait_untagged(tag, 10)
        assert not left, describe(left)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_signals_unwind_runs_finally_blocks_and_exits_with_128_plus_n(tmp_path, signum):
    marker = tmp_path / "cleaned"
    code = textwrap.dedent(f"""
        import sys, time
        from deep500lite.processes import signals_unwind, terminated_by
        with signals_unwind():
            try:
                print("ready", flush=True)
                time.sleep(300)
            finally:
                open({str(marker)!r}, "w").write(str(terminated_by()))
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signum)
        assert proc.wait(timeout=30) == 128 + signum
    finally:
        proc.kill()
    assert marker.read_text() == str(int(signum))


def test_signals_held_delivers_a_signal_after_the_block():
    code = textwrap.dedent("""
        import os, signal, time
        from deep500lite.processes import signals_held
        try:
            with signals_held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)
                print("block finished", flush=True)
            print("not reached", flush=True)
        except KeyboardInterrupt:
            print("interrupted after the block", flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.splitlines() == ["block finished", "interrupted after the block"], out


def test_kill_identified_spares_a_process_that_is_not_the_one_identified():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        seen = processes.identify([proc.pid])
        assert seen[proc.pid] is not None
        processes.kill_identified({proc.pid: seen[proc.pid] + 1})  # another start time: another process with that pid
        time.sleep(0.2)
        assert proc.poll() is None
        processes.kill_identified(seen)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        proc.kill()


def test_signal_names_say_what_the_signal_means():
    assert processes.signal_name(signal.SIGSEGV) == "SIGSEGV (segmentation fault)"
    assert processes.signal_name(signal.SIGKILL) == "SIGKILL (killed)"
    assert processes.signal_name(200) == "signal 200"
