"""TorchDistributedCommunicator (gloo on the CPU, NCCL on GPUs), checked in real multi-process jobs.

The mpiexec jobs run ``torch_check_collectives.py`` on every rank with ``mpirun`` from tests/support.py
(own process group, timeout): the ranks find each other through mpi4py, and the script compares
every result with numpy and with MPICommunicator in the same job. A torchrun-style job (``env://``)
and a one-rank group (``init_method=file://``) run as plain subprocesses, each with a timeout.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from deep500lite.errors import UserError
from deep500lite.utils import is_package_available
from support import REPO, mpirun, requires_mpi

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "torch_check_collectives.py")

requires_torch = pytest.mark.skipif(not is_package_available("torch"),
                                    reason="needs PyTorch: pip install 'deep500lite[torch]'")


def _cuda_count() -> int:
    if not is_package_available("torch"):
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _run(cmds, timeout=90):
    """Start every command (each in its own process group), wait for all; kill all past ``timeout``."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("DEEP500LITE_COMM_TIMEOUT", None)
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                              env=dict(env, **extra), start_new_session=True) for cmd, extra in cmds]
    outs = []
    try:
        for proc in procs:
            outs.append(proc.communicate(timeout=timeout)[0])
    except subprocess.TimeoutExpired:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"{cmds[0][0]} did not end within {timeout} s")
    return [p.returncode for p in procs], outs


@pytest.mark.mpi
@requires_mpi
@requires_torch
@pytest.mark.parametrize("p", [2, 3])
def test_every_operation_matches_numpy_and_the_mpi_communicator(p):
    """Allreduce (native, the four p2p algorithms, auto; sum/mean/max; lengths 0, 1, p-1, p+1,
    1001), the other collectives, point to point, Deep500 names; ring byte counts; native byte
    counts equal MPICommunicator's."""
    rc, out, _ = mpirun(p, SCRIPT, timeout=120)
    assert rc == 0 and "OK " in out and f"on {p} ranks" in out and "FAIL" not in out, out[-6000:]
    assert "backend='gloo'" in out, out[-2000:]


@pytest.mark.mpi
@requires_mpi
@requires_torch
def test_a_stalled_operation_times_out_naming_rank_and_operation():
    # Rank 1 of 2 skips a native and a ring allreduce; rank 0 has a 2 s timeout.
    rc, out, seconds = mpirun(2, SCRIPT, "stall", timeout=60)
    assert rc != 0, out
    assert ("caught CommunicationTimeout: rank 0 of 2: allreduce(native) timed out after 2 s waiting for "
            "the other ranks (collective)") in out, out
    assert ("CommunicationTimeout: rank 0 of 2: allreduce(ring) timed out after 2 s waiting for a message "
            "from rank 1") in out, out
    assert "deep500lite: rank 0 of 2 raised CommunicationTimeout" in out, out  # the job ends through MPI_Abort
    assert "finished without error" not in out, out
    assert seconds < 30, f"took {seconds:.1f} s"


