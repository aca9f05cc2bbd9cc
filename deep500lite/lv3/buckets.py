"""Level 3: gradient buckets whose allreduce starts while the backward pass still runs.

:class:`GradientBuckets` is what :class:`~deep500lite.lv3.distributed_optimizers.ConsistentDecentralized`
uses to overlap communication with the backward pass, as PyTorch's DistributedDataParallel does:

- the parameters are put in the order their gradients are expected (:func:`gradient_order`: the
  parameters read last by the forward pass first) and fused into buckets of at most
  ``bucket_bytes`` (:func:`~deep500lite.lv3.optimizer.fuse_buckets`);
- as the executor reports each finished gradient (``on_gradient``, see
  :meth:`~deep500lite.lv1.executor.GraphExecutor.set_gradient_hook`), it is copied into its
  bucket's flat buffer; once a bucket is full, and every bucket before it has started, its
  non-blocking allreduce (:meth:`~deep500lite.lv3.communication.CommunicationNetwork.iallreduce`,
  ``op="mean"``) starts, so every rank starts the same allreduces in the same order whatever order
  its gradients come in;
- at the end of the backward pass (``on_backward_end``) the remaining buckets start (a gradient
  that never came counts as zeros), every request is waited for in order, and the averages are
  written back into the gradients the executor handed over.

An executor that cannot report gradients during the backward pass gets the same buckets after it
(:meth:`GradientBuckets.average`), and so does an exchange that is not to overlap
(``average(..., algorithm=...)``: one blocking allreduce per bucket, with any algorithm): the same flat messages, so the same results,
bit for bit, whatever the communication library's order of summation.
"""

from __future__ import annotations

import numpy as np

from deep500lite.errors import UserError
from deep500lite.lv3.communication import CompletedRequest
from deep500lite.lv3.optimizer import fuse_buckets

__all__ = ["GradientBuckets", "gradient_order"]


def gradient_order(network, names: list[str]) -> list[str]:
    """``names`` (parameters) in the order a backward pass is expected to finish their gradients.

    A parameter read by a later node of the (topologically sorted) graph gets its gradient
    earlier; parameters read by the same node keep their reverse order (a bias before its weight,
    as in DistributedDataParallel's reversed ``parameters()``); parameters no node reads come last.
    """
    first: dict[str, int] = {}
    wanted = set(names)
    for k, node in enumerate(network.graph.node):
        for name in node.input:
            if name in wanted and name not in first:
                first[name] = k
    position = {name: i for i, name in enumerate(names)}
    unread = len(network.graph.node)
    return sorted(names, key=lambda n: (-first.get(n, -1) if n in first else unread, -position[n]))


