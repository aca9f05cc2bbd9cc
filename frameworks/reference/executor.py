"""The numpy reference executor."""

from __future__ import annotations

import copy

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from deep500lite.lv1.executor import GraphExecutor
from deep500lite.frameworks.reference.operators import SUPPORTED_OPS

__all__ = ["ReferenceExecutor", "from_model"]


class ReferenceExecutor(GraphExecutor):
    """Runs a network with ``onnx.reference.ReferenceEvaluator`` on numpy arrays.

    The network's parameters are held as numpy arrays and fed to the evaluator as graph inputs,
    so ``feed_tensor`` takes effect without rebuilding anything.
    """

    framework = "reference"
    SUPPORTED_OPS = SUPPORTED_OPS

    def __init__(self, network, device=None):
        super().__init__(network, device)
        values = self.network.host_values()
        self._tensors: dict[str, np.ndarray] = {k: np.array(v, copy=True) for k, v in values.items()}
        self._evaluator = None
        self._built_version = -1

    def _evaluator_for_network(self) -> ReferenceEvaluator:
        if self._evaluator is None or self._built_version != self.network.version:
            model = copy.deepcopy(self.network._model)
            graph = model.graph
            declared = {i.name for i in graph.input}
            for name in self.network.initializers:
                if name not in declared:
                    v = self._tensors[name]
                    graph.input.append(onnx.helper.make_tensor_value_info(
                        name, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
            self._evaluator = ReferenceEvaluator(model)
            self._built_version = self.network.version
        return self._evaluator

    def inference(self, feeds):
        """Run the network forward (see :meth:`GraphExecutor.inference`)."""
        feeds = self.network.check_feeds(feeds)
        evaluator = self._evaluator_for_network()
        outputs = self.network.outputs
        inits = {k: self._tensors[k] for k in self.network.initializers}
        results = evaluator.run(outputs, {**inits, **feeds})
        # Sequences and optionals (lists, None) are returned as the evaluator gives them.
        return {name: r if r is None or isinstance(r, list) else np.asarray(r) for name, r in zip(outputs, results)}

    def inference_and_backprop(self, feeds, y="loss"):
        """Run forward in training mode, then backward from ``y`` (see :meth:`GraphExecutor.inference_and_backprop`).

        The training graph of :func:`deep500lite.lv1.autodiff.training_graph` is built once per
        network version and ``y``; parameters are fed from this executor's arrays. Gradients are
        kept for :meth:`fetch_tensor`; the updated BatchNormalization running statistics replace
        the executor's values.
        """
        feeds = self.network.check_feeds(feeds)
        tg, evaluator = self._training_program(y)
        names = tg.output_names
        inits = {k: self._tensors[k] for k in tg.param_inputs}
        if tg.dropout_masks:  # drawn from this executor's own seeded generator
            rng = self.__dict__.setdefault("_dropout_rng", np.random.default_rng(0))
            inits.update(tg.draw_masks(rng))
        results = dict(zip(names, evaluator.run(names, {**inits, **feeds})))
        self._store_training_results(tg, results)
        return {name: np.asarray(results[name]) for name in tg.outputs}

    def _training_program(self, y):
        from deep500lite.lv1.autodiff import training_graph

        key = (self.network.version, y)
        cache = getattr(self, "_training_cache", None)
        if cache is None or cache[0] != key:
            tg = training_graph(self.network, y)
            self._training_cache = (key, tg, ReferenceEvaluator(tg.model))
        return self._training_cache[1], self._training_cache[2]

    def _store_training_results(self, tg, results):
        grads = getattr(self, "_grads", None)
        if grads is None:
            grads = self._grads = {}
        grads.clear()
        for param, out in tg.gradients.items():
            ref = self._tensors[param]
            grads[out] = np.asarray(results[out], dtype=ref.dtype).reshape(ref.shape)
        for stat, out in tg.running_stats.items():
            ref = self._tensors[stat]
            self._tensors[stat] = np.asarray(results[out], dtype=ref.dtype).reshape(ref.shape)

    def has_tensor(self, name):
        return name in self._tensors or name in getattr(self, "_grads", {})

    def fetch_tensor(self, name):
        if name in self._tensors:
            return self._tensors[name]
        return self._grads[name]

    def feed_tensor(self, name, value):
        old = self._tensors.get(name)
        value = np.asarray(value)
        if old is not None and (old.shape != value.shape or old.dtype != value.dtype):
            raise ValueError(
                f"feed_tensor('{name}'): expected {old.dtype.name}{list(old.shape)}. "
                f"Received: {value.dtype.name}{list(value.shape)}"
            )
        self._tensors[name] = np.array(value, copy=True)


def from_model(network, device=None) -> ReferenceExecutor:
    """Build a :class:`ReferenceExecutor` (CPU only) for a Network, ONNX file or ModelProto."""
    return ReferenceExecutor(network, device)
