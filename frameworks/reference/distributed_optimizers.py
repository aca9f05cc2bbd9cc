"""Deep500's distributed optimizers under the reference framework (``d5ref.ConsistentDecentralized``...).

Deep500 defined them in ``deep500.frameworks.reference``; deep500lite's live at level 3
(:mod:`deep500lite.lv3.distributed_optimizers`) and work with every executor and base optimizer.
These are the same classes, so ``d5ref.ConsistentDecentralized(optimizer, comm)`` and
``d5.distributed.ConsistentDecentralized(optimizer, comm)`` are one thing, with one exception:
``d5ref.InconsistentParameterServer`` is level 3's with ``root_trains=False`` by default, so that
its root only serves the workers, as Deep500's did (level 3's root also trains on its own batches).
Constructors take Deep500's arguments in Deep500's order: ``(base_optimizer, comm=None)``,
``comm=None`` creating ``d5.CommunicationNetwork()`` (an ``MPICommunicator`` over all ranks).
"""

from deep500lite.lv3 import distributed_optimizers as _lv3
from deep500lite.lv3.distributed_optimizers import (ConsistentDecentralized, ConsistentNeighbors,
                                                    ConsistentParameterServer, ElasticAveraging,
                                                    ModelAverageDecentralized, StaleSynchronous)
from deep500lite.lv3.optimizer import DistributedOptimizer

__all__ = ["DistributedOptimizer", "ConsistentParameterServer", "InconsistentParameterServer",
           "ConsistentDecentralized", "ModelAverageDecentralized", "ConsistentNeighbors", "ElasticAveraging",
           "StaleSynchronous"]


class InconsistentParameterServer(_lv3.InconsistentParameterServer):
    """Deep500's asynchronous parameter server: the root serves the workers and trains on nothing.

    :class:`deep500lite.lv3.distributed_optimizers.InconsistentParameterServer` with
    ``root_trains=False`` by default: every step the root runs its forward and backward pass (for
    the step's outputs) but applies only the gradients the workers send, ``size - 1`` updates a
    step. Pass ``root_trains=True`` for level 3's scheme. The other arguments are level 3's.
    """

    def __init__(self, optimizer, comm=None, root: int = 0, compressor=None, error_feedback: bool = True,
                 tag: int = _lv3.ASYNC_PS_TAG, *, root_trains: bool = False):
        super().__init__(optimizer, comm, root, compressor, error_feedback, tag, root_trains=root_trains)
