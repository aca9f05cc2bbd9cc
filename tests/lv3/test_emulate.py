"""``deep500lite emulate``: real network namespaces, veth pairs, a bridge and tbf shaping (needs root and iproute2).

Every case runs ``python -m deep500lite emulate ...`` in a child process and afterwards lists
``ip netns``, the links of this machine's own namespace (``ip link``), the files the hosts had
(``/etc/netns``, the lock file) and the process table: nothing of the case may be left, whether
the command succeeded, failed, was interrupted (SIGINT, SIGTERM) or killed (SIGKILL, after which
the next run removes the stale namespaces). Each command carries a unique token in its arguments,
and in its environment (which every process it starts inherits, ranks included: hydra passes the
environment on), so a process it left would be found.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from deep500lite.cli import main
from deep500lite.errors import UserError
from deep500lite.lv3 import emulate as emulate_module
from deep500lite.lv3.emulate import (LOCK_DIR, EmulatedHosts, clean_stale, format_rate, live_namespaces,
                                     parse_bandwidth, parse_latency, processes_in)
from deep500lite.utils import is_package_available
from support import REPO, requires_mpi

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "launch_check.py")
IP = shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin")
BIN = os.path.dirname(sys.executable)

requires_root = pytest.mark.skipif(os.geteuid() != 0 or IP is None,
                                   reason="emulated hosts need root and iproute2 (CI runs as root)")
requires_torch = pytest.mark.skipif(not is_package_available("torch"), reason="needs torch")


def _root_links() -> set[str]:
    out = subprocess.run([IP, "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line}


def _processes_with(token: str) -> list[int]:
    """Processes with ``token`` in their command line or environment (every process a case starts inherits it)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            for part in ("cmdline", "environ"):
                try:
                    with open(f"/proc/{entry}/{part}", "rb") as f:
                        if token.encode() in f.read():
                            found.append(int(entry))
                            break
                except OSError:
                    pass
    return found


class Case:
    """One ``emulate`` run in a child process, and what it may have left behind."""

    def __init__(self, *argv: str, env=None, cwd=REPO):
        self.token = f"tok{uuid.uuid4().hex[:12]}"
        self.links = _root_links()
        self.argv = [a.replace("TOKEN", self.token) for a in argv]
        self.out_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"d5-emulate-test-{self.token}.log")
        self.log = open(self.out_path, "w+")
        env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}", D5_EMULATE_TEST=self.token, **(env or {}))
        self.proc = subprocess.Popen([sys.executable, "-m", "deep500lite", "emulate", *self.argv], stdout=self.log,
                                     stderr=subprocess.STDOUT, text=True, cwd=cwd, env=env)
        self.tag = f"{emulate_module.PREFIX}{self.proc.pid}-"

    def output(self) -> str:
        with open(self.out_path) as f:
            return f.read()

    def wait(self, timeout: float = 240) -> tuple[int, str]:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            clean_stale(IP)
            pytest.fail(f"emulate {' '.join(self.argv)} did not end within {timeout} s: {self.output()[-3000:]}")
        return rc, self.output()

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"{text!r} did not appear: {self.output()[-3000:]}")
            time.sleep(0.2)

    def namespaces(self) -> list[str]:
        return [n for n in live_namespaces() if n.startswith(self.tag)]

    def assert_nothing_left(self) -> None:
        assert self.namespaces() == [], self.namespaces()
        assert not [f for f in (os.listdir("/etc/netns") if os.path.isdir("/etc/netns") else [])
                    if f.startswith(self.tag)]
        assert not [f for f in (os.listdir(LOCK_DIR) if os.path.isdir(LOCK_DIR) else []) if f.startswith(self.tag)]
        assert not [f for f in os.listdir(tempfile.gettempdir()) if f.startswith(self.tag)]  # host file, script
        assert _root_links() == self.links
        deadline = time.monotonic() + 5  # killed processes may take a moment to be reaped
        while _processes_with(self.token) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _processes_with(self.token) == [], _processes_with(self.token)
        self.log.close()
        os.unlink(self.out_path)


