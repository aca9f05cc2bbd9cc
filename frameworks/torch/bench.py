"""PyTorch's part of ``deep500lite bench``: what is timed on torch, and the torch-measured peak.

The orchestration (cases, timing, statistics, tables, JSON) lives in :mod:`deep500lite.bench`;
it reaches this module at run time through
``deep500lite.registry.framework_module("torch", "bench")``. Every framework's ``bench`` module
has the same functions for the same role:

- ``bench op``: :func:`op_runner` (one GEMM or convolution case) and :func:`op_threads`;
- ``bench overhead``: :func:`set_seed`, :func:`inference_pair` and :func:`training_pair`
  (deep500lite against the framework's own API);
- ``bench overhead --op``: :func:`custom_op_pair` (a custom operator against the framework's own);
- ``bench distributed``: :func:`data_parallel_pair` and :func:`gloo_group` (a deep500lite
  data-parallel step against ``DistributedDataParallel``; in ``bench_data_parallel.py``).

Only torch measures the peak (:mod:`deep500lite.bench.peak`): :func:`peak_cpu_kernels`,
:func:`peak_gpu_kernels`, :func:`gpu_info` and :func:`require_gpu`.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
import torch.nn.functional as F

from deep500lite.bench.contract import (LEARNING_RATE, MODEL_SHAPES, MOMENTUM, OpRunner, measure_kernel, random_labels,
                                        with_loss)
from deep500lite.errors import DeviceError
from deep500lite.frameworks.torch import models
from deep500lite.frameworks.torch.bench_data_parallel import data_parallel_pair, gloo_group  # bench distributed
from deep500lite.frameworks.torch.custom import custom_op
from deep500lite.frameworks.torch.optimizers import MomentumOptimizer
from deep500lite.lv1.network import load_model
from deep500lite.registry import executor

__all__ = ["TRAINING_SAME_WEIGHTS", "op_runner", "op_threads", "set_seed", "set_device", "inference_pair", "training_pair", "custom_op_pair",
           "peak_cpu_kernels", "peak_gpu_kernels", "gpu_info", "require_gpu", "data_parallel_pair", "gloo_group"]


# --------------------------------------------------------------------------------------------- bench op


#: bench overhead --training: the native side starts from the deep500lite side's weights (the model is exported).
TRAINING_SAME_WEIGHTS = True


def op_runner(case, inputs, device, threads) -> OpRunner:
    """``torch.matmul`` / ``torch.nn.functional.conv2d`` (NCHW) on one case, under ``inference_mode``.

    Args:
        case: a :class:`~deep500lite.bench.op.GemmCase` or :class:`~deep500lite.bench.op.ConvCase`.
        inputs: the case's numpy inputs; copied to the device once, here.
        device: the :class:`~deep500lite.Device`; on a GPU each run ends with ``torch.cuda.synchronize``.
        threads: CPU threads (set for the whole run by :func:`op_threads`).

    Returns:
        An :class:`~deep500lite.bench.op.OpRunner`.
    """
    dev = torch.device("cuda", device.index) if device.is_gpu else torch.device("cpu")
    tensors = [torch.from_numpy(x).to(dev) for x in inputs]
    if case.suite == "gemm":
        def call():
            with torch.inference_mode():
                return torch.matmul(tensors[0], tensors[1])
        how = "torch.matmul"
    else:
        def call():
            with torch.inference_mode():
                return F.conv2d(tensors[0], tensors[1], stride=case.stride, padding=case.pad)
        how = "torch.nn.functional.conv2d (NCHW)"
    sync = (lambda: torch.cuda.synchronize(dev)) if device.is_gpu else None
    return OpRunner(call, sync, lambda: call().cpu().numpy(), how + " under inference_mode")


@contextlib.contextmanager
def op_threads(threads: int, device):
    """``torch.set_num_threads(threads)`` for the block (restored after); yields a description."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield f"torch.set_num_threads({threads})" + (f", CUDA {torch.cuda.get_device_name(device.index)}"
                                                      if device.is_gpu else "")
    finally:
        torch.set_num_threads(previous)


# --------------------------------------------------------------------------------------------- bench overhead


_device = None  # the deep500lite Device of bench overhead (None: the CPU)


def set_seed(seed: int) -> None:
    """Seed torch's global generator (the modules' initial weights)."""
    torch.manual_seed(seed)


def set_device(device) -> None:
    """The device ``bench overhead`` runs both sides on (a deep500lite ``Device``); a GPU must be visible."""
    global _device
    if device.is_gpu:
        require_gpu(device.index)
    _device = device


def _torch_device():
    return torch.device("cuda", _device.index) if _device is not None and _device.is_gpu else torch.device("cpu")


def _transfers(dev):
    """``(to_device, to_host)`` of the native side: the copies a GPU needs, nothing extra on the CPU."""
    if dev.type == "cpu":
        return torch.from_numpy, (lambda t: t.numpy())
    return (lambda a: torch.from_numpy(a).to(dev)), (lambda t: t.cpu().numpy())


def inference_pair(model, batch, rng):
    """A ``torch.nn.Module`` under ``inference_mode`` against its ``torch.onnx`` export on the torch executor.

    Args:
        model: ``"lenet"`` or ``"resnet20"``.
        batch: samples per call.
        rng: the numpy generator of the inputs.

    Returns:
        ``(deep500lite_call, native_call, executor)``.
    """
    module = (models.LeNet() if model == "lenet" else models.ResNet20()).eval()
    x = rng.standard_normal((batch, *MODEL_SHAPES[model])).astype(np.float32)
    ex = executor(load_model(models.export_onnx(module, torch.from_numpy(x))), "torch", device=_device)
    dev = _torch_device()
    module.to(dev)

    to_device, to_host = _transfers(dev)

    def native():  # numpy in, numpy out, as the executor's call: the copies to and from a GPU are on both sides
        with torch.inference_mode():
            return to_host(module(to_device(x)))

    return (lambda: ex.inference({"input": x})["output"]), native, ex


