"""Host lists (``--hosts``, ``--hostfile``, ``$DEEP500LITE_HOSTFILE``, Slurm) and the mpiexec command lines they give.

Host lists of ``localhost`` run real jobs through hydra here (hydra starts the ranks of a host
that is this machine without ssh); jobs across emulated hosts are in ``test_emulate.py``. Slurm
cannot run here: its detection is tested on the variables ``salloc`` and ``sbatch`` set, with the
node-list forms of Slurm's documentation, and the command line is what hydra's Slurm launcher
gets (``test_emulate.py`` also runs it through a stand-in ``srun``).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from deep500lite.errors import UserError
from deep500lite.lv3 import hosts as hosts_module
from deep500lite.lv3.hosts import (HOSTFILE_ENV, Hosts, expand_nodelist, parse_hosts, read_hostfile, resolve_hosts,
                                   slurm_allocation, tasks_per_node)
from deep500lite.lv3.launch import check_ranks, oversubscription_note
from support import REPO, requires_mpi

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "launch_check.py")
ALLOCATION = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[01-03]", "SLURM_TASKS_PER_NODE": "2(x2),1"}


def _srun_found(name, path=None):
    return "/opt/slurm/bin/srun" if name == "srun" else None


def _srun_missing(name, path=None):
    return None


def test_a_host_list_gives_hydra_its_hosts():
    found = parse_hosts("node1:2, node2:2,node3")
    assert found.entries == (("node1", 2), ("node2", 2), ("node3", 1)) and found.slots == 5
    assert found.mpiexec_args() == ["-hosts", "node1:2,node2:2,node3:1"]
    # hydra's placement: the slots of each host in order, then around again
    assert found.placement(3) == [("node1", 2), ("node2", 1)]
    assert found.placement(7) == [("node1", 4), ("node2", 2), ("node3", 1)]  # as hydra placed 7 ranks
    assert found.describe(3) == "3 hosts from --hosts node1:2, node2:2,node3: node1 (2 ranks), node2 (1 rank)"


@pytest.mark.parametrize("text", ["", "node1,", "node1:0", "node1:-2", "node1:two", "no de", "a:1:2", ":3"])
def test_a_bad_host_list_is_one_clear_error(text):
    with pytest.raises(UserError, match=r"--hosts must be HOST\[:SLOTS\],\.\.\. such as node1:2,node2:2.*Received"):
        parse_hosts(text)


def test_host_files_in_mpich_and_open_mpi_form(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# the cluster\nnode1:4\n\nnode2   slots=2   # Open MPI's form\nnode3\n")
    found = read_hostfile(str(path))
    assert found.entries == (("node1", 4), ("node2", 2), ("node3", 1))
    assert found.mpiexec_args() == ["-hosts", "node1:4,node2:2,node3:1"]
    assert found.source == f"--hostfile {path}"


@pytest.mark.parametrize("content, what", [
    ("node1:4\nnode2 max_slots=3\n", "line 2 of the host file"),
    ("node1:x\n", "line 1 of the host file"),
    ("# nothing\n\n", "names no host"),
])
def test_a_bad_host_file_names_the_line(tmp_path, content, what):
    path = tmp_path / "hosts"
    path.write_text(content)
    with pytest.raises(UserError, match=what):
        read_hostfile(str(path))


def test_a_missing_host_file_is_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="--hostfile must name a readable host file.*Received"):
        read_hostfile(str(tmp_path / "absent"))


@pytest.mark.parametrize("text, names", [
    ("tux[1-3]", ["tux1", "tux2", "tux3"]),  # Slurm's documentation (scontrol show hostnames)
    ("linux[00-02,05]", ["linux00", "linux01", "linux02", "linux05"]),
    ("gpu1,node[8-10]", ["gpu1", "node8", "node9", "node10"]),
    ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
    ("login", ["login"]),
])
def test_slurm_node_lists_expand(text, names):
    assert expand_nodelist(text) == names


@pytest.mark.parametrize("text", ["node[1-3", "node[a-b]", "node]1["])
def test_a_malformed_node_list_is_refused(text):
    with pytest.raises(UserError, match="Slurm node list"):
        expand_nodelist(text)


def test_slurm_tasks_per_node():
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert tasks_per_node("16") == [16]
    with pytest.raises(UserError, match="SLURM_TASKS_PER_NODE must look like"):
        tasks_per_node("2(3)")


def test_a_slurm_allocation_is_detected_and_given_to_hydras_slurm_launcher():
    found = slurm_allocation(ALLOCATION)
    assert found.slurm_job == "4242" and found.entries == (("node01", 2), ("node02", 2), ("node03", 1))
    # hydra's Slurm launcher starts one proxy a node with srun --nodelist node01,node02,node03
    assert found.mpiexec_args() == ["-launcher", "slurm", "-hosts", "node01:2,node02:2,node03:1"]
    assert found.source == "the Slurm allocation (job 4242)"
    # the older variable names (SLURM_JOBID, SLURM_NODELIST) are read too
    assert slurm_allocation({"SLURM_JOBID": "7", "SLURM_NODELIST": "a,b"}).entries == (("a", 1), ("b", 1))
    # a node list not readable here: hydra reads it itself
    odd = slurm_allocation({"SLURM_JOB_ID": "8", "SLURM_JOB_NODELIST": "n[1-2", "SLURM_TASKS_PER_NODE": "1"})
    assert odd.entries == () and odd.mpiexec_args() == ["-launcher", "slurm", "-rmk", "slurm"]
    # a job id alone (e.g. inherited by a program outside the allocation) is not an allocation
    assert slurm_allocation({"SLURM_JOB_ID": "9"}) is None and slurm_allocation({}) is None


def test_where_the_hosts_come_from(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("h1:2\nh2:2\n")
    env = dict(ALLOCATION, **{HOSTFILE_ENV: str(hostfile)})
    # flags first, then $DEEP500LITE_HOSTFILE, then the Slurm allocation, then this machine
    assert resolve_hosts("x:1", None, env, _srun_found).names == ["x"]
    assert resolve_hosts(None, str(hostfile), {}, _srun_found).source == f"--hostfile {hostfile}"
    assert resolve_hosts(None, None, env, _srun_found).source == f"${HOSTFILE_ENV} {hostfile}"
    assert resolve_hosts(None, None, ALLOCATION, _srun_found).slurm_job == "4242"
    assert resolve_hosts(None, None, {}, _srun_found) is None
    with pytest.raises(UserError, match="either with --hosts or with --hostfile, not both"):
        resolve_hosts("x:1", str(hostfile), {}, _srun_found)
    with pytest.raises(UserError, match=r"runs in the Slurm allocation \(job 4242\).*srun is not on PATH"):
        resolve_hosts(None, None, ALLOCATION, _srun_missing)


def test_rank_limits_and_notes_follow_the_slots():
    four = parse_hosts("a:2,b:2")
    assert check_ranks(16, hosts=four) == 16  # at least 16 are always allowed
    with pytest.raises(UserError, match="more ranks than --hosts a:2,b:2 can run sensibly"):
        check_ranks(17, hosts=four)
    assert check_ranks(17, hosts=four, oversubscribe=True) == 17
    assert check_ranks(10_000, hosts=slurm_allocation({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[1"})) == 10_000
    assert oversubscription_note(4, hosts=four) is None
    assert oversubscription_note(5, "allreduce", four).startswith("note: 5 ranks on 4 slots of --hosts a:2,b:2")


def _launch(*argv, env=None, timeout=90):
    code = "import sys; from deep500lite.cli.launch_cmd import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ, **(env or {})), timeout=timeout)


@pytest.mark.mpi
@requires_mpi
def test_launch_on_a_host_list_runs_through_hydra_and_watches_the_start_over_tcp():
    done = _launch("--hosts", "localhost:2", "-n", "2", SCRIPT, "ok")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 ranks on 1 host from --hosts localhost:2: localhost (2 ranks)" in done.stderr
    for r in range(2):
        assert f"rank {r} of 2 started with ['ok']" in done.stdout, done.stdout
    # a rank stuck before MPI: named, over the TCP start marks that ranks on other hosts use
    done = _launch("--hosts", "localhost:2", "-n", "2", "--startup-timeout", "4", SCRIPT, "hang-before-mpi", "1")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "rank 1 of 2 did not start within 4 s" in done.stderr, done.stderr


@pytest.mark.mpi
@requires_mpi
def test_launch_takes_a_host_file_from_the_environment(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost:3\n")
    done = _launch("-n", "3", "--", "echo", "hello", env={HOSTFILE_ENV: str(hostfile)})
    assert done.returncode == 0 and done.stdout.count("hello") == 3, done.stdout + done.stderr
    assert f"from ${HOSTFILE_ENV} {hostfile}" in done.stderr
    done = _launch("-n", "2", "--hosts", "localhost:1", "--hostfile", str(hostfile), "--", "true")
    assert done.returncode == 2 and "not both" in done.stderr


def test_the_module_documents_what_it_exports():
    for name in hosts_module.__all__:
        assert getattr(hosts_module, name).__doc__ or name == "HOSTFILE_ENV", name
    assert isinstance(Hosts().mpiexec_args(), list)
