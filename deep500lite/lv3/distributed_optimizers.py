"""Level 3: distributed optimizers (Deep500's names) over any base optimizer and executor.

Decentralized gradient exchangers (:class:`ConsistentDecentralized`, :class:`ConsistentNeighbors`,
:class:`~deep500lite.lv3.compression.CompressedDecentralized`) take any base optimizer: a
:class:`~deep500lite.lv2.optimizer.ThreeStepOptimizer` (every reference optimizer, on every
executor) runs in its three steps with the exchange in between; any other (the frameworks' native
optimizers) runs its own ``step`` with the exchange put in its ``gradient_modifier``
(:meth:`~deep500lite.lv3.optimizer.DistributedOptimizer._exchange_step`). The parameter servers and
:class:`StaleSynchronous` apply updates outside the base's own step (on the server, or for
gradients arriving later), so they need a ``ThreeStepOptimizer``. Parameter-averaging ones
(:class:`ModelAverageDecentralized`, :class:`ElasticAveraging`) call the base optimizer's own
``step`` and take any :class:`~deep500lite.lv2.optimizer.Optimizer`.

The asynchronous ones (:class:`InconsistentParameterServer`, :class:`StaleSynchronous`) let
ranks run apart; every rank must call ``step`` the same number of times and then
``finalize()`` (on every rank) before reading or saving the parameters.

Every constructor takes the base optimizer and the communicator first, in Deep500's order; the
communicator may be left out (or None), as in Deep500, to create an
:class:`~deep500lite.lv3.mpi.MPICommunicator` over all ranks (Deep500's ``CommunicationNetwork()``).

All ranks must start from the same parameters (the zoo's ``create_model`` with one seed gives
that; otherwise broadcast them first with :func:`broadcast_parameters`).
"""

from __future__ import annotations

import collections

import numpy as np

from deep500lite.errors import UserError, UserTypeError
from deep500lite.lv2.microbatch import MicrobatchOptimizer
from deep500lite.lv2.optimizer import Optimizer, ThreeStepOptimizer
from deep500lite.lv3.allreduce import ALGORITHMS
from deep500lite.lv3.buckets import GradientBuckets
from deep500lite.lv3.communication import CommunicationNetwork
from deep500lite.lv3.compression import Compressor, ErrorFeedback
from deep500lite.lv3.optimizer import DistributedOptimizer, check_bucket, flatten, fuse_buckets, unflatten

__all__ = ["ConsistentDecentralized", "ConsistentParameterServer", "InconsistentParameterServer",
           "ModelAverageDecentralized", "ConsistentNeighbors", "ElasticAveraging", "StaleSynchronous",
           "broadcast_parameters"]

#: The default bucket of the decentralized optimizers: 25 MiB, DistributedDataParallel's ``bucket_cap_mb``.
DEFAULT_BUCKET_BYTES = 25 << 20
#: Default message tags of the asynchronous optimizers (point-to-point messages on the user's
#: communicator): the asynchronous parameter server uses ``tag`` (gradients) and ``tag + 1``
#: (parameters); stale-synchronous SGD uses ``tag``. Give two optimizers that run at once on one
#: communicator different tags.
ASYNC_PS_TAG = 0x5D50
SSP_TAG = 0x5D60
_MAX_TAG = 32767  # the least MPI_TAG_UB that MPI guarantees


def _check_root(root, comm) -> int:
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < comm.size:
        raise UserError(f"root must be a rank from 0 to {comm.size - 1}. Received: root={root!r}")
    return int(root)


def _check_tag(tag, span: int = 1) -> int:
    if isinstance(tag, bool) or not isinstance(tag, (int, np.integer)) or not 0 <= tag <= _MAX_TAG - span + 1:
        raise UserError(f"tag must be an integer from 0 to {_MAX_TAG - span + 1}"
                        f"{' (it uses tag and tag + 1)' if span > 1 else ''}. Received: tag={tag!r}")
    return int(tag)


