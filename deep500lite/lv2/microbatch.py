"""Level 2: micro-batching, one training step computed as several smaller forward/backward passes.

A batch of ``B`` samples is cut along its first axis into micro-batches of ``ceil(B / n)``
samples (the last one smaller when ``n`` does not divide ``B``). Each micro-batch runs forward
and backward on the wrapped executor; the gradients are accumulated on the host in float64,
weighted so that their sum is the full batch's gradient, and the optimizer then takes one
update. Only one micro-batch's activations are alive at a time, which is what lowers the peak
memory of a step.

Weights: with a loss that is the *mean* over the batch, micro-batch ``i`` (``b_i`` samples)
contributes ``(b_i / B) * grad_i``, so ``sum_i (b_i / B) * grad_i`` is the full batch's gradient;
with a *sum* loss every weight is 1. The loss output is combined with the same weights; an output
whose first axis is the micro-batch size (logits, per-sample values) is concatenated; any other
output is averaged with the weights ``b_i / B``.

BatchNormalization: in training mode each micro-batch is normalised with its *own* statistics,
and the running statistics are updated once per micro-batch (``n`` momentum updates per step),
exactly as if the micro-batches had been run one after the other. The result therefore differs
from the full batch for networks with BatchNormalization; it equals the full batch (within
float32 round-off) for networks without batch-dependent operators.

Public names:

- :func:`microbatch`: the entry point (``d5.transforms.microbatch(obj, n)``) for an optimizer,
  an executor or a network.
- :class:`MicrobatchOptimizer`: wraps any reference/ONNX Runtime optimizer
  (a :class:`~deep500lite.ThreeStepOptimizer`) or a native torch, TensorFlow or JAX optimizer; it
  is a :class:`~deep500lite.Optimizer`, so :func:`~deep500lite.test_training`, the
  :class:`~deep500lite.Trainer` and the recipe runner take it unchanged. Inside a Level 3
  distributed optimizer it is gradient accumulation under data parallelism: its
  :meth:`~MicrobatchOptimizer.exchange_step` (or :meth:`~MicrobatchOptimizer.accumulate` and
  :meth:`~MicrobatchOptimizer.apply_gradients`) lets the gradient exchange run once per step on
  the accumulated gradients.
- :class:`MicrobatchExecutor`: wraps an executor; ``inference_and_backprop`` leaves the
  accumulated gradients readable through ``executor.network.fetch_tensors``.
- :func:`split_batch`, :func:`combine_outputs`, :func:`loss_reduction`,
  :func:`relax_batch_dimension`: the pieces, usable alone.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import onnx

from deep500lite.errors import ExecutionError, UserError, UserTypeError
from deep500lite.lv1.network import Network, load_model
from deep500lite.lv2.optimizer import Optimizer, ThreeStepOptimizer

__all__ = ["microbatch", "MicrobatchOptimizer", "MicrobatchExecutor", "split_batch", "combine_outputs",
           "loss_reduction", "relax_batch_dimension"]

_REDUCTIONS = ("auto", "mean", "sum")
_LOSS_OPS = ("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss")


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise UserError(f"microbatch: n, the number of micro-batches, must be an integer >= 1. Received: {n!r}")
    return int(n)


def split_batch(feeds: dict, n: int, inputs: Sequence[str] | None = None) -> list[tuple[dict, int]]:
    """Cut feeds into micro-batches along their first axis.

    Args:
        feeds: one array per network input.
        n: the number of micro-batches asked for; each holds ``ceil(B / n)`` samples, the last
            one the rest (so there are ``ceil(B / ceil(B / n))`` of them, ``n`` whenever ``n``
            divides ``B``).
        inputs: the names of the feeds to cut; None: every feed with at least one axis. The
            others are passed whole to every micro-batch.

    Returns:
        A list of ``(feeds of one micro-batch, its number of samples)``.

    Raises:
        UserError: ``n`` is not a positive integer, a named input is not fed, or the cut feeds
            disagree on the batch size.
    """
    n = _check_n(n)
    if not isinstance(feeds, dict):
        raise UserTypeError(f"microbatch: feeds must be a dict of input name to array. Received: {type(feeds).__name__}")
    arrays = {k: (v if isinstance(v, np.ndarray) else np.asarray(v)) for k, v in feeds.items()}
    if inputs is None:
        cut = [k for k, v in arrays.items() if v.ndim >= 1]
    else:
        cut = list(inputs)
        missing = [k for k in cut if k not in arrays]
        if missing:
            raise UserError(f"microbatch: the inputs to split must be fed. Fed: {sorted(arrays)}. "
                            f"Received: inputs={cut}")
    if not cut:
        raise UserError(f"microbatch: no fed array has a batch axis to split. Received: feeds with shapes "
                        f"{ {k: list(v.shape) for k, v in arrays.items()} }")
    sizes = {k: arrays[k].shape[0] if arrays[k].ndim else None for k in cut}
    if len(set(sizes.values())) != 1 or None in sizes.values():
        raise UserError(f"microbatch: every split input needs the same batch size on its first axis "
                        f"(name the inputs to split with inputs=). Received: first-axis sizes {sizes}")
    total = next(iter(sizes.values()))
    if total == 0:
        raise UserError("microbatch: the batch is empty. Received: batch size 0")
    size = math.ceil(total / n)
    parts = []
    for start in range(0, total, size):
        stop = min(start + size, total)
        part = {k: (v[start:stop] if k in sizes else v) for k, v in arrays.items()}
        parts.append((part, stop - start))
    return parts


def combine_outputs(outputs: Sequence[dict], sizes: Sequence[int], loss: str | None = None,
                    reduction: str = "mean") -> dict[str, np.ndarray]:
    """The full batch's outputs from its micro-batches' outputs.

    Args:
        outputs: one output dict per micro-batch, in order.
        sizes: the number of samples of each micro-batch.
        loss: the loss output, combined by ``reduction``; None: no output is the loss.
        reduction: ``"mean"`` (weights ``b_i / B``) or ``"sum"`` (weights 1) for the loss.

    Returns:
        One array per output: concatenated along the first axis where that axis is each
        micro-batch's size, otherwise the ``b_i / B``-weighted mean (the loss: by ``reduction``).
    """
    total = float(sum(sizes))
    combined = {}
    for name in outputs[0]:
        values = [np.asarray(o[name]) for o in outputs]
        if name == loss and reduction == "sum":
            combined[name] = np.asarray(sum(v.astype(np.float64) for v in values)).astype(values[0].dtype)
        elif name != loss and all(v.ndim >= 1 and v.shape[0] == b for v, b in zip(values, sizes)):
            combined[name] = np.concatenate(values, axis=0)
        elif values[0].dtype.kind in "fc":
            mean = sum(v.astype(np.float64) * (b / total) for v, b in zip(values, sizes))
            combined[name] = np.asarray(mean).astype(values[0].dtype)
        else:
            combined[name] = values[-1]
    return combined


def loss_reduction(network: Network, loss: str, reduction: str = "auto") -> str:
    """How the loss reduces over the batch: ``"mean"`` or ``"sum"``.

    Args:
        network: the network.
        loss: the loss tensor.
        reduction: ``"mean"`` or ``"sum"`` are returned as given; ``"auto"`` reads the node that
            produces the loss: the ``reduction`` of a ``SoftmaxCrossEntropyLoss`` or
            ``NegativeLogLikelihoodLoss``, ``"sum"`` for ``ReduceSum``, otherwise ``"mean"``.

    Raises:
        UserError: an unknown reduction, or (with ``"auto"``) a loss whose mean is not weighted by
            the number of samples (class weights or ``ignore_index``), for which no fixed
            micro-batch weights give the full batch's gradient.
    """
    if reduction not in _REDUCTIONS:
        raise UserError(f"microbatch: reduction must be one of {list(_REDUCTIONS)}. Received: {reduction!r}")
    if reduction != "auto":
        return reduction
    node = next((nd for nd in network.graph.node if loss in nd.output), None)
    if node is None:
        return "mean"
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type in _LOSS_OPS:
        found = attrs.get("reduction", b"mean")
        found = found.decode() if isinstance(found, bytes) else str(found)
        weighted = len(node.input) > 2 and bool(node.input[2])
        if found == "mean" and (weighted or "ignore_index" in attrs):
            raise UserError(f"microbatch: the loss '{loss}' ({node.op_type}) averages over class weights or "
                            "non-ignored samples, not over the batch, so micro-batch gradients cannot be weighted "
                            "by their sizes; use reduction='sum' in the loss, or pass reduction='mean' to accept "
                            f"the approximation. Received: weights={weighted}, ignore_index={attrs.get('ignore_index')}")
        return "sum" if found == "sum" else "mean"
    return "sum" if node.op_type == "ReduceSum" else "mean"


def relax_batch_dimension(network, batch_size: int | None = None) -> Network:
    """A copy of ``network`` whose inputs and outputs take any batch size.

    The first dimension of every graph input, output and value_info that equals ``batch_size``
    (default: the first input's first dimension) becomes the symbolic ``"batch"``. Networks that
    also bake the batch size into constants (a ``Reshape`` to ``[64, -1]``) still need a fixed size.

    Args:
        network: a :class:`~deep500lite.Network`, an ONNX path or ModelProto.
        batch_size: the fixed batch size to free; None: read it from the first input.

    Returns:
        A new :class:`~deep500lite.Network` (current parameter values included).
    """
    model = load_model(network).to_onnx()
    graph = model.graph
    params = {t.name for t in graph.initializer}
    if batch_size is None:
        for vi in graph.input:
            dims = vi.type.tensor_type.shape.dim
            if vi.name not in params and dims and dims[0].HasField("dim_value"):
                batch_size = dims[0].dim_value
                break
    if batch_size is None:
        return load_model(model)
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        if vi.name in params or not vi.type.HasField("tensor_type"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if dims and dims[0].HasField("dim_value") and dims[0].dim_value == batch_size:
            dims[0].dim_param = "batch"
    return load_model(model)


def _accumulate(acc: dict, names: Sequence[str], grads: Sequence[np.ndarray], weight: float) -> None:
    for name, g in zip(names, grads):
        g = np.asarray(g, dtype=np.float64) * weight
        if name in acc:
            acc[name] += g
        else:
            acc[name] = g


def _weights(sizes: Sequence[int], reduction: str) -> list[float]:
    total = float(sum(sizes))
    return [b / total if reduction == "mean" else 1.0 for b in sizes]


def _is_native(optimizer) -> bool:
    # The native torch/TensorFlow/JAX optimizers all take a gradient_modifier path that runs
    # inference_and_backprop and passes every parameter's gradient through the modifier.
    return type(optimizer).__module__.startswith("deep500lite.frameworks.")


class MicrobatchOptimizer(Optimizer):
    """An optimizer whose every step is ``n`` micro-batches with accumulated gradients, then one update.

    Args:
        optimizer: the wrapped optimizer: a :class:`~deep500lite.ThreeStepOptimizer` (every
            reference and ONNX Runtime optimizer, and user-written ones) or a native optimizer
            of ``deep500lite.frameworks.torch``, ``.tensorflow`` or ``.jax``.
        n: the number of micro-batches per step (1: the wrapped optimizer's own step).
        reduction: how the loss reduces over the batch: ``"auto"`` (read from the graph, see
            :func:`loss_reduction`), ``"mean"`` or ``"sum"``.
        inputs: the feeds to cut (None: every fed array with a first axis).

    Native optimizers apply the accumulated gradient through their ``gradient_modifier`` path
    (one host round trip per parameter and step); a ``gradient_modifier`` of the wrapped
    optimizer still runs, on the accumulated gradient.

    Raises:
        UserTypeError: the optimizer is of neither kind.
        UserError: ``n`` or ``reduction`` is invalid.
    """

    def __init__(self, optimizer, n: int, reduction: str = "auto", inputs: Sequence[str] | None = None):
        if not isinstance(optimizer, ThreeStepOptimizer) and not (isinstance(optimizer, Optimizer)
                                                                 and _is_native(optimizer)):
            raise UserTypeError("microbatch wraps a d5.ThreeStepOptimizer (reference, onnxruntime or your own) or a "
                                "native torch/tensorflow/jax optimizer of deep500lite.frameworks. "
                                f"Received: {type(optimizer).__name__}")
        super().__init__(optimizer.executor, optimizer.loss)
        self.optimizer = optimizer
        self.n = _check_n(n)
        self.reduction = loss_reduction(self.network, self.loss, reduction)
        self.inputs = None if inputs is None else list(inputs)
        #: the sizes of the last step's micro-batches
        self.last_sizes: list[int] = []

    def __getattr__(self, name):
        # Hyperparameters (learning_rate, momentum, ...) and state live on the wrapped optimizer.
        if name == "optimizer":
            raise AttributeError(name)
        return getattr(self.optimizer, name)

    @property
    def lr(self):
        """The wrapped optimizer's learning rate."""
        return self.optimizer.lr

    @lr.setter
    def lr(self, value):
        self.optimizer.lr = value

    def set_parameter(self, name, value, predicate=None):
        """Set a hyperparameter of the wrapped optimizer (see its ``set_parameter``)."""
        self.optimizer.set_parameter(name, value, predicate)

    def step(self, inputs):
        """One training step over ``n`` micro-batches of ``inputs``, then one update.

        Returns:
            The full batch's outputs (see :func:`combine_outputs`), computed before the update.
        """
        return self.exchange_step(inputs, None)

    def exchange_step(self, inputs, exchange=None):
        """One step whose accumulated gradients pass once through ``exchange`` before the single update.

        This is the seam a Level 3 distributed optimizer uses for data parallelism with gradient
        accumulation: the ``n`` micro-batches' gradients are summed first, then ``exchange`` (an
        allreduce, say) sees the whole accumulated set once, then the wrapped optimizer updates.

        Args:
            inputs: the feeds of the whole (per-rank) batch.
            exchange: None, or ``exchange(names, params, grads) -> grads`` called once per step
                on the accumulated gradients of every trainable parameter.

        Returns:
            The full batch's outputs (see :func:`combine_outputs`), computed before the update.
        """
        parts = split_batch(inputs, self.n, self.inputs)
        self.last_sizes = [b for _, b in parts]
        if len(parts) == 1 and exchange is None:
            return self.optimizer.step(parts[0][0])
        if isinstance(self.optimizer, ThreeStepOptimizer):
            outputs, names, params, grads = self.accumulate(inputs)
            if exchange is not None:
                grads = exchange(names, params, grads)
            self.apply_gradients(names, params, grads)
            return outputs
        outs = self._native_step(parts, exchange)
        return combine_outputs(outs, self.last_sizes, self.loss, self.reduction)

    def accumulate(self, inputs):
        """Forward and backward over the ``n`` micro-batches, without an update.

        Only for a wrapped :class:`~deep500lite.ThreeStepOptimizer` (its ``new_input`` and
        ``prepare_param`` hooks run once, as in its own step).

        Returns:
            ``(outputs, names, params, grads)``: the full batch's outputs, the trainable
            parameters' names and values, and their accumulated gradients (in the parameters'
            dtypes).

        Raises:
            UserTypeError: the wrapped optimizer is a native one (it has no separate update).
        """
        opt, net = self.optimizer, self.network
        if not isinstance(opt, ThreeStepOptimizer):
            raise UserTypeError("microbatch: accumulate() needs a wrapped ThreeStepOptimizer (reference, onnxruntime "
                                f"or your own); use exchange_step() for a native one. Received: {type(opt).__name__}")
        parts = split_batch(inputs, self.n, self.inputs)
        self.last_sizes = [b for _, b in parts]
        opt.new_input()
        pairs = net.gradient(self.loss)
        for pname, _ in pairs:
            opt.prepare_param(pname)
        acc, outs = {}, []
        for (feeds, _), w in zip(parts, _weights(self.last_sizes, self.reduction)):
            outs.append(self.executor.inference_and_backprop(feeds, self.loss))
            _accumulate(acc, [p for p, _ in pairs], net.fetch_tensors([g for _, g in pairs]), w)
        names = [p for p, _ in pairs]
        params = net.fetch_tensors(names)
        grads = [acc[name].astype(param.dtype) for name, param in zip(names, params)]
        return combine_outputs(outs, self.last_sizes, self.loss, self.reduction), names, params, grads

    def apply_gradients(self, names, params, grads) -> None:
        """The wrapped :class:`~deep500lite.ThreeStepOptimizer`'s update on given (accumulated) gradients.

        Its ``gradient_modifier``, if any, runs on each gradient first.
        """
        opt = self.optimizer
        for pname, param, grad in zip(names, params, grads):
            grad = np.asarray(grad, dtype=param.dtype)
            if opt.gradient_modifier is not None:
                grad = opt.gradient_modifier(pname, param, grad)
            self.network.feed_tensor(pname, np.asarray(opt.update_rule(grad, param, pname), dtype=param.dtype))

    def _native_step(self, parts, exchange=None):
        opt, net = self.optimizer, self.network
        weights = _weights(self.last_sizes, self.reduction)
        pairs = net.gradient(self.loss)
        acc, outs = {}, []
        for (feeds, _), w in zip(parts[:-1], weights[:-1]):
            outs.append(self.executor.inference_and_backprop(feeds, self.loss))
            _accumulate(acc, [p for p, _ in pairs], net.fetch_tensors([g for _, g in pairs]), w)
        user, seen, last, done = opt.gradient_modifier, set(), weights[-1], {}

        def combine(name, param, grad):
            seen.add(name)
            if exchange is not None:
                if not done:  # the first call: the whole accumulated set, exchanged once
                    names = [p for p, _ in pairs]
                    values = net.fetch_tensors([n for pair in pairs for n in pair])
                    totals = [np.asarray(acc.get(n, 0.0) + np.asarray(g, dtype=np.float64) * last).astype(g.dtype)
                              for n, g in zip(names, values[1::2])]
                    done.update(zip(names, exchange(names, values[0::2], totals)))
                total = np.asarray(done[name]).astype(np.asarray(grad).dtype)
            else:
                total = acc.get(name, 0.0) + np.asarray(grad, dtype=np.float64) * last
                total = np.asarray(total).astype(np.asarray(grad).dtype)
            return total if user is None else user(name, param, total)

        opt.gradient_modifier = combine
        try:
            outs.append(opt.step(parts[-1][0]))
        finally:
            opt.gradient_modifier = user
        lost = [p for p, _ in pairs if p not in seen]
        if lost:
            raise ExecutionError(f"microbatch: {type(opt).__name__} did not pass every gradient through its "
                                 "gradient_modifier, so the accumulated gradients of some parameters were not "
                                 f"applied. Received: parameters without a modifier call: {lost[:10]}")
        return outs


class _AccumulatedNetwork:
    """The wrapped executor's network, except that gradients read the accumulated values."""

    def __init__(self, network: Network, owner: "MicrobatchExecutor"):
        self._network, self._owner = network, owner

    def __getattr__(self, name):
        return getattr(self._network, name)

    def fetch_tensors(self, names):
        """As :meth:`Network.fetch_tensors`; gradients are those of the last micro-batched step."""
        if isinstance(names, str):
            return self._network.fetch_tensors(names)  # raises the usual error
        grads = self._owner.gradients
        return [grads[n] if n in grads else self._network.fetch_tensor(n) for n in names]

    def fetch_tensor(self, name):
        """The current value of one tensor (an accumulated gradient after a micro-batched step)."""
        return self.fetch_tensors([name])[0]


class MicrobatchExecutor:
    """An executor that runs every call as ``n`` micro-batches of the wrapped executor.

    ``inference`` concatenates the micro-batches' outputs; ``inference_and_backprop`` also
    accumulates the gradients (weighted as the module docstring says) and keeps them in
    :attr:`gradients`, which ``executor.network.fetch_tensors`` returns, so the reference and
    ONNX Runtime optimizers (and any :class:`~deep500lite.ThreeStepOptimizer`) train through it
    unchanged. Native torch/TensorFlow/JAX optimizers need the executor they were built for:
    wrap them with :class:`MicrobatchOptimizer` instead.

    Args:
        executor: the wrapped :class:`~deep500lite.GraphExecutor`.
        n: the number of micro-batches per call.
        reduction: ``"auto"``, ``"mean"`` or ``"sum"`` (see :func:`loss_reduction`).
        inputs: the feeds to cut (None: every fed array with a first axis).

    Attributes:
        executor: the wrapped executor.
        network: the wrapped network, whose gradients read the accumulated values.
        gradients: ``{"<param>_grad": array}`` of the last ``inference_and_backprop``.
    """

    def __init__(self, executor, n: int, reduction: str = "auto", inputs: Sequence[str] | None = None):
        if not hasattr(executor, "inference_and_backprop") or not hasattr(executor, "network"):
            raise UserTypeError(f"microbatch wraps a d5.GraphExecutor. Received: {type(executor).__name__}")
        self.executor = executor
        self.n = _check_n(n)
        if reduction not in _REDUCTIONS:
            raise UserError(f"microbatch: reduction must be one of {list(_REDUCTIONS)}. Received: {reduction!r}")
        self.reduction = reduction
        self.inputs = None if inputs is None else list(inputs)
        self.network = _AccumulatedNetwork(executor.network, self)
        self.gradients: dict[str, np.ndarray] = {}

    def __getattr__(self, name):
        # framework, devname, options, compile_seconds, device_peak_memory, ...
        if name == "executor":
            raise AttributeError(name)
        return getattr(self.executor, name)

    def synchronize(self) -> None:
        """Wait for the wrapped executor's device."""
        self.executor.synchronize()

    def inference(self, feeds):
        """Forward in micro-batches; outputs as :func:`combine_outputs` joins them."""
        parts = split_batch(feeds, self.n, self.inputs)
        outs = [self.executor.inference(f) for f, _ in parts]
        return combine_outputs(outs, [b for _, b in parts])

    def inference_and_backprop(self, feeds, y: str = "loss"):
        """Forward and backward in micro-batches; the accumulated gradients then read as ``"<param>_grad"``.

        Returns:
            The full batch's outputs (see :func:`combine_outputs`).
        """
        reduction = loss_reduction(self.executor.network, y, self.reduction)
        parts = split_batch(feeds, self.n, self.inputs)
        sizes = [b for _, b in parts]
        pairs = self.executor.network.gradient(y)
        acc, outs = {}, []
        for (part, _), w in zip(parts, _weights(sizes, reduction)):
            outs.append(self.executor.inference_and_backprop(part, y))
            _accumulate(acc, [g for _, g in pairs], self.executor.network.fetch_tensors([g for _, g in pairs]), w)
        dtypes = dict(zip([p for p, _ in pairs], self.executor.network.fetch_tensors([p for p, _ in pairs])))
        self.gradients = {g: acc[g].astype(dtypes[p].dtype) for p, g in pairs}
        return combine_outputs(outs, sizes, y, reduction)

    def has_tensor(self, name: str) -> bool:
        """Whether the tensor is an accumulated gradient or held by the wrapped executor."""
        return name in self.gradients or self.executor.has_tensor(name)

    def fetch_tensor(self, name: str) -> np.ndarray:
        """An accumulated gradient, or a tensor of the wrapped executor."""
        return self.gradients[name] if name in self.gradients else self.executor.fetch_tensor(name)

    def feed_tensor(self, name: str, value) -> None:
        """Set a parameter of the wrapped executor."""
        self.executor.feed_tensor(name, value)

    def __repr__(self) -> str:
        return f"MicrobatchExecutor({self.executor!r}, n={self.n})"


def microbatch(obj, n: int, *, framework: str = "torch", reduction: str = "auto",
               inputs: Sequence[str] | None = None, **executor_kwargs):
    """Micro-batch a training step: ``d5.transforms.microbatch(optimizer_or_executor_or_network, n)``.

    Args:
        obj: an optimizer (returns a :class:`MicrobatchOptimizer`: the form for
            :func:`~deep500lite.test_training` and recipes), an executor (returns a
            :class:`MicrobatchExecutor`), or a network, ONNX path or ModelProto (its batch
            dimension is freed with :func:`relax_batch_dimension`, an executor of ``framework``
            is built, and a :class:`MicrobatchExecutor` over it is returned).
        n: the number of micro-batches per step.
        framework: the executor to build for a network (default ``"torch"``).
        reduction: ``"auto"``, ``"mean"`` or ``"sum"`` (see :func:`loss_reduction`).
        inputs: the feeds to cut (None: every fed array with a first axis).
        **executor_kwargs: passed to ``d5.executor`` for a network (``device=``, ``seed=``).

    Example::

        opt = d5.transforms.microbatch(d5ref.GradientDescent(executor, 0.1), 8)
        d5.test_training(executor, train, test, opt, epochs=1, batch_size=256)
    """
    _check_n(n)
    if isinstance(obj, Optimizer):
        return MicrobatchOptimizer(obj, n, reduction=reduction, inputs=inputs)
    if hasattr(obj, "inference_and_backprop"):
        return MicrobatchExecutor(obj, n, reduction=reduction, inputs=inputs)
    if isinstance(obj, (Network, onnx.ModelProto, str)) or hasattr(obj, "__fspath__"):
        from deep500lite.registry import executor as build_executor  # frameworks load at run time
        return MicrobatchExecutor(build_executor(relax_batch_dimension(obj), framework, **executor_kwargs), n,
                                  reduction=reduction, inputs=inputs)
    raise UserTypeError("microbatch takes an optimizer, an executor or a network (Network, ONNX path or "
                        f"ModelProto). Received: {type(obj).__name__}")
