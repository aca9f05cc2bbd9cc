"""``deep500lite bench op``: operator benchmarks (GEMM, convolution, custom operators), roofline style.

What is timed, per case and framework (numpy inputs are made once per case, seeded, and moved to
the framework's tensors and device before timing; nothing is copied inside the timed region):

- **torch**: ``torch.matmul(A, B)`` / ``torch.nn.functional.conv2d(X, W, stride, padding)`` under
  ``torch.inference_mode()``, ``torch.set_num_threads(T)``. On a GPU the tensors live
  on the device and every run ends with ``torch.cuda.synchronize()``.
- **tensorflow**: ``tf.linalg.matmul`` / ``tf.nn.conv2d`` inside a ``tf.function``, intra-op
  threads T. Convolution runs in NHWC (input) and HWIO (filter), TensorFlow's native
  layout (its CPU kernels do not take NCHW): the inputs are transposed once, before timing. Each
  run ends by fetching the result with ``.numpy()`` (on the CPU this waits for the result without
  copying it); on a GPU ``tf.test.experimental.sync_devices()`` waits instead, so no device-to-host
  copy is timed.
- **onnxruntime**: a one-node ONNX model (``MatMul`` / ``Conv``) in an ``InferenceSession`` with
  ``intra_op_num_threads = T``, run with **I/O binding**: both inputs are bound once
  as ``OrtValue``s on the device and the output is bound to the device, allocated by ONNX Runtime
  on each run (as the other frameworks allocate theirs). Both operands are graph inputs, not
  initializers, so ONNX Runtime does not pre-pack the weights, like the other frameworks, which
  also receive both operands on every call.
- **reference**: ``numpy.matmul`` (numpy's BLAS, limited to T threads with threadpoolctl) for GEMM; the deep500lite
  reference executor (``onnx.reference``) on the same one-node ONNX ``Conv`` for convolution.
  CPU only.
- **jax**: ``jax.jit(jnp.matmul)`` / ``jax.jit(jax.lax.conv_general_dilated)`` (NCHW, OIHW) on
  device arrays, compiled before timing, each run waiting with ``block_until_ready``. XLA sizes
  its CPU thread pool when JAX starts: T is not applied (the setup records this).
- **op** (suite ``custom``): the operator's own ``forward`` on numpy arrays (a Python operator
  runs its numpy code; a compiled C++ operator its C++ code).

T is the ``threads`` argument (``--threads``), by default the cores this process may use. The
code of each framework is ``op_runner`` and ``op_threads`` in ``frameworks/<fw>/bench.py``,
reached through :func:`deep500lite.registry.framework_module` when the benchmark runs.

Method: one untimed call whose output is compared with the reference result (``max |err|``
relative to ``max |reference|``), one probing call, then
:func:`deep500lite.metrics.time_function`: warm-up, device synchronization in the timed region,
repeats until the 95% CI of the median is within 5% of it or ``max_time`` seconds of timed work
are spent (10 runs at least; 3 for calls longer than a tenth of ``max_time``). Cases run one after
the other, each on every framework in turn, so that a burst of other load on a shared machine
hits the frameworks of one case alike.

Reported per case and framework: the median with its 95% CI, GFLOP/s = FLOP / median, and its
place under the roofline of this machine's *measured* peak (:mod:`deep500lite.perfmodel.peak`).

FLOP and bytes, float32 (4 bytes per element), inputs read once and outputs written once:

- GEMM ``C[M,N] = A[M,K] B[K,N]``: ``2 M N K`` FLOP, ``4 (M K + K N + M N)`` bytes.
- convolution ``X[N,C,H,W] * W[K,C,R,S] -> Y[N,K,P,Q]`` with ``P = (H + 2 pad - R) // stride + 1``
  (Q likewise): ``2 N K C R S P Q`` FLOP, ``4 (N C H W + K C R S + N K P Q)`` bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import io
import os
import time
from typing import Callable, Sequence

import numpy as np

from deep500lite.bench.contract import OpRunner
from deep500lite.errors import DeviceError, UserError, UserTypeError, format_choices
from deep500lite.lv0.operator import CustomPythonOp, Operator
from deep500lite.lv0.tensordesc import tensordesc

__all__ = [
    "SUITES", "SKINNY_BATCHES", "DEFAULT_SUITES", "SIZES", "OP_FRAMEWORKS", "CUSTOM_FRAMEWORK", "GemmCase",
    "ConvCase", "CustomCase", "custom_case", "SaxpyOp", "gemm_cases", "conv_cases", "skinny_cases",
    "custom_example_cases", "load_custom_cases", "OpRunner", "OpResult", "OpBenchmark", "run_op_benchmark",
    "parse_suites", "parse_frameworks", "check_size",
    "TABLE_HEADERS", "plot_results",
]

SUITES = ("gemm", "conv", "skinny", "custom")
DEFAULT_SUITES = ("gemm", "conv")
SIZES = ("small", "default", "large")
OP_FRAMEWORKS = ("torch", "tensorflow", "onnxruntime", "reference", "jax")
CUSTOM_FRAMEWORK = "op"
_F32 = 4
_OPSET = 17
_REL_ERROR_WARN = 1e-3


# --------------------------------------------------------------------------------------------- cases


@dataclasses.dataclass(frozen=True)
class GemmCase:
    """A float32 GEMM ``C[M,N] = A[M,K] B[K,N]`` (DeepBench's convention: N is often the batch).

    Attributes:
        name: a short name.
        m: rows of A and C.
        n: columns of B and C.
        k: the reduction dimension.
        origin: where the size comes from.
    """

    name: str
    m: int
    n: int
    k: int
    origin: str = ""
    suite = "gemm"

    @property
    def flops(self) -> float:
        """``2 M N K``."""
        return 2.0 * self.m * self.n * self.k

    @property
    def bytes_moved(self) -> float:
        """A and B read once, C written once (float32)."""
        return float(_F32 * (self.m * self.k + self.k * self.n + self.m * self.n))

    @property
    def shape(self) -> str:
        """``M.. N.. K..``."""
        return f"M{self.m} N{self.n} K{self.k}"

    def make_inputs(self, rng) -> tuple:
        """Seeded float32 ``A[M,K]`` and ``B[K,N]``."""
        return (rng.standard_normal((self.m, self.k), dtype=np.float32),
                rng.standard_normal((self.k, self.n), dtype=np.float32))

    def expected(self, inputs) -> np.ndarray:
        """The reference result (numpy)."""
        return np.matmul(*inputs)

    def onnx_model(self):
        """A one-node ONNX ``MatMul`` model with inputs ``A``, ``B`` and output ``Y``."""
        from onnx import helper

        node = helper.make_node("MatMul", ["A", "B"], ["Y"])
        return _one_node_model(node, [("A", [self.m, self.k]), ("B", [self.k, self.n])], ("Y", [self.m, self.n]))

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"suite": self.suite, "name": self.name, "M": self.m, "N": self.n, "K": self.k, "origin": self.origin}


@dataclasses.dataclass(frozen=True)
class ConvCase:
    """A float32 2-D convolution ``X[N,C,H,W] * W[K,C,R,S] -> Y[N,K,P,Q]`` (no bias, no groups).

    Attributes:
        name: a short name.
        n: batch.
        c: input channels.
        h: input height.
        w: input width.
        k: output channels (filters).
        r: filter height.
        s: filter width.
        stride: the same in both dimensions.
        pad: zero padding on every side.
        origin: where the size comes from.
    """

    name: str
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride: int = 1
    pad: int = 0
    origin: str = ""
    suite = "conv"

    @property
    def p(self) -> int:
        """Output height."""
        return (self.h + 2 * self.pad - self.r) // self.stride + 1

    @property
    def q(self) -> int:
        """Output width."""
        return (self.w + 2 * self.pad - self.s) // self.stride + 1

    @property
    def flops(self) -> float:
        """``2 N K C R S P Q``."""
        return 2.0 * self.n * self.k * self.c * self.r * self.s * self.p * self.q

    @property
    def bytes_moved(self) -> float:
        """X and W read once, Y written once (float32)."""
        return float(_F32 * (self.n * self.c * self.h * self.w + self.k * self.c * self.r * self.s
                             + self.n * self.k * self.p * self.q))

    @property
    def shape(self) -> str:
        """``N.. C.. HxW K.. RxS/stride p<pad>``."""
        return f"N{self.n} C{self.c} {self.h}x{self.w} K{self.k} {self.r}x{self.s}/{self.stride} p{self.pad}"

    def make_inputs(self, rng) -> tuple:
        """Seeded float32 ``X[N,C,H,W]`` and ``W[K,C,R,S]``."""
        return (rng.standard_normal((self.n, self.c, self.h, self.w), dtype=np.float32),
                rng.standard_normal((self.k, self.c, self.r, self.s), dtype=np.float32))

    def expected(self, inputs) -> np.ndarray:
        """The reference result (``onnx.reference``'s Conv)."""
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(self.onnx_model()).run(None, {"X": inputs[0], "W": inputs[1]})[0]

    def onnx_model(self):
        """A one-node ONNX ``Conv`` model with inputs ``X``, ``W`` and output ``Y``."""
        from onnx import helper

        node = helper.make_node("Conv", ["X", "W"], ["Y"], kernel_shape=[self.r, self.s],
                                strides=[self.stride, self.stride], pads=[self.pad] * 4)
        return _one_node_model(node, [("X", [self.n, self.c, self.h, self.w]), ("W", [self.k, self.c, self.r, self.s])],
                               ("Y", [self.n, self.k, self.p, self.q]))

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"suite": self.suite, "name": self.name, "N": self.n, "C": self.c, "H": self.h, "W": self.w,
                "K": self.k, "R": self.r, "S": self.s, "stride": self.stride, "pad": self.pad, "P": self.p,
                "Q": self.q, "origin": self.origin}


@dataclasses.dataclass(frozen=True, eq=False)
class CustomCase:
    """A custom operator with concrete inputs and its FLOP and byte counts (make it with :func:`custom_case`).

    Attributes:
        name: a short name.
        op: the operator (``op.forward(*inputs)`` is timed).
        inputs: the input arrays.
        flops: FLOP of one call.
        bytes_moved: bytes of one call (inputs read and outputs written once, unless given).
        origin: what the operator is.
    """

    name: str
    op: Operator
    inputs: tuple
    flops: float
    bytes_moved: float
    origin: str = ""
    suite = "custom"

    @property
    def shape(self) -> str:
        """The input shapes, ``;``-separated."""
        return ";".join("x".join(map(str, x.shape)) or "scalar" for x in self.inputs)

    def make_inputs(self, rng) -> tuple:
        """The case's own inputs (made once by :func:`custom_case`)."""
        return self.inputs

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"suite": self.suite, "name": self.name, "op": type(self.op).__name__,
                "inputs": [{"dtype": x.dtype.name, "shape": list(x.shape)} for x in self.inputs],
                "flops": self.flops, "bytes_moved": self.bytes_moved, "origin": self.origin}


