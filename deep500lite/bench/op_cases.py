"""The cases of ``deep500lite bench op``: GEMM, convolution, skinny GEMMs and custom operators, with FLOP and bytes.

Each case knows its shapes, its FLOP and bytes moved (float32, inputs read once and outputs
written once; see :mod:`deep500lite.bench.op`), makes its seeded inputs and computes the
reference result with numpy (or ``onnx.reference``). The suites (:func:`gemm_cases`,
:func:`conv_cases`, :func:`skinny_cases`, :func:`custom_example_cases`, :func:`load_custom_cases`)
list them by size. Running and timing them is :mod:`deep500lite.bench.op`'s.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from deep500lite.errors import UserError, UserTypeError, format_choices
from deep500lite.lv0.operator import CustomPythonOp, Operator
from deep500lite.lv0.tensordesc import tensordesc

__all__ = ["CUSTOM_FRAMEWORK", "SUITES", "DEFAULT_SUITES", "SIZES", "SKINNY_BATCHES", "GemmCase", "ConvCase",
           "CustomCase", "custom_case", "SaxpyOp", "gemm_cases", "conv_cases", "skinny_cases", "custom_example_cases",
           "load_custom_cases", "check_size"]

SUITES = ("gemm", "conv", "skinny", "custom")
DEFAULT_SUITES = ("gemm", "conv")
SIZES = ("small", "default", "large")
#: The name custom operators are listed under (timed through their own forward()).
CUSTOM_FRAMEWORK = "op"
_F32 = 4
_OPSET = 17




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
    """Load custom cases named by ``MODULE:NAME`` or ``FILE.py:NAME`` (a file imports with its folder on
    ``sys.path``, so it can import its neighbours: :func:`deep500lite.bench.user_code.load_attribute`).

    ``NAME`` is a :class:`CustomCase`, a sequence of them, or a callable taking the size preset
    (``"small"``, ``"default"`` or ``"large"``) and returning either.

    Raises:
        UserError: the spec is malformed, cannot be imported, or names something else.
    """
    from deep500lite.bench.user_code import load_attribute

    obj = load_attribute(spec, "--custom-op", "a CustomCase, a list of them or a function returning them")
    if callable(obj) and not isinstance(obj, CustomCase):
        obj = obj(size)
    cases = [obj] if isinstance(obj, CustomCase) else list(obj) if isinstance(obj, (list, tuple)) else None
    if not cases or not all(isinstance(c, CustomCase) for c in cases):
        raise UserError(f"--custom-op {spec!r} must give a CustomCase (deep500lite.bench.op.custom_case(op, flops)), "
                        f"a list of them, or a function of the size returning them. Received: {type(obj).__name__}")
    return cases


def check_size(size: str) -> str:
    """Return ``size`` if it is a preset of :data:`SIZES`, else raise UserError."""
    if size not in SIZES:
        raise UserError(f"--size must be one of {format_choices(SIZES)}. Received: {size!r}")
    return size
