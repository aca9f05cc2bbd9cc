"""The reference framework's part of ``deep500lite bench``: numpy and ``onnx.reference``, CPU only.

The orchestration (cases, timing, statistics, tables, JSON) lives in :mod:`deep500lite.bench`;
it reaches this module at run time through
``deep500lite.registry.framework_module("reference", "bench")``. Every framework's ``bench``
module has the same functions for the same role:

- ``bench op``: :func:`op_runner` (one GEMM or convolution case) and :func:`op_threads`;
- ``bench overhead``: :func:`set_seed` and :func:`training_pair` (the reference framework has no
  native API besides deep500lite, so there is no ``inference_pair`` and :func:`training_pair` has
  no native side);
- ``bench overhead --op``: :func:`custom_op_pair` (a custom operator against the framework's own).
"""

from __future__ import annotations

import contextlib

import numpy as np

from deep500lite.bench.contract import OpRunner, blas_threads, d5_training_step, graph_pair
from deep500lite.errors import DeviceError
from deep500lite.frameworks.reference.optimizers import MomentumOptimizer
from deep500lite.lv1.network import load_model
from deep500lite.registry import executor

__all__ = ["op_runner", "op_threads", "set_seed", "training_pair", "custom_op_pair"]


# --------------------------------------------------------------------------------------------- bench op


def op_runner(case, inputs, device, threads) -> OpRunner:
    """``numpy.matmul`` for GEMM; the reference executor (``onnx.reference``) on the case's one-node ``Conv``.

    Args:
        case: a :class:`~deep500lite.bench.op.GemmCase` or :class:`~deep500lite.bench.op.ConvCase`.
        inputs: the case's numpy inputs.
        device: the :class:`~deep500lite.Device`; the CPU only.
        threads: numpy's BLAS threads (set for the whole run by :func:`op_threads`).

    Returns:
        An :class:`~deep500lite.bench.op.OpRunner`.

    Raises:
        DeviceError: a GPU was asked for (the framework is skipped).
    """
    if device.is_gpu:
        raise DeviceError(f"the reference framework runs on the CPU only. Received: device={str(device)!r}")
    if case.suite == "gemm":
        a, b = inputs
        return OpRunner(lambda: np.matmul(a, b), None, lambda: np.matmul(a, b), "numpy.matmul")
    ex = executor(load_model(case.onnx_model()), "reference")
    feeds = {"X": inputs[0], "W": inputs[1]}

    def call():
        return ex.inference(feeds)["Y"]

    return OpRunner(call, None, call, "deep500lite reference executor (onnx.reference Conv) on a one-node model")


@contextlib.contextmanager
def op_threads(threads: int, device):
    """numpy's BLAS limited to ``threads`` threads for the block (:func:`deep500lite.bench.peak.blas_threads`)."""
    with blas_threads(threads) as how:
        yield f"numpy BLAS: {how}"


# --------------------------------------------------------------------------------------------- bench overhead


def set_seed(seed: int) -> None:
    """Nothing to seed: the reference framework's random numbers come from the numpy generators passed in."""


def training_pair(model, batch, rng):
    """deep500lite's training step on the reference executor alone (ONNX autodiff graph, numpy
    ``MomentumOptimizer``): there is no native training loop to compare with.

    Returns:
        ``(deep500lite_call, None, executor)``.
    """
    return d5_training_step("reference", model, batch, rng, MomentumOptimizer)


# --------------------------------------------------------------------------------------------- bench overhead --op


def custom_op_pair(op, x, g):
    """The operator as a custom node of an ONNX graph against the graph ``x * Sigmoid(x)`` of standard
    operators, on the reference executor, both differentiated by deep500lite's ONNX autodiff.

    Returns:
        ``(custom_call, native_call)``; each call returns ``(y, dL/dx)`` as numpy arrays
        (see :func:`deep500lite.bench.op_overhead.graph_pair`).
    """
    return graph_pair("reference", op, x, g)