def test_rates_and_latencies_parse():
    assert parse_bandwidth("100mbit") == 100_000_000 and parse_bandwidth("1Gbit/s") == 1_000_000_000
    assert parse_bandwidth("2.5gbit") == 2_500_000_000 and parse_bandwidth("none") is None
    assert format_rate(100_000_000) == "100 Mbit/s" and format_rate(None) == "unshaped"
    assert parse_latency("5ms") == pytest.approx(5e-3) and parse_latency("200us") == pytest.approx(2e-4)
    for bad in ("100", "100mbps", "fast", "0mbit", "-1gbit"):
        with pytest.raises(UserError, match="--bandwidth must be a rate such as 100mbit"):
            parse_bandwidth(bad)
    for bad in ("5 minutes", "0ms", "20s"):
        with pytest.raises(UserError, match="--latency must be a one-way delay"):
            parse_latency(bad)
    with pytest.raises(UserError, match="--hosts must be a number of emulated hosts from 1 to 253"):
        EmulatedHosts(0)
    with pytest.raises(UserError, match=r"--burst must be a whole number of bytes, at least one full frame \(1514\)"):
        EmulatedHosts(2, 100_000_000, burst=1000)
    # 100 us at the rate, at least two full frames
    assert emulate_module.default_burst(100_000_000) == 3028 and emulate_module.default_burst(10**9) == 12_500


