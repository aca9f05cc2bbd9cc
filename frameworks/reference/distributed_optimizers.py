"""Deep500's distributed optimizers under the reference framework (``d5ref.ConsistentDecentralized``...).

Deep500 defined them in ``deep500.frameworks.reference``; deep500lite's live at level 3
(:mod:`deep500lite.lv3.distributed_optimizers`) and work with every executor and base optimizer.
These are the same classes, so ``d5ref.ConsistentDecentralized(optimizer, comm)`` and
``d5.distributed.ConsistentDecentralized(optimizer, comm)`` are one thing. Constructors take
Deep500's arguments in Deep500's order: ``(base_optimizer, comm=None)``, ``comm=None`` creating
``d5.CommunicationNetwork()`` (an ``MPICommunicator`` over all ranks).
"""

from deep500lite.lv3.distributed_optimizers import (ConsistentDecentralized, ConsistentNeighbors,
                                                    ConsistentParameterServer, ElasticAveraging,
                                                    InconsistentParameterServer, ModelAverageDecentralized,
                                                    StaleSynchronous)
from deep500lite.lv3.optimizer import DistributedOptimizer

__all__ = ["DistributedOptimizer", "ConsistentParameterServer", "InconsistentParameterServer",
           "ConsistentDecentralized", "ModelAverageDecentralized", "ConsistentNeighbors", "ElasticAveraging",
           "StaleSynchronous"]