class GradientBuckets:
    """Averages a network's gradients over the ranks in fused buckets (see the module documentation).

    Args:
        comm: the communicator; its :meth:`iallreduce` starts each bucket.
        bucket_bytes: the largest bucket (0: one bucket per gradient).

    Attributes:
        names: the parameters in bucket order (after :meth:`prepare`).
        buckets: the indices into :attr:`names` of each bucket.
        armed: True between :meth:`start` and the end of the backward pass; the hook ignores
            calls otherwise (another backward pass on the same executor).
        overlapped: after a step, how many buckets started before the backward pass ended.
        averages: after the backward pass, each parameter's averaged gradient (views of the
            bucket buffers, valid until the next :meth:`start`).
    """

    def __init__(self, comm, bucket_bytes: int):
        self.comm = comm
        self.bucket_bytes = bucket_bytes
        self.names: list[str] = []
        self.buckets: list[list[int]] = []
        self.armed = False
        self.overlapped = 0
        self._key = None
        self._index: dict[str, int] = {}
        self.averages: dict[str, np.ndarray] = {}

    # ------------------------------------------------------------------ set-up
    def prepare(self, network, loss: str) -> None:
        """Lay out the buckets for ``network``'s parameters of ``loss`` (again only when the network changed)."""
        pairs = network.gradient(loss)
        key = (getattr(network, "version", None), loss, tuple(p for p, _ in pairs))
        if key == self._key:
            return
        self.names = gradient_order(network, [p for p, _ in pairs])
        values = network.fetch_tensors(self.names)  # shapes and dtypes (read once per layout)
        self._shapes = [np.shape(v) for v in values]
        self._sizes = [int(np.size(v)) for v in values]
        self.buckets = fuse_buckets([np.asarray(v) for v in values], self.bucket_bytes)
        self._index = {name: i for i, name in enumerate(self.names)}
        self._bucket_of = [0] * len(self.names)
        self._offsets = [0] * len(self.names)
        self._buffers = []
        for b, bucket in enumerate(self.buckets):
            offset = 0
            for i in bucket:
                self._bucket_of[i], self._offsets[i] = b, offset
                offset += self._sizes[i]
            self._buffers.append(np.empty(offset, np.asarray(values[bucket[0]]).dtype))
        self._key = key

    # ------------------------------------------------------------ one backward
    def start(self) -> None:
        """Arm for one backward pass."""
        self._views: list = [None] * len(self.names)
        self._filled = [0] * len(self.buckets)
        self._requests: list = [None] * len(self.buckets)
        self._next = 0
        self._pending = 0
        self.overlapped = 0
        self.averages = {}
        self._write_back = True
        self._algorithm = None
        self.armed = True

    def on_gradient(self, name: str, grad: np.ndarray) -> None:
        """The executor's hook: ``grad`` (a writable array) is ``name``'s finished gradient."""
        if not self.armed:
            return
        i = self._index.get(name)
        if i is None or self._views[i] is not None:
            return
        self._views[i] = grad
        b = self._bucket_of[i]
        self._filled[b] += 1
        if b == self._next and self._filled[b] == len(self.buckets[b]):
            while self._next < len(self.buckets) and self._filled[self._next] == len(self.buckets[self._next]):
                self._launch(self._next)
                self.overlapped += 1
        elif self._pending < self._next:
            # Let the communication library advance the oldest allreduce in flight (MPI moves data only
            # when called; a test is a few microseconds).
            if self._requests[self._pending].test():
                self._pending += 1

    def on_backward_end(self) -> None:
        """The executor's hook: start what is left, wait for everything, write the averages back."""
        if not self.armed:
            return
        self.armed = False
        while self._next < len(self.buckets):
            self._launch(self._next)
        for b, bucket in enumerate(self.buckets):
            flat = self._requests[b].wait()
            for i in bucket:
                start = self._offsets[i]
                mean = flat[start:start + self._sizes[i]].reshape(self._shapes[i])
                view = self._views[i]
                if view is not None and self._write_back:
                    view[...] = mean
                self.averages[self.names[i]] = mean
        self._views = []

    def _launch(self, b: int) -> None:
        buf = self._buffers[b]
        for i in self.buckets[b]:
            part = buf[self._offsets[i]:self._offsets[i] + self._sizes[i]]
            view = self._views[i]
            if view is None:
                part[...] = 0
            else:
                part[...] = np.ravel(view)
        if self._algorithm is None:
            self._requests[b] = self.comm.iallreduce(buf, "mean", out=buf)
        else:
            buf[...] = self.comm.allreduce(buf, "mean", algorithm=self._algorithm)
            self._requests[b] = CompletedRequest(self.comm, buf)
        self._next = b + 1

    def disarm(self) -> None:
        """Forget a backward pass that failed (its allreduces, if any started, are left to the error)."""
        self.armed = False
        self._views = []

    # ----------------------------------------------------------- after backward
    def average(self, names: list[str], grads: list[np.ndarray], algorithm: str | None = None) -> list[np.ndarray]:
        """The same buckets for gradients known only after the backward pass: their averages, in ``names``' order.

        Args:
            names: the parameters (those of the layout, in any order).
            grads: their gradients (not modified).
            algorithm: None starts every bucket's non-blocking native allreduce and then waits;
                an allreduce algorithm (``native``, ``ring``, ...) runs one blocking allreduce per
                bucket, in bucket order.

        Raises:
            UserError: ``names`` are not the parameters the buckets were laid out for.
        """
        if sorted(names) != sorted(self.names):
            raise UserError(f"The gradients to average are not those of the bucket layout. Allowed: "
                            f"{sorted(self.names)}. Received: {sorted(names)}")
        self.start()
        self._write_back = False
        self._algorithm = algorithm
        for name, grad in zip(names, grads):
            self.on_gradient(name, np.asarray(grad))
        self.overlapped = 0
        self.on_backward_end()
        return [self.averages[name] for name in names]
