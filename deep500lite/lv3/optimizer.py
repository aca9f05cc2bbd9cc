"""Level 3: distributed optimizers wrap a base optimizer and a communicator.

A base optimizer micro-batched with ``d5.transforms.microbatch`` (a
:class:`~deep500lite.lv2.microbatch.MicrobatchOptimizer`) is data-parallel with gradient
accumulation: its micro-batches' gradients are summed first, then exchanged once per step (one
allreduce per step, not per micro-batch), then the single update runs.
"""

from __future__ import annotations

import abc
import time

import numpy as np

from deep500lite.errors import UserError, UserTypeError
from deep500lite.lv2.microbatch import MicrobatchOptimizer
from deep500lite.lv2.optimizer import Optimizer, ThreeStepOptimizer
from deep500lite.lv3.communication import CommunicationNetwork

__all__ = ["DistributedOptimizer", "fuse_buckets", "check_bucket", "flatten", "unflatten"]


def fuse_buckets(arrays: list[np.ndarray], bucket_bytes: int) -> list[list[int]]:
    """Group consecutive arrays into buckets of at most ``bucket_bytes`` (tensor fusion).

    An array larger than ``bucket_bytes`` gets a bucket of its own; arrays of different dtypes
    never share a bucket. ``bucket_bytes=0`` puts every array in its own bucket.

    Returns:
        The indices of the arrays in each bucket, in order.
    """
    buckets: list[list[int]] = []
    size = 0
    for i, a in enumerate(arrays):
        if buckets and bucket_bytes > 0 and size + a.nbytes <= bucket_bytes \
                and arrays[buckets[-1][0]].dtype == a.dtype:
            buckets[-1].append(i)
            size += a.nbytes
        else:
            buckets.append([i])
            size = a.nbytes
    return buckets


def check_bucket(bucket_bytes) -> int:
    """``bucket_bytes`` as an int, after checking it is an integer >= 0 (0: no fusion).

    Raises:
        UserError: ``bucket_bytes`` is not an integer >= 0.
    """
    if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, (int, np.integer)) or bucket_bytes < 0:
        raise UserError(f"bucket_bytes must be an integer >= 0 (0: no fusion). Received: bucket_bytes={bucket_bytes!r}")
    return int(bucket_bytes)


def flatten(arrays) -> np.ndarray:
    """The arrays raveled and concatenated into one flat message (an empty float32 array for none)."""
    return np.concatenate([np.ravel(a) for a in arrays]) if arrays else np.zeros(0, np.float32)


def unflatten(flat, like) -> list[np.ndarray]:
    """Split a flat message made by :func:`flatten` back into arrays shaped and typed like ``like``."""
    out, start = [], 0
    for a in like:
        out.append(flat[start:start + a.size].reshape(a.shape).astype(a.dtype, copy=False))
        start += a.size
    return out


