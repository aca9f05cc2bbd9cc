"""Level 3: distributed optimizers (Deep500's names) over any base optimizer and executor.

Gradient-exchanging optimizers (:class:`ConsistentDecentralized`,
:class:`ConsistentParameterServer`, :class:`ConsistentNeighbors`) run the forward and backward
pass themselves with the base optimizer's hooks, exchange the gradients, then apply the base
optimizer's ``update_rule``: the base optimizer must be a
:class:`~deep500lite.lv2.optimizer.ThreeStepOptimizer` (every reference optimizer is, and works
on every executor). Parameter-averaging ones (:class:`ModelAverageDecentralized`) call the base
optimizer's own ``step`` and take any :class:`~deep500lite.lv2.optimizer.Optimizer`.

All ranks must start from the same parameters (the zoo's ``create_model`` with one seed gives
that; otherwise broadcast them first with :func:`broadcast_parameters`).
"""

from __future__ import annotations

import numpy as np

from deep500lite.errors import UserError
from deep500lite.lv2.optimizer import Optimizer
from deep500lite.lv3.allreduce import ALGORITHMS
from deep500lite.lv3.communication import CommunicationNetwork
from deep500lite.lv3.optimizer import DistributedOptimizer, fuse_buckets

__all__ = ["ConsistentDecentralized", "ConsistentParameterServer", "ModelAverageDecentralized",
           "ConsistentNeighbors", "ElasticAveraging", "broadcast_parameters"]

DEFAULT_BUCKET_BYTES = 1 << 20


def _check_bucket(bucket_bytes) -> int:
    if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, (int, np.integer)) or bucket_bytes < 0:
        raise UserError(f"bucket_bytes must be an integer >= 0 (0: no fusion). Received: bucket_bytes={bucket_bytes!r}")
    return int(bucket_bytes)


def _check_algorithm(algorithm) -> str:
    if algorithm not in ALGORITHMS:
        raise UserError(f"algorithm must be one of {', '.join(map(repr, ALGORITHMS))}. Received: {algorithm!r}")
    return algorithm


def _fused_allreduce(comm, arrays, bucket_bytes, algorithm, op="mean") -> list[np.ndarray]:
    """Allreduce ``arrays`` bucket by bucket: each bucket is one flat message."""
    out: list[np.ndarray] = [None] * len(arrays)
    for bucket in fuse_buckets(arrays, bucket_bytes):
        flat = np.concatenate([np.ravel(arrays[i]) for i in bucket])
        reduced = comm.allreduce(flat, op=op, algorithm=algorithm)
        start = 0
        for i in bucket:
            n = arrays[i].size
            out[i] = reduced[start:start + n].reshape(arrays[i].shape)
            start += n
    return out


def _flatten(arrays) -> np.ndarray:
    return np.concatenate([np.ravel(a) for a in arrays]) if arrays else np.zeros(0, np.float32)


def _unflatten(flat, like) -> list[np.ndarray]:
    out, start = [], 0
    for a in like:
        out.append(flat[start:start + a.size].reshape(a.shape).astype(a.dtype, copy=False))
        start += a.size
    return out


def broadcast_parameters(optimizer: DistributedOptimizer, root: int = 0) -> None:
    """Give every rank ``root``'s trainable parameters (collective: call on every rank)."""
    names, params = optimizer._parameters()
    for name, value in zip(names, params):
        optimizer.network.feed_tensor(name, optimizer.communication.broadcast(np.ascontiguousarray(value), root))


class ConsistentDecentralized(DistributedOptimizer):
    """Synchronous data-parallel SGD: allreduce the gradients, average, apply the base update.

    Every rank ends each step with the same parameters. With a mean-reduction loss, ``P`` ranks
    with batches of ``B/P`` take the same steps as one rank with batch ``B``.

    Args:
        optimizer: the base :class:`~deep500lite.lv2.optimizer.ThreeStepOptimizer`.
        comm: the communicator.
        bucket_bytes: tensor fusion: consecutive gradients are packed into flat buckets of at
            most this many bytes, one allreduce each (0: one allreduce per gradient).
        algorithm: the allreduce algorithm (``native``, ``ring``, ..., ``auto``).
    """

    def __init__(self, optimizer: Optimizer, comm: CommunicationNetwork, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                 algorithm: str = "native"):
        super().__init__(optimizer, comm)
        self._three_step()
        self.bucket_bytes = _check_bucket(bucket_bytes)
        self.algorithm = _check_algorithm(algorithm)

    def step(self, inputs):
        start = self._begin()
        outputs, names, params, grads = self._gradients(inputs)
        grads = _fused_allreduce(self.communication, grads, self.bucket_bytes, self.algorithm, "mean")
        self._apply(names, params, grads)
        self._end(start)
        return outputs


class ConsistentParameterServer(DistributedOptimizer):
    """Synchronous parameter server: gradients go to ``root``, which averages them, runs the base
    update and sends the new parameters to every rank.

    Rank ``root`` both computes (on its own minibatch) and serves. All gradients travel as one
    flat message per step, and so do the parameters.

    Args:
        optimizer: the base :class:`~deep500lite.lv2.optimizer.ThreeStepOptimizer` (its state
            lives on ``root``).
        comm: the communicator.
        root: the server rank.
    """

    def __init__(self, optimizer: Optimizer, comm: CommunicationNetwork, root: int = 0):
        super().__init__(optimizer, comm)
        self._three_step()
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < comm.size:
            raise UserError(f"root must be a rank from 0 to {comm.size - 1}. Received: root={root!r}")
        self.root = int(root)

    def step(self, inputs):
        start = self._begin()
        comm = self.communication
        outputs, names, params, grads = self._gradients(inputs)
        gathered = comm.gather(_flatten(grads), self.root)
        if comm.rank == self.root:
            mean = np.mean(np.stack(gathered), axis=0)
            self._apply(names, params, _unflatten(mean, grads))
            flat = _flatten(self.network.fetch_tensors(names))
        else:
            flat = _flatten(params)
        new = comm.broadcast(flat, self.root)
        if comm.rank != self.root:
            for name, value in zip(names, _unflatten(new, params)):
                self.network.feed_tensor(name, value)
        self._end(start)
        return outputs


