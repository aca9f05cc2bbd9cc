"""Level 3: the framework-neutral half of ``HorovodDistributedOptimizer`` (Deep500's Horovod adapter).

Horovod (https://horovod.ai) averages gradients over ranks with its own allreduce. The adapter
here drives it through Horovod's documented API only: ``hvd.init()``, ``hvd.rank()``,
``hvd.size()``, ``hvd.allreduce(tensor, op=hvd.Average, name=...)`` and
``hvd.broadcast(tensor, root_rank, name=...)``. The framework packages subclass it with the
conversions between numpy arrays and their tensors
(``deep500lite.frameworks.tensorflow.HorovodDistributedOptimizer`` on ``horovod.tensorflow``,
``deep500lite.frameworks.torch.HorovodDistributedOptimizer`` on ``horovod.torch``). Horovod is
imported when an optimizer is created, never at import time.
"""

from __future__ import annotations

import abc
import importlib
import re
import time

import numpy as np

from deep500lite.errors import FrameworkNotAvailableError, UserError, UserTypeError
from deep500lite.lv2.optimizer import Optimizer
from deep500lite.lv3 import _common
from deep500lite.lv3.communication import CommunicationNetwork
from deep500lite.lv3.optimizer import DistributedOptimizer

__all__ = ["HorovodOptimizerBase", "import_horovod"]


def import_horovod(module: str, framework: str):
    """Import and return Horovod's module for a framework (``horovod.tensorflow``, ``horovod.torch``).

    Raises:
        FrameworkNotAvailableError: Horovod (or its support for ``framework``) is not installed;
            the message names the package and how to install it.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        flag = {"TensorFlow": "HOROVOD_WITH_TENSORFLOW", "PyTorch": "HOROVOD_WITH_PYTORCH"}.get(framework, "")
        raise FrameworkNotAvailableError(
            f"HorovodDistributedOptimizer needs the package 'horovod' built with {framework} support "
            f"({flag}=1 pip install horovod), which deep500lite does not install. Without it, use deep500lite's "
            "own distributed optimizers over MPI (for example d5ref.ConsistentDecentralized(optimizer, comm), "
            "the same gradient averaging; needs mpi4py). "
            f"Received: import {module} failed: {exc}") from exc


def _tensor_name(prefix: str, name: str) -> str:
    return prefix + re.sub(r"[^A-Za-z0-9_.]", "_", name)


class HorovodOptimizerBase(DistributedOptimizer):
    """Data-parallel training with Horovod: the gradients are averaged over all ranks with
    ``hvd.allreduce(..., op=hvd.Average)`` and the base optimizer applies them.

    The first :meth:`step` gives every rank ``root_rank``'s parameters (``hvd.broadcast``), as
    Deep500's adapter did with Horovod's ``BroadcastGlobalVariablesHook(0)``. The base optimizer
    runs as in :class:`~deep500lite.lv3.distributed_optimizers.ConsistentDecentralized`: a
    reference (three-step) optimizer in its three steps, a framework's native optimizer through its
    ``gradient_modifier``. Subclasses provide :meth:`_allreduce_mean` and :meth:`_broadcast` for
    their framework's tensors, and the class attributes ``horovod_module`` and ``framework``.

    Args:
        optimizer: the base optimizer (Deep500 passed the framework's own, such as
            ``d5tf.MomentumOptimizer``).
        comm: a deep500lite communicator, kept as :attr:`communication` as Deep500 did; Horovod
            does not use it (None is fine).
        root_rank: the rank whose parameters every rank starts from.

    Attributes:
        hvd: the Horovod module.
        rank, size: Horovod's rank and number of ranks.
        original_optimizer: the base optimizer (Deep500's name; also ``base_optimizer``).

    Raises:
        FrameworkNotAvailableError: Horovod is not installed (checked first).
    """

    horovod_module = ""
    framework = ""

    def __init__(self, optimizer: Optimizer, comm: CommunicationNetwork | None = None, root_rank: int = 0):
        hvd = import_horovod(self.horovod_module, self.framework)
        if not isinstance(optimizer, Optimizer):
            raise UserTypeError(f"optimizer must be a deep500lite Optimizer. Received: {type(optimizer).__name__}")
        if comm is not None and not isinstance(comm, CommunicationNetwork):
            raise UserTypeError("comm must be None or a deep500lite CommunicationNetwork. "
                                f"Received: {type(comm).__name__}")
        hvd.init()
        Optimizer.__init__(self, optimizer.executor, optimizer.loss, optimizer.gradient_modifier)
        self.hvd = hvd
        self.rank, self.size = int(hvd.rank()), int(hvd.size())
        if isinstance(root_rank, bool) or not isinstance(root_rank, (int, np.integer)) \
                or not 0 <= root_rank < self.size:
            raise UserError(f"root_rank must be a rank from 0 to {self.size - 1}. Received: root_rank={root_rank!r}")
        self.root_rank = int(root_rank)
        self.base_optimizer = self.original_optimizer = optimizer
        self.communication = comm
        self.steps = 0
        self.bytes_per_step = 0
        self.bytes_sent = 0
        self.step_seconds = 0.0
        self.communication_seconds = 0.0
        self._synchronized = False

    @abc.abstractmethod
    def _allreduce_mean(self, array: np.ndarray, name: str) -> np.ndarray:
        """The mean of ``array`` over all ranks, through ``hvd.allreduce``."""

    @abc.abstractmethod
    def _broadcast(self, array: np.ndarray, name: str) -> np.ndarray:
        """``root_rank``'s ``array`` on every rank, through ``hvd.broadcast``."""

    def broadcast_parameters(self) -> None:
        """Give every rank ``root_rank``'s trainable parameters (collective; the first step calls it)."""
        names, params = self._parameters()
        for name, value in zip(names, params):
            value = np.ascontiguousarray(value)
            self.network.feed_tensor(name, np.asarray(self._broadcast(value, _tensor_name("d5_bcast_", name)),
                                                      dtype=value.dtype))
        self._synchronized = True

    def _exchange(self, names, params, grads) -> list[np.ndarray]:
        start = time.perf_counter()
        out = [np.asarray(self._allreduce_mean(np.ascontiguousarray(g), _tensor_name("d5_grad_", n)), dtype=g.dtype)
               for n, g in zip(names, grads)]
        self.communication_seconds = time.perf_counter() - start
        self.bytes_per_step = sum(_common.native_volume("allreduce", g.nbytes, self.size, self.rank)[0] for g in grads)
        return out

    def step(self, inputs):
        clock = time.perf_counter()
        if not self._synchronized:
            self.broadcast_parameters()
        outputs = self._exchange_step(inputs, self._exchange)
        self.bytes_sent += self.bytes_per_step
        self.step_seconds = time.perf_counter() - clock
        self.steps += 1
        return outputs
