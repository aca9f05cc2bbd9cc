"""Deep500's ``TensorflowNativeGraphExecutor``: a TensorFlow 1 graph behind the executor interface.

Deep500's TensorFlow code built graphs with placeholders and ran them in a ``tf.Session``. With
TensorFlow 2 that code runs in graph mode after ``import tensorflow.compat.v1 as tf`` and
``tf.disable_v2_behavior()``; :class:`TensorflowNativeGraphExecutor` then wraps such a graph:

>>> x, y = tf.placeholder(tf.float32), tf.placeholder(tf.float32)     # doctest: +SKIP
>>> pred = tf.Variable(2.0) * x; cost = tf.squared_difference(pred, y)  # doctest: +SKIP
>>> ex = d5tf.TensorflowNativeGraphExecutor(cost, pred.name)          # doctest: +SKIP
>>> ex.inference({x: 1.0, y: 3.0})    # {pred.name: 2.0, cost.name: 1.0}   # doctest: +SKIP

Semantics (Deep500's):

- Feeds are keyed by placeholder tensors or by their names (``"Placeholder:0"``); values are
  numbers or arrays. The outputs are the tensor named ``output_node_name`` and the loss, keyed
  by their tensor names.
- The executor runs in the session given, or in a new one on the loss's graph; the graph's
  variables are initialized on first use (and variables an optimizer adds, on its first step).
- ``network.parameters`` are the graph's trainable variables (by name, ``"Variable:0"``);
  ``inference_and_backprop`` computes their gradients with ``tf.gradients``, readable as
  ``"<variable name>_grad"``.
- The native optimizers of :mod:`deep500lite.frameworks.tensorflow` given this executor
  (``d5tf.GradientDescent(executor, cost.name, lr)``) build TensorFlow 1's optimizer
  (``tf.compat.v1.train.GradientDescentOptimizer`` and so on) on the graph; a hyperparameter may
  be a number, a tensor, or a tensor's name, and a placeholder among them is fed with the step's
  feeds, as in Deep500.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf

from deep500lite.errors import FeedError, UserError, UserKeyError, UserTypeError
from deep500lite.lv1.device import as_device
from deep500lite.lv1.executor import GraphExecutor
from deep500lite.lv1.network import Deep500NetworkNames, gradient_name
from deep500lite.lv2.optimizer import Optimizer

__all__ = ["TensorflowNativeGraphExecutor", "GraphOptimizer"]

_v1 = tf.compat.v1


def _graph_mode(what: str) -> None:
    if tf.executing_eagerly():
        raise UserError(f"{what} runs a TensorFlow 1 graph, but TensorFlow is executing eagerly: start the script "
                        "with 'import tensorflow.compat.v1 as tf' and 'tf.disable_v2_behavior()', as Deep500's "
                        "TensorFlow code needs. Received: eager execution")


class GraphNetwork(Deep500NetworkNames):
    """The ``network`` of a :class:`TensorflowNativeGraphExecutor`: the graph's placeholders, outputs and variables.

    Attributes:
        inputs: the names of the graph's placeholders.
        outputs: the output tensor's name and the loss's name.
        parameters: the names of the graph's trainable variables.
    """

    def __init__(self, executor: "TensorflowNativeGraphExecutor"):
        self._executor = executor
        graph = executor.graph
        self.inputs = [op.outputs[0].name for op in graph.get_operations() if op.type == "Placeholder"]
        self.outputs = list(dict.fromkeys([executor.output.name, executor.loss.name]))
        with graph.as_default():
            self._vars = {v.name: v for v in _v1.trainable_variables()}
        self.parameters = list(self._vars)

    def input_descriptors(self) -> dict:
        """No descriptors: placeholders need not declare shapes."""
        return {name: None for name in self.inputs}

    def output_descriptors(self) -> dict:
        """No descriptors (known once the graph has run)."""
        return {name: None for name in self.outputs}

    def gradient(self, y: str = "loss") -> list[tuple[str, str]]:
        """The ``(variable, gradient name)`` pairs that ``inference_and_backprop`` fills."""
        return [(p, gradient_name(p)) for p in self.parameters]

    def fetch_tensors(self, names: Sequence[str]) -> list[np.ndarray]:
        """Current values of variables, or of gradients after ``inference_and_backprop``.

        Raises:
            UserKeyError: a name that is neither a variable nor a computed gradient.
            UserTypeError: ``names`` is one string, not a list of them.
        """
        if isinstance(names, str):
            raise UserTypeError(f"fetch_tensors expects a list of names. Received: the string {names!r}")
        ex, out = self._executor, []
        for name in names:
            if name in self._vars:
                ex._initialize()
                out.append(np.asarray(ex.session.run(self._vars[name])))
            elif name in ex._grads:
                out.append(ex._grads[name])
            else:
                raise UserKeyError(f"fetch_tensors: no tensor '{name}'. Variables: {self.parameters[:20]}; gradients "
                                   f"('<variable>_grad') after inference_and_backprop. Received: {name!r}")
        return out

    def fetch_tensor(self, name: str) -> np.ndarray:
        """The current value of one variable or gradient."""
        return self.fetch_tensors([name])[0]

    def feed_tensor(self, name: str, value, is_param: bool = False) -> None:
        """Load a new value into a variable (same shape).

        Raises:
            FeedError: an unknown variable, or a value of another shape.
        """
        var = self._vars.get(name)
        if var is None:
            raise FeedError(f"feed_tensor: unknown variable '{name}'. Variables: {self.parameters[:20]}. "
                            f"Received: {name!r}")
        value = np.asarray(value)
        if tuple(value.shape) != tuple(var.shape.as_list()):
            raise FeedError(f"feed_tensor('{name}'): expected shape {var.shape.as_list()}. "
                            f"Received: {list(value.shape)}")
        self._executor._initialize()
        var.load(value, self._executor.session)


class TensorflowNativeGraphExecutor(GraphExecutor):
    """Runs a TensorFlow 1 graph given by its loss tensor (Deep500's class and arguments).

    Args:
        loss_node: the loss tensor of the graph.
        output_node_name: the name of the output tensor (``pred.name``).
        session: a ``tf.compat.v1.Session`` to run in (default: a new one on the loss's graph).
        events: Deep500's executor events; accepted, not called.

    Raises:
        UserError: TensorFlow is executing eagerly (the graph needs ``tf.disable_v2_behavior()``),
            or ``output_node_name`` names no tensor of the graph.
        UserTypeError: ``loss_node`` is not a graph tensor.
    """

    framework = "tensorflow"

    def __init__(self, loss_node, output_node_name: str = "output", session=None, events=None):
        _graph_mode("TensorflowNativeGraphExecutor")
        if not isinstance(loss_node, tf.Tensor) or not hasattr(loss_node, "graph"):
            raise UserTypeError(f"TensorflowNativeGraphExecutor takes the loss tensor of a TensorFlow 1 graph. "
                                f"Received: {type(loss_node).__name__}")
        self.devname = as_device(None)
        self.graph = loss_node.graph
        self.loss = loss_node
        try:
            self.output = self.graph.get_tensor_by_name(output_node_name)
        except (KeyError, ValueError) as exc:
            raise UserError(f"output_node_name must name a tensor of the loss's graph (such as pred.name, "
                            f"'add:0'). Received: {output_node_name!r}") from exc
        self.session = session if session is not None else _v1.Session(graph=self.graph)
        self.events = list(events or [])
        self._grads: dict[str, np.ndarray] = {}
        self._grad_tensors = None
        self._initialized: set[str] = set()
        self.network = GraphNetwork(self)

    def _initialize(self) -> None:
        """Initialize the graph's variables that have not been yet (an optimizer adds its own)."""
        with self.graph.as_default():
            fresh = [v for v in _v1.global_variables() if v.name not in self._initialized]
            if fresh:
                self.session.run(_v1.variables_initializer(fresh))
                self._initialized.update(v.name for v in fresh)

    def feed_dict(self, feeds) -> dict:
        """Deep500's feeds (keyed by placeholders or their names) as a session's feed dict."""
        if not isinstance(feeds, dict):
            raise UserTypeError(f"feeds must be a dict from placeholders (or their names) to values. "
                                f"Received: {type(feeds).__name__}")
        out = {}
        for key, value in feeds.items():
            if isinstance(key, str):
                try:
                    key = self.graph.get_tensor_by_name(key if ":" in key else key + ":0")
                except (KeyError, ValueError) as exc:
                    raise FeedError(f"No tensor {key!r} in the graph; feed the placeholders "
                                    f"{self.network.inputs}. Received: {key!r}") from exc
            out[key] = value
        return out

    def run(self, fetches: list, feeds) -> list:
        """Run ``fetches`` with the feeds (variables initialized first)."""
        self._initialize()
        return self.session.run(fetches, self.feed_dict(feeds))

    def inference(self, feeds) -> dict:
        """Run the graph; returns the output and the loss, keyed by their tensor names."""
        names = self.network.outputs
        values = self.run([self.graph.get_tensor_by_name(n) for n in names], feeds)
        return dict(zip(names, values))

    def inference_and_backprop(self, feeds, y: str | None = None) -> dict:
        """Run the graph and the gradients of the loss (or of the tensor named ``y``) for every variable."""
        loss = self.loss if y in (None, "loss") else self.graph.get_tensor_by_name(y)
        variables = [self.network._vars[p] for p in self.network.parameters]
        if self._grad_tensors is None or self._grad_tensors[0] is not loss:
            with self.graph.as_default():
                self._grad_tensors = (loss, _v1.gradients(loss, variables))
        names = self.network.outputs
        outs = [self.graph.get_tensor_by_name(n) for n in names]
        pairs = [(p, g) for p, g in zip(self.network.parameters, self._grad_tensors[1]) if g is not None]
        values = self.run(outs + [g for _, g in pairs], feeds)
        self._grads = {gradient_name(p): np.asarray(v) for (p, _), v in zip(pairs, values[len(outs):])}
        return dict(zip(names, values[:len(outs)]))


# Deep500's TensorFlow 1 optimizers: class name -> (TensorFlow 1 class, hyperparameter names in
# Deep500's order, Deep500's defaults). None as a default means the argument is required.
_KINDS = {
    "GradientDescent": ("GradientDescentOptimizer", ("learning_rate",), {"learning_rate": 0.1}),
    "MomentumOptimizer": ("MomentumOptimizer", ("learning_rate", "momentum"), {}),
    "NesterovOptimizer": ("MomentumOptimizer", ("learning_rate", "momentum"), {}),
    "AdamOptimizer": ("AdamOptimizer", ("learning_rate", "beta1", "beta2", "epsilon"),
                      {"learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}),
    "AdaGradOptimizer": ("AdagradOptimizer", ("learning_rate", "initial_accumulator_value"),
                         {"initial_accumulator_value": 0.1}),
    "RMSPropOptimizer": ("RMSPropOptimizer", ("learning_rate", "decay", "momentum", "epsilon"),
                         {"decay": 0.9, "momentum": 0.0, "epsilon": 1e-10}),
}


class GraphOptimizer(Optimizer):
    """A TensorFlow 1 optimizer minimizing the loss of a :class:`TensorflowNativeGraphExecutor`.

    Made by the native optimizers of this package when given such an executor (their class name
    picks the TensorFlow 1 optimizer); the arguments are Deep500's: ``(executor, loss, <the
    hyperparameters in Deep500's order>)``, each a number, a tensor or a tensor's name.

    Args:
        kind: the native optimizer's class name (``"GradientDescent"``, ``"MomentumOptimizer"``...).
        executor: the graph executor.
        args, kwargs: the native optimizer's arguments.

    Raises:
        UserTypeError: a missing or unknown argument.
    """

    def __init__(self, kind: str, executor, args: tuple, kwargs: dict):
        tf_class, order, defaults = _KINDS[kind]
        kwargs = dict(kwargs)
        if "lr" in kwargs:
            kwargs["learning_rate"] = kwargs.pop("lr")
        loss = kwargs.pop("loss", None)
        if args and isinstance(args[0], (str, tf.Tensor)):
            loss, args = args[0], args[1:]
        if len(args) > len(order):
            raise UserTypeError(f"{kind}(executor, loss, ...) takes at most {len(order)} hyperparameters "
                                f"({', '.join(order)}). Received: {len(args)}")
        values = {**defaults, **dict(zip(order, args)), **kwargs}
        unknown = sorted(set(values) - set(order))
        missing = [n for n in order if n not in values]
        if unknown or missing:
            raise UserTypeError(f"{kind} on a TensorFlow 1 graph takes {', '.join(order)}. "
                                f"Received: {'unknown ' + ', '.join(unknown) if unknown else 'no ' + ', '.join(missing)}")
        loss_name = executor.loss.name if loss in (None, "loss") else getattr(loss, "name", loss)
        super().__init__(executor, loss_name)
        self.kind = kind
        self.hyperparameters = {n: self._tensor_or_number(values[n]) for n in order}
        self.learning_rate = self.hyperparameters["learning_rate"]
        self._minimize = None

    def _tensor_or_number(self, value):
        if isinstance(value, str):
            return self.executor.graph.get_tensor_by_name(value)
        return value

    def step(self, inputs) -> dict:
        """One update with TensorFlow 1's optimizer; returns the outputs of that run (loss included)."""
        ex = self.executor
        if self._minimize is None:
            tf_class = getattr(_v1.train, _KINDS[self.kind][0])
            options = dict(self.hyperparameters)
            if self.kind == "NesterovOptimizer":
                options["use_nesterov"] = True
            with ex.graph.as_default():
                self._minimize = tf_class(**options).minimize(ex.graph.get_tensor_by_name(self.loss))
        names = ex.network.outputs
        values = ex.run([self._minimize] + [ex.graph.get_tensor_by_name(n) for n in names], inputs)
        return dict(zip(names, values[1:]))