def _check_compressor(compressor, error_feedback):
    """``(compressor, ErrorFeedback or None)``; ``(None, None)`` without compression."""
    if compressor is None:
        return None, None
    if not isinstance(compressor, Compressor):
        raise UserTypeError("compressor must be None or a deep500lite Compressor (compression.TopK, QSGD, SignSGD, "
                            f"Ternary). Received: {type(compressor).__name__}")
    return compressor, (ErrorFeedback(compressor) if error_feedback else None)


def _encode(compressor, feedback, key: str, flat: np.ndarray) -> tuple[np.ndarray, ...]:
    parts = feedback.encode(key, flat) if feedback is not None else compressor.encode(flat)
    return tuple(np.ascontiguousarray(part) for part in parts)


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


def broadcast_parameters(optimizer: DistributedOptimizer, root: int = 0) -> None:
    """Give every rank ``root``'s trainable parameters (collective: call on every rank)."""
    names, params = optimizer._parameters()
    for name, value in zip(names, params):
        optimizer.network.feed_tensor(name, optimizer.communication.broadcast(np.ascontiguousarray(value), root))


class ConsistentDecentralized(DistributedOptimizer):
    """Synchronous data-parallel SGD: allreduce the gradients, average, apply the base update.

    Every rank ends each step with the same parameters. With a mean-reduction loss, ``P`` ranks
    with batches of ``B/P`` take the same steps as one rank with batch ``B``.

    The gradients travel in :class:`~deep500lite.lv3.buckets.GradientBuckets`: consecutive
    gradients, in the order the backward pass finishes them, fused into buckets of at most
    ``bucket_bytes``. With ``overlap=True`` (the default) and the ``native`` algorithm, each
    bucket's non-blocking allreduce starts as soon as its gradients exist, while the backward pass
    goes on (where the executor reports gradients during it:
    :meth:`~deep500lite.lv1.executor.GraphExecutor.set_gradient_hook`, the torch executor), or
    all start right after it (other executors). With ``overlap=False``, another algorithm, or a
    base optimizer micro-batched with ``d5.transforms.microbatch``, the same buckets are
    exchanged after the backward pass, one blocking allreduce each. The buckets hold the same
    bytes either way, so the averaged gradients are the same, bit for bit.

    Args:
        optimizer: any base :class:`~deep500lite.lv2.optimizer.Optimizer` (a framework's native one
            through its ``gradient_modifier``; see the module documentation).
        comm: the communicator.
        bucket_bytes: tensor fusion: consecutive gradients are packed into flat buckets of at
            most this many bytes, one allreduce each (0: one allreduce per gradient). Default
            25 MiB, DistributedDataParallel's.
        algorithm: the allreduce algorithm (``native``, ``ring``, ..., ``auto``).
        overlap: start each bucket's allreduce during the backward pass where possible.

    Attributes:
        overlapped_buckets: after a step, how many buckets started before the backward pass
            ended (0 without overlap).
    """

    @property
    def bucket_layout(self) -> list[list[str]]:
        """The parameters of each bucket, in the order the buckets start (empty before the first
        overlapped step)."""
        buckets = self._buckets
        return [[buckets.names[i] for i in bucket] for bucket in buckets.buckets]

    def __init__(self, optimizer: Optimizer, comm: CommunicationNetwork | None = None,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, algorithm: str = "native", overlap: bool = True):
        super().__init__(optimizer, comm)
        self.bucket_bytes = check_bucket(bucket_bytes)
        self.algorithm = _check_algorithm(algorithm)
        if not isinstance(overlap, bool):
            raise UserTypeError(f"overlap must be True or False. Received: overlap={overlap!r}")
        self.overlap = overlap
        self.overlapped_buckets = 0
        self._buckets = GradientBuckets(self.communication, self.bucket_bytes)

    def step(self, inputs):
        start = self._begin()
        buckets = self._buckets
        buckets.bucket_bytes = self.bucket_bytes
        buckets.prepare(self.network, self.loss)
        self.overlapped_buckets = 0
        if self.overlap and self.algorithm == "native" and not isinstance(self.base_optimizer, MicrobatchOptimizer):
            outputs = self._bucketed_step(inputs)
        else:
            outputs = self._exchange_step(inputs, lambda names, params, grads: buckets.average(
                names, grads, self.algorithm))
        self._end(start)
        return outputs

    def _bucketed_step(self, inputs):
        buckets = self._buckets
        if not self.executor.set_gradient_hook(buckets):
            return self._exchange_step(inputs, lambda names, params, grads: buckets.average(names, grads))
        buckets.start()
        try:
            if self.gradient_modifier is None and not isinstance(self.base_optimizer, ThreeStepOptimizer):
                outputs = self.base_optimizer.step(inputs)  # its gradients are averaged when its backward ends
            else:
                outputs = self._exchange_step(inputs, lambda names, params, grads: grads)
        finally:
            ended = not buckets.armed
            buckets.disarm()
        if not ended:
            raise UserError(f"The executor ({type(self.executor).__name__}) took the gradient hook but never called "
                            "on_backward_end, so the gradients were applied without being averaged; its "
                            "set_gradient_hook must return False unless it calls both hook methods. Received: "
                            f"{type(self.executor).__name__}.set_gradient_hook -> True")
        self.overlapped_buckets = buckets.overlapped
        return outputs