def _one_node_model(node, inputs, output):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [node], f"bench_{node.op_type.lower()}",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(output[0], TensorProto.FLOAT, output[1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)], ir_version=8)  # IR of opset 17


def _random_input(desc, rng) -> np.ndarray:
    if np.issubdtype(desc.dtype, np.floating):
        return rng.standard_normal(desc.shape).astype(desc.dtype)
    if desc.dtype == np.bool_:
        return rng.random(desc.shape) < 0.5
    return rng.integers(0, 10, size=desc.shape).astype(desc.dtype)


def custom_case(op: Operator, flops: float, bytes_moved: float | None = None, *, name: str | None = None,
                inputs: Sequence[np.ndarray] | None = None, origin: str = "", seed: int = 0) -> CustomCase:
    """A benchmark case for any level-0 operator (a Python op, or a compiled C++ op).

    Args:
        op: the :class:`~deep500lite.Operator`. Without ``inputs`` it needs
            ``input_descriptors`` with every dimension known; inputs are then drawn at random
            (floats standard normal, integers in [0, 10)) with ``seed``.
        flops: floating-point operations of one ``forward`` call (> 0).
        bytes_moved: bytes one call moves; by default every input and output once (the outputs
            are counted by calling ``forward`` once).
        name: the case's name (default: the op's class name).
        inputs: the input arrays, instead of random ones.
        origin: a note on what the operator is.
        seed: seed of the random inputs.

    Returns:
        A :class:`CustomCase`.

    Raises:
        UserTypeError: ``op`` is not an Operator.
        UserError: no inputs and the descriptors are missing or not concrete, or ``flops <= 0``.
    """
    if not isinstance(op, Operator):
        raise UserTypeError("custom_case needs a d5.Operator (a CustomPythonOp or a compiled C++ op). "
                            f"Received: {type(op).__name__}")
    label = name or type(op).__name__
    if not flops or flops <= 0:
        raise UserError(f"custom case {label!r}: flops must be a positive number of FLOP per call. Received: {flops!r}")
    if inputs is None:
        descs = getattr(op, "input_descriptors", None)
        if descs is None or not all(getattr(d, "is_static", False) for d in descs):
            raise UserError(f"custom case {label!r}: the operator needs input_descriptors with every dimension known "
                            f"(d5.tensordesc(dtype, [sizes])), or pass inputs=. Received: {descs!r}")
        rng = np.random.default_rng(seed)
        inputs = tuple(_random_input(d, rng) for d in descs)
    else:
        inputs = tuple(np.asarray(x) for x in inputs)
    if bytes_moved is None:
        out = op.forward(*inputs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        bytes_moved = float(sum(x.nbytes for x in inputs) + sum(np.asarray(y).nbytes for y in outs))
    if bytes_moved <= 0:
        raise UserError(f"custom case {label!r}: bytes_moved must be positive. Received: {bytes_moved!r}")
    return CustomCase(label, op, inputs, float(flops), float(bytes_moved), origin)


class SaxpyOp(CustomPythonOp):
    """``z = alpha * x + y`` on float32 vectors: the built-in example of the ``custom`` suite.

    Two FLOP per element and 12 bytes (x and y read, z written): a memory-bound operator.

    Args:
        n: the vectors' length.
        alpha: the scale of ``x``.
    """

    def __init__(self, n: int, alpha: float = 2.0):
        desc = tensordesc(np.float32, [n])
        super().__init__([desc, desc], [desc])
        self.alpha = np.float32(alpha)

    def forward(self, x, y):
        """``alpha * x + y``."""
        return self.alpha * x + y

    def backward(self, grads, fwd_inputs, fwd_outputs):
        """``(alpha * g, g)``."""
        (g,) = grads
        return self.alpha * g, g.copy()


# --------------------------------------------------------------------------------------------- suites

# Skinny GEMMs (Keuper, "Distributed Training of Deep Neural Networks: Theoretical and Practical
# Limits of Parallel Scalability", section IV): a fully connected layer with I inputs and O outputs
# computes (O x I) x (I x b) for a per-node batch b; data-parallel training over more nodes shrinks
# b, leaving too little work to parallelize inside the BLAS. M = O, K = I, N = b.
_SKINNY_ORIGIN = "fully connected layer at per-node batch N (Keuper, skinny GEMM)"


def gemm_cases(size: str = "default") -> list[GemmCase]:
    """The GEMM suite at a size preset (see docs/operator-benchmarks.md for the origins)."""
    check_size(size)
    if size == "small":
        return [GemmCase("square-128", 128, 128, 128, "tiny square (tests)"),
                GemmCase("deepbench-like", 256, 32, 256, "tiny DeepBench-style M=K, N = batch (tests)"),
                GemmCase("skinny-b4", 512, 4, 512, "tiny skinny GEMM (tests)")]
    cases = [
        GemmCase("square-1024", 1024, 1024, 1024, "square training GEMM"),
        GemmCase("deepbench-1760", 1760, 128, 1760, "DeepBench training GEMM, N = batch 128"),
        GemmCase("deepbench-2560", 2560, 64, 2560, "DeepBench training GEMM, N = batch 64"),
    ]
    batches = (1, 4, 16, 32)
    if size == "large":
        cases = [GemmCase("square-2048", 2048, 2048, 2048, "square training GEMM"),
                 GemmCase("square-4096", 4096, 4096, 4096, "square training GEMM"),
                 GemmCase("deepbench-5124", 5124, 9124, 2560, "DeepBench training GEMM, large"),
                 *cases[1:]]
        batches = (1, 4, 16, 32, 64, 128)
        cases += [GemmCase(f"alexnet-fc6-b{b}", 4096, b, 9216, f"AlexNet fc6 (9216->4096), {_SKINNY_ORIGIN}")
                  for b in (1, 8, 32)]
    cases += [GemmCase(f"alexnet-fc7-b{b}", 4096, b, 4096,
                       f"AlexNet fc7 (4096->4096; DeepBench has (4096, N, 4096) too), {_SKINNY_ORIGIN}")
              for b in batches]
    return cases


#: Per-node batches of the ``skinny`` suite.
SKINNY_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# The default preset: a few layers of each network, cases over 4 GFLOP left out (about a minute per framework
# here); ``large`` takes every convolution and fully connected layer at every batch.
_SKINNY_DEFAULT = {"alexnet": ("conv5", "fc6", "fc7"), "googlenet": ("5b.3x3", "fc")}
_SKINNY_SMALL = {"alexnet": ("fc8",), "googlenet": ("fc",)}
_SKINNY_MAX_FLOP = 4e9


def skinny_cases(size: str = "default") -> list[GemmCase]:
    """The ``skinny`` suite: GEMMs of AlexNet's and GoogLeNet's layers at per-node batches 1 to 256.

    Shapes come from :data:`deep500lite.perfmodel.scaling_networks.MODELS` (the layers of Table III
    of the seed paper's networks): a convolution as its im2col GEMM, ``M`` = filters, ``N`` = b x
    output pixels, ``K`` = input channels x kernel height x width (per group); a fully connected
    layer ``M`` = outputs, ``N`` = b, ``K`` = inputs. Names are ``skinny-<model>-<layer>-b<b>``;
    the same shape appears once. ``small``: two fully connected layers at b = 1, 4, 16 (tests).
    """
    from deep500lite.perfmodel.scaling_networks import model_description

    check_size(size)
    chosen = _SKINNY_SMALL if size == "small" else _SKINNY_DEFAULT if size == "default" else None
    batches = (1, 4, 16) if size == "small" else SKINNY_BATCHES
    cases, seen = [], set()
    for model in ("alexnet", "googlenet"):
        for layer in model_description(model).layers:
            if layer.kind not in ("conv", "fc") or layer.aux or (chosen and layer.name not in chosen[model]):
                continue
            m, k = layer.out_elems // layer.gemm_m, layer.macs // layer.out_elems
            for b in batches:
                n = layer.gemm_m * b
                if (m, n, k) in seen or (size == "default" and 2.0 * m * n * k > _SKINNY_MAX_FLOP):
                    continue
                seen.add((m, n, k))
                what = (f"im2col GEMM: M = {m} filters, N = b x {layer.gemm_m} output pixels, K = {k}"
                        if layer.kind == "conv" else f"M = {m} outputs, N = b, K = {k} inputs")
                cases.append(GemmCase(f"skinny-{model}-{layer.name}-b{b}", m, n, k,
                                      f"{model} {layer.name} ({what}) at per-node batch {b}"))
    return cases


def conv_cases(size: str = "default") -> list[ConvCase]:
    """The convolution suite at a size preset (layers of DeepBench's conv list; batch 2 by default, 16 large)."""
    check_size(size)
    if size == "small":
        return [ConvCase("tiny-3x3", 1, 8, 16, 16, 16, 3, 3, 1, 1, "tiny 3x3 (tests)"),
                ConvCase("tiny-1x1-s2", 1, 16, 14, 14, 8, 1, 1, 2, 0, "tiny strided 1x1 (tests)")]
    n = 16 if size == "large" else 2
    return [
        ConvCase("resnet-conv1", n, 3, 224, 224, 64, 7, 7, 2, 3, "DeepBench conv list: ResNet-50 first layer"),
        ConvCase("resnet-1x1-56", n, 256, 56, 56, 64, 1, 1, 1, 0, "DeepBench conv list: ResNet-50 bottleneck 1x1"),
        ConvCase("resnet-3x3-56", n, 64, 56, 56, 64, 3, 3, 1, 1, "DeepBench conv list: ResNet-50 3x3, 56x56"),
        ConvCase("resnet-3x3-28", n, 128, 28, 28, 128, 3, 3, 1, 1, "DeepBench conv list: ResNet-50 3x3, 28x28"),
        ConvCase("resnet-3x3-14", n, 256, 14, 14, 256, 3, 3, 1, 1, "DeepBench conv list: ResNet-50 3x3, 14x14"),
        ConvCase("resnet-3x3-7", n, 512, 7, 7, 512, 3, 3, 1, 1, "DeepBench conv list: ResNet-50 3x3, 7x7"),
        ConvCase("deepspeech-conv1", n, 1, 161, 700, 32, 5, 20, 2, 0,
                 "DeepBench conv list: speech, 161 frequencies x 700 steps, 5x20 filter, stride 2"),
        ConvCase("ocr-conv1", n, 1, 48, 480, 16, 3, 3, 1, 1, "DeepBench conv list: OCR, 48x480 text line, one channel"),
    ]


def custom_example_cases(size: str = "default") -> list[CustomCase]:
    """The built-in custom case: :class:`SaxpyOp` on 2^16 / 2^22 / 2^25 floats."""
    check_size(size)
    n = {"small": 1 << 16, "default": 1 << 22, "large": 1 << 25}[size]
    return [custom_case(SaxpyOp(n), flops=2.0 * n, bytes_moved=3.0 * _F32 * n, name=f"saxpy-{n}",
                        origin="built-in example: a CustomPythonOp z = 2 x + y (numpy)")]


def load_custom_cases(spec: str, size: str = "default") -> list[CustomCase]:
    """Load custom cases named by ``MODULE:NAME`` or ``FILE.py:NAME``.

    ``NAME`` is a :class:`CustomCase`, a sequence of them, or a callable taking the size preset
    (``"small"``, ``"default"`` or ``"large"``) and returning either.

    Raises:
        UserError: the spec is malformed, cannot be imported, or names something else.
    """
    if not isinstance(spec, str) or ":" not in spec or spec.endswith(":"):
        raise UserError(f"--custom-op must be MODULE:NAME or FILE.py:NAME. Received: {spec!r}")
    where, attr = spec.rsplit(":", 1)
    try:
        if where.endswith(".py"):
            if not os.path.isfile(where):
                raise UserError(f"--custom-op: file {where!r} does not exist; give MODULE:NAME or the path of an "
                                f"existing FILE.py:NAME. Received: {spec!r}")
            mod_spec = importlib.util.spec_from_file_location(f"_d5_custom_{abs(hash(where))}", where)
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - an error in the user's module is the user's to fix
        raise UserError(f"--custom-op: cannot import {where!r}: {type(exc).__name__}: {exc}; give an importable "
                        f"module or .py file. Received: {spec!r}") from exc
    if not hasattr(module, attr):
        raise UserError(f"--custom-op: {where!r} has no {attr!r}; NAME must be a CustomCase, a list of them or a "
                        f"function returning them, defined in {where!r}. Received: {spec!r}")
    obj = getattr(module, attr)
    if callable(obj) and not isinstance(obj, CustomCase):
        obj = obj(size)
    cases = [obj] if isinstance(obj, CustomCase) else list(obj) if isinstance(obj, (list, tuple)) else None
    if not cases or not all(isinstance(c, CustomCase) for c in cases):
        raise UserError(f"--custom-op {spec!r} must give a CustomCase (deep500lite.bench.op.custom_case(op, flops)), "
                        f"a list of them, or a function of the size returning them. Received: {type(obj).__name__}")
    return cases


# --------------------------------------------------------------------------------------------- checks


def _split(value) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v).strip() for v in value]


