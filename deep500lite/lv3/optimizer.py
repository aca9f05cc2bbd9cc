"""Level 3: distributed optimizers wrap a base optimizer and a communicator."""

from __future__ import annotations

import abc

from deep500lite.lv2.optimizer import Optimizer
from deep500lite.lv3.communication import CommunicationNetwork

__all__ = ["DistributedOptimizer"]


class DistributedOptimizer(Optimizer, abc.ABC):
    """Trains one network replica per rank with a base optimizer, communicating between steps.

    Args:
        optimizer: the base (single-process) optimizer; its executor and loss are used.
        comm: the :class:`CommunicationNetwork`.
    """

    def __init__(self, optimizer: Optimizer, comm: CommunicationNetwork):
        super().__init__(optimizer.executor, optimizer.loss, optimizer.gradient_modifier)
        self.base_optimizer = optimizer
        self.communication = comm

    @abc.abstractmethod
    def step(self, inputs):
        """Run one distributed training step on this rank's minibatch.

        Args:
            inputs: this rank's feeds.

        Returns:
            The outputs of this rank's forward pass. After the call, parameters obey the
            optimizer's consistency model (identical on all ranks for consistent optimizers).
        """
