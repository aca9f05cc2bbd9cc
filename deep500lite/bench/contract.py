"""The contract between ``deep500lite bench`` and the framework packages: what a framework's ``bench`` module provides.

A framework that takes part in the benchmarks has a ``bench`` role module (``frameworks/<fw>/bench.py``,
or a plugin's own) with the functions of :class:`FrameworkBench` that its
:class:`~deep500lite.frameworkspec.FrameworkSpec` declares in ``bench`` (``"op"``, ``"inference"``,
``"training"``, ``"custom_op"``, ``"peak"``). It imports from ``deep500lite.bench`` this module
only: the shared pieces below (the runner record, the models' shapes and hyperparameters, the
deep500lite-side training step, the custom-operator graph pair, the peak kernels' timer, and the zoo's
:class:`~deep500lite.bench.zoo_model.ZooModel` for a ``zoo`` role module and
:class:`~deep500lite.bench.zoo_model.GraphModel` for a ``zoo_graphs`` one), and
the benchmark drivers (:mod:`~deep500lite.bench.op`, :mod:`~deep500lite.bench.overhead`,
:mod:`~deep500lite.bench.op_overhead`, :mod:`deep500lite.perfmodel.peak`) reach the framework's module
through the registry when they run, never the other way round.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Protocol

import numpy as np

from deep500lite.bench.zoo_model import GraphModel, ZooModel, map_parameters
from deep500lite.perfmodel.peak import blas_threads, measure_kernel

__all__ = ["FrameworkBench", "OpRunner", "LEARNING_RATE", "MOMENTUM", "MODEL_SHAPES", "with_loss", "random_labels",
           "d5_training_step", "zoo_network", "graph_pair", "blas_threads", "measure_kernel", "ZooModel", "map_parameters",
           "GraphModel"]

#: Input shapes (one sample) of the models ``bench overhead`` times.
MODEL_SHAPES = {"lenet": (1, 28, 28), "resnet20": (3, 32, 32)}


class FrameworkBench(Protocol):
    """What a framework's ``bench`` module defines (each function only for the benchmarks its spec lists).

    ``"op"`` (``bench op``): ``op_runner(case, inputs, device, threads) -> OpRunner`` (raise
    :class:`~deep500lite.errors.DeviceError` for a case it cannot run there) and
    ``op_threads(threads, device)``, a context manager yielding how the thread count was applied.
    ``"inference"`` / ``"training"`` (``bench overhead``): ``inference_pair(model, batch, rng)`` and
    ``training_pair(model, batch, rng)`` returning ``(deep500lite_call, native_call or None, executor)``
    for a model of :data:`MODEL_SHAPES`; ``set_seed(seed)``; optionally ``set_device(device)``.
    ``"custom_op"`` (``bench overhead --op``): ``custom_op_pair(op, x, g) -> (custom_call, native_call)``,
    each call returning ``(y, dL/dx)``. ``"peak"`` (the measured peak): ``peak_cpu_kernels(a, b,
    threads)``, ``peak_gpu_kernels(index, gemm_n, copy_elements)``, ``gpu_info(index)`` and
    ``require_gpu(index)``. ``"gpu"``: ``set_device(device)``, so ``bench overhead --device gpu:N`` runs it.
    ``"data_parallel"`` (``bench distributed``'s ``ddp`` row): ``gloo_group()`` and
    ``data_parallel_pair(model, batch, rng, comm, group, bucket_bytes)``, a deep500lite data-parallel step
    and the framework's own data-parallel engine's on one rank of an MPI job.
    """

    def op_runner(self, case, inputs, device, threads) -> OpRunner:  # pragma: no cover - protocol
        """One ``bench op`` case, ready to time."""

    def set_seed(self, seed: int) -> None:  # pragma: no cover - protocol
        """Seed the framework's own generators (the models' weights)."""


@dataclasses.dataclass
class OpRunner:
    """One case, ready to time on one framework (made by a framework's ``bench.op_runner``).

    A framework that cannot run the case here (no GPU it can see, a CPU-only framework) raises
    :class:`~deep500lite.errors.DeviceError` instead, and is skipped with its message.

    Attributes:
        fn: the timed call.
        sync: waits for the device's work (None on the CPU, where ``fn`` returns when done).
        fetch: one call, its result as numpy in the case's layout (for the correctness check).
        how: what is called, for the results.
    """

    fn: Callable[[], object]
    sync: Callable[[], None] | None
    fetch: Callable[[], np.ndarray]
    how: str


#: The momentum optimizer's hyperparameters in the training rows.
LEARNING_RATE, MOMENTUM = 0.01, 0.9


def with_loss(network):
    """``network`` with the digits loss (softmax cross-entropy of ``output`` and ``label``) added as ``loss``."""
    from deep500lite.datasets import dataset_loss

    network.add_operation(dataset_loss("digits")(["output", "label"], "loss"))
    return network


def random_labels(rng, batch):
    """``batch`` random int64 class labels in [0, 10)."""
    return rng.integers(0, 10, size=batch).astype(np.int64)


def zoo_network(model: str, batch: int):
    """The zoo's ONNX network of a key of :data:`MODEL_SHAPES` (``resnet20`` is the zoo's ResNet of depth 20),
    10 classes, ``batch`` samples per call: the graph both sides of ``bench overhead`` run."""
    from deep500lite.networks import create_model

    name, kwargs = ("lenet", {}) if model == "lenet" else ("resnet", {"depth": 20})
    return create_model(name, batch, classes=10, shape=MODEL_SHAPES[model], **kwargs)[0]


def d5_training_step(framework, model, batch, rng, optimizer_class):
    """deep500lite's training step alone, for a framework with no native training loop to compare with.

    Args:
        framework: the executor's framework key.
        model: a key of :data:`MODEL_SHAPES` (the zoo's ONNX graph is used).
        batch: samples per step.
        rng: the numpy generator of the inputs and labels.
        optimizer_class: the momentum optimizer to step with (``optimizer_class(executor,
            learning_rate=, momentum=)``).

    Returns:
        ``(deep500lite_call, None, executor)``; the call returns the step's loss.
    """
    from deep500lite.registry import executor

    net = with_loss(zoo_network(model, batch))
    ex = executor(net, framework)
    optimizer = optimizer_class(ex, learning_rate=LEARNING_RATE, momentum=MOMENTUM)
    feeds = {"input": rng.standard_normal((batch, *MODEL_SHAPES[model])).astype(np.float32),
             "label": random_labels(rng, batch)}
    return (lambda: optimizer.step(feeds)["loss"]), None, ex


def _graph(n, custom_type):
    """A network computing s = Swish(x * w) and loss = sum(s * g), with w = 1 a parameter."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from deep500lite.lv0.custom import CUSTOM_DOMAIN, custom_node
    from deep500lite.lv1.network import load_model

    nodes = [helper.make_node("Mul", ["x", "w"], ["h"])]
    if custom_type is None:
        nodes += [helper.make_node("Sigmoid", ["h"], ["sg"]), helper.make_node("Mul", ["h", "sg"], ["s"])]
    else:
        nodes.append(custom_node(custom_type, ["h"], ["s"]))
    nodes += [helper.make_node("Mul", ["s", "g"], ["sg2"]),
              helper.make_node("ReduceSum", ["sg2"], ["loss"], keepdims=0)]
    vi = [helper.make_tensor_value_info(k, TensorProto.FLOAT, [n]) for k in ("x", "g")]
    graph = helper.make_graph(nodes, "swish", vi, [helper.make_tensor_value_info("s", TensorProto.FLOAT, [n])],
                              initializer=[numpy_helper.from_array(np.ones(n, np.float32), "w")],
                              value_info=[helper.make_tensor_value_info("h", TensorProto.FLOAT, [n])])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(CUSTOM_DOMAIN, 1)] if custom_type else [])
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    if custom_type is not None:
        onnx.checker.check_model(model)
    return load_model(model)


