"""Executors whose parameters live in numpy arrays on the host and that run whole ONNX graphs.

The reference and ONNX Runtime executors both keep every initializer as a numpy array, run the
forward graph for ``inference`` and the training graph of :mod:`deep500lite.lv1.autodiff` for
``inference_and_backprop``. What they share lives here; each supplies how a graph is compiled
(:meth:`HostGraphExecutor._compile`).
"""

from __future__ import annotations

import abc
from typing import Callable

import numpy as np

from deep500lite.errors import FeedError, UserKeyError
from deep500lite.lv1.executor import GraphExecutor

__all__ = ["HostGraphExecutor"]

Runner = Callable[[list, dict], list]


class HostGraphExecutor(GraphExecutor, abc.ABC):
    """A :class:`GraphExecutor` holding parameters and gradients as numpy arrays.

    Args:
        network: a Network, ONNX file path or ModelProto.
        device: the device.
        seed: seed of the generator that draws dropout masks in training.
    """

    def __init__(self, network, device=None, seed: int = 0):
        super().__init__(network, device)
        self._tensors: dict[str, np.ndarray] = {k: np.array(v, copy=True)
                                                for k, v in self.network.host_values().items()}
        self._grads: dict[str, np.ndarray] = {}
        self._dropout_rng = np.random.default_rng(seed)
        self._training_cache = None

    def get_rng_state(self) -> dict:
        """The dropout generator's state (a checkpoint saves it; numpy values only)."""
        return self._dropout_rng.bit_generator.state

    def set_rng_state(self, state: dict) -> None:
        """Restore the dropout generator's state from :meth:`get_rng_state`."""
        self._dropout_rng.bit_generator.state = state

    @abc.abstractmethod
    def _compile(self, model) -> Runner:
        """Return ``run(output_names, feeds) -> list of arrays`` for an ONNX ``model``."""

    def _parameters_changed(self) -> None:
        """Called after parameters or running statistics change (default: nothing to rebuild)."""

    def _run_checked(self, runner: Runner, names: list, fixed: dict, feeds: dict) -> list:
        """Run with the user's feeds checked by :meth:`Network.check_feeds` first."""
        return runner(names, {**fixed, **self.network.check_feeds(feeds)})

    def inference_and_backprop(self, feeds, y="loss"):
        """Run forward in training mode, then backward from ``y`` (see :meth:`GraphExecutor.inference_and_backprop`).

        The training graph of :func:`deep500lite.lv1.autodiff.training_graph` is compiled once
        per network version and ``y``; parameters (and dropout masks drawn from this executor's
        seeded generator) are fed as graph inputs, so updating them needs no rebuild. Gradients
        are kept for :meth:`fetch_tensor`; the updated BatchNormalization running statistics
        replace the executor's values.
        """
        from deep500lite.lv1.autodiff import training_graph

        key = (self.network.version, y)
        if self._training_cache is None or self._training_cache[0] != key:
            tg = training_graph(self.network, y)
            self._training_cache = (key, tg, self._compile(tg.model))
        _, tg, runner = self._training_cache
        names = tg.output_names
        fixed = {k: self._tensors[k] for k in tg.param_inputs}
        if tg.dropout_masks:
            fixed.update(tg.draw_masks(self._dropout_rng))
        results = dict(zip(names, self._run_checked(runner, names, fixed, feeds)))
        self._grads.clear()
        for param, out in tg.gradients.items():
            ref = self._tensors[param]
            self._grads[out] = np.asarray(results[out], dtype=ref.dtype).reshape(ref.shape)
        for stat, out in tg.running_stats.items():
            ref = self._tensors[stat]
            self._tensors[stat] = np.asarray(results[out], dtype=ref.dtype).reshape(ref.shape)
        if tg.running_stats:
            self._parameters_changed()
        return {name: np.asarray(results[name]) for name in tg.outputs}

    def has_tensor(self, name):
        return name in self._tensors or name in self._grads

    def fetch_tensor(self, name):
        if name in self._tensors:
            return self._tensors[name]
        if name not in self._grads:
            raise UserKeyError(f"The {self.framework} executor holds no tensor '{name}'; it holds the parameters "
                               "and, after inference_and_backprop, their gradients ('<param>_grad'). "
                               f"Received: {name!r}")
        return self._grads[name]

    def feed_tensor(self, name, value):
        old = self._tensors.get(name)
        value = np.asarray(value)
        if old is not None and (old.shape != value.shape or old.dtype != value.dtype):
            raise FeedError(f"feed_tensor('{name}'): expected {old.dtype.name}{list(old.shape)}. "
                            f"Received: {value.dtype.name}{list(value.shape)}")
        self._tensors[name] = np.array(value, copy=True)
        self._parameters_changed()
