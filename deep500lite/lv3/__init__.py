"""Level 3: distributed training (communicators, allreduce algorithms, distributed optimizers).

Re-exported as ``deep500lite.distributed``. Nothing here imports mpi4py or torch at import time:
:class:`MPICommunicator` imports mpi4py when it is created.
"""

from deep500lite.lv3 import compression
from deep500lite.lv3.allreduce import ALGORITHMS, AlphaBeta, allreduce_cost, choose_algorithm
from deep500lite.lv3.communication import ALLREDUCE_OPS, CommunicationNetwork, CommunicationTimeout, Request
from deep500lite.lv3.distributed_optimizers import (ConsistentDecentralized, ConsistentNeighbors,
                                                    ConsistentParameterServer, ElasticAveraging,
                                                    InconsistentParameterServer, ModelAverageDecentralized,
                                                    StaleSynchronous, broadcast_parameters)
from deep500lite.lv3.mpi import MPICommunicator, install_abort_on_exception
from deep500lite.lv3.optimizer import DistributedOptimizer, fuse_buckets
from deep500lite.lv3.sampler import DistributedSampler, PartitionedDistributedSampler
from deep500lite.lv3.torch_dist import TorchDistributedCommunicator

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
]