def parse_suites(value) -> tuple:
    """``"gemm,conv"`` (or a sequence) -> a tuple of suite names, in :data:`SUITES` order.

    Raises:
        UserError: an unknown or no suite.
    """
    names = _split(value)
    bad = [n for n in names if n not in SUITES]
    if bad or not names:
        raise UserError(f"--suite takes a comma-separated list of {format_choices(SUITES)}. Received: {value!r}"
                        + (f" (unknown: {', '.join(map(repr, bad))})" if bad else ""))
    return tuple(s for s in SUITES if s in names)


def parse_frameworks(value) -> tuple:
    """``"torch,reference"`` (or a sequence; aliases such as ``pytorch`` accepted) -> framework keys.

    Raises:
        UserError: an unknown or no framework.
    """
    from deep500lite.registry import FRAMEWORK_ALIASES

    names = [FRAMEWORK_ALIASES.get(n.lower(), n.lower()) for n in _split(value)]
    bad = [n for n in names if n not in OP_FRAMEWORKS]
    if bad or not names:
        raise UserError(f"--frameworks takes a comma-separated list of {format_choices(OP_FRAMEWORKS)}. "
                        f"Received: {value!r}" + (f" (unknown: {', '.join(map(repr, bad))})" if bad else ""))
    return tuple(dict.fromkeys(names))


