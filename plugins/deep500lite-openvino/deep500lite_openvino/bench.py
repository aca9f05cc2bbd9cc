"""OpenVINO's runners for ``deep500lite bench op`` and ``bench overhead`` (:mod:`deep500lite.bench.contract`).

- ``bench op``: the case's one-node ONNX model (``MatMul`` / ``Conv``, both operands graph inputs)
  compiled for the CPU with ``INFERENCE_NUM_THREADS`` = T, run with an ``InferRequest`` whose input
  tensors are set once.
- ``bench overhead``: the zoo's ONNX graph compiled by OpenVINO directly (``Core.read_model`` of
  the exported model, ``compile_model`` with the same configuration) and run with
  ``InferRequest.infer`` on the same numpy input, against the same graph on the OpenVINO executor:
  the ratio is what deep500lite adds around OpenVINO (feed checks, the output dict and copies).
- ``bench overhead --training``: deep500lite's training step alone (the ONNX autodiff graph and the
  reference ``MomentumOptimizer``); OpenVINO has no training of its own to compare with.
"""

from __future__ import annotations

import contextlib

import numpy as np
import openvino as ov

from deep500lite.bench.contract import MODEL_SHAPES, OpRunner, d5_training_step, zoo_network
from deep500lite.errors import DeviceError
from deep500lite.registry import executor

from deep500lite_openvino.executor import compile_onnx
from deep500lite_openvino.optimizers import MomentumOptimizer

__all__ = ["op_runner", "op_threads", "set_seed", "inference_pair", "training_pair"]


def op_runner(case, inputs, device, threads) -> OpRunner:
    """The case's one-node ONNX model compiled by OpenVINO for the CPU with ``threads`` threads.

    Raises:
        DeviceError: a GPU was asked for (the framework is skipped).
    """
    if device.is_gpu:
        raise DeviceError(f"the OpenVINO plugin runs on the CPU only. Received: device={str(device)!r}")
    compiled = compile_onnx(case.onnx_model(), threads)
    request = compiled.create_infer_request()
    for port, x in zip(compiled.inputs, inputs):
        request.set_tensor(port, ov.Tensor(np.ascontiguousarray(x)))
    output = compiled.outputs[0]

    def call():
        request.infer()

    def fetch():
        call()
        return np.array(request.get_tensor(output).data, copy=True)

    op_type = "MatMul" if case.suite == "gemm" else "Conv"
    return OpRunner(call, None, fetch, f"one-node {op_type} compiled by OpenVINO (CPU, f32), InferRequest.infer "
                                       "with the input tensors set once")


@contextlib.contextmanager
def op_threads(threads: int, device):
    """Nothing to set for the process: each compiled model gets ``INFERENCE_NUM_THREADS`` (see :func:`op_runner`)."""
    yield f"INFERENCE_NUM_THREADS {threads}"


def set_seed(seed: int) -> None:
    """Nothing to seed: OpenVINO draws no random numbers here (the inputs come from numpy)."""


def inference_pair(model, batch, rng):
    """The zoo's ONNX graph compiled by OpenVINO directly, against the same graph on the OpenVINO executor.

    Args:
        model: a key of :data:`deep500lite.bench.contract.MODEL_SHAPES`.
        batch: samples per call.
        rng: the numpy generator of the input.

    Returns:
        ``(deep500lite_call, native_call, executor)``.
    """
    net = zoo_network(model, batch)
    request = compile_onnx(net.to_onnx()).create_infer_request()
    ex = executor(net, "openvino")
    x = rng.standard_normal((batch, *MODEL_SHAPES[model])).astype(np.float32)

    def native():
        return request.infer({"input": x}, share_inputs=True, share_outputs=False)[0]

    return (lambda: ex.inference({"input": x})["output"]), native, ex


def training_pair(model, batch, rng):
    """deep500lite's training step on OpenVINO alone: ``(deep500lite_call, None, executor)``."""
    return d5_training_step("openvino", model, batch, rng, MomentumOptimizer)
