"""Level 3: distributed training (communicators, allreduce algorithms, distributed optimizers).

Re-exported as ``deep500lite.distributed``; Deep500's top-level names (``DistributedSampler``,
``PartitionedDistributedSampler``, ``DistributedOptimizer``, ``CommunicationVolume``,
``mpi_end_barrier``, ``mpi_fork``) are also on ``deep500lite``, and ``d5.CommunicationNetwork`` is
:class:`MPICommunicator` (Deep500's was MPI; here :class:`CommunicationNetwork` is the abstract
base). Nothing here imports mpi4py or torch at import time:
:class:`MPICommunicator` imports mpi4py when it is created, and ``TorchDistributedCommunicator``
(defined in :mod:`deep500lite.frameworks.torch.distributed`, as ``torch.distributed`` is a torch
feature) is imported, with the torch framework, on first access to this attribute.
"""

import importlib

from deep500lite.lv3 import compression
from deep500lite.lv3.allreduce import ALGORITHMS, AlphaBeta, allreduce_cost, choose_algorithm
from deep500lite.lv3.communication import (ALLREDUCE_OPS, CommunicationNetwork, CommunicationTimeout, Request,
                                           live_communicators)
from deep500lite.lv3.distributed_optimizers import (ConsistentDecentralized, ConsistentNeighbors,
                                                    ConsistentParameterServer, ElasticAveraging,
                                                    InconsistentParameterServer, ModelAverageDecentralized,
                                                    StaleSynchronous, broadcast_parameters)
from deep500lite.lv3.horovod import HorovodOptimizerBase
from deep500lite.lv3.metrics import CommunicationVolume
from deep500lite.lv3.mpi import MPICommunicator, install_abort_on_exception
from deep500lite.lv3.mpi_helper import mpi_end_barrier, mpi_fork
from deep500lite.lv3.optimizer import DistributedOptimizer, fuse_buckets
from deep500lite.lv3.sampler import (DistributedSampler, PartitionedDataset, PartitionedDistributedSampler,
                                     WrappedDistributedSampler, WrappedPartitionedSampler)

__all__ = [
    "CommunicationNetwork",
    "CommunicationTimeout",
    "Request",
    "MPICommunicator",
    "TorchDistributedCommunicator",
    "DistributedOptimizer",
    "ConsistentDecentralized",
    "ConsistentParameterServer",
    "InconsistentParameterServer",
    "ModelAverageDecentralized",
    "ConsistentNeighbors",
    "ElasticAveraging",
    "StaleSynchronous",
    "broadcast_parameters",
    "fuse_buckets",
    "DistributedSampler",
    "PartitionedDistributedSampler",
    "compression",
    "ALLREDUCE_OPS",
    "ALGORITHMS",
    "AlphaBeta",
    "allreduce_cost",
    "choose_algorithm",
    "install_abort_on_exception",
    "live_communicators",
    "CommunicationVolume",
    "mpi_end_barrier",
    "mpi_fork",
    "HorovodOptimizerBase",
    "WrappedDistributedSampler",
    "WrappedPartitionedSampler",
    "PartitionedDataset",
]

# Names that live in a framework package: attribute -> (framework key, module).
_FRAMEWORK_NAMES = {
    "TorchDistributedCommunicator": ("torch", "deep500lite.frameworks.torch.distributed"),
}


def __getattr__(name: str):
    """Resolve framework-provided names (``TorchDistributedCommunicator``) on first access.

    Raises:
        FrameworkNotAvailableError: the framework's package (torch) is not installed; the
            message names the extra to install.
        AttributeError: any other unknown name.
    """
    if name not in _FRAMEWORK_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from deep500lite.registry import import_framework

    framework, module = _FRAMEWORK_NAMES[name]
    import_framework(framework)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