def check_size(size: str) -> str:
    """Return ``size`` if it is a preset of :data:`SIZES`, else raise UserError."""
    if size not in SIZES:
        raise UserError(f"--size must be one of {format_choices(SIZES)}. Received: {size!r}")
    return size


# --------------------------------------------------------------------------------------------- runners


def _custom_runner(case, device) -> OpRunner:
    if device.is_gpu:
        raise DeviceError("custom operators are timed through forward() on numpy arrays, on the CPU; use --device "
                          f"cpu. Received: --device {device}")
    op, inputs = case.op, case.inputs

    def call():
        return op.forward(*inputs)

    def fetch():
        out = call()
        return np.asarray(out[0] if isinstance(out, (tuple, list)) else out)

    return OpRunner(call, None, fetch, f"{type(op).__name__}.forward on numpy arrays")


# --------------------------------------------------------------------------------------------- results


@dataclasses.dataclass
class OpResult:
    """One case timed on one framework.

    Attributes:
        case: the :class:`GemmCase`, :class:`ConvCase` or :class:`CustomCase`.
        framework: the framework key (``op`` for custom operators).
        measurement: the :class:`~deep500lite.Measurement` with every raw sample.
        roofline: the :class:`~deep500lite.perfmodel.peak.Roofline` of the median.
        max_rel_error: ``max |y - reference| / max |reference|`` of one call (None without a reference).
        how: what was called.
    """

    case: object
    framework: str
    measurement: object
    roofline: object
    max_rel_error: float | None
    how: str

    @property
    def gflops(self) -> float:
        """GFLOP/s at the median time."""
        return self.case.flops / self.measurement.median / 1e9

    def row(self) -> list:
        """The table row (see :data:`TABLE_HEADERS`)."""
        from deep500lite.metrics.tables import format_ci

        s, r = self.measurement.summary, self.roofline
        return [self.case.suite, self.case.name, self.case.shape, self.framework,
                format_ci(s.median, s.ci_low, s.ci_high), s.n, f"{self.gflops:.4g}", f"{r.intensity:.3g}", r.bound,
                f"{100 * r.fraction_of_attainable:.1f}", f"{100 * r.fraction_of_peak:.1f}"]

    def to_dict(self) -> dict:
        """JSON-ready form with every raw sample."""
        s = self.measurement.summary
        return {"suite": self.case.suite, "case": self.case.to_dict(), "framework": self.framework, "how": self.how,
                "flops": self.case.flops, "bytes_moved": self.case.bytes_moved, "median_s": s.median,
                "ci_low_s": s.ci_low, "ci_high_s": s.ci_high, "gflops": self.gflops,
                "roofline": self.roofline.to_dict(), "max_rel_error": self.max_rel_error,
                "measurement": self.measurement.to_dict()}


