"""Distributed training with TensorFlow: Deep500's ``HorovodDistributedOptimizer`` over ``horovod.tensorflow``.

deep500lite's own distributed optimizers (``deep500lite.frameworks.reference.ConsistentDecentralized``
and the others of :mod:`deep500lite.lv3.distributed_optimizers`) run on TensorFlow executors too;
this module only adds the Horovod adapter. Horovod is imported when the optimizer is created.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from deep500lite.lv3.horovod import HorovodOptimizerBase

__all__ = ["HorovodDistributedOptimizer"]


class HorovodDistributedOptimizer(HorovodOptimizerBase):
    """Deep500's ``HorovodDistributedOptimizer(optimizer, comm=None)`` for TensorFlow executors.

    Averages every gradient over the ranks with ``horovod.tensorflow.allreduce(op=Average)``
    before ``optimizer`` applies it, and starts every rank from rank 0's parameters
    (``horovod.tensorflow.broadcast``); see :class:`~deep500lite.lv3.horovod.HorovodOptimizerBase`.
    Run the script with ``horovodrun -np N python script.py`` (or ``mpiexec``).

    Untested: Horovod 0.28.1 does not build against tensorflow-cpu 2.21 (its headers include
    ``highwayhash/arch_specific.h``, which the wheel does not ship). The torch adapter, which shares
    :class:`~deep500lite.lv3.horovod.HorovodOptimizerBase`, is checked on real Horovod ranks
    (``tests/lv3/test_horovod_adapter.py``), and so is the error raised without Horovod.

    Args:
        optimizer: the base optimizer, such as ``d5tf.MomentumOptimizer(executor, "loss", 0.1, 0.9)``.
        comm: kept as ``communication`` (Deep500's argument); Horovod does not use it.
        root_rank: the rank whose parameters every rank starts from.

    Raises:
        FrameworkNotAvailableError: ``horovod.tensorflow`` cannot be imported; the message names
            the package.
    """

    horovod_module = "horovod.tensorflow"
    framework = "TensorFlow"

    def _allreduce_mean(self, array: np.ndarray, name: str) -> np.ndarray:
        return self.hvd.allreduce(tf.convert_to_tensor(array), op=self.hvd.Average, name=name).numpy()

    def _broadcast(self, array: np.ndarray, name: str) -> np.ndarray:
        return self.hvd.broadcast(tf.convert_to_tensor(array), self.root_rank, name=name).numpy()
