"""Deep500's level-3 names on deep500lite: the wrapping samplers, ``CommunicationNetwork()``,
``CommunicationVolume``, ``mpi_end_barrier``, ``mpi_fork``, the distributed optimizers under
``d5ref`` and the Horovod adapter's error without Horovod.

Whatever initializes MPI runs in a child process, so this test process never does.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets, networks
from deep500lite.errors import FrameworkNotAvailableError, UserError, UserTypeError
from deep500lite.lv3 import (CommunicationNetwork, CommunicationVolume, DistributedSampler, PartitionedDataset,
                             PartitionedDistributedSampler, WrappedDistributedSampler, WrappedPartitionedSampler,
                             distributed_optimizers)
from deep500lite.lv3.horovod import HorovodOptimizerBase
from deep500lite.lv3.metrics import format_bytes
from support import REPO, requires_mpi


class _Ranks:
    """Only what the samplers read from a communicator."""

    def __init__(self, rank, size):
        self.rank, self.size = rank, size


def _dataset(n):
    return d5.NumpyDataset(np.arange(n, dtype=np.float32)[:, None], "x", np.arange(n), "y")


def _epoch(sampler):
    return [b["y"].tolist() for b in sampler]


# ------------------------------------------------------------------------------- samplers
def test_partitioned_form_gives_each_rank_a_contiguous_part_in_its_samplers_order():
    parts = []
    for rank in range(3):
        inner = d5.ShuffleSampler(_dataset(20), 2, seed=rank)
        sampler = d5.PartitionedDistributedSampler(inner, _Ranks(rank, 3))
        assert type(sampler) is WrappedPartitionedSampler and isinstance(sampler, PartitionedDistributedSampler)
        assert len(sampler) == 3 and sampler.batch_size == 2 and sampler.dataset.label_node == "y"
        first, second = _epoch(sampler), _epoch(sampler)
        assert len(first) == 3 and first != second  # a new shuffle each epoch, within the part
        parts.append(sorted(sum(first, [])))
        assert sorted(sum(second, [])) == parts[-1]
    # 20 // 3 = 6 samples each, contiguous: 0-5, 6-11, 12-17 (18 and 19 never visited, as in Deep500)
    assert parts == [list(range(0, 6)), list(range(6, 12)), list(range(12, 18))]


def test_partitioned_form_without_comm_is_one_rank():
    sampler = d5.PartitionedDistributedSampler(d5.OrderedSampler(_dataset(8), 4), None)
    assert _epoch(sampler) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_distributed_form_takes_a_share_of_the_wrapped_samplers_batches():
    inner = d5.OrderedSampler(_dataset(24), 4)
    sampler = d5.DistributedSampler(inner, _Ranks(1, 2))
    assert type(sampler) is WrappedDistributedSampler and isinstance(sampler, DistributedSampler)
    # Deep500's length: the wrapped sampler's 6 batches shared by 2 ranks; every epoch restarts it
    assert len(sampler) == 3
    assert _epoch(sampler) == _epoch(sampler) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    iter(sampler)
    assert sampler()["y"].tolist() == [0, 1, 2, 3]  # Deep500's sampler(): the next batch


def test_wrapped_samplers_pass_settings_through_to_the_wrapped_one():
    inner = d5.OrderedSampler(_dataset(10), 4)
    sampler = d5.PartitionedDistributedSampler(inner, _Ranks(0, 1))
    assert len(sampler) == 2
    sampler.drop_last_batch = False  # what the trainer does to evaluate a whole set
    assert inner.drop_last_batch is False and len(sampler) == 3
    assert _epoch(sampler)[-1] == [8, 9]


def test_deep500lite_forms_still_work_beside_deep500s():
    ds = _dataset(20)
    assert type(PartitionedDistributedSampler(ds, 2, rank=0, size=2)) is PartitionedDistributedSampler
    assert type(DistributedSampler(ds, 2, rank=0, size=2)) is DistributedSampler


def test_partitioned_dataset_maps_indices_into_its_part():
    part = PartitionedDataset(_dataset(10), 4, 3)
    assert len(part) == 4
    assert part[np.array([0, 3, 5])]["y"].tolist() == [3, 6, 4]
    assert part[[1, 2]]["y"].tolist() == [4, 5]
    assert part[1:3]["y"].tolist() == [4, 5]


def test_wrapped_sampler_errors():
    with pytest.raises(UserError, match="fewer than the 3 ranks"):
        d5.PartitionedDistributedSampler(d5.OrderedSampler(_dataset(2), 1), _Ranks(0, 3))
    with pytest.raises(UserError, match="fewer than batch_size=4"):
        d5.PartitionedDistributedSampler(d5.OrderedSampler(_dataset(8), 4), _Ranks(0, 4))
    with pytest.raises(UserError, match="fewer than the 4 ranks"):
        d5.DistributedSampler(d5.OrderedSampler(_dataset(8), 4), _Ranks(0, 4))


# --------------------------------------------------------------------- CommunicationVolume
class _Loopback(CommunicationNetwork):
    """One rank; ``allreduce`` counts ``x.nbytes`` each way (a stand-in for real traffic)."""

    def allreduce(self, x, op="sum", algorithm="native"):
        self._count("allreduce", sent=x.nbytes, received=x.nbytes, call=True)
        return np.array(x)


_Loopback.__abstractmethods__ = frozenset()


def test_communication_volume_counts_the_bytes_between_begin_and_end():
    comm = _Loopback()
    comm.allreduce(np.zeros(100, np.float32))  # before begin: not counted
    metric = d5.CommunicationVolume()
    metric.begin(None)
    comm.allreduce(np.zeros(10, np.float64))
    later = _Loopback()  # created after begin: counted from zero
    later.allreduce(np.zeros(3, np.float32))
    metric.end(None)
    comm.allreduce(np.zeros(1000, np.float32))  # after end: not counted
    volume = metric.measure(None, None, None)
    assert volume[f"_Loopback#{comm.serial}"] == (80, 80)
    assert volume[f"_Loopback#{later.serial}"] == (12, 12)
    assert metric.total() == 184 and metric.bytes_sent == metric.bytes_received == 92
    assert metric.measure_summary() == "184.0B"
    quiet = d5.CommunicationVolume(prettyprint=False)
    quiet.begin(None)
    comm.allreduce(np.zeros(2, np.float32))
    quiet.end(None)
    assert quiet.measure_summary() == "16"


def test_communication_volume_of_one_communicator():
    comm, other = _Loopback(), _Loopback()
    metric = CommunicationVolume("/usr/sbin/ifstat", True, comm=comm)  # Deep500's arguments, unused tool
    metric.begin()
    comm.allreduce(np.zeros(4, np.float32))
    other.allreduce(np.zeros(400, np.float32))
    metric.end()
    assert metric.measure() == {f"_Loopback#{comm.serial}": (16, 16)}
    with pytest.raises(UserTypeError, match="CommunicationNetwork"):
        CommunicationVolume(comm=object())


def test_format_bytes():
    assert [format_bytes(n) for n in (0, 1023, 1536, 3 * 2**20)] == ["0.0B", "1023.0B", "1.5KiB", "3.0MiB"]


# ------------------------------------------------------------------- distributed optimizers
def test_reference_framework_has_deep500s_distributed_optimizers_with_deep500s_arguments():
    import deep500lite.frameworks.reference as d5ref

    for name in ("ConsistentParameterServer", "InconsistentParameterServer", "ConsistentDecentralized",
                 "ModelAverageDecentralized", "ConsistentNeighbors"):
        cls = getattr(d5ref, name)
        # the same class, but Deep500's asynchronous server's root only serves (root_trains=False)
        if name == "InconsistentParameterServer":
            assert issubclass(cls, distributed_optimizers.InconsistentParameterServer)
            assert inspect.signature(cls).parameters["root_trains"].default is False
            assert inspect.signature(getattr(distributed_optimizers, name)).parameters["root_trains"].default is True
        else:
            assert cls is getattr(distributed_optimizers, name)
        params = list(inspect.signature(cls).parameters.values())
        assert [p.name for p in params[:2]] == ["optimizer", "comm"] and params[1].default is None, name


def test_a_distributed_optimizer_rejects_what_is_not_a_communicator():
    import deep500lite.frameworks.reference as d5ref

    net, _, out = networks.create_model("mlp", 4, classes=3, shape=(1, 2, 2), hidden=(3,))
    net.add_operation(datasets.dataset_loss("digits")([out, "label"], "loss"))
    base = d5ref.GradientDescent(d5ref.from_model(net))
    with pytest.raises(UserTypeError, match="CommunicationNetwork"):
        d5ref.ConsistentDecentralized(base, "MPI")


def _run_child(code: str, *args: str, env=None, timeout=60) -> subprocess.CompletedProcess:
    env = dict(os.environ if env is None else env, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


@requires_mpi
def test_deep500_communication_network_is_mpi_and_optimizers_default_to_it_then_mpi_end_barrier_finalizes():
    out = _run_child("""
        import sys
        import deep500lite as d5
        d5.mpi_end_barrier()  # no mpi4py imported: nothing to do
        assert 'mpi4py.MPI' not in sys.modules
        import deep500lite.frameworks.reference as d5ref
        from deep500lite.lv3 import MPICommunicator
        comm = d5.CommunicationNetwork()
        assert type(comm) is MPICommunicator and isinstance(comm, d5.distributed.CommunicationNetwork)
        assert (comm.rank, comm.size) == (0, 1)
        from deep500lite import datasets, networks
        net, _, out = networks.create_model('mlp', 4, classes=3, shape=(1, 2, 2), hidden=(3,))
        net.add_operation(datasets.dataset_loss('digits')([out, 'label'], 'loss'))
        opt = d5ref.ConsistentDecentralized(d5ref.GradientDescent(d5ref.from_model(net)))
        assert type(opt.communication) is MPICommunicator
        from mpi4py import MPI
        d5.mpi_end_barrier()
        assert MPI.Is_finalized()
        d5.mpi_end_barrier()  # already finalized: nothing to do
        print('done')
        """)
    assert out.returncode == 0 and "done" in out.stdout, out.stderr


@requires_mpi
def test_mpi_fork_runs_the_script_on_n_ranks(tmp_path):
    script = tmp_path / "fork.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        import deep500lite as d5
        with d5.mpi_fork(2) as role:
            if role == 'child':
                comm = d5.CommunicationNetwork()
                total = comm.sync_all(__import__('numpy').ones(1))[0]
                with open(os.path.join(sys.argv[1], 'rank%d' % comm.rank), 'w') as f:
                    f.write('%d %g' % (comm.size, total))
            else:
                print('parent', sorted(os.listdir(sys.argv[1])))
        """))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for name in ("D500_IN_MPI", "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        env.pop(name, None)
    out = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, env=env,
                         timeout=90)
    assert out.returncode == 0, out.stderr
    assert "parent ['fork.py', 'rank0', 'rank1']" in out.stdout
    assert (tmp_path / "rank1").read_text() == "2 2"