TABLE_HEADERS = ["suite", "case", "shape", "framework", "median [95% CI]", "runs", "GFLOP/s", "FLOP/B", "bound",
                 "% attainable", "% peak"]


@dataclasses.dataclass
class OpBenchmark:
    """Everything one ``bench op`` run measured.

    Attributes:
        device: ``"cpu"`` or ``"gpu:N"``.
        threads: CPU threads given to each framework (and to the peak's kernels).
        peak: the machine's :class:`~deep500lite.perfmodel.peak.Peak`.
        results: one :class:`OpResult` per case and framework, in suite, case, framework order.
        skipped: ``{"framework", "case", "reason"}`` for what could not run (``case`` None: all).
        notes: warnings (noisy measurements, outputs that disagree).
        framework_setup: framework -> its thread settings and version.
        settings: the arguments of the run.
    """

    device: str
    threads: int
    peak: object
    results: list
    skipped: list
    notes: list
    framework_setup: dict
    settings: dict

    def table(self, fmt: str = "table") -> str:
        """The results as ``table``, ``markdown`` or ``csv`` (:func:`deep500lite.metrics.tables.format_table`)."""
        from deep500lite.metrics.tables import format_table

        return format_table(TABLE_HEADERS, [r.row() for r in self.results], fmt)

    def skip_lines(self) -> list[str]:
        """One line per skipped framework (or framework and case)."""
        lines = []
        for s in self.skipped:
            what = s["framework"] if s["case"] is None else f"{s['framework']} on {s['case']}"
            lines.append(f"skipped {what}: {s['reason']}")
        return lines

    def to_dict(self) -> dict:
        """JSON-ready form: settings, peak, every result with its raw samples, skips and notes."""
        return {"benchmark": "op", "settings": self.settings, "device": self.device, "threads": self.threads,
                "framework_setup": self.framework_setup, "peak": self.peak.to_dict(),
                "results": [r.to_dict() for r in self.results], "skipped": self.skipped, "notes": self.notes}