class DistributedOptimizer(Optimizer, abc.ABC):
    """Trains one network replica per rank with a base optimizer, communicating between steps.

    Subclasses implement :meth:`step`. After each step, :attr:`bytes_per_step` holds the bytes
    this rank sent during it (from the communicator's counters), :attr:`step_seconds` its wall
    time, :attr:`communication_seconds` the part of it spent inside communication calls
    (including waiting for slower ranks; the rest is computation), and :attr:`steps` the number
    of steps taken.

    Args:
        optimizer: the base (single-process) optimizer; its executor and loss are used.
        comm: the :class:`CommunicationNetwork`; None (as in Deep500) creates an
            :class:`~deep500lite.lv3.mpi.MPICommunicator` over all ranks (Deep500's
            ``CommunicationNetwork()``).
    """

    def __init__(self, optimizer: Optimizer, comm: CommunicationNetwork | None = None):
        if not isinstance(optimizer, Optimizer):
            raise UserTypeError(f"optimizer must be a deep500lite Optimizer. Received: {type(optimizer).__name__}")
        if comm is not None and not isinstance(comm, CommunicationNetwork):
            raise UserTypeError("comm must be a deep500lite CommunicationNetwork (such as d5.CommunicationNetwork(), "
                                "an MPICommunicator) "
                                f"or None. Received: {type(comm).__name__}")
        super().__init__(optimizer.executor, optimizer.loss, optimizer.gradient_modifier)
        self.base_optimizer = optimizer
        if comm is None:
            from deep500lite.lv3.mpi import MPICommunicator

            comm = MPICommunicator()
        self.communication = comm
        self.steps = 0
        self.bytes_per_step = 0
        self.bytes_sent = 0
        self.step_seconds = 0.0
        self.communication_seconds = 0.0

    @abc.abstractmethod
    def step(self, inputs):
        """Run one distributed training step on this rank's minibatch.

        Args:
            inputs: this rank's feeds.

        Returns:
            The outputs of this rank's forward pass. After the call, parameters obey the
            optimizer's consistency model (identical on all ranks for consistent optimizers).
        """

    # ---------------------------------------------------------------- helpers for subclasses
    def _begin(self) -> tuple:
        comm = self.communication
        return comm.bytes_sent, comm.seconds, time.perf_counter()

    def _end(self, start: tuple) -> None:
        sent, seconds, clock = start
        comm = self.communication
        self.step_seconds = time.perf_counter() - clock
        self.communication_seconds = comm.seconds - seconds
        self.bytes_per_step = comm.bytes_sent - sent
        self.bytes_sent += self.bytes_per_step
        self.steps += 1

    def _three_step(self) -> ThreeStepOptimizer:
        base = self.base_optimizer
        if isinstance(base, MicrobatchOptimizer):
            base = base.optimizer  # its update rule and hooks; the gradients are accumulated by the wrapper
        if not isinstance(base, ThreeStepOptimizer):
            raise UserError(f"{type(self).__name__} exchanges gradients, so its base optimizer must be a "
                            "ThreeStepOptimizer or UpdateRuleOptimizer (such as the reference optimizers of "
                            f"deep500lite.frameworks.reference). Received: {type(base).__name__}")
        return base

    def _gradients(self, inputs):
        """Forward and backward pass with the base optimizer's hooks.

        Returns:
            ``(outputs, names, params, grads)`` for the trainable parameters (with a micro-batched
            base: the gradients accumulated over its micro-batches).
        """
        base = self._three_step()
        if isinstance(self.base_optimizer, MicrobatchOptimizer):
            return self.base_optimizer.accumulate(inputs)
        base.new_input()
        pairs = self.network.gradient(self.loss)
        for pname, _ in pairs:
            base.prepare_param(pname)
        outputs = self.executor.inference_and_backprop(inputs, self.loss)
        values = self.network.fetch_tensors([n for pair in pairs for n in pair])
        names = [p for p, _ in pairs]
        return outputs, names, values[0::2], values[1::2]

    def _apply(self, names, params, grads) -> None:
        """The base optimizer's update on (already communicated) gradients."""
        base = self._three_step()
        if isinstance(self.base_optimizer, MicrobatchOptimizer):
            if self.gradient_modifier is not None:
                grads = [self.gradient_modifier(n, p, g) for n, p, g in zip(names, params, grads)]
            self.base_optimizer.apply_gradients(names, params, grads)  # the wrapped optimizer's modifier, then rule
            return
        for pname, param, grad in zip(names, params, grads):
            if self.gradient_modifier is not None:
                grad = self.gradient_modifier(pname, param, grad)
            self.network.feed_tensor(pname, np.asarray(base.update_rule(grad, param, pname), dtype=param.dtype))

    def _exchange_step(self, inputs, exchange):
        """One step that replaces each gradient by ``exchange(names, params, grads)`` before the
        base update, for any base optimizer.

        A :class:`~deep500lite.lv2.optimizer.ThreeStepOptimizer` base runs here in its three
        steps (:meth:`_gradients`, exchange, :meth:`_apply`). Any other base (the frameworks'
        native optimizers) runs its own ``step`` with a ``gradient_modifier`` put in place for the
        step: its first call fetches every gradient after the backward pass, exchanges them all at
        once (so fusion and compression see the whole set), and each call returns its parameter's
        exchanged gradient (through the user's own ``gradient_modifier``, if any).

        Returns:
            The base step's outputs.

        Raises:
            UserError: the base optimizer never called its ``gradient_modifier`` (so nothing was
                exchanged).
        """
        base = self.base_optimizer
        if isinstance(base, MicrobatchOptimizer):
            user = self.gradient_modifier
            if user is not None:  # as _apply does: this optimizer's modifier after the exchange
                inner = exchange

                def exchange(names, params, grads):
                    return [user(n, p, g) for n, p, g in zip(names, params, inner(names, params, grads))]

            return base.exchange_step(inputs, exchange)  # accumulate, exchange once, update once
        if isinstance(base, ThreeStepOptimizer):
            outputs, names, params, grads = self._gradients(inputs)
            self._apply(names, params, exchange(names, params, grads))
            return outputs
        user = self.gradient_modifier
        exchanged: dict[str, np.ndarray] = {}

        def modifier(name, param, grad):
            if not exchanged:
                pairs = self.network.gradient(self.loss)
                values = self.network.fetch_tensors([n for pair in pairs for n in pair])
                names = [p for p, _ in pairs]
                exchanged.update(zip(names, exchange(names, values[0::2], values[1::2])))
            new = np.asarray(exchanged[name], dtype=grad.dtype)
            return new if user is None else user(name, param, new)

        previous = base.gradient_modifier
        base.gradient_modifier = modifier
        try:
            outputs = base.step(inputs)
        finally:
            base.gradient_modifier = previous
        if not exchanged:
            raise UserError(f"{type(self).__name__} exchanges gradients through the base optimizer's "
                            f"gradient_modifier, which {type(base).__name__}.step never called. Use a "
                            "ThreeStepOptimizer (the reference optimizers), a framework's native optimizer, or an "
                            "optimizer that applies gradient_modifier to every gradient. "
                            f"Received: a {type(base).__name__}")
        return outputs

    def _parameters(self) -> tuple[list[str], list[np.ndarray]]:
        names = [p for p, _ in self.network.gradient(self.loss)]
        return names, self.network.fetch_tensors(names)

    def set_parameter(self, name: str, value) -> None:
        """Set a hyperparameter of this optimizer, or else of the base optimizer (``learning_rate``)."""
        if hasattr(self, name) and not name.startswith("_") and not callable(getattr(self, name)):
            setattr(self, name, value)
        else:
            self.base_optimizer.set_parameter(name, value)