def training_pair(model, batch, rng):
    """One step with ``torch.optim.SGD`` against the exported module on the torch executor with its
    native ``MomentumOptimizer`` (both start from the same weights).

    Args:
        model: ``"lenet"`` or ``"resnet20"``.
        batch: samples per step.
        rng: the numpy generator of the inputs and labels.

    Returns:
        ``(deep500lite_call, native_call, executor)``; each call returns the step's loss.
    """
    module = models.LeNet() if model == "lenet" else models.ResNet20()
    x = rng.standard_normal((batch, *MODEL_SHAPES[model])).astype(np.float32)
    y = random_labels(rng, batch)
    net = with_loss(load_model(models.export_onnx(module, torch.from_numpy(x), training=True)))
    ex = executor(net, "torch", device=_device)
    dev = _torch_device()
    module.to(dev)
    optimizer = MomentumOptimizer(ex, learning_rate=LEARNING_RATE, momentum=MOMENTUM)
    native_opt = torch.optim.SGD(module.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    module.train()

    to_device, to_host = _transfers(dev)

    def native():
        native_opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(module(to_device(x)), to_device(y))
        loss.backward()
        native_opt.step()
        return to_host(loss.detach())

    return (lambda: optimizer.step({"input": x, "label": y})["loss"]), native, ex


# --------------------------------------------------------------------------------------------- bench overhead --op


def custom_op_pair(op, x, g):
    """``deep500lite.frameworks.torch.custom_op(op)`` against ``torch.nn.functional.silu``, with autograd.

    Args:
        op: the Swish operator (:func:`deep500lite.bench.op_overhead.swish_op`).
        x: the input vector.
        g: the output gradient.

    Returns:
        ``(custom_call, native_call)``; each call returns ``(y, dL/dx)`` as numpy arrays.
    """
    fn = custom_op(op)
    xt, gt = torch.from_numpy(x), torch.from_numpy(g)

    def run(f):
        def call():
            t = xt.clone().requires_grad_(True)
            y = f(t)
            (grad,) = torch.autograd.grad(y, t, gt)
            return y.detach().numpy(), grad.numpy()
        return call

    return run(lambda t: fn(t)[0]), run(torch.nn.functional.silu)


# --------------------------------------------------------------------------------------------- peak


def peak_cpu_kernels(a, b, threads: int) -> dict:
    """Time ``torch.matmul(a, b)`` on the CPU with ``threads`` threads (the peak's ``gemm_torch`` kernel).

    Args:
        a: float32 ``n x n`` numpy array.
        b: float32 ``n x n`` numpy array.
        threads: torch's CPU threads during the measurement (restored after).

    Returns:
        ``{"gemm_torch": kernel}`` (see :func:`deep500lite.bench.peak.measure_kernel`).
    """
    work = 2.0 * a.shape[0] * a.shape[1] * b.shape[1]
    kernels = {}
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        with torch.inference_mode():
            kernels["gemm_torch"] = measure_kernel(lambda: torch.matmul(ta, tb), work, "FLOP/s")
    finally:
        torch.set_num_threads(previous)
    return kernels


def peak_gpu_kernels(index: int, gemm_n: int, copy_elements: int) -> dict:
    """Time a float32 ``gemm_n``-cubed GEMM and a ``copy_`` of ``copy_elements`` floats on CUDA GPU ``index``.

    Returns:
        ``{"gemm_torch": kernel, "copy_torch": kernel}`` (see :func:`deep500lite.bench.peak.measure_kernel`).
    """
    dev = torch.device("cuda", index)

    def sync():
        torch.cuda.synchronize(dev)

    n = gemm_n
    kernels = {}
    with torch.inference_mode():
        gen = torch.Generator(device=dev).manual_seed(0)
        a = torch.randn((n, n), device=dev, generator=gen)
        b = torch.randn((n, n), device=dev, generator=gen)
        kernels["gemm_torch"] = measure_kernel(lambda: torch.matmul(a, b), 2.0 * n ** 3, "FLOP/s", sync=sync)
        src = torch.ones(copy_elements, device=dev)
        dst = torch.empty_like(src)
        kernels["copy_torch"] = measure_kernel(lambda: dst.copy_(src), 2.0 * src.numel() * 4, "B/s", sync=sync)
    return kernels


def gpu_info(index: int) -> dict:
    """``{"name": the GPU's name, "tf32": whether torch's float32 matmul may use TF32}`` of CUDA GPU ``index``."""
    return {"name": torch.cuda.get_device_name(index), "tf32": bool(torch.backends.cuda.matmul.allow_tf32)}


def require_gpu(index: int) -> None:
    """Raise a :class:`~deep500lite.errors.DeviceError` unless torch sees CUDA GPU ``index``."""
    if not torch.cuda.is_available():
        raise DeviceError(f"--device gpu:{index} needs a CUDA GPU visible to PyTorch, but torch.cuda.is_available() "
                          f"is False here (torch {torch.__version__}: no GPU or a CPU-only build). Use --device cpu. "
                          f"Received: --device gpu:{index}")
    if index >= torch.cuda.device_count():
        raise DeviceError(f"--device gpu:{index} does not exist: torch sees {torch.cuda.device_count()} GPU(s), "
                          f"gpu:0 to gpu:{torch.cuda.device_count() - 1}. Received: --device gpu:{index}")