@requires_torch
def test_rendezvous_without_mpi_torchrun_environment_and_init_method(tmp_path):
    """RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (what torchrun sets) -> env:// on two processes;
    and, at the same time, a one-rank group from init_method='file://...' whose collectives run
    through torch.distributed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    jobs = [([sys.executable, SCRIPT, "env"], dict(base, RANK=str(r), LOCAL_RANK=str(r))) for r in range(2)]
    jobs.append(([sys.executable, SCRIPT, "single", "cpu", str(tmp_path / "store")], {}))
    codes, outs = _run(jobs)
    assert codes == [0, 0, 0], "\n".join(outs)[-4000:]
    assert "OK rank 0 of 2" in outs[0] and "OK rank 1 of 2" in outs[1], outs
    assert "OK single" in outs[2] and "backend='gloo'" in outs[2], outs[2][-4000:]


@pytest.mark.gpu
@requires_torch
@pytest.mark.skipif(_cuda_count() == 0, reason="needs a CUDA GPU")
def test_nccl_on_gpu(tmp_path):
    """NCCL: the whole check on 2 ranks with 2+ GPUs (under mpiexec), else a one-rank NCCL group."""
    if _cuda_count() >= 2 and is_package_available("mpi4py"):
        rc, out, _ = mpirun(2, SCRIPT, "cuda", timeout=180)
        assert rc == 0 and "OK " in out and "backend='nccl'" in out and "FAIL" not in out, out[-6000:]
    codes, outs = _run([([sys.executable, SCRIPT, "single", "cuda", str(tmp_path / "store")], {})], timeout=180)
    assert codes == [0] and "OK single" in outs[0] and "backend='nccl'" in outs[0], outs[0][-4000:]


# ---------------------------------------------------------------- in this process
@requires_torch
def test_single_process_and_bad_input(monkeypatch):
    import numpy as np
    import torch

    from deep500lite.frameworks.torch.distributed import TorchDistributedCommunicator

    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE",
                 "DEEP500LITE_COMM_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    comm = TorchDistributedCommunicator()
    assert (comm.rank, comm.size, comm.backend, str(comm.device), comm.group) == (0, 1, "gloo", "cpu", None)
    assert not torch.distributed.is_initialized()  # one process: no process group at all
    x = np.arange(6.0).reshape(2, 3)
    for algorithm in ("native", "ring", "auto"):
        got = comm.allreduce(x, op="mean", algorithm=algorithm)
        assert np.array_equal(got, x) and got is not x
    assert np.array_equal(comm.gather(x)[0], x) and np.array_equal(comm.reduce_scatter(x), x.reshape(-1))
    assert comm.stats["allreduce"]["calls"] == 3 and comm.bytes_sent == 0 and comm.seconds > 0

    with pytest.raises(UserError, match=r"Allowed values are 'gloo', 'nccl'. Received: backend='mpi'"):
        TorchDistributedCommunicator(backend="mpi")
    with pytest.raises(UserError, match=r"Allowed values are 'cpu', 'cuda'.*Received: device='tpu:0'"):
        TorchDistributedCommunicator(device="tpu:0")
    if torch.cuda.is_available():
        with pytest.raises(UserError, match=r"backend='gloo' moves CPU tensors.*Received: device='cuda:0'"):
            TorchDistributedCommunicator(backend="gloo", device="gpu:0")
    else:
        with pytest.raises(UserError, match=r"device='gpu:0' needs a CUDA GPU, and torch.cuda.is_available\(\) "
                                            r"is False.*Use device='cpu'"):
            TorchDistributedCommunicator(device="gpu:0")
        with pytest.raises(UserError, match=r"backend='nccl' needs CUDA GPUs.*"
                                            r"torch.cuda.is_available\(\)=False.*Use backend='gloo'"):
            TorchDistributedCommunicator(backend="nccl")
    with pytest.raises(UserError, match="timeout must be a positive number"):
        TorchDistributedCommunicator(timeout=0)
    monkeypatch.setenv("DEEP500LITE_COMM_TIMEOUT", "soon")
    with pytest.raises(UserError, match="DEEP500LITE_COMM_TIMEOUT must be a number of seconds. Received: 'soon'"):
        TorchDistributedCommunicator()
    monkeypatch.delenv("DEEP500LITE_COMM_TIMEOUT")
    with pytest.raises(UserError, match=r"need init_method=.*Received: rank=1, size=4, init_method=None"):
        TorchDistributedCommunicator(rank=1, size=4)
    with pytest.raises(UserError, match=r"root must be a rank from 0 to 0. Received: root=1"):
        comm.broadcast(x, root=1)
    with pytest.raises(UserError, match=r"Received: op='avg'"):
        comm.allreduce(x, op="avg")
    with pytest.raises(UserError, match=r"Allowed values are 'native', 'ring'.*Received: algorithm='fast'"):
        comm.allreduce(x, algorithm="fast")
    with pytest.raises(UserError, match="op='mean' needs a floating-point"):
        comm.allreduce(np.arange(3), op="mean")
    with pytest.raises(UserError, match=r"at least 2 ranks.*Received: dest=0"):
        comm.send(x, 0)
    with pytest.raises(UserError, match="recv_any needs a process group"):
        comm.recv_any(x)


def test_import_does_not_load_torch():
    """``deep500lite.lv3`` names the communicator but imports torch only when it is first used."""
    code = ("import sys, deep500lite.lv3 as lv3; "
            "print('torch' in sys.modules, 'mpi4py' in sys.modules, 'TorchDistributedCommunicator' in lv3.__all__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.stdout.strip() == "False False True", out.stdout + out.stderr


@requires_torch
def test_resolved_from_the_torch_framework():
    import deep500lite as d5
    from deep500lite.frameworks.torch.distributed import TorchDistributedCommunicator
    from deep500lite.lv3 import TorchDistributedCommunicator as from_lv3

    assert from_lv3 is TorchDistributedCommunicator is d5.distributed.TorchDistributedCommunicator
    assert "TorchDistributedCommunicator" in dir(d5.distributed)
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchCommunicator'"):
        d5.distributed.NoSuchCommunicator  # noqa: B018


def test_missing_torch_names_the_extra():
    """Without torch, the first access raises FrameworkNotAvailableError with the pip command."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "import deep500lite.lv3 as lv3\n"
            "from deep500lite.errors import FrameworkNotAvailableError\n"
            "try:\n    lv3.TorchDistributedCommunicator\n"
            "except FrameworkNotAvailableError as exc:\n    print('raised', exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.stdout.startswith("raised Framework 'torch' needs"), out.stdout + out.stderr
    assert "pip install 'deep500lite[torch]'" in out.stdout, out.stdout
