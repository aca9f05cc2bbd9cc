"""JAX's part of ``deep500lite bench``: what is timed on JAX.

The orchestration (cases, timing, statistics, tables, JSON) lives in :mod:`deep500lite.bench`;
it reaches this module at run time through
``deep500lite.registry.framework_module("jax", "bench")``. The functions have the same names and
roles as in the other frameworks' ``bench`` modules:

- ``bench op``: :func:`op_runner` (one GEMM or convolution case) and :func:`op_threads`;
- ``bench overhead``: :func:`set_seed`, :func:`inference_pair` and :func:`training_pair`
  (the deep500lite JAX executor against the same model written in plain JAX, see
  :mod:`deep500lite.frameworks.jax.models`);
- ``bench overhead --op``: :func:`custom_op_pair` (a custom operator against ``jax.nn.silu``).

Compilation is kept out of the timed calls: each pair compiles both sides (one call each)
before it returns, and the native side's first-call time is attached to its call as
``native.compile_seconds`` (the executor keeps its own in ``executor.compile_seconds``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from deep500lite.bench.contract import LEARNING_RATE, MODEL_SHAPES, MOMENTUM, OpRunner, random_labels, with_loss
from deep500lite.errors import DeviceError
from deep500lite.frameworks.jax import models
from deep500lite.lv1.network import load_model
from deep500lite.registry import executor

__all__ = ["TRAINING_SAME_WEIGHTS", "op_runner", "op_threads", "set_seed", "set_device", "inference_pair", "training_pair",
           "custom_op_pair"]

_seed = 0
_device = None  # the deep500lite Device of bench overhead (None: the CPU)


#: bench overhead --training: the native side starts from the deep500lite side's weights (the model is exported).
TRAINING_SAME_WEIGHTS = True


def _jax_device(device):
    if not device.is_gpu:
        return jax.devices("cpu")[0]
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if device.index >= len(gpus):
        raise DeviceError(f"--device gpu:{device.index} needs a GPU visible to JAX, which sees {len(gpus)} "
                          f"(jax {jax.__version__}; a CPU-only jaxlib sees none). Use --device cpu. "
                          f"Received: --device gpu:{device.index}")
    return gpus[device.index]


# --------------------------------------------------------------------------------------------- bench op


def op_runner(case, inputs, device, threads) -> OpRunner:
    """``jnp.matmul`` / ``jax.lax.conv_general_dilated`` (NCHW, OIHW) on one case, compiled by ``jax.jit``.

    Args:
        case: a :class:`~deep500lite.bench.op.GemmCase` or :class:`~deep500lite.bench.op.ConvCase`.
        inputs: the case's numpy inputs; copied to the device once, here.
        device: the :class:`~deep500lite.Device`; each run waits for its result (``block_until_ready``).
        threads: unused: XLA's CPU thread pool is sized when JAX starts (see :func:`op_threads`).

    Returns:
        An :class:`~deep500lite.bench.op.OpRunner`; it is compiled here (one call) so that
        compilation is not timed.
    """
    dev = _jax_device(device)
    arrays = [jax.device_put(x, dev) for x in inputs]
    if case.suite == "gemm":
        fn = jax.jit(jnp.matmul)
        how = "jax.jit(jnp.matmul)"
    else:
        pads = [(case.pad, case.pad)] * 2
        fn = jax.jit(lambda x, w: jax.lax.conv_general_dilated(x, w, (case.stride, case.stride), pads,
                                                               dimension_numbers=("NCHW", "OIHW", "NCHW")))
        how = "jax.jit(jax.lax.conv_general_dilated) (NCHW)"
    fn(*arrays).block_until_ready()

    def call():
        return fn(*arrays).block_until_ready()

    return OpRunner(call, None, lambda: np.asarray(fn(*arrays)), how)


@contextlib.contextmanager
def op_threads(threads: int, device):
    """Nothing can be set for the block: XLA sizes its CPU thread pool when JAX starts (``XLA_FLAGS``);
    yields a description of what JAX runs on."""
    flags = os.environ.get("XLA_FLAGS", "")
    dev = _jax_device(device)
    yield f"XLA {dev.platform} ({dev.device_kind}); threads fixed at start" + (f", XLA_FLAGS={flags}" if flags else "")


# --------------------------------------------------------------------------------------------- bench overhead


def set_seed(seed: int) -> None:
    """The seed of the models' initial weights (deep500lite's networks draw them from it)."""
    global _seed
    _seed = int(seed)


def set_device(device) -> None:
    """The device ``bench overhead`` runs both sides on (a deep500lite ``Device``); a GPU must be visible to JAX."""
    global _device
    _jax_device(device)
    _device = device


def _model(name):
    """The plain-JAX model with its arrays committed to the benchmark's device (``jax.jit`` runs where they are)."""
    build = models.lenet if name == "lenet" else models.resnet20
    jm = build(input_shape=MODEL_SHAPES[name], seed=_seed)
    if _device is None:
        return jm
    dev = _jax_device(_device)
    put = functools.partial(jax.tree_util.tree_map, lambda a: jax.device_put(a, dev))
    return dataclasses.replace(jm, params=put(jm.params), state=put(jm.state))


