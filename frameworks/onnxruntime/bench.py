"""ONNX Runtime's part of ``deep500lite bench``: what is timed on ONNX Runtime.

The orchestration (cases, timing, statistics, tables, JSON) lives in :mod:`deep500lite.bench`;
it reaches this module at run time through
``deep500lite.registry.framework_module("onnxruntime", "bench")``. Every framework's ``bench``
module has the same functions for the same role:

- ``bench op``: :func:`op_runner` (one GEMM or convolution case) and :func:`op_threads`;
- ``bench overhead``: :func:`set_seed`, :func:`inference_pair` and :func:`training_pair`
  (deep500lite against the framework's own API; ONNX Runtime has no training loop of its own,
  so :func:`training_pair` has no native side);
- ``bench overhead --op``: :func:`custom_op_pair` (a custom operator against the framework's own).
"""

from __future__ import annotations

import contextlib

import numpy as np
import onnxruntime as ort

from deep500lite.bench.contract import MODEL_SHAPES, OpRunner, d5_training_step, graph_pair, zoo_network
from deep500lite.errors import DeviceError
from deep500lite.frameworks.onnxruntime.optimizers import MomentumOptimizer
from deep500lite.registry import executor

__all__ = ["op_runner", "op_threads", "set_seed", "inference_pair", "training_pair", "custom_op_pair"]


# --------------------------------------------------------------------------------------------- bench op


def op_runner(case, inputs, device, threads) -> OpRunner:
    """The case's one-node ONNX model (``MatMul`` / ``Conv``) in an ``InferenceSession``, run with I/O binding.

    Both inputs are bound once as ``OrtValue``s on the device; the output is bound to the device
    and allocated by ONNX Runtime on each run. Both operands are graph inputs, not initializers,
    so ONNX Runtime does not pre-pack the weights.

    Args:
        case: a :class:`~deep500lite.bench.op.GemmCase` or :class:`~deep500lite.bench.op.ConvCase`.
        inputs: the case's numpy inputs.
        device: the :class:`~deep500lite.Device` (a GPU needs the ``CUDAExecutionProvider``).
        threads: the session's ``intra_op_num_threads``.

    Returns:
        An :class:`~deep500lite.bench.op.OpRunner`.

    Raises:
        DeviceError: a GPU was asked for and ONNX Runtime has no CUDA provider (the framework is skipped).
    """
    if device.is_gpu:
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise DeviceError("ONNX Runtime has no CUDAExecutionProvider here (install onnxruntime-gpu). "
                              f"Received: device={str(device)!r}")
        providers, kind = [("CUDAExecutionProvider", {"device_id": device.index})], "cuda"
    else:
        providers, kind = ["CPUExecutionProvider"], "cpu"
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(case.onnx_model().SerializeToString(), sess_options=options, providers=providers)
    binding = session.io_binding()
    values = [ort.OrtValue.ortvalue_from_numpy(x, kind, device.index) for x in inputs]
    for meta, value in zip(session.get_inputs(), values):
        binding.bind_ortvalue_input(meta.name, value)
    binding.bind_output("Y", kind, device.index)

    def call():
        session.run_with_iobinding(binding)

    def fetch():
        call()
        return binding.copy_outputs_to_cpu()[0]

    op_type = "MatMul" if case.suite == "gemm" else "Conv"
    return OpRunner(call, None, fetch, f"one-node {op_type} InferenceSession, run_with_iobinding "
                                       f"(inputs bound once, output allocated on {kind} each run)")


@contextlib.contextmanager
def op_threads(threads: int, device):
    """Nothing to set for the process: each session gets ``intra_op_num_threads`` (see :func:`op_runner`)."""
    yield f"intra_op_num_threads {threads}"


# --------------------------------------------------------------------------------------------- bench overhead


def set_seed(seed: int) -> None:
    """Nothing to seed: ONNX Runtime draws no random numbers here (the inputs come from numpy)."""


def inference_pair(model, batch, rng):
    """The zoo's ONNX graph in an ``InferenceSession.run`` against the same graph on the ONNX Runtime executor.

    Both sessions get the same options, with intra-op spinning off: with spinning thread pools
    the idle session would spin while the other works and slow it down.

    Args:
        model: ``"lenet"`` or ``"resnet20"``.
        batch: samples per call.
        rng: the numpy generator of the inputs.

    Returns:
        ``(deep500lite_call, native_call, executor)``.
    """
    net = zoo_network(model, batch)
    def options():
        # Two sessions in one process: with spinning intra-op thread pools, the idle one would
        # spin while the other works and slow it down; both sides get the same settings.
        opts = ort.SessionOptions()
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return opts

    session = ort.InferenceSession(net.to_onnx().SerializeToString(), sess_options=options(),
                                   providers=["CPUExecutionProvider"])
    ex = executor(net, "onnxruntime", session_options=options())
    x = rng.standard_normal((batch, *MODEL_SHAPES[model])).astype(np.float32)

    def native():
        return session.run(["output"], {"input": x})[0]

    return (lambda: ex.inference({"input": x})["output"]), native, ex


def training_pair(model, batch, rng):
    """deep500lite's training step on ONNX Runtime alone (ONNX autodiff graph, reference numpy
    ``MomentumOptimizer``): the ``onnxruntime`` package has no native training loop to compare with.

    Returns:
        ``(deep500lite_call, None, executor)``.
    """
    return d5_training_step("onnxruntime", model, batch, rng, MomentumOptimizer)


# --------------------------------------------------------------------------------------------- bench overhead --op


def custom_op_pair(op, x, g):
    """The operator as a custom node of an ONNX graph (through onnxruntime-extensions) against the graph
    ``x * Sigmoid(x)`` of standard operators, both differentiated by deep500lite's ONNX autodiff.

    Returns:
        ``(custom_call, native_call)``; each call returns ``(y, dL/dx)`` as numpy arrays
        (see :func:`deep500lite.bench.op_overhead.graph_pair`).
    """
    return graph_pair("onnxruntime", op, x, g)
