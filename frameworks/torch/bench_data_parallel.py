"""PyTorch's part of ``deep500lite bench distributed``: a deep500lite data-parallel step against torch DDP.

:func:`data_parallel_pair` builds, on one rank of an MPI job, the two steps the ``ddp`` row times
in alternation:

- **deep500lite**: the module exported to ONNX for training, with the cross-entropy loss added, on
  the torch executor with its native ``MomentumOptimizer``, wrapped in
  :class:`~deep500lite.lv3.ConsistentDecentralized` over the given communicator: the optimizer
  stack ``deep500lite run -n P`` builds for a recipe with ``executor='torch'``,
  ``optimizer='MomentumOptimizer'`` and ``distributed='ConsistentDecentralized'``;
- **native**: a copy of the same module (same weights) in
  ``torch.nn.parallel.DistributedDataParallel`` over a gloo process group of its own, trained with
  ``torch.optim.SGD`` with the same learning rate and momentum.

Both take the same local batch and the same gradient bucket size (deep500lite's
``bucket_bytes``, DDP's ``bucket_cap_mb``). DDP's ``forward_sync_buffers`` is off: deep500lite
does not synchronize BatchNormalization's running statistics during training either (the ranks
start with the same ones).
"""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F

from deep500lite.bench.contract import LEARNING_RATE, MODEL_SHAPES, MOMENTUM, random_labels, with_loss
from deep500lite.frameworks.torch import models
from deep500lite.frameworks.torch.optimizers import MomentumOptimizer
from deep500lite.lv1.network import load_model
from deep500lite.lv3 import ConsistentDecentralized
from deep500lite.registry import executor

__all__ = ["DataParallelPair", "data_parallel_pair", "gloo_group"]


class DataParallelPair:
    """The two steps of one rank (see the module doc) and their first-step gradients.

    Attributes:
        d5_step: ``callable() -> float``: one deep500lite data-parallel step (the local loss).
        native_step: ``callable() -> float``: one DDP step (the local loss).
        optimizer: the :class:`~deep500lite.lv3.ConsistentDecentralized`.
        parameters: the parameter names, as in the module's ``named_parameters``.
    """

    def __init__(self, d5_step, native_step, optimizer, ddp, parameters):
        self.d5_step = d5_step
        self.native_step = native_step
        self.optimizer = optimizer
        self.parameters = parameters
        self._ddp = ddp

    def d5_gradients(self) -> dict[str, np.ndarray]:
        """The averaged gradients the last deep500lite step applied (what torch's optimizer read from ``.grad``)."""
        ex = self.optimizer.executor
        return {n: np.array(ex.fetch_tensor(f"{n}_grad")) for n in self.parameters}

    def native_gradients(self) -> dict[str, np.ndarray]:
        """The gradients DDP averaged in the last native step."""
        params = dict(self._ddp.module.named_parameters())
        return {n: params[n].grad.detach().numpy().copy() for n in self.parameters}


def gloo_group():
    """A gloo process group of every rank, for DDP alone (the default group is created first if needed,
    through :class:`~deep500lite.lv3.TorchDistributedCommunicator`'s rendezvous under mpiexec).

    Returns:
        ``(group, communicator)``: the new group and the communicator that owns the default group
        (close it at the end).
    """
    from deep500lite.lv3 import TorchDistributedCommunicator

    comm = TorchDistributedCommunicator(backend="gloo")
    return torch.distributed.new_group(backend="gloo"), comm


def data_parallel_pair(model: str, batch: int, rng: np.random.Generator, comm, group,
                       bucket_bytes: int) -> DataParallelPair:
    """The deep500lite and DDP steps of this rank on ``model`` (see the module doc).

    Args:
        model: ``"lenet"`` or ``"resnet20"``; seed torch first (every rank the same), so that
            the ranks start from the same weights.
        batch: samples per rank and step.
        rng: the generator of this rank's inputs and labels (seeded per rank by the caller).
        comm: the deep500lite communicator of the deep500lite side.
        group: the torch process group of DDP (:func:`gloo_group`).
        bucket_bytes: the gradient bucket size of both sides.
    """
    module = models.LeNet() if model == "lenet" else models.ResNet20()
    x = rng.standard_normal((batch, *MODEL_SHAPES[model])).astype(np.float32)
    y = random_labels(rng, batch)
    native_module = copy.deepcopy(module)
    net = with_loss(load_model(models.export_onnx(module, torch.from_numpy(x), training=True)))
    ex = executor(net, "torch")
    names = [n for n, _ in native_module.named_parameters()]
    missing = sorted(set(names) - set(net.parameters))
    if missing:  # the exporter renamed a parameter: the gradients could not be compared
        raise RuntimeError(f"The ONNX export of {model} lacks the module's parameters {missing}")
    optimizer = ConsistentDecentralized(MomentumOptimizer(ex, learning_rate=LEARNING_RATE, momentum=MOMENTUM),
                                        comm, bucket_bytes=bucket_bytes)
    native_module.train()
    ddp = torch.nn.parallel.DistributedDataParallel(native_module, process_group=group,
                                                    bucket_cap_mb=bucket_bytes / (1 << 20),
                                                    forward_sync_buffers=False)
    native_opt = torch.optim.SGD(ddp.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    feeds = {"input": x, "label": y}

    def d5_step():
        return float(optimizer.step(feeds)["loss"])

    def native_step():
        native_opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        native_opt.step()
        return float(loss.detach())

    return DataParallelPair(d5_step, native_step, optimizer, ddp, names)