class ConsistentParameterServer(DistributedOptimizer):
    """Synchronous parameter server: gradients go to ``root``, which averages them, runs the base
    update and sends the new parameters to every rank.

    Rank ``root`` both computes (on its own minibatch) and serves. All gradients travel as one
    flat message per step, and so do the parameters.

    With a ``compressor``, every other rank sends its flat gradient compressed (with error
    feedback unless ``error_feedback=False``; the compressed parts have shapes that depend only on
    the gradient's length, so they are gathered like plain arrays); ``root`` decodes them and
    averages them with its own, uncompressed gradient. The parameters still travel dense.

    Args:
        optimizer: the base :class:`~deep500lite.lv2.optimizer.ThreeStepOptimizer` (its state
            lives on ``root``).
        comm: the communicator.
        root: the server rank.
        compressor: None, or a :class:`~deep500lite.lv3.compression.Compressor` for the
            gradients sent to ``root``.
        error_feedback: with a compressor, add what the last compression dropped to the next
            gradient (per rank).
    """

    def __init__(self, optimizer: Optimizer, comm: CommunicationNetwork | None = None, root: int = 0, compressor=None,
                 error_feedback: bool = True):
        super().__init__(optimizer, comm)
        self._three_step()
        self.root = _check_root(root, self.communication)
        self.compressor, self.feedback = _check_compressor(compressor, error_feedback)

    def step(self, inputs):
        start = self._begin()
        comm = self.communication
        outputs, names, params, grads = self._gradients(inputs)
        flat = flatten(grads)
        if self.compressor is None:
            gathered = comm.gather(flat, self.root)
            if comm.rank == self.root:
                mean = np.mean(np.stack(gathered), axis=0)
        else:
            # The root's own gradient needs no compression; it sends same-shaped placeholder parts.
            parts = (self.compressor.encode(np.zeros_like(flat)) if comm.rank == self.root
                     else _encode(self.compressor, self.feedback, "all", flat))
            gathered = [comm.gather(np.ascontiguousarray(part), self.root) for part in parts]
            if comm.rank == self.root:
                total = flat.astype(np.float64)
                for r in range(comm.size):
                    if r != self.root:
                        total += self.compressor.decode(tuple(g[r] for g in gathered), flat.size, np.float64)
                mean = total / comm.size
        if comm.rank == self.root:
            self._apply(names, params, unflatten(mean, grads))
            flat = flatten(self.network.fetch_tensors(names))
        else:
            flat = flatten(params)
        new = comm.broadcast(flat, self.root)
        if comm.rank != self.root:
            for name, value in zip(names, unflatten(new, params)):
                self.network.feed_tensor(name, value)
        self._end(start)
        return outputs