def test_mpi_fork_with_one_rank_is_the_child_and_checks_n():
    with d5.mpi_fork(1) as role:
        assert role == "child"
    with pytest.raises(UserError, match="integer >= 1"):
        d5.mpi_fork(0)


# ------------------------------------------------------------------------------- Horovod
class _TensorFlowHorovod(HorovodOptimizerBase):
    horovod_module = "horovod.tensorflow"
    framework = "TensorFlow"

    def _allreduce_mean(self, array, name):
        raise AssertionError("never reached without Horovod")

    _broadcast = _allreduce_mean


def test_horovod_adapter_without_horovod_names_the_package():
    with pytest.raises(FrameworkNotAvailableError) as info:
        _TensorFlowHorovod(object(), None)
    message = str(info.value)
    assert "'horovod'" in message and "HOROVOD_WITH_TENSORFLOW=1 pip install horovod" in message
    assert message.endswith("Received: import horovod.tensorflow failed: No module named 'horovod'")
    assert isinstance(info.value, ImportError)


def test_torch_horovod_adapter_without_horovod_names_the_package():
    d5torch = pytest.importorskip("deep500lite.frameworks.torch")
    with pytest.raises(FrameworkNotAvailableError, match="HOROVOD_WITH_PYTORCH=1 pip install horovod"):
        d5torch.HorovodDistributedOptimizer(None)