class ModelAverageDecentralized(DistributedOptimizer):
    """Local SGD: every rank steps with its own base optimizer; every ``period`` steps the ranks
    average their parameters (allreduce, fused into buckets).

    ``period=1`` with plain gradient descent equals :class:`ConsistentDecentralized`; larger
    periods communicate ``period`` times less, at the price of replicas drifting in between.

    Args:
        optimizer: any base :class:`~deep500lite.lv2.optimizer.Optimizer`.
        comm: the communicator.
        period: steps between averagings.
        bucket_bytes, algorithm: as for :class:`ConsistentDecentralized`.
    """

    def __init__(self, optimizer: Optimizer, comm: CommunicationNetwork, period: int = 1,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, algorithm: str = "native"):
        super().__init__(optimizer, comm)
        if isinstance(period, bool) or not isinstance(period, (int, np.integer)) or period < 1:
            raise UserError(f"period must be an integer >= 1. Received: period={period!r}")
        self.period = int(period)
        self.bucket_bytes = _check_bucket(bucket_bytes)
        self.algorithm = _check_algorithm(algorithm)

    def step(self, inputs):
        start = self._begin()
        outputs = self.base_optimizer.step(inputs)
        if (self.steps + 1) % self.period == 0:
            names, params = self._parameters()
            averaged = _fused_allreduce(self.communication, params, self.bucket_bytes, self.algorithm, "mean")
            for name, value, old in zip(names, averaged, params):
                self.network.feed_tensor(name, np.asarray(value, dtype=old.dtype))
        self._end(start)
        return outputs


class ConsistentNeighbors(DistributedOptimizer):
    """Decentralized SGD on a ring: each rank averages its gradients with its two ring
    neighbours' (each distinct neighbour once) and applies the base update.

    Replicas are not identical across ranks; information spreads one neighbour per step.

    Args:
        optimizer: the base :class:`~deep500lite.lv2.optimizer.ThreeStepOptimizer`.
        comm: the communicator.
    """

    def __init__(self, optimizer: Optimizer, comm: CommunicationNetwork):
        super().__init__(optimizer, comm)
        self._three_step()

    def step(self, inputs):
        start = self._begin()
        outputs, names, params, grads = self._gradients(inputs)
        averaged = self.communication.reduce_from_neighbors(_flatten(grads), op="mean")
        self._apply(names, params, _unflatten(averaged, grads))
        self._end(start)
        return outputs


class ElasticAveraging(DistributedOptimizer):
    """Synchronous elastic averaging SGD (EASGD, Zhang et al. 2015).

    Every rank keeps a copy of the center variable ``c`` (initially the starting parameters),
    steps with its base optimizer, and every ``period`` steps all ranks exchange
    ``d_i = x_i - c`` (one allreduce of the sum): ``x_i <- x_i - alpha d_i`` and
    ``c <- c + alpha sum_i d_i``. The replicas are pulled toward the center but differ; the
    center is the same on every rank (:attr:`center`). Stable for ``alpha * P < 1``.

    Args:
        optimizer: any base :class:`~deep500lite.lv2.optimizer.Optimizer`.
        comm: the communicator.
        alpha: the elastic coefficient (``learning_rate * rho`` in the paper), in (0, 1].
        period: steps between exchanges (the paper's ``tau``).
        bucket_bytes, algorithm: as for :class:`ConsistentDecentralized`.
    """

    def __init__(self, optimizer: Optimizer, comm: CommunicationNetwork, alpha: float = 0.1, period: int = 1,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, algorithm: str = "native"):
        super().__init__(optimizer, comm)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha <= 1:
            raise UserError(f"alpha must be a number in (0, 1]. Received: alpha={alpha!r}")
        if isinstance(period, bool) or not isinstance(period, (int, np.integer)) or period < 1:
            raise UserError(f"period must be an integer >= 1. Received: period={period!r}")
        self.alpha = float(alpha)
        self.period = int(period)
        self.bucket_bytes = _check_bucket(bucket_bytes)
        self.algorithm = _check_algorithm(algorithm)
        self.center: dict[str, np.ndarray] | None = None

    def step(self, inputs):
        start = self._begin()
        if self.center is None:
            names, params = self._parameters()
            self.center = {n: np.array(v, dtype=np.float64) for n, v in zip(names, params)}
        outputs = self.base_optimizer.step(inputs)
        if (self.steps + 1) % self.period == 0:
            names, params = self._parameters()
            diffs = [p.astype(np.float64) - self.center[n] for n, p in zip(names, params)]
            summed = _fused_allreduce(self.communication, diffs, self.bucket_bytes, self.algorithm, "sum")
            for name, param, diff, total in zip(names, params, diffs, summed):
                self.network.feed_tensor(name, (param - self.alpha * diff).astype(param.dtype))
                self.center[name] = self.center[name] + self.alpha * total
        self._end(start)
        return outputs
