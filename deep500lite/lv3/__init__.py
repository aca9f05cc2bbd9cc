"""Level 3: distributed training (communicators, distributed optimizers).

Re-exported as ``deep500lite.distributed``. Nothing here imports mpi4py or torch at import time.
"""

from deep500lite.lv3.communication import ALLREDUCE_OPS, CommunicationNetwork
from deep500lite.lv3.optimizer import DistributedOptimizer

__all__ = ["CommunicationNetwork", "DistributedOptimizer", "ALLREDUCE_OPS"]