def test_missing_programs_and_root_are_named(monkeypatch, capsys):
    monkeypatch.setattr(emulate_module, "_tool", lambda name: None if name == "tc" else "/usr/bin/" + name)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(UserError, match=r"needs the program 'tc' \(Debian/Ubuntu: apt-get install iproute2\)"):
        emulate_module.check_requirements()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(UserError, match="deep500lite emulate needs root.*Received: user id 1000"):
        emulate_module.check_requirements()
    # the command line: one line, exit status 2, before anything is made
    assert main(["emulate", "--hosts", "2", "--bandwidth", "1gbit", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("deep500lite emulate: error: deep500lite emulate needs root") and err.count("\n") == 1


@requires_root
@pytest.mark.mpi
@requires_mpi
def test_bench_allreduce_across_two_namespaces_goes_through_the_shaped_link(tmp_path):
    out = tmp_path / "ar.json"
    case = Case("--hosts", "2", "--bandwidth", "100mbit", "--", "deep500lite", "bench", "allreduce", "-n", "2",
                "--min-bytes", "4MiB", "--max-bytes", "4MiB", "--algorithms", "native", "--no-calibrate",
                "--max-time", "0.1", "--interleave", "0", "--json", str(out), "--job-timeout", "180", "--timeout", "60")
    rc, text = case.wait()
    assert rc == 0, text
    assert "2 emulated hosts (host1, host2; 1 slot each) on a bridge, each link shaped to 100 Mbit/s" in text
    assert "on 2 hosts from $DEEP500LITE_HOSTFILE" in text and "host1 (1 rank), host2 (1 rank)" in text, text
    assert "data check: 0 wrong elements" in text
    row = json.loads(out.read_text())["rows"][0]
    # Each rank sends its 4 MiB (MPICH's allreduce on 2 ranks): over a 100 Mbit/s link that cannot take less than
    # 4 MiB * 8 / 1e8 s = 0.34 s (a machine's load only adds to it); over shared memory it takes about a millisecond.
    assert row["bytes"] == 4 << 20 and min(row["samples"]) >= 0.9 * (4 << 20) * 8 / 1e8, row["samples"]
    case.assert_nothing_left()
    # the model of the link, checked against the rows (the verdict is a measurement's: docs/scaling.md)
    done = subprocess.run([sys.executable, "-m", "deep500lite", "model", "allreduce", "--check", str(out),
                           "--network", "20e-6,12.5e6"], capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    assert f"measured ({out}, 2 ranks) against predicted by" in done.stdout
    assert "native (as recursive_doubling)" in done.stdout and "in 1 of 1 rows (4 B to 256 MiB)" in done.stdout


@requires_root
@pytest.mark.mpi
@requires_mpi
def test_a_two_host_hostfile_job_runs_through_launch():
    case = Case("--hosts", "2", "--bandwidth", "1gbit", "--", "sh", "-c",
                f'deep500lite launch --hostfile "$DEEP500LITE_HOSTFILE" -n 2 {SCRIPT} host TOKEN')
    rc, text = case.wait()
    assert rc == 0, text
    assert "rank 0 runs on host1 (host1)" in text and "rank 1 runs on host2 (host2)" in text, text
    assert "2 ranks on 2 hosts from --hostfile /tmp/" in text
    case.assert_nothing_left()


@requires_root
@pytest.mark.mpi
@requires_mpi
def test_bench_spatial_runs_across_emulated_hosts(tmp_path):
    out = tmp_path / "spatial.json"
    case = Case("--hosts", "2", "--bandwidth", "1gbit", "--", "deep500lite", "bench", "spatial", "-n", "2", "--size",
                "16", "--steps", "1", "--layers", "2", "--width", "4", "--channels", "2", "--framework", "reference",
                "--modes", "sample,spatial", "--json", str(out))
    rc, text = case.wait()
    assert rc == 0, text
    assert "bench spatial: ranks on 2 hosts from $DEEP500LITE_HOSTFILE" in text, text
    rows = json.loads(out.read_text())["rows"]
    assert sorted(r["mode"] for r in rows) == ["sample", "spatial"] and all(r["ranks"] == 2 for r in rows), rows
    case.assert_nothing_left()


@requires_root
@pytest.mark.mpi
@requires_mpi
def test_hydras_slurm_launcher_starts_the_ranks_through_srun(tmp_path):
    # Slurm cannot run here: a stand-in srun starts each proxy the way srun would (one a node, SLURM_NODEID set),
    # on the emulated host of that name; everything else is deep500lite's Slurm path and hydra's Slurm launcher.
    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\n"
                    'echo "srun $*" >> "$SRUN_LOG"\n'
                    'while [ $# -gt 0 ]; do case "$1" in --nodelist) nodes="$2"; shift 2;; -N|-n|--input) shift 2;; '
                    "*) break;; esac; done\n"
                    "i=0; for node in $(echo \"$nodes\" | tr , ' '); do\n"
                    '  SLURM_NODEID=$i SLURM_PROCID=$i "$ENTER_HOST" "$node" "$@" & i=$((i + 1)); done; wait\n')
    srun.chmod(0o755)
    log = tmp_path / "srun.log"
    inner = (f'ENTER_HOST=$HYDRA_LAUNCHER_EXEC SRUN_LOG={log} exec env -u DEEP500LITE_HOSTFILE -u HYDRA_LAUNCHER '
             f'-u HYDRA_LAUNCHER_EXEC -u HYDRA_HOST_FILE SLURM_JOB_ID=77 SLURM_JOB_NODELIST="host[1-2]" '
             f'SLURM_TASKS_PER_NODE="1(x2)" PATH={tmp_path}:$PATH deep500lite launch -n 2 --startup-timeout 60 '
             f'{SCRIPT} host TOKEN')
    case = Case("--hosts", "2", "--bandwidth", "none", "--", "sh", "-c", inner)
    rc, text = case.wait()
    assert rc == 0, text
    assert "2 ranks on 2 hosts from the Slurm allocation (job 77): host1 (1 rank), host2 (1 rank)" in text, text
    assert "rank 0 runs on host1 (host1)" in text and "rank 1 runs on host2 (host2)" in text, text
    assert log.read_text().startswith("srun --nodelist host1,host2 -N 2 -n 2 --input none ")
    assert "hydra_pmi_proxy" in log.read_text()
    case.assert_nothing_left()


@requires_root
@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("communicator", ["mpi", pytest.param("torch", marks=requires_torch)])
def test_run_n_2_across_emulated_hosts_and_the_model_check(tmp_path, communicator):
    out = tmp_path / "run2"
    case = Case("--hosts", "2", "--bandwidth", "100mbit", "--", "deep500lite", "run", "digits_mlp_distributed",
                "-n", "2", "--set", f"communicator={communicator}", "--out", str(out),
                "--timeout", "600", "--set", "executor=reference", "--comm-timeout", "120")
    rc, text = case.wait(timeout=600)
    assert rc == 0, text
    assert "training on 2 ranks (mpiexec -n 2) on 2 hosts from $DEEP500LITE_HOSTFILE" in text, text
    per_rank = json.loads((out / "rank1" / "results.json").read_text())
    assert per_rank["distributed"]["rank"] == 1 and per_rank["summaries"]["steps_done"] > 0
    case.assert_nothing_left()
    results = str(out / "results.json")
    done = subprocess.run([sys.executable, "-m", "deep500lite", "model", "scaling", "digits_mlp_distributed",
                           "--nodes", "1,2", "--weak", "--batch", "32", "--network", "50e-6,12.5e6", "--fusion-mb", "1",
                           "--no-overlap", "--accelerator", "xeon-e5-2680v3", "--step-from", results, "--check",
                           results], capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    assert "measured (--check) against predicted" in done.stdout and f"2      {results}" in done.stdout, done.stdout


@requires_root
@pytest.mark.mpi
@requires_mpi
def test_a_failing_command_leaves_nothing_and_its_status_is_kept():
    case = Case("--hosts", "2", "--bandwidth", "1gbit", "--", "deep500lite", "launch", "-n", "2", SCRIPT, "exit", "3",
                "TOKEN")
    rc, text = case.wait()
    assert rc == 3, text
    case.assert_nothing_left()
    case = Case("--hosts", "3", "--bandwidth", "none", "--", "sh", "-c", "exit 7 # TOKEN")
    assert case.wait()[0] == 7
    case.assert_nothing_left()


@requires_root
@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_emulation_leaves_nothing(signum):
    case = Case("--hosts", "2", "--bandwidth", "100mbit", "--grace", "5", "--", "deep500lite", "launch", "-n", "2",
                SCRIPT, "sleep", "TOKEN")
    case.wait_for("rank 1 of 2 started")
    assert len(case.namespaces()) == 3 and processes_in(case.namespaces())
    case.proc.send_signal(signum)
    rc, text = case.wait(timeout=60)
    assert rc == 128 + signum, text
    assert f"deep500lite emulate: stopped by {signal.Signals(signum).name}; removing the hosts" in text
    case.assert_nothing_left()


@requires_root
def test_a_killed_emulation_is_removed_by_the_next_one():
    case = Case("--hosts", "2", "--bandwidth", "1gbit", "--", "sleep", "300")
    case.wait_for("running: sleep 300")
    names = case.namespaces()
    assert len(names) == 3 and _processes_with(case.token)
    case.proc.kill()  # SIGKILL: nothing of emulate's own clean-up runs
    case.proc.wait()
    assert case.namespaces() == names and _processes_with(case.token)  # left behind, sleep still running
    removed = clean_stale(IP)  # what every emulate run does first; a live owner's namespaces are kept
    assert case.tag + "0" in removed, removed
    case.assert_nothing_left()


@requires_root
@pytest.mark.mpi
@requires_mpi
def test_start_up_and_job_timeouts_hold_across_hosts():
    case = Case("--hosts", "2", "--bandwidth", "1gbit", "--", "deep500lite", "launch", "-n", "2", "--startup-timeout",
                "8", SCRIPT, "hang-before-mpi", "1", "TOKEN")
    rc, text = case.wait()
    assert rc == 2 and "rank 1 of 2 did not start within 8 s" in text, text
    case.assert_nothing_left()
    case = Case("--hosts", "2", "--bandwidth", "1gbit", "--", "deep500lite", "launch", "-n", "2", "--timeout", "15",
                SCRIPT, "sleep", "TOKEN")
    rc, text = case.wait()
    assert rc == 124 and "did not end within 15 s and was killed" in text, text
    case.assert_nothing_left()


@requires_root
def test_latency_is_added_with_netem_or_refused_in_one_line():
    case = Case("--hosts", "2", "--bandwidth", "100mbit", "--latency", "5ms", "--", "sh", "-c", "exit 0 # TOKEN")
    rc, text = case.wait()
    if rc == 2:  # this kernel has no netem (as the 6.x VMs here)
        lines = [line for line in text.splitlines() if line.strip()]
        assert lines == [lines[0]] and lines[0].startswith(
            "deep500lite emulate: error: --latency needs the netem queueing discipline, which this kernel does not "
            "have"), text
    else:
        assert rc == 0 and "5000 us one way between hosts (netem)" in text, text
    case.assert_nothing_left()


@requires_root
def test_bad_input_is_refused_before_anything_is_made():
    for argv, message in ((["--hosts", "2", "--bandwidth", "fast", "--", "true"], "--bandwidth must be a rate"),
                          (["--hosts", "2", "--bandwidth", "1gbit"], "emulate needs a command to run on the hosts"),
                          (["--hosts", "2", "--bandwidth", "1gbit", "--", "no-such-program-d5"],
                           "'no-such-program-d5' is not an executable file nor on PATH")):
        case = Case(*argv)
        rc, text = case.wait()
        assert rc == 2 and message in text, text
        case.assert_nothing_left()


def test_the_module_documents_what_it_exports():
    for name in emulate_module.__all__:
        value = getattr(emulate_module, name)
        assert isinstance(value, str) or value.__doc__, name