class InconsistentParameterServer(DistributedOptimizer):
    """Asynchronous parameter server (Hogwild-style, as in DistBelief's Downpour SGD).

    Every rank other than ``root`` (a worker) computes a gradient on its current parameters,
    sends it to ``root`` and takes the parameters ``root`` sends back; it never waits for the
    other workers. ``root`` both computes and serves: each :meth:`step` applies its own gradient
    with the base update, then serves exactly ``size - 1`` requests in the order they arrive
    (from any workers, a fast worker possibly several times): it applies that gradient with the
    base update and sends its current parameters back to that worker.

    A worker's gradient was taken on parameters that ``root`` has updated since; its
    *staleness* is the number of updates ``root`` applied between sending those parameters and
    applying the gradient (0 when a fast worker is served twice within one of ``root``'s steps;
    with ``root_trains`` a first request waits for ``root``'s own first update, so it is at least 1).
    :attr:`staleness` keeps it for every served request (on ``root``). There is no bound: a
    worker that is slower than the others sees larger staleness (use :class:`StaleSynchronous`
    for a bound). Momentum-type base optimizers are sensitive to it (asynchrony acts like extra
    momentum); lower their momentum or learning rate.

    Constraints: every rank calls :meth:`step` the same number of times (``root`` serves
    ``size - 1`` requests per step, every worker sends one per step, so the totals match and
    every request is served), then :meth:`finalize` on every rank, which gives every rank
    ``root``'s parameters. Messages use tags ``tag`` and ``tag + 1`` on the user's communicator.

    With two ranks the order is fixed: ``root`` applies its own gradient, then the worker's,
    which was taken on the parameters of one update before.

    With ``root_trains=False`` (Deep500's scheme, and the default of Deep500's import path
    ``deep500lite.frameworks.reference.InconsistentParameterServer``) ``root`` only serves: it
    still runs its forward and backward pass (its step returns those outputs, for the metrics),
    but never applies its own gradient, so a step makes ``size - 1`` updates and, on two ranks,
    the worker's gradient is never stale (plain sequential training on the worker's batches).

    Args:
        optimizer: the base :class:`~deep500lite.lv2.optimizer.ThreeStepOptimizer` (its state
            lives on ``root``; every served gradient is one base update, with ``new_input``).
        comm: the communicator.
        root: the server rank.
        compressor: None, or a :class:`~deep500lite.lv3.compression.Compressor` for the
            gradients workers send.
        error_feedback: with a compressor, keep and re-add what compression dropped (per worker).
        tag: the message tag (gradients; parameters use ``tag + 1``).
        root_trains: whether ``root`` applies its own gradient each step (``False``: it only
            serves the workers, as in Deep500).

    Attributes:
        staleness: on ``root``, the staleness of every served gradient, in serving order.
        served_ranks: on ``root``, the worker of every served gradient, in serving order.
        updates: on ``root``, the base updates applied so far (``size`` per step; ``size - 1``
            when ``root_trains`` is False).
    """

    def __init__(self, optimizer: Optimizer, comm: CommunicationNetwork | None = None, root: int = 0, compressor=None,
                 error_feedback: bool = True, tag: int = ASYNC_PS_TAG, *, root_trains: bool = True):
        if not isinstance(root_trains, (bool, np.bool_)):
            raise UserError(f"root_trains must be True or False. Received: root_trains={root_trains!r}")
        super().__init__(optimizer, comm)
        self._three_step()
        self.root_trains = bool(root_trains)
        self.root = _check_root(root, self.communication)
        self.tag = _check_tag(tag, span=2)
        self.compressor, self.feedback = _check_compressor(compressor, error_feedback)
        self.staleness: list[int] = []
        self.served_ranks: list[int] = []
        self.updates = 0
        self._sent_version = dict.fromkeys(range(self.communication.size), 0)

    @property
    def max_staleness(self) -> int:
        """The largest staleness served so far (0 before any request, and on workers)."""
        return max(self.staleness, default=0)

    def step(self, inputs):
        start = self._begin()
        comm = self.communication
        outputs, names, params, grads = self._gradients(inputs)
        flat = flatten(grads)
        if comm.rank != self.root:
            if self.compressor is None:
                comm.send(flat, self.root, self.tag)
            else:
                for part in _encode(self.compressor, self.feedback, "all", flat):
                    comm.send(part, self.root, self.tag)
            new = comm.recv(flatten(params), self.root, self.tag + 1)
            for name, value in zip(names, unflatten(new, params)):
                self.network.feed_tensor(name, value)
        else:
            if self.root_trains:
                self._apply(names, params, grads)
                self.updates += 1
            like = self.compressor.encode(np.zeros_like(flat)) if self.compressor is not None else (flat,)
            for _ in range(comm.size - 1):
                first, source = comm.recv_any(like[0], self.tag)
                parts = (first,) + tuple(comm.recv(p, source, self.tag) for p in like[1:])
                grad = first if self.compressor is None else self.compressor.decode(parts, flat.size, flat.dtype)
                self.staleness.append(self.updates - self._sent_version[source])
                self.served_ranks.append(source)
                self.base_optimizer.new_input()
                current = self.network.fetch_tensors(names)
                self._apply(names, current, unflatten(grad, grads))
                self.updates += 1
                comm.send(flatten(self.network.fetch_tensors(names)), source, self.tag + 1)
                self._sent_version[source] = self.updates
        self._end(start)
        return outputs

    def finalize(self) -> None:
        """Give every rank ``root``'s parameters (collective: call on every rank after the last step)."""
        sent = self.communication.bytes_sent
        broadcast_parameters(self, self.root)
        self.bytes_sent += self.communication.bytes_sent - sent


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

    def __init__(self, optimizer: Optimizer, comm: CommunicationNetwork | None = None, period: int = 1,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, algorithm: str = "native"):
        super().__init__(optimizer, comm)
        if isinstance(period, bool) or not isinstance(period, (int, np.integer)) or period < 1:
            raise UserError(f"period must be an integer >= 1. Received: period={period!r}")
        self.period = int(period)
        self.bucket_bytes = check_bucket(bucket_bytes)
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
        optimizer: the base any base :class:`~deep500lite.lv2.optimizer.Optimizer` (as for
            :class:`~deep500lite.lv3.distributed_optimizers.ConsistentDecentralized`).
        comm: the communicator.
    """

    def step(self, inputs):
        start = self._begin()
        outputs = self._exchange_step(inputs, lambda names, params, grads: unflatten(
            self.communication.reduce_from_neighbors(flatten(grads), op="mean"), grads))
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

    def __init__(self, optimizer: Optimizer, comm: CommunicationNetwork | None = None, alpha: float = 0.1,
                 period: int = 1, bucket_bytes: int = DEFAULT_BUCKET_BYTES, algorithm: str = "native"):
        super().__init__(optimizer, comm)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha <= 1:
            raise UserError(f"alpha must be a number in (0, 1]. Received: alpha={alpha!r}")
        if isinstance(period, bool) or not isinstance(period, (int, np.integer)) or period < 1:
            raise UserError(f"period must be an integer >= 1. Received: period={period!r}")
        self.alpha = float(alpha)
        self.period = int(period)
        self.bucket_bytes = check_bucket(bucket_bytes)
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


class StaleSynchronous(DistributedOptimizer):
    """Stale-synchronous (bounded-staleness) decentralized SGD (Ho et al., 2013, SSP).

    Each step, every rank computes its gradient, sends it to every other rank (non-blocking) and
    applies, in one base update, the mean contribution ``sum / size`` of its own gradient and
    every peer gradient that has arrived (a peer's gradient of step ``u`` is applied no earlier
    than this rank's step ``u``). Before ending step ``t`` it waits until it has applied every
    peer's gradients of steps ``<= t - staleness``; so the gradient of step ``t`` is taken on
    parameters that miss at most the peers' last ``staleness`` steps, and a rank never runs more
    than ``staleness`` steps ahead of the slowest. :attr:`observed_staleness` records, for each
    applied peer gradient, ``t - u`` (never more than ``staleness``).

    ``staleness=0`` is synchronous SGD: every rank applies the mean of all step-``t`` gradients,
    summed in rank order (so replicas stay bitwise identical), and takes the same steps as
    :class:`ConsistentDecentralized` with any base optimizer, up to float rounding (it sends
    ``(size - 1) · n`` bytes per step, where an allreduce sends ``2 (size - 1) / size · n``). For
    ``staleness > 0`` each rank applies every gradient (each divided by ``size``) once by
    :meth:`finalize`, so with plain gradient descent the replicas agree after it (up to float
    rounding); stateful base optimizers (momentum) see a different grouping on each rank.

    Constraints: every rank calls :meth:`step` the same number of times, then :meth:`finalize`
    on every rank (it waits for the gradients still in flight and applies them). Messages use
    tag ``tag`` on the user's communicator. A send's bytes are counted when it completes, so
    :attr:`bytes_per_step` may show a send in a later step; after :meth:`finalize`,
    :attr:`bytes_sent` is ``(size - 1) · n`` per step.

    Args:
        optimizer: the base :class:`~deep500lite.lv2.optimizer.ThreeStepOptimizer`.
        comm: the communicator.
        staleness: the bound ``s >= 0`` on how many steps a peer's gradient may lag.
        tag: the message tag.

    Attributes:
        observed_staleness: ``t - u`` for each peer gradient of step ``u`` applied in step ``t``.
    """

    def __init__(self, optimizer: Optimizer, comm: CommunicationNetwork | None = None, staleness: int = 1,
                 tag: int = SSP_TAG):
        super().__init__(optimizer, comm)
        self._three_step()
        if isinstance(staleness, bool) or not isinstance(staleness, (int, np.integer)) or staleness < 0:
            raise UserError(f"staleness must be an integer >= 0 (0: synchronous). Received: staleness={staleness!r}")
        self.staleness = int(staleness)
        self.tag = _check_tag(tag)
        self.observed_staleness: list[int] = []
        self._peers = [q for q in range(self.communication.size) if q != self.communication.rank]
        self._pending = {q: collections.deque() for q in self._peers}  # (step, receive request), in step order
        self._sends: list = []

    @property
    def max_observed_staleness(self) -> int:
        """The largest staleness observed so far (0 before any peer gradient)."""
        return max(self.observed_staleness, default=0)

    def _collect(self, need: int, record_at: int | None) -> list[tuple[int, int, np.ndarray]]:
        """Peer gradients received: every one of step <= ``need`` (waiting), and the others that
        have arrived. Returns ``(step, rank, flat gradient)``."""
        out = []
        for q in self._peers:
            queue = self._pending[q]
            while queue:
                u, req = queue[0]
                if u <= need:
                    req.wait()
                elif not req.test():
                    break
                queue.popleft()
                out.append((u, q, req.buffer))
                if record_at is not None:
                    self.observed_staleness.append(record_at - u)
        return out

    def _apply_mean(self, names, params, like, contributions) -> None:
        total = np.zeros(like.size, np.float64)
        for _, _, g in sorted(contributions, key=lambda c: (c[0], c[1])):
            total += g
        self._apply(names, params, unflatten(total / self.communication.size, params))

    def step(self, inputs):
        start = self._begin()
        comm = self.communication
        t = self.steps
        outputs, names, params, grads = self._gradients(inputs)
        flat = flatten(grads)
        for q in self._peers:
            self._sends.append(comm.isend(flat, q, self.tag))
            # Messages from one rank with one tag arrive in order: this receive gets q's step t.
            self._pending[q].append((t, comm.irecv(flat, q, self.tag)))
        received = self._collect(t - self.staleness, record_at=t)
        self._apply_mean(names, params, flat, received + [(t, comm.rank, flat)])
        self._sends = [req for req in self._sends if not req.test()]
        self._end(start)
        return outputs

    def finalize(self) -> None:
        """Wait for every gradient still in flight and apply it; wait for this rank's sends.

        Call on every rank after the last step (every rank must have taken the same number of
        steps). With plain gradient descent the replicas then agree.
        """
        sent = self.communication.bytes_sent
        received = self._collect(self.steps, record_at=None)
        if received:
            names, params = self._parameters()
            self.base_optimizer.new_input()
            self._apply_mean(names, params, flatten(params), received)
        for req in self._sends:
            req.wait()
        self._sends = []
        self.bytes_sent += self.communication.bytes_sent - sent