def _time(runner: OpRunner, label: str, max_time: float):
    from deep500lite.metrics.timing import time_function

    t0 = time.perf_counter()
    runner.fn()
    if runner.sync is not None:
        runner.sync()
    probe = time.perf_counter() - t0
    long_call = probe > max_time / 10
    return time_function(runner.fn, label=label, sync=runner.sync, warmup=0 if long_call else 2,
                         min_runs=3 if long_call else 10, max_time=max_time)


def _rel_error(y, expected) -> float:
    y = np.asarray(y, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if y.shape != expected.shape:
        return float("inf")
    scale = float(np.max(np.abs(expected))) or 1.0
    return float(np.max(np.abs(y - expected))) / scale


def run_op_benchmark(suites=DEFAULT_SUITES, frameworks=OP_FRAMEWORKS, size: str = "default", max_time: float = 2.0,
                     device="cpu", custom_cases: Sequence[CustomCase] | None = None, seed: int = 0,
                     progress: Callable[[str], None] | None = None, peak=None,
                     threads: int | None = None) -> OpBenchmark:
    """Run the operator benchmarks (see the module doc for the method).

    Args:
        suites: names from :data:`SUITES` (a list or ``"gemm,conv"``).
        frameworks: names from :data:`OP_FRAMEWORKS`; those not installed are skipped with a note.
        size: ``small`` (seconds, for tests), ``default`` or ``large``.
        max_time: seconds of timed work per case and framework at most (> 0).
        device: ``"cpu"`` or ``"gpu:N"`` (needs torch with CUDA).
        custom_cases: the cases of the ``custom`` suite (default: :func:`custom_example_cases`).
        seed: seed of the inputs.
        progress: optional ``callable(str)`` told what is being measured.
        peak: a :class:`~deep500lite.perfmodel.peak.Peak` to place the results under (default: measured
            here with :func:`~deep500lite.perfmodel.peak.measure_peak`, before and after the cases;
            each kernel's faster measurement counts).
        threads: CPU threads for every framework and for the peak (default: the usable cores).

    Returns:
        An :class:`OpBenchmark`.

    Raises:
        UserError: a bad suite, framework, size, time or device (DeviceError without the GPU).
    """
    from deep500lite.perfmodel.peak import measure_peak, require_torch_gpu, roofline, usable_cores
    from deep500lite.lv1.device import as_device
    from deep500lite.registry import FRAMEWORKS, framework_module, framework_version, is_framework_available

    suites, frameworks, size = parse_suites(suites), parse_frameworks(frameworks), check_size(size)
    if not isinstance(max_time, (int, float)) or not max_time > 0:
        raise UserError(f"--max-time must be a positive number of seconds. Received: {max_time!r}")
    dev = as_device(device)
    if dev.is_gpu:
        require_torch_gpu(dev.index)
    if threads is None:
        threads = usable_cores()
    elif isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise UserError(f"--threads must be a positive integer. Received: {threads!r}")
    say = progress or (lambda msg: None)
    cases = []
    if "gemm" in suites:
        cases += gemm_cases(size)
    if "conv" in suites:
        cases += conv_cases(size)
    if "skinny" in suites:
        cases += skinny_cases(size)
    if "custom" in suites:
        cases += list(custom_cases) if custom_cases is not None else custom_example_cases(size)

    measure = peak is None
    if measure:
        say(f"measuring the peak of {dev} (GEMM and STREAM kernels)")
        measure_peak(dev, threads)
    results, skipped, notes, setup = [], [], [], {}
    expected: dict[int, np.ndarray] = {}
    rng_inputs: dict[int, tuple] = {}

    def inputs_of(i, case):
        if i not in rng_inputs:
            rng_inputs[i] = case.make_inputs(np.random.default_rng(seed + i))
        return rng_inputs[i]

    def expected_of(i, case):
        if i not in expected:
            expected[i] = case.expected(inputs_of(i, case))
        return expected[i]

    def record(i, case, framework, runner):
        y = runner.fetch()
        err = _rel_error(y, expected_of(i, case)) if hasattr(case, "expected") else None
        say(f"{framework} {case.suite} {case.name}: timing (up to {max_time:g} s)")
        m = _time(runner, f"{framework} {case.suite} {case.name}", max_time)
        results.append(OpResult(case, framework, m, None, err, runner.how))
        if err is not None and err > _REL_ERROR_WARN:
            notes.append(f"{framework} {case.name}: output differs from the reference by {err:.2g} "
                         "(max |err| / max |reference|)")
        warning = m.warning()
        if warning:
            notes.append(warning)

    standard = [(i, c) for i, c in enumerate(cases) if c.suite != "custom"]
    active = []
    for framework in frameworks if standard else ():
        if not is_framework_available(framework):
            extra = FRAMEWORKS[framework][3]
            skipped.append({"framework": framework, "case": None,
                            "reason": f"not installed (pip install 'deep500lite[{extra}]')"})
        elif framework == "reference" and dev.is_gpu:
            skipped.append({"framework": framework, "case": None, "reason": "runs on the CPU only"})
        else:
            active.append(framework)
    with contextlib.ExitStack() as stack:
        for framework in active:
            say(f"{framework}: setting up")
            how_threads = stack.enter_context(framework_module(framework, "bench").op_threads(threads, dev))
            setup[framework] = {"version": framework_version(framework), "threads": how_threads}
        # Case by case, every framework in turn: a burst of other load on the machine then hits
        # the frameworks of one case alike instead of all the cases of one framework.
        for i, case in standard:
            for framework in list(active):
                try:
                    runner = framework_module(framework, "bench").op_runner(case, inputs_of(i, case), dev, threads)
                except DeviceError as exc:
                    skipped.append({"framework": framework, "case": None, "reason": str(exc)})
                    active.remove(framework)
                    continue
                record(i, case, framework, runner)
                del runner
            rng_inputs.pop(i, None)
            expected.pop(i, None)
    for i, case in enumerate(cases):
        if case.suite != "custom":
            continue
        try:
            runner = _custom_runner(case, dev)
        except DeviceError as exc:
            skipped.append({"framework": CUSTOM_FRAMEWORK, "case": case.name, "reason": str(exc)})
            continue
        setup.setdefault(CUSTOM_FRAMEWORK, {"version": None, "threads": "as the operator uses them"})
        record(i, case, CUSTOM_FRAMEWORK, runner)

    if measure:
        say(f"measuring the peak of {dev} again (the faster measurement of each kernel counts)")
        peak = measure_peak(dev, threads, refresh=True)
    for r in results:
        r.roofline = roofline(r.case.flops, r.case.bytes_moved, r.measurement.median, peak)
    order = {fw: j for j, fw in enumerate((*frameworks, CUSTOM_FRAMEWORK))}
    position = {id(c): j for j, c in enumerate(cases)}
    results.sort(key=lambda r: (position[id(r.case)], order[r.framework]))
    settings = {"suites": list(suites), "frameworks": list(frameworks), "size": size, "max_time": max_time,
                "device": str(dev), "seed": seed, "threads": threads}
    return OpBenchmark(str(dev), threads, peak, results, skipped, notes, setup, settings)


# --------------------------------------------------------------------------------------------- plots

_COLORS = {"torch": "#ee4c2c", "tensorflow": "#ff8f00", "onnxruntime": "#005ba4", "reference": "#4d4d4d",
           "jax": "#7b3fa0", CUSTOM_FRAMEWORK: "#2a9d8f"}


def plot_results(bench: OpBenchmark, folder) -> list[str]:
    """Box plots of GFLOP/s (each raw sample's FLOP / time), one PNG per suite: ``<folder>/op-<suite>.png``.

    Cases are groups along the x axis, one box per framework; the dashed line is the measured
    peak and the black tick over each case its roofline bound (attainable GFLOP/s). Uses
    matplotlib's Agg canvas (no display needed).

    Returns:
        The paths written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    from deep500lite.utils import atomic_write_bytes

    paths = []
    for suite in SUITES:
        rows = [r for r in bench.results if r.case.suite == suite]
        if not rows:
            continue
        case_names = list(dict.fromkeys(r.case.name for r in rows))
        fws = list(dict.fromkeys(r.framework for r in rows))
        width = 0.8 / len(fws)
        fig = Figure(figsize=(max(6.0, 1.1 * len(case_names) + 2), 4.8))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        for r in rows:
            x = case_names.index(r.case.name) + (fws.index(r.framework) - (len(fws) - 1) / 2) * width
            rates = [r.case.flops / t / 1e9 for t in r.measurement.raw_times]
            box = ax.boxplot(rates, positions=[x], widths=width * 0.85, patch_artist=True, showfliers=True,
                             flierprops={"markersize": 2}, medianprops={"color": "black"})
            for patch in box["boxes"]:
                patch.set_facecolor(_COLORS.get(r.framework, "#999999"))
                patch.set_alpha(0.8)
        for j, name in enumerate(case_names):
            attainable = next(r.roofline.attainable for r in rows if r.case.name == name) / 1e9
            ax.hlines(attainable, j - 0.45, j + 0.45, colors="black", linewidth=1.2)
        ax.axhline(bench.peak.flops / 1e9, color="black", linestyle="--", linewidth=0.8)
        ax.set_xticks(range(len(case_names)))
        ax.set_xticklabels(case_names, rotation=30, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("GFLOP/s (per run)")
        ax.set_title(f"bench op: {suite} on {bench.device} (dashed: measured peak {bench.peak.flops / 1e9:.0f} "
                     "GFLOP/s; ticks: roofline bound)", fontsize=9)
        handles = [Patch(facecolor=_COLORS.get(fw, "#999999"), label=fw) for fw in fws]
        ax.legend(handles=handles, fontsize=8, loc="best")
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        path = os.path.join(os.fspath(folder), f"op-{suite}.png")
        atomic_write_bytes(path, buf.getvalue())
        paths.append(path)
    return paths