def graph_pair(framework, op, x, g):
    """The operator as a custom node of an ONNX graph against ``x * Sigmoid(x)`` of standard operators.

    Both graphs run on ``framework``'s executor and are differentiated by deep500lite's ONNX autodiff;
    the frameworks without a custom-op API of their own (ONNX Runtime, the reference executor) use it
    as their ``bench.custom_op_pair``.

    Args:
        framework: the executor's framework key.
        op: the Swish operator (:func:`deep500lite.bench.op_overhead.swish_op`), registered here as a custom node type.
        x: the input vector.
        g: the output gradient.

    Returns:
        ``(custom_call, native_call)``; each call returns ``(y, dL/dx)`` as numpy arrays.
    """
    from deep500lite.lv0.custom import register_op
    from deep500lite.registry import executor

    op_type = f"BenchSwish{op.__class__.__name__}{len(x)}"
    register_op(op, op_type)
    executors = [executor(_graph(len(x), t), framework) for t in (op_type, None)]

    def run(ex):
        def call():
            out = ex.inference_and_backprop({"x": x, "g": g}, "loss")
            # The gradient of w is x * dLoss/dh; with w = 1 it equals the input gradient.
            return out["s"], ex.network.fetch_tensors(["w_grad"])[0]
        return call

    return run(executors[0]), run(executors[1])
