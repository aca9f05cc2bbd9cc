"""Peak memory of one micro-batched training step, measured in this (fresh) process.

Usage: ``python tests/lv2/microbatch_peak_memory.py FRAMEWORK N [BATCH] [WIDTH]``; prints one JSON
line. Run it once per (framework, n) in a fresh interpreter, with ``MALLOC_MMAP_THRESHOLD_=65536``
in the environment so that glibc returns every large buffer to the system when it is freed (its
dynamic threshold would otherwise keep buffers up to 32 MiB in the heap, hiding them from RSS).

Method: a convolutional network (two 3x3 convolutions of ``WIDTH`` channels at 32x32, max-pool,
fully connected, softmax cross-entropy) trained by the reference ``GradientDescent`` wrapped in
``d5.transforms.microbatch(optimizer, N)``. ``cold`` is the growth of the peak resident set
(``VmHWM``) over the resident set before the first step (graph building and compilation
included); ``warm`` is the same for a second step after ``/proc/self/clear_refs`` reset the peak.
``activation_bytes`` is the sum of every intermediate tensor of the forward graph at the full
batch, from ONNX shape inference.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import deep500lite as d5
from deep500lite.frameworks import reference as d5ref

__all__ = ["conv_net", "activation_bytes", "measure"]


def conv_net(width: int, batch=None) -> onnx.ModelProto:
    """The measured network; ``batch=None`` leaves the batch dimension open."""
    rng = np.random.default_rng(0)
    n = "N" if batch is None else batch
    inits = [numpy_helper.from_array((rng.standard_normal((width, 3, 3, 3)) * 0.2).astype(np.float32), "w1"),
             numpy_helper.from_array(np.zeros(width, np.float32), "b1"),
             numpy_helper.from_array((rng.standard_normal((width, width, 3, 3)) * 0.05).astype(np.float32), "w2"),
             numpy_helper.from_array(np.zeros(width, np.float32), "b2"),
             numpy_helper.from_array((rng.standard_normal((10, width * 16 * 16)) * 0.01).astype(np.float32), "w3"),
             numpy_helper.from_array(np.zeros(10, np.float32), "b3")]
    nodes = [helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["output"], transB=1),
             helper.make_node("SoftmaxCrossEntropyLoss", ["output", "label"], ["loss"])]
    graph = helper.make_graph(nodes, "convnet",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [n, 3, 32, 32]),
                               helper.make_tensor_value_info("label", TensorProto.INT64, [n])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [n, 10]),
                               helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def activation_bytes(width: int, batch: int) -> int:
    """Bytes of every intermediate forward tensor at ``batch`` (ONNX shape inference)."""
    model = onnx.shape_inference.infer_shapes(conv_net(width, batch))
    total = 0
    for vi in model.graph.value_info:
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        total += int(np.prod(dims)) * 4
    return total


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(key)


def measure(framework: str, n: int, batch: int = 256, width: int = 32) -> dict:
    """One cold and one warm step's peak RSS growth (bytes)."""
    executor = d5.executor(d5.load_model(conv_net(width)), framework)
    opt = d5.transforms.microbatch(d5ref.GradientDescent(executor, learning_rate=0.01), n)
    rng = np.random.default_rng(1)
    feeds = {"input": rng.standard_normal((batch, 3, 32, 32)).astype(np.float32),
             "label": rng.integers(0, 10, batch).astype(np.int64)}
    out = {"framework": framework, "n": n, "batch": batch, "width": width,
           "activation_bytes": activation_bytes(width, batch)}
    for phase in ("cold", "warm"):
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident set
        before = _status("VmRSS")
        loss = opt.step(feeds)["loss"]
        out[phase] = _status("VmHWM") - before
        out[phase + "_loss"] = float(loss)
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    fw, n = args[0], int(args[1])
    batch = int(args[2]) if len(args) > 2 else 256
    width = int(args[3]) if len(args) > 3 else 32
    print(json.dumps(measure(fw, n, batch, width)))