def _compiled(native, runs: int = 3):
    """Call ``native`` once (tracing and XLA compilation) and a few times more; attach the first call's
    extra time over a compiled call as ``native.compile_seconds``."""
    start = time.perf_counter()
    native()
    first = time.perf_counter() - start
    steady = []
    for _ in range(runs):
        start = time.perf_counter()
        native()
        steady.append(time.perf_counter() - start)
    native.compile_seconds = max(0.0, first - float(np.median(steady)))
    return native


def inference_pair(model, batch, rng):
    """The model in plain JAX under ``jax.jit`` against its ONNX graph on the deep500lite JAX executor.

    Both start from the same weights (those of deep500lite's network, see
    :func:`deep500lite.frameworks.jax.models.lenet`), take the same numpy batch and return numpy.

    Args:
        model: ``"lenet"`` or ``"resnet20"``.
        batch: samples per call.
        rng: the numpy generator of the inputs.

    Returns:
        ``(deep500lite_call, native_call, executor)``, both compiled already.
    """
    jm = _model(model)
    x = rng.standard_normal((batch, *MODEL_SHAPES[model])).astype(np.float32)
    ex = executor(load_model(models.export_onnx(jm)), "jax", device=_device)
    infer = models.inference_function(jm)

    precision = ex.options["matmul_precision"]

    def native():  # traced at the executor's matmul precision (on a GPU: no TF32 unless it allows it)
        with jax.default_matmul_precision(precision):
            return np.asarray(infer(x))

    def d5():
        return ex.inference({"input": x})["output"]

    d5()
    return d5, _compiled(native), ex


def training_pair(model, batch, rng):
    """One step of plain JAX (``jax.jit`` of ``value_and_grad`` and an ``optax.sgd`` momentum update)
    against the same model's ONNX graph, with the loss added, on the JAX executor with its native
    ``MomentumOptimizer``; both start from the same weights, and both normalize batches with the
    batch's statistics (as deep500lite's executors train).

    Args:
        model: ``"lenet"`` or ``"resnet20"``.
        batch: samples per step.
        rng: the numpy generator of the inputs and labels.

    Returns:
        ``(deep500lite_call, native_call, executor)``; each call returns the step's loss. Each
        side has made four steps already (compilation), so they stay at the same weights.
    """
    from deep500lite.frameworks.jax.optimizers import MomentumOptimizer

    jm = _model(model)
    x = rng.standard_normal((batch, *MODEL_SHAPES[model])).astype(np.float32)
    y = random_labels(rng, batch)
    net = with_loss(load_model(models.export_onnx(jm)))
    ex = executor(net, "jax", device=_device)
    optimizer = MomentumOptimizer(ex, learning_rate=LEARNING_RATE, momentum=MOMENTUM)
    step, carry = models.training_step(jm, LEARNING_RATE, MOMENTUM)
    feeds = {"input": x, "label": y}

    precision = ex.options["matmul_precision"]

    def native():
        nonlocal carry
        with jax.default_matmul_precision(precision):
            carry, loss = step(carry, x, y)
        return np.asarray(loss)

    def d5():
        return optimizer.step(feeds)["loss"]

    native = _compiled(native, runs=3)
    for _ in range(4):  # as many steps as _compiled made: both sides stay at the same weights
        d5()
    return d5, native, ex


# --------------------------------------------------------------------------------------------- bench overhead --op


def custom_op_pair(op, x, g):
    """``deep500lite.frameworks.jax.custom.custom_op(op)`` against ``jax.nn.silu``, each differentiated
    by ``jax.vjp`` inside ``jax.jit`` (the custom operator runs on the host through ``jax.pure_callback``).

    Args:
        op: the Swish operator (:func:`deep500lite.bench.op_overhead.swish_op`).
        x: the input vector.
        g: the output gradient.

    Returns:
        ``(custom_call, native_call)``; each call returns ``(y, dL/dx)`` as numpy arrays; both
        compiled already.
    """
    from deep500lite.frameworks.jax.custom import custom_op

    xj, gj = jnp.asarray(x), jnp.asarray(g)

    def run(f):
        @jax.jit
        def step(t, gy):
            y, pullback = jax.vjp(f, t)
            return y, pullback(gy)[0]

        def call():
            y, grad = step(xj, gj)
            return np.asarray(y), np.asarray(grad)

        call()
        return call

    custom = custom_op(op)
    return run(lambda t: custom(t)[0]), run(jax.nn.silu)
