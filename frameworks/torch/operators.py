"""ONNX operators as torch functions.

Every converter takes a :class:`NodeSpec` (the node's parsed attributes, the values of its inputs
that are constant at build time, the opset) and returns a function of the node's input tensors
that returns its output tensor, or a tuple with one entry per declared output. Attributes are
parsed once, when the function is built, so running it does no protobuf work. Converters never
modify their inputs in place.
"""

from __future__ import annotations

import math
from typing import Callable

import ml_dtypes
import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

from deep500lite.errors import UnsupportedOperatorError
from deep500lite.lv1.network import constant_attribute_value

__all__ = ["SUPPORTED_OPS", "NodeSpec", "build_node", "parse_attributes", "to_torch", "to_numpy",
           "ONNX_TO_TORCH_DTYPE"]

_CONVERTERS: dict[str, Callable] = {}

ONNX_TO_TORCH_DTYPE = {
    onnx.TensorProto.FLOAT: torch.float32,
    onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.FLOAT16: torch.float16,
    onnx.TensorProto.BFLOAT16: torch.bfloat16,
    onnx.TensorProto.INT8: torch.int8,
    onnx.TensorProto.INT16: torch.int16,
    onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.INT64: torch.int64,
    onnx.TensorProto.UINT8: torch.uint8,
    onnx.TensorProto.UINT16: torch.uint16,
    onnx.TensorProto.UINT32: torch.uint32,
    onnx.TensorProto.UINT64: torch.uint64,
    onnx.TensorProto.BOOL: torch.bool,
    onnx.TensorProto.COMPLEX64: torch.complex64,
    onnx.TensorProto.COMPLEX128: torch.complex128,
    onnx.TensorProto.FLOAT8E4M3FN: torch.float8_e4m3fn,
    onnx.TensorProto.FLOAT8E4M3FNUZ: torch.float8_e4m3fnuz,
    onnx.TensorProto.FLOAT8E5M2: torch.float8_e5m2,
    onnx.TensorProto.FLOAT8E5M2FNUZ: torch.float8_e5m2fnuz,
}
_FLOAT8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz)

# Unsigned types torch stores but barely computes with: arithmetic runs in int64.
_WIDE_UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)


# numpy dtypes torch cannot take directly, moved as raw bits of the same width.
_BIT_VIEWS = {
    np.dtype(ml_dtypes.bfloat16): (np.uint16, torch.bfloat16),
    np.dtype(ml_dtypes.float8_e4m3fn): (np.uint8, torch.float8_e4m3fn),
    np.dtype(ml_dtypes.float8_e4m3fnuz): (np.uint8, torch.float8_e4m3fnuz),
    np.dtype(ml_dtypes.float8_e5m2): (np.uint8, torch.float8_e5m2),
    np.dtype(ml_dtypes.float8_e5m2fnuz): (np.uint8, torch.float8_e5m2fnuz),
}
_TORCH_BIT_VIEWS = {t: (torch.uint16 if n == np.uint16 else torch.uint8, d) for d, (n, t) in _BIT_VIEWS.items()}


def to_torch(value, device: torch.device) -> torch.Tensor:
    """A numpy array as a torch tensor on ``device`` (shares memory on the CPU when it can)."""
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    view = _BIT_VIEWS.get(arr.dtype)
    if view is not None:
        t = torch.from_numpy(np.ascontiguousarray(arr).view(view[0])).view(view[1])
    else:
        if arr.dtype == object or arr.dtype.kind in "SUV":
            raise TypeError(f"torch has no tensor type for numpy dtype {arr.dtype}")
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        elif not arr.flags.writeable or any(s < 0 for s in arr.strides):
            arr = np.array(arr)
        t = torch.from_numpy(arr)
    return t if device.type == "cpu" else t.to(device)


def to_numpy(t: torch.Tensor, copy: bool = False) -> np.ndarray:
    """A tensor as a numpy array: a copy if ``copy`` or the tensor is not in host memory."""
    t = t.detach()
    if t.device.type != "cpu":
        t, copy = t.cpu(), False
    if copy or not t.is_contiguous():
        t = t.clone(memory_format=torch.contiguous_format)
    view = _TORCH_BIT_VIEWS.get(t.dtype)
    if view is not None:
        return t.view(view[0]).numpy().view(view[1])
    return t.numpy()


def _op(*names):
    def register(fn):
        for name in names:
            _CONVERTERS[name] = fn
        return fn
    return register


def parse_attributes(node: onnx.NodeProto) -> dict:
    """The node's attributes as Python values (strings decoded, tensors as numpy arrays)."""
    out = {}
    for a in node.attribute:
        if a.type == onnx.AttributeProto.STRING:
            out[a.name] = a.s.decode()
        elif a.type == onnx.AttributeProto.STRINGS:
            out[a.name] = [s.decode() for s in a.strings]
        elif a.type == onnx.AttributeProto.TENSOR:
            out[a.name] = numpy_helper.to_array(a.t)
        elif a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS,
                        onnx.AttributeProto.SPARSE_TENSOR):
            out[a.name] = a
        else:
            v = onnx.helper.get_attribute_value(a)
            out[a.name] = list(v) if isinstance(v, (list, tuple)) or a.type in (
                onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS) else v
    return out


class NodeSpec:
    """What a converter knows about a node when it builds the node's function.

    Attributes:
        op: the ONNX op type.
        domain: the node's operator domain (custom domains run registered custom operators).
        name: the node's name (or its first output's name).
        attrs: parsed attributes (see :func:`parse_attributes`).
        opset: the default-domain opset of the model.
        consts: per input, its numpy value when known at build time, else ``None``.
        present: per input, whether the input is given (optional inputs may be empty).
        n_outputs: number of declared outputs.
        device: the torch device the function runs on.
        training: build the training-mode function (``BatchNormalization`` with batch statistics
            and running statistics updated in place, ``Dropout`` active); see
            ``TorchExecutor.inference_and_backprop``.
        generator: the ``torch.Generator`` training-mode ``Dropout`` draws its masks from.
    """

    def __init__(self, node: onnx.NodeProto, opset: int, consts: list, device: torch.device,
                 training: bool = False, generator: torch.Generator | None = None):
        self.training = training
        self.generator = generator
        self.op = node.op_type
        self.domain = node.domain
        self.name = node.name or (node.output[0] if node.output else node.op_type)
        self.attrs = parse_attributes(node)
        self.opset = opset
        self.present = [bool(n) for n in node.input]
        self.consts = consts
        self.n_outputs = len(node.output)
        self.outputs_wanted = [bool(n) for n in node.output]
        self.device = device

    def attr(self, key, default=None):
        return self.attrs.get(key, default)

    def has(self, i: int) -> bool:
        return i < len(self.present) and self.present[i]

    def const(self, i: int):
        return self.consts[i] if i < len(self.consts) else None

    def unsupported(self, what: str) -> UnsupportedOperatorError:
        return UnsupportedOperatorError(
            f"The torch executor does not support {self.op} (node '{self.name}') with {what}.")


def build_node(spec: NodeSpec) -> Callable:
    """The function computing ``spec``'s node (see module docstring)."""
    if spec.domain not in ("", "ai.onnx"):
        from deep500lite.frameworks.torch.custom import custom_op
        from deep500lite.lv0.custom import registered_op

        op = registered_op(spec.domain, spec.op)
        if op is None:
            raise UnsupportedOperatorError(
                f"The torch executor does not support operator '{spec.domain}::{spec.op}' (node '{spec.name}'): "
                "no custom operator is registered under that name (d5.register_op).")
        return custom_op(op)
    try:
        conv = _CONVERTERS[spec.op]
    except KeyError:
        raise UnsupportedOperatorError(
            f"The torch executor does not support operator '{spec.op}' (node '{spec.name}').") from None
    return conv(spec)


def _ints(value) -> list[int]:
    if isinstance(value, torch.Tensor) and value.dim() == 1 and not value.is_floating_point():
        return value.tolist()
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.reshape(-1).tolist()]
    return [int(v) for v in np.asarray(value).reshape(-1).tolist()]


def _scalar(value):
    if isinstance(value, torch.Tensor):
        return value.reshape(-1)[0].item()
    return np.asarray(value).reshape(-1)[0].item()


def _const_ints(spec: NodeSpec, i: int):
    c = spec.const(i)
    return None if c is None else _ints(c)


def _wide_unsigned(fn):
    """Run ``fn`` in int64 when an input is uint16/32/64, casting the result back."""
    def run(*xs):
        dt = next((x.dtype for x in xs if x is not None and x.dtype in _WIDE_UNSIGNED), None)
        if dt is None:
            return fn(*xs)
        r = fn(*[x.to(torch.int64) if x is not None and x.dtype == dt else x for x in xs])
        return r.to(dt) if r.dtype == torch.int64 else r
    return run


# ------------------------------------------------------------------- elementwise
_UNARY = {
    "Abs": torch.abs, "Neg": torch.neg, "Sqrt": torch.sqrt, "Exp": torch.exp, "Log": torch.log,
    "Erf": torch.special.erf, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh, "Relu": torch.relu,
    "Floor": torch.floor, "Ceil": torch.ceil, "Reciprocal": torch.reciprocal, "Sin": torch.sin,
    "Cos": torch.cos, "Tan": torch.tan, "Asin": torch.asin, "Acos": torch.acos, "Atan": torch.atan,
    "Sinh": torch.sinh, "Cosh": torch.cosh, "Asinh": torch.asinh, "Acosh": torch.acosh,
    "Atanh": torch.atanh, "Sign": torch.sign, "Not": torch.logical_not, "Round": torch.round,
    "IsNaN": torch.isnan, "BitwiseNot": torch.bitwise_not,
    "Softsign": lambda x: x / (1 + x.abs()),
    "Mish": lambda x: x * torch.tanh(F.softplus(x)),
}


@_op(*_UNARY)
def _unary(spec):
    return _wide_unsigned(_UNARY[spec.op])


@_op("Identity")
def _identity(spec):
    return lambda x: x


def _int_div(a, b):
    if a.is_floating_point() or a.is_complex():
        return a / b
    return torch.div(a, b, rounding_mode="trunc")


def _pow(a, b):
    r = torch.pow(a, b)
    return r if r.dtype == a.dtype else r.to(a.dtype)


_BINARY = {
    "Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": _int_div, "Pow": _pow,
    "Equal": torch.eq, "Less": torch.lt, "Greater": torch.gt, "LessOrEqual": torch.le,
    "GreaterOrEqual": torch.ge, "And": torch.logical_and, "Or": torch.logical_or,
    "Xor": torch.logical_xor, "BitwiseAnd": torch.bitwise_and, "BitwiseOr": torch.bitwise_or,
    "BitwiseXor": torch.bitwise_xor,
}


@_op(*_BINARY)
def _binary(spec):
    return _wide_unsigned(_BINARY[spec.op])


@_op("Mod")
def _mod(spec):
    return _wide_unsigned(torch.fmod if spec.attr("fmod", 0) else torch.remainder)


@_op("Max", "Min", "Sum", "Mean")
def _variadic(spec):
    pair = {"Max": torch.maximum, "Min": torch.minimum, "Sum": torch.add, "Mean": torch.add}[spec.op]
    mean = spec.op == "Mean"

    def run(*xs):
        r = xs[0]
        for x in xs[1:]:
            r = pair(r, x)
        if len(xs) == 1:
            r = r.clone()
        return r / len(xs) if mean else r
    return _wide_unsigned(run)


@_op("Where")
def _where(spec):
    return _wide_unsigned(lambda c, x, y: torch.where(c, x, y))


@_op("Clip")
def _clip(spec):
    if spec.opset < 11:
        lo, hi = spec.attr("min", -math.inf), spec.attr("max", math.inf)
        return lambda x: torch.clamp(x, lo, hi)

    def run(x, lo=None, hi=None):
        if lo is not None:
            x = torch.maximum(x, lo.to(x.dtype))
        if hi is not None:
            x = torch.minimum(x, hi.to(x.dtype))
        return x
    return _wide_unsigned(run)


@_op("LeakyRelu")
def _leaky_relu(spec):
    alpha = spec.attr("alpha", 0.01)
    return lambda x: F.leaky_relu(x, alpha)


@_op("PRelu")
def _prelu(spec):
    return lambda x, slope: torch.where(x < 0, x * slope, x)


@_op("ThresholdedRelu")
def _thresholded_relu(spec):
    alpha = spec.attr("alpha", 1.0)
    return lambda x: torch.where(x > alpha, x, torch.zeros((), dtype=x.dtype, device=x.device))


@_op("HardSigmoid")
def _hard_sigmoid(spec):
    alpha, beta = spec.attr("alpha", 0.2), spec.attr("beta", 0.5)
    return lambda x: torch.clamp(x * alpha + beta, 0, 1)


@_op("HardSwish")
def _hard_swish(spec):
    return lambda x: x * torch.clamp(x / 6 + 0.5, 0, 1)


@_op("Elu")
def _elu(spec):
    alpha = spec.attr("alpha", 1.0)
    return lambda x: F.elu(x, alpha)


@_op("Celu")
def _celu(spec):
    alpha = spec.attr("alpha", 1.0)
    return lambda x: F.celu(x, alpha)


@_op("Selu")
def _selu(spec):
    alpha = spec.attr("alpha", 1.67326319217681884765625)
    gamma = spec.attr("gamma", 1.05070102214813232421875)
    return lambda x: gamma * torch.where(x > 0, x, alpha * (torch.exp(x) - 1))


@_op("Softplus")
def _softplus(spec):
    return lambda x: torch.where(x > 0, x + torch.log1p(torch.exp(-x)), torch.log1p(torch.exp(x)))


@_op("Gelu")
def _gelu(spec):
    approximate = spec.attr("approximate", "none")
    return lambda x: F.gelu(x, approximate=approximate)


@_op("Shrink")
def _shrink(spec):
    bias, lambd = spec.attr("bias", 0.0), spec.attr("lambd", 0.5)

    def run(x):
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        return torch.where(x < -lambd, x + bias, torch.where(x > lambd, x - bias, zero)).to(x.dtype)
    return run


def _softmax_like(spec, fn):
    if spec.opset >= 13:
        axis = spec.attr("axis", -1)
        return lambda x: fn(x, axis)
    axis = spec.attr("axis", 1)

    def run(x):
        a = axis % x.dim() if x.dim() else 0
        return fn(x.reshape(math.prod(x.shape[:a]), -1), 1).reshape(x.shape)
    return run


@_op("Softmax")
def _softmax(spec):
    return _softmax_like(spec, lambda x, a: torch.softmax(x, a))


@_op("LogSoftmax")
def _log_softmax(spec):
    return _softmax_like(spec, lambda x, a: torch.log_softmax(x, a))


@_op("Hardmax")
def _hardmax(spec):
    def hardmax(x, a):
        return F.one_hot(torch.argmax(x, a), x.shape[a]).movedim(-1, a).to(x.dtype)
    return _softmax_like(spec, hardmax)


# ------------------------------------------------------------- linear algebra
@_op("MatMul")
def _matmul(spec):
    return _wide_unsigned(torch.matmul)


@_op("Gemm")
def _gemm(spec):
    alpha, beta = spec.attr("alpha", 1.0), spec.attr("beta", 1.0)
    ta, tb = spec.attr("transA", 0), spec.attr("transB", 0)
    if alpha == 1.0 and beta == 1.0 and not ta and tb:
        return lambda a, b, c=None: F.linear(a, b, c) if c is None or c.dim() <= 1 else F.linear(a, b) + c

    def run(a, b, c=None):
        if ta:
            a = a.t()
        if tb:
            b = b.t()
        y = a @ b
        if alpha != 1.0:
            y = y * alpha
        if c is not None:
            y = y + (c * beta if beta != 1.0 else c)
        return y
    return run


@_op("Einsum")
def _einsum(spec):
    equation = spec.attr("equation")
    return lambda *xs: torch.einsum(equation, *xs)


# -------------------------------------------------------------- convolutions
_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _same_pads(size, kernel, stride, dilation, lower: bool):
    """Begin/end pads making ``out = ceil(in / stride)`` (ONNX auto_pad SAME_*)."""
    total = max((math.ceil(size / stride) - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    small = total // 2
    return (total - small, small) if lower else (small, total - small)


def _torch_pad_list(begins, ends):
    """ONNX per-axis begin/end pads of the spatial axes as ``F.pad``'s last-axis-first list."""
    out = []
    for b, e in zip(reversed(begins), reversed(ends)):
        out += [b, e]
    return out


class _Padding:
    """Spatial padding of a conv or pool: symmetric ones go to torch, others to ``F.pad``."""

    def __init__(self, spec, nd, kernel, strides, dilations):
        self.auto_pad = spec.attr("auto_pad", "NOTSET")
        pads = spec.attr("pads") or [0] * (2 * nd)
        if self.auto_pad == "VALID":
            pads = [0] * (2 * nd)
        self.begins, self.ends = list(pads[:nd]), list(pads[nd:])
        self.kernel, self.strides, self.dilations = kernel, strides, dilations
        self.nd = nd

    def dynamic(self) -> bool:
        return self.auto_pad in ("SAME_UPPER", "SAME_LOWER")

    def pads_for(self, shape):
        if not self.dynamic():
            return self.begins, self.ends
        lower = self.auto_pad == "SAME_LOWER"
        pairs = [_same_pads(s, k, st, d, lower) for s, k, st, d in
                 zip(shape[-self.nd:], self.kernel, self.strides, self.dilations)]
        return [p[0] for p in pairs], [p[1] for p in pairs]


@_op("Conv")
def _conv(spec):
    w = spec.const(1)
    kernel = spec.attr("kernel_shape") or (None if w is None else list(w.shape[2:]))
    nd = len(kernel) if kernel else None
    group = spec.attr("group", 1)

    def make(nd, kernel):
        if nd not in _CONV:
            raise spec.unsupported(f"{nd} spatial dimensions (1 to 3 are supported)")
        strides = spec.attr("strides") or [1] * nd
        dilations = spec.attr("dilations") or [1] * nd
        padding = _Padding(spec, nd, kernel, strides, dilations)
        conv = _CONV[nd]
        if not padding.dynamic() and padding.begins == padding.ends:
            sym = padding.begins
            return lambda x, w, b=None: conv(x, w, b, strides, sym, dilations, group)
        if not padding.dynamic():
            pad = _torch_pad_list(padding.begins, padding.ends)
            return lambda x, w, b=None: conv(F.pad(x, pad), w, b, strides, 0, dilations, group)

        def run(x, w, b=None):
            begins, ends = padding.pads_for(x.shape)
            if begins == ends:
                return conv(x, w, b, strides, begins, dilations, group)
            return conv(F.pad(x, _torch_pad_list(begins, ends)), w, b, strides, 0, dilations, group)
        return run

    if kernel is not None:
        return make(nd, kernel)
    cache = {}

    def lazy(x, w, b=None):
        key = tuple(w.shape)
        if key not in cache:
            cache[key] = make(w.dim() - 2, list(w.shape[2:]))
        return cache[key](x, w, b)
    return lazy


@_op("ConvTranspose")
def _conv_transpose(spec):
    group = spec.attr("group", 1)
    auto_pad = spec.attr("auto_pad", "NOTSET")

    def run(x, w, b=None):
        nd = w.dim() - 2
        if nd not in _CONV_T:
            raise spec.unsupported(f"{nd} spatial dimensions (1 to 3 are supported)")
        kernel = spec.attr("kernel_shape") or list(w.shape[2:])
        strides = spec.attr("strides") or [1] * nd
        dilations = spec.attr("dilations") or [1] * nd
        out_pad = spec.attr("output_padding") or [0] * nd
        pads = spec.attr("pads") or [0] * (2 * nd)
        in_sizes = x.shape[2:]
        full = [s * (i - 1) + op + (k - 1) * d + 1
                for s, i, op, k, d in zip(strides, in_sizes, out_pad, kernel, dilations)]
        out_shape = spec.attr("output_shape")
        if out_shape is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out_shape = [i * s for i, s in zip(in_sizes, strides)]
        if out_shape is not None:
            out_shape = list(out_shape)[-nd:]
            begins, ends = [], []
            for f, o in zip(full, out_shape):
                total = f - o
                if auto_pad == "SAME_UPPER":
                    begins.append(total // 2)
                    ends.append(total - total // 2)
                else:
                    begins.append(total - total // 2)
                    ends.append(total // 2)
        else:
            begins, ends = pads[:nd], pads[nd:]
        y = _CONV_T[nd](x, w, None, strides, 0, 0, group, dilations)
        # torch's result has the size without output_padding; output_padding adds zeros at the end,
        # then ONNX's pads crop (negative F.pad) both sides.
        crop = _torch_pad_list([-p for p in begins], [op - p for op, p in zip(out_pad, ends)])
        if any(crop):
            y = F.pad(y, crop)
        if b is not None:
            y = y + b.reshape(1, -1, *([1] * nd))
        return y
    return run


# -------------------------------------------------------------------- pooling
_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def _pool_output_size(size, k, s, d, b, e, ceil_mode):
    span = size + b + e - ((k - 1) * d + 1)
    out = (span // s if not ceil_mode else -(-span // s)) + 1
    if ceil_mode and (out - 1) * s >= size + b:
        out -= 1  # the last window would start in the end padding
    return out


def _pool_geometry(spec, nd, x_shape, padding):
    begins, ends = padding.pads_for(x_shape)
    ceil_mode = spec.attr("ceil_mode", 0)
    extra = []
    for size, k, s, d, b, e in zip(x_shape[-nd:], padding.kernel, padding.strides, padding.dilations,
                                   begins, ends):
        out = _pool_output_size(size, k, s, d, b, e, ceil_mode)
        need = (out - 1) * s + (k - 1) * d + 1 - (size + b + e)
        extra.append(max(need, 0))
    return begins, ends, extra


@_op("MaxPool")
def _max_pool(spec):
    kernel = spec.attr("kernel_shape")
    nd = len(kernel)
    if nd not in _MAX_POOL:
        raise spec.unsupported(f"{nd} spatial dimensions (1 to 3 are supported)")
    strides = spec.attr("strides") or [1] * nd
    dilations = spec.attr("dilations") or [1] * nd
    padding = _Padding(spec, nd, kernel, strides, dilations)
    ceil_mode = bool(spec.attr("ceil_mode", 0))
    storage_order = spec.attr("storage_order", 0)
    want_indices = spec.n_outputs > 1 and spec.outputs_wanted[1]
    pool = _MAX_POOL[nd]
    fast = (not padding.dynamic() and padding.begins == padding.ends
            and all(p * 2 <= k for p, k in zip(padding.begins, kernel)) and not want_indices)
    if fast:
        sym = padding.begins
        return lambda x: pool(x, kernel, strides, sym, dilations, ceil_mode)

    def run(x):
        dtype = x.dtype
        if not x.is_floating_point():
            x = x.to(torch.float64)
        begins, ends, extra = _pool_geometry(spec, nd, x.shape, padding)
        ends = [e + a for e, a in zip(ends, extra)]
        xp = F.pad(x, _torch_pad_list(begins, ends), value=-math.inf) if any(begins + ends) else x
        y, idx = pool(xp, kernel, strides, 0, dilations, False, True)
        y = y.to(dtype)
        if not want_indices:
            return (y, None) if spec.n_outputs > 1 else y
        # idx indexes the padded plane; map it to the input's flattened (N, C, spatial) position.
        coords, rest = [], idx
        for size in reversed(xp.shape[2:]):
            coords.append(rest % size)
            rest = rest // size
        coords = [c - b for c, b in zip(reversed(coords), begins)]
        sizes = list(x.shape[2:])
        flat = torch.zeros_like(idx)
        order = range(nd) if storage_order == 0 else reversed(range(nd))
        for i in order:
            flat = flat * sizes[i] + coords[i]
        plane = math.prod(sizes)
        base = torch.arange(x.shape[0] * x.shape[1], device=x.device).reshape(x.shape[0], x.shape[1],
                                                                               *([1] * nd))
        return y, flat + base * plane
    return run


@_op("AveragePool")
def _avg_pool(spec):
    kernel = spec.attr("kernel_shape")
    nd = len(kernel)
    if nd not in _AVG_POOL:
        raise spec.unsupported(f"{nd} spatial dimensions (1 to 3 are supported)")
    strides = spec.attr("strides") or [1] * nd
    dilations = spec.attr("dilations") or [1] * nd
    padding = _Padding(spec, nd, kernel, strides, dilations)
    include_pad = bool(spec.attr("count_include_pad", 0))
    ceil_mode = bool(spec.attr("ceil_mode", 0))
    pool = _AVG_POOL[nd]
    if (not padding.dynamic() and padding.begins == padding.ends and not ceil_mode
            and all(d == 1 for d in dilations) and all(p * 2 <= k for p, k in zip(padding.begins, kernel))):
        sym = padding.begins
        return lambda x: pool(x, kernel, strides, sym, False, include_pad)
    conv = _CONV[nd]

    def run(x):
        begins, ends, extra = _pool_geometry(spec, nd, x.shape, padding)
        c = x.shape[1]
        ones = torch.ones((c, 1, *kernel), dtype=x.dtype, device=x.device)
        pad = _torch_pad_list(begins, [e + a for e, a in zip(ends, extra)])
        total = conv(F.pad(x, pad), ones, None, strides, 0, dilations, c)
        mask = torch.ones((1, 1, *x.shape[2:]), dtype=x.dtype, device=x.device)
        if include_pad:
            mask = F.pad(mask, _torch_pad_list(begins, ends), value=1.0)
            mask = F.pad(mask, _torch_pad_list([0] * nd, extra))
        else:
            mask = F.pad(mask, pad)
        count = conv(mask, ones[:1], None, strides, 0, dilations)
        return total / count
    return run


@_op("GlobalAveragePool")
def _global_avg_pool(spec):
    return lambda x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True)


@_op("GlobalMaxPool")
def _global_max_pool(spec):
    return lambda x: x.amax(dim=tuple(range(2, x.dim())), keepdim=True)


# ------------------------------------------------------------- normalization
@_op("BatchNormalization")
def _batch_norm(spec):
    eps = spec.attr("epsilon", 1e-5)
    momentum = spec.attr("momentum", 0.9)
    training = spec.attr("training_mode", 0) and spec.opset >= 14

    if spec.training:
        return _batch_norm_train(spec, eps, momentum)
    if not training:
        def infer(x, scale, b, mean, var):
            y = F.batch_norm(x, mean, var, scale, b, False, 0.0, eps)
            return y if spec.n_outputs == 1 else (y,) + (None,) * (spec.n_outputs - 1)
        return infer

    def train(x, scale, b, mean, var):
        dims = [0] + list(range(2, x.dim()))
        shape = (1, -1) + (1,) * (x.dim() - 2)
        m = x.mean(dim=dims)
        v = x.var(dim=dims, unbiased=False)
        y = (x - m.reshape(shape)) / torch.sqrt(v.reshape(shape) + eps) * scale.reshape(shape) + b.reshape(shape)
        return y, mean * momentum + m * (1 - momentum), var * momentum + v * (1 - momentum)
    return train


def _batch_norm_train(spec, eps, momentum):
    """Training mode: batch statistics, running statistics updated in place with ONNX's rule.

    ONNX: ``running = running * momentum + stat * (1 - momentum)`` with the biased batch variance.
    ``F.batch_norm`` (one fused kernel, as ``nn.BatchNorm2d`` runs) applies
    ``running = running * (1 - m) + stat * m`` with the *unbiased* variance ``v * n / (n - 1)``;
    it updates a copy of the running variance scaled by ``n / (n - 1)``, which is scaled back by
    ``(n - 1) / n`` into the running variance: ONNX's rule (up to two roundings).
    """
    torch_momentum = 1.0 - momentum
    n_out = spec.n_outputs

    def train(x, scale, b, mean, var):
        if mean.requires_grad or var.requires_grad:  # computed statistics: never update in place
            mean, var = mean.detach().clone(), var.detach().clone()
        n = x.numel() // x.shape[1] if x.dim() > 1 else x.shape[0]
        if n > 1:
            # A scaled copy: autograd saves the running-variance argument, so it must not change.
            with torch.no_grad():
                scaled = var * (n / (n - 1))
            y = F.batch_norm(x, mean, scaled, scale, b, True, torch_momentum, eps)
            with torch.no_grad():
                torch.mul(scaled, (n - 1) / n, out=var)
        else:
            y = F.batch_norm(x, mean, var, scale, b, True, torch_momentum, eps)
        if n_out == 1:
            return y
        return ((y, mean.clone(), var.clone()) + (None,) * n_out)[:n_out]
    return train


@_op("InstanceNormalization")
def _instance_norm(spec):
    eps = spec.attr("epsilon", 1e-5)
    return lambda x, scale, b: F.instance_norm(x, weight=scale, bias=b, eps=eps)


@_op("LayerNormalization")
def _layer_norm(spec):
    axis = spec.attr("axis", -1)
    eps = spec.attr("epsilon", 1e-5)
    stash = spec.attr("stash_type", 1)

    def run(x, scale, b=None):
        a = axis % x.dim()
        dims = tuple(range(a, x.dim()))
        xs = x.to(torch.float32) if stash == 1 and x.dtype in (torch.float16, torch.bfloat16) else x
        mean = xs.mean(dim=dims, keepdim=True)
        inv_std = torch.rsqrt(((xs - mean) ** 2).mean(dim=dims, keepdim=True) + eps)
        y = ((xs - mean) * inv_std).to(x.dtype) * scale
        if b is not None:
            y = y + b
        outs = (y, mean, inv_std)
        return y if spec.n_outputs == 1 else outs[:spec.n_outputs]
    return run


@_op("LRN")
def _lrn(spec):
    alpha, beta = spec.attr("alpha", 1e-4), spec.attr("beta", 0.75)
    bias, size = spec.attr("bias", 1.0), spec.attr("size")
    front, back = (size - 1) // 2, size - 1 - (size - 1) // 2

    def run(x):
        sq = (x * x).unsqueeze(1)  # (N, 1, C, ...)
        pad = [0, 0] * (x.dim() - 2) + [front, back]
        sq = F.pad(sq, pad).squeeze(1)
        total = sq.narrow(1, 0, x.shape[1])
        for i in range(1, size):
            total = total + sq.narrow(1, i, x.shape[1])
        return x / (bias + (alpha / size) * total) ** beta
    return run


@_op("Dropout")
def _dropout(spec):
    ratio_attr = spec.attr("ratio", 0.5)
    # The training pass (spec.training) drops unless the graph feeds training_mode=False; it
    # draws masks from the executor's seeded generator (the node's seed attribute is not used).
    default_training = spec.training
    generator = spec.generator

    def run(x, ratio=None, training_mode=None):
        training = default_training if training_mode is None else bool(training_mode.item())
        p = float(_scalar(ratio)) if ratio is not None else ratio_attr
        if training and p > 0:
            if generator is not None:
                mask = torch.rand(x.shape, generator=generator, device=x.device) >= p
            else:
                mask = torch.rand_like(x, dtype=torch.float32) >= p
            y = x * mask / (1 - p)
        else:
            y, mask = x, None
        if spec.n_outputs == 1:
            return y
        if mask is None:
            mask = torch.ones(x.shape, dtype=torch.bool, device=x.device)
        return y, mask
    return run


# ------------------------------------------------------------------- shapes
@_op("Shape")
def _shape(spec):
    start, end = spec.attr("start", 0), spec.attr("end")
    return lambda x: torch.tensor(x.shape[start:end], dtype=torch.int64, device=x.device)


@_op("Size")
def _size(spec):
    return lambda x: torch.tensor(x.numel(), dtype=torch.int64, device=x.device)


@_op("Constant")
def _constant(spec):
    value = constant_attribute_value(spec.attrs)
    if value is None or value.dtype == object:
        raise spec.unsupported(f"attribute(s) {sorted(spec.attrs)} (string and sparse constants have no torch type)")
    t = to_torch(value, spec.device)
    return lambda: t


@_op("ConstantOfShape")
def _constant_of_shape(spec):
    value = spec.attr("value")
    value = np.zeros(1, np.float32) if value is None else value
    fill = to_torch(value.reshape(-1)[:1], spec.device).reshape(())
    return lambda shape: fill.expand(_ints(shape)).clone()


@_op("Cast")
def _cast(spec):
    to = spec.attr("to")
    if to not in ONNX_TO_TORCH_DTYPE:
        raise spec.unsupported(f"to={onnx.TensorProto.DataType.Name(to)}")
    dtype = ONNX_TO_TORCH_DTYPE[to]
    saturate = spec.attr("saturate", 1)
    return lambda x: _cast_to(x, dtype, saturate)


def _cast_to(x, dtype, saturate=1):
    if dtype not in _FLOAT8 or not x.is_floating_point():
        return x.to(dtype)
    big = torch.finfo(dtype).max
    if saturate:
        return x.clamp(-big, big).to(dtype)
    # Without saturation, out-of-range values become inf where the type has one, else NaN.
    y = x.to(dtype)
    over = x.abs() > big
    if over.any():
        inf = math.inf if dtype == torch.float8_e5m2 else math.nan
        y = torch.where(over, torch.copysign(torch.tensor(inf, dtype=x.dtype, device=x.device), x), x).to(dtype)
    return y


@_op("CastLike")
def _cast_like(spec):
    saturate = spec.attr("saturate", 1)
    return lambda x, like: _cast_to(x, like.dtype, saturate)


def _reshape_target(x, shape, allowzero):
    if allowzero:
        return shape
    return [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]


@_op("Reshape")
def _reshape(spec):
    allowzero = spec.attr("allowzero", 0)
    if spec.opset < 5:
        shape = spec.attr("shape")
        return lambda x: x.reshape(_reshape_target(x, shape, allowzero))
    shape = _const_ints(spec, 1)
    if shape is not None and (allowzero or 0 not in shape):
        return lambda x, s: x.reshape(shape)
    return lambda x, s: x.reshape(_reshape_target(x, _ints(s), allowzero))


@_op("Flatten")
def _flatten(spec):
    axis = spec.attr("axis", 1)

    def run(x):
        a = axis % x.dim() if axis < 0 else axis
        return x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))
    return run


@_op("Transpose")
def _transpose(spec):
    perm = spec.attr("perm")
    if perm is None:
        return lambda x: x.permute(*reversed(range(x.dim())))
    return lambda x: x.permute(perm)


def _axes_input(spec, attr_opset: int, index: int = 1):
    """Axes as an attribute (``opset < attr_opset``) or an input: (static axes, from_input)."""
    if spec.opset < attr_opset:
        return spec.attr("axes"), False
    return _const_ints(spec, index), True


@_op("Squeeze")
def _squeeze(spec):
    axes, from_input = _axes_input(spec, 13)

    def run(x, ax=None):
        a = axes if axes is not None else (_ints(ax) if ax is not None else None)
        if a is None:
            return x.squeeze()
        return x.squeeze(tuple(i % x.dim() for i in a)) if a else x
    return run


@_op("Unsqueeze")
def _unsqueeze(spec):
    axes, from_input = _axes_input(spec, 13)

    def run(x, ax=None):
        a = axes if axes is not None else _ints(ax)
        rank = x.dim() + len(a)
        for i in sorted(i % rank for i in a):
            x = x.unsqueeze(i)
        return x
    return run


@_op("Concat")
def _concat(spec):
    axis = spec.attr("axis")
    return lambda *xs: torch.cat(xs, axis)


@_op("Split")
def _split(spec):
    axis = spec.attr("axis", 0)
    n = spec.n_outputs
    if spec.opset < 13:
        split = spec.attr("split")
    else:
        split = _const_ints(spec, 1) if spec.has(1) else None

    def run(x, s=None):
        sizes = split if split is not None else (_ints(s) if s is not None else None)
        if sizes is None:
            return tuple(torch.split(x, math.ceil(x.shape[axis] / n), axis))
        return tuple(torch.split(x, sizes, axis))
    return run


def _slice(x, starts, ends, axes, steps):
    index = [slice(None)] * x.dim()
    flips = []
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis %= x.dim()
        size = x.shape[axis]
        lo, hi, st = slice(start, end, step).indices(size)
        if step > 0:
            index[axis] = slice(lo, max(hi, lo), st)
        else:
            count = len(range(lo, hi, st))
            # Walk backwards on the flipped axis: position p of x is size-1-p there.
            flips.append(axis)
            first = size - 1 - lo
            index[axis] = slice(first, first + count * (-st), -st) if count else slice(0, 0)
    if flips:
        x = x.flip(flips)
    return x[tuple(index)]


@_op("Slice")
def _slice_op(spec):
    if spec.opset < 10:
        starts, ends = spec.attr("starts"), spec.attr("ends")
        axes = spec.attr("axes") or list(range(len(starts)))
        return lambda x: _slice(x, starts, ends, axes, [1] * len(starts))
    consts = [_const_ints(spec, i) if spec.has(i) else None for i in range(1, 5)]

    def run(x, starts, ends, axes=None, steps=None):
        s = consts[0] if consts[0] is not None else _ints(starts)
        e = consts[1] if consts[1] is not None else _ints(ends)
        a = consts[2] if consts[2] is not None else (_ints(axes) if axes is not None else list(range(len(s))))
        st = consts[3] if consts[3] is not None else (_ints(steps) if steps is not None else [1] * len(s))
        return _slice(x, s, e, a, st)
    return run


def _fix_negative(idx, size):
    return torch.where(idx < 0, idx + size, idx)


@_op("Gather")
def _gather(spec):
    axis = spec.attr("axis", 0)
    static = spec.const(1)
    if static is not None and static.ndim == 0:
        k = int(static)  # one index (the usual Gather on a Shape): no tensor arithmetic per call
        return lambda x, idx: x.select(axis, k)

    def run(x, idx):
        a = axis % x.dim()
        i = _fix_negative(idx.to(torch.int64), x.shape[a])
        if i.dim() == 0:
            return x.select(a, int(i))
        out = x.index_select(a, i.reshape(-1))
        return out.reshape(*x.shape[:a], *i.shape, *x.shape[a + 1:])
    return run


@_op("GatherElements")
def _gather_elements(spec):
    axis = spec.attr("axis", 0)

    def run(x, idx):
        a = axis % x.dim()
        return torch.gather(x, a, _fix_negative(idx.to(torch.int64), x.shape[a]))
    return run


@_op("Expand")
def _expand(spec):
    def run(x, shape):
        return x.expand(torch.broadcast_shapes(tuple(x.shape), tuple(_ints(shape))))
    return run


@_op("Tile")
def _tile(spec):
    return lambda x, reps: x.repeat(_ints(reps))


@_op("Range")
def _range(spec):
    def run(start, limit, delta):
        s, l, d = start.item(), limit.item(), delta.item()
        n = max(math.ceil((l - s) / d), 0)
        return (torch.arange(n, dtype=torch.float64 if start.is_floating_point() else torch.int64,
                             device=start.device) * d + s).to(start.dtype)
    return run


@_op("Pad")
def _pad(spec):
    mode = spec.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise spec.unsupported(f"mode={mode!r}")
    if spec.opset < 11:
        static_pads, static_value = spec.attr("pads"), spec.attr("value", 0.0)
    else:
        static_pads, static_value = _const_ints(spec, 1), None

    def run(x, pads=None, value=None, axes=None):
        p = static_pads if static_pads is not None else _ints(pads)
        ax = list(range(x.dim())) if axes is None else [a % x.dim() for a in _ints(axes)]
        n = len(ax)
        begins, ends = [0] * x.dim(), [0] * x.dim()
        for i, a in enumerate(ax):
            begins[a], ends[a] = p[i], p[i + n]
        if mode == "constant":
            v = static_value if value is None else value.item()
            v = 0 if v is None else v
            return F.pad(x, _torch_pad_list(begins, ends), value=v)
        for a in range(x.dim()):
            b, e = begins[a], ends[a]
            if b == 0 and e == 0:
                continue
            size = x.shape[a]
            pos = torch.arange(-b, size + e, device=x.device)
            if mode == "edge":
                pos = pos.clamp(0, size - 1)
            elif mode == "wrap":
                pos = pos % size
            else:
                period = 2 * (size - 1) if size > 1 else 1
                pos = pos.abs() % period
                pos = torch.where(pos >= size, period - pos, pos)
            x = x.index_select(a, pos)
        return x
    return run


@_op("DepthToSpace")
def _depth_to_space(spec):
    bs, mode = spec.attr("blocksize"), spec.attr("mode", "DCR")

    def run(x):
        n, c, h, w = x.shape
        if mode == "DCR":
            y = x.reshape(n, bs, bs, c // bs ** 2, h, w).permute(0, 3, 4, 1, 5, 2)
        else:
            y = x.reshape(n, c // bs ** 2, bs, bs, h, w).permute(0, 1, 4, 2, 5, 3)
        return y.reshape(n, c // bs ** 2, h * bs, w * bs)
    return run


@_op("SpaceToDepth")
def _space_to_depth(spec):
    bs, mode = spec.attr("blocksize"), spec.attr("mode", "DCR")
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)

    def run(x):
        n, c, h, w = x.shape
        y = x.reshape(n, c, h // bs, bs, w // bs, bs).permute(perm)
        return y.reshape(n, c * bs * bs, h // bs, w // bs)
    return run


@_op("Trilu")
def _trilu(spec):
    upper = spec.attr("upper", 1)

    def run(x, k=None):
        kk = 0 if k is None else int(k.item())
        return torch.triu(x, kk) if upper else torch.tril(x, kk)
    return run


@_op("NonZero")
def _nonzero(spec):
    return lambda x: torch.nonzero(x.reshape(1) if x.dim() == 0 else x).t().contiguous()


@_op("CumSum")
def _cumsum(spec):
    exclusive, reverse = spec.attr("exclusive", 0), spec.attr("reverse", 0)

    def run(x, axis):
        a = int(axis.item()) % x.dim()
        y = x.flip(a) if reverse else x
        y = torch.cumsum(y, a).to(x.dtype)
        if exclusive:
            y = F.pad(y.narrow(a, 0, y.shape[a] - 1), [0, 0] * (x.dim() - 1 - a) + [1, 0])
        return y.flip(a) if reverse else y
    return run


@_op("TopK")
def _topk(spec):
    axis = spec.attr("axis", -1)
    largest = spec.attr("largest", 1)
    k_attr = spec.attr("k") if spec.opset < 10 else None

    def run(x, k=None):
        kk = k_attr if k_attr is not None else int(_scalar(k))
        # A stable sort keeps the lower index first among equal values, as ONNX requires.
        values, idx = torch.sort(x, dim=axis, descending=bool(largest), stable=True)
        return values.narrow(axis, 0, kk), idx.narrow(axis, 0, kk)
    return run


# ---------------------------------------------------------------- reductions
def _reduce_axes(spec, attr_opset):
    if spec.opset < attr_opset:
        return spec.attr("axes"), False
    return _const_ints(spec, 1) if spec.has(1) else None, True


def _identity_value(op, dtype):
    if dtype == torch.bool:
        return {"ReduceMax": False, "ReduceMin": True, "ReduceProd": True}.get(op, False)
    big = math.inf if dtype.is_floating_point else torch.iinfo(dtype).max
    return {"ReduceMax": -big if dtype.is_floating_point else torch.iinfo(dtype).min,
            "ReduceMin": big, "ReduceProd": 1, "ReduceLogSumExp": -math.inf,
            "ReduceLogSum": -math.inf}.get(op, 0)


def _mean(x, dims, keep):
    if x.is_floating_point():
        return x.mean(dim=dims, keepdim=keep)
    return x.to(torch.float64).mean(dim=dims, keepdim=keep).to(x.dtype)


def _prod(x, dims, keep):
    for d in sorted(dims, reverse=True):
        x = x.prod(dim=d, keepdim=True)
    return x if keep else x.squeeze(dims)


_REDUCE = {
    "ReduceSum": lambda x, d, k: x.sum(dim=d, keepdim=k).to(x.dtype),
    "ReduceMean": _mean,
    "ReduceMax": lambda x, d, k: x.amax(dim=d, keepdim=k),
    "ReduceMin": lambda x, d, k: x.amin(dim=d, keepdim=k),
    "ReduceProd": _prod,
    "ReduceL1": lambda x, d, k: x.abs().sum(dim=d, keepdim=k).to(x.dtype),
    "ReduceL2": lambda x, d, k: torch.sqrt((x * x).sum(dim=d, keepdim=k)).to(x.dtype),
    "ReduceLogSum": lambda x, d, k: torch.log(x.sum(dim=d, keepdim=k)),
    "ReduceLogSumExp": lambda x, d, k: torch.logsumexp(x, dim=d, keepdim=k),
    "ReduceSumSquare": lambda x, d, k: (x * x).sum(dim=d, keepdim=k).to(x.dtype),
}


@_op(*_REDUCE)
def _reduce(spec):
    fn = _REDUCE[spec.op]
    keep = bool(spec.attr("keepdims", 1))
    noop = spec.attr("noop_with_empty_axes", 0)
    axes, _ = _reduce_axes(spec, 13 if spec.op == "ReduceSum" else 18)
    op = spec.op

    def run(x, ax=None):
        a = axes if axes is not None else (_ints(ax) if ax is not None else [])
        if not a:
            if noop:
                return x
            a = list(range(x.dim()))
        dims = tuple(sorted(i % x.dim() for i in a)) if x.dim() else ()
        if x.dim() == 0:
            return fn(x.reshape(1), (0,), False).reshape(())
        if x.numel() == 0 and any(x.shape[d] == 0 for d in dims):
            shape = [1 if i in dims else s for i, s in enumerate(x.shape)] if keep else \
                [s for i, s in enumerate(x.shape) if i not in dims]
            return torch.full(shape, _identity_value(op, x.dtype), dtype=x.dtype, device=x.device)
        return fn(x, dims, keep)
    return _wide_unsigned(run)


@_op("ArgMax", "ArgMin")
def _arg(spec):
    axis, keep = spec.attr("axis", 0), bool(spec.attr("keepdims", 1))
    last = spec.attr("select_last_index", 0)
    fn = torch.argmax if spec.op == "ArgMax" else torch.argmin

    def run(x):
        a = axis % x.dim()
        if last:
            return x.shape[a] - 1 - fn(x.flip(a), dim=a, keepdim=keep)
        return fn(x, dim=a, keepdim=keep)
    return run


# ---------------------------------------------------------------- recurrent
_ACTIVATIONS = {
    "sigmoid": lambda a, b: torch.sigmoid,
    "tanh": lambda a, b: torch.tanh,
    "relu": lambda a, b: torch.relu,
    "affine": lambda a, b: (lambda x: a * x + b),
    "leakyrelu": lambda a, b: (lambda x: F.leaky_relu(x, a)),
    "thresholdedrelu": lambda a, b: (lambda x: torch.where(x > a, x, torch.zeros_like(x))),
    "scaledtanh": lambda a, b: (lambda x: a * torch.tanh(b * x)),
    "hardsigmoid": lambda a, b: (lambda x: torch.clamp(a * x + b, 0, 1)),
    "elu": lambda a, b: (lambda x: F.elu(x, a)),
    "softsign": lambda a, b: (lambda x: x / (1 + x.abs())),
    "softplus": lambda a, b: F.softplus,
}
_ACT_DEFAULT_ALPHA = {"leakyrelu": 0.01, "thresholdedrelu": 1.0, "hardsigmoid": 0.2, "elu": 1.0,
                      "affine": 1.0, "scaledtanh": 1.0}
_ACT_DEFAULT_BETA = {"hardsigmoid": 0.5, "affine": 0.0, "scaledtanh": 1.0}


def _rnn_activations(spec, defaults, num_dir):
    names = spec.attr("activations") or defaults * num_dir
    alphas, betas = list(spec.attr("activation_alpha") or []), list(spec.attr("activation_beta") or [])
    acts = []
    for i, name in enumerate(names):
        key = name.lower()
        if key not in _ACTIVATIONS:
            raise spec.unsupported(f"activation {name!r}")
        a = alphas[i] if i < len(alphas) else _ACT_DEFAULT_ALPHA.get(key, 0.0)
        b = betas[i] if i < len(betas) else _ACT_DEFAULT_BETA.get(key, 0.0)
        acts.append(_ACTIVATIONS[key](a, b))
    if len(acts) == len(defaults) and num_dir == 2:
        acts = acts * 2
    n = len(defaults)
    return [acts[d * n:(d + 1) * n] for d in range(num_dir)]


def _reverse_index(seq_len, lens, device):
    """Per (t, batch) the time step to read for a reverse pass honouring ``sequence_lens``."""
    t = torch.arange(seq_len, device=device).unsqueeze(1)
    lens = lens.to(torch.int64).unsqueeze(0)
    return torch.where(t < lens, lens - 1 - t, t)


def _recurrent(spec, gates: int, defaults, cell):
    """Shared driver of RNN, GRU and LSTM: layouts, directions, sequence_lens and states.

    ``cell(x_t, states, R, Rb, P, acts) -> states`` computes one step from the projected input
    ``x_t = X_t @ W^T + Wb``; ``states[0]`` is the hidden state.
    """
    direction = spec.attr("direction", "forward")
    num_dir = 2 if direction == "bidirectional" else 1
    hidden = spec.attr("hidden_size")
    layout = spec.attr("layout", 0)
    acts = _rnn_activations(spec, defaults, num_dir)
    n_states = 2 if spec.op == "LSTM" else 1

    def run(x, w, r, b=None, seq_lens=None, h0=None, *rest):
        c0 = rest[0] if rest else None
        p = rest[1] if len(rest) > 1 else None
        if layout:
            x = x.transpose(0, 1)
            h0 = None if h0 is None else h0.transpose(0, 1)
            c0 = None if c0 is None else c0.transpose(0, 1)
        seq, batch = x.shape[0], x.shape[1]
        hs = hidden or r.shape[-1]
        ys, finals = [], []
        mask = None
        if seq_lens is not None:
            mask = (torch.arange(seq, device=x.device).unsqueeze(1) < seq_lens.to(torch.int64).unsqueeze(0))
            mask = mask.unsqueeze(-1)  # (seq, batch, 1)
        for d in range(num_dir):
            reverse = direction == "reverse" or d == 1
            xd = x
            if reverse:
                if seq_lens is None:
                    xd = x.flip(0)
                else:
                    idx = _reverse_index(seq, seq_lens, x.device)
                    xd = torch.gather(x, 0, idx.unsqueeze(-1).expand_as(x))
            wb = b[d, :gates * hs] if b is not None else 0
            rb = b[d, gates * hs:] if b is not None else 0
            xw = torch.matmul(xd, w[d].t()) + wb
            zeros = torch.zeros(batch, hs, dtype=x.dtype, device=x.device)
            states = [h0[d] if h0 is not None else zeros]
            if n_states == 2:
                states.append(c0[d] if c0 is not None else zeros)
            pd = p[d] if p is not None else None
            outs = []
            for t in range(seq):
                new = cell(xw[t], states, r[d], rb, pd, acts[d])
                if mask is not None:
                    m = mask[t]
                    new = [torch.where(m, n, s) for n, s in zip(new, states)]
                    outs.append(torch.where(m, new[0], torch.zeros_like(new[0])))
                else:
                    outs.append(new[0])
                states = new
            y = torch.stack(outs) if outs else torch.zeros(0, batch, hs, dtype=x.dtype, device=x.device)
            if reverse:
                if seq_lens is None:
                    y = y.flip(0)
                else:
                    y = torch.gather(y, 0, idx.unsqueeze(-1).expand_as(y))
            ys.append(y)
            finals.append(states)
        y = torch.stack(ys, 1)  # (seq, num_dir, batch, hidden)
        h_n = torch.stack([f[0] for f in finals])
        results = [y, h_n]
        if n_states == 2:
            results.append(torch.stack([f[1] for f in finals]))
        if layout:
            results = [y.permute(2, 0, 1, 3)] + [s.transpose(0, 1) for s in results[1:]]
        results = results[:spec.n_outputs]
        return results[0] if spec.n_outputs == 1 else tuple(results)
    return run


@_op("RNN")
def _rnn(spec):
    clip = spec.attr("clip")

    def cell(xw, states, r, rb, p, acts):
        g = xw + states[0] @ r.t() + rb
        if clip is not None:
            g = g.clamp(-clip, clip)
        return [acts[0](g)]
    return _recurrent(spec, 1, ["Tanh"], cell)


@_op("GRU")
def _gru(spec):
    clip = spec.attr("clip")
    before_reset = spec.attr("linear_before_reset", 0)

    def cell(xw, states, r, rb, p, acts):
        f, g = acts
        h = states[0]
        hs = h.shape[-1]
        xz, xr, xh = xw.split(hs, -1)
        rz, rr, rh = r.split(hs, 0)
        if isinstance(rb, torch.Tensor):
            bz, br, bh = rb.split(hs, -1)
        else:
            bz = br = bh = 0
        cz, cr = xz + h @ rz.t() + bz, xr + h @ rr.t() + br
        if clip is not None:
            cz, cr = cz.clamp(-clip, clip), cr.clamp(-clip, clip)
        z, rg = f(cz), f(cr)
        if before_reset:
            ch = xh + rg * (h @ rh.t() + bh)
        else:
            ch = xh + (rg * h) @ rh.t() + bh
        if clip is not None:
            ch = ch.clamp(-clip, clip)
        return [(1 - z) * g(ch) + z * h]
    return _recurrent(spec, 3, ["Sigmoid", "Tanh"], cell)


@_op("LSTM")
def _lstm(spec):
    clip = spec.attr("clip")
    input_forget = spec.attr("input_forget", 0)

    def cell(xw, states, r, rb, p, acts):
        f, g, hact = acts
        h, c = states
        gates = xw + h @ r.t() + rb
        if clip is not None:
            gates = gates.clamp(-clip, clip)
        i, o, fg, cc = gates.chunk(4, -1)
        if p is not None:
            pi, po, pf = p.chunk(3)
            i, fg = i + pi * c, fg + pf * c
        i = f(i)
        fg = 1 - i if input_forget else f(fg)
        c_new = fg * c + i * g(cc)
        if p is not None:
            o = o + po * c_new
        return [f(o) * hact(c_new), c_new]
    return _recurrent(spec, 4, ["Sigmoid", "Tanh", "Tanh"], cell)


# ---------------------------------------------------------------------- losses
def _nll(spec, log_prob, target, weight):
    reduction = spec.attr("reduction", "mean")
    ignore = spec.attr("ignore_index")
    dtype = log_prob.dtype
    if dtype in (torch.float16, torch.bfloat16):
        log_prob = log_prob.float()
        weight = None if weight is None else weight.float()
    target = target.to(torch.int64)
    if ignore is not None:
        # torch checks the range of every target, ignored ones included; park them on class 0.
        ignored = target == ignore
        safe = torch.where(ignored, torch.zeros_like(target), target)
        w = weight if weight is not None else torch.ones(
            log_prob.shape[1], dtype=log_prob.dtype, device=log_prob.device)
        per = -log_prob.gather(1, safe.unsqueeze(1)).squeeze(1) * w[safe]
        wsum = torch.where(ignored, torch.zeros_like(per), w[safe])
        per = torch.where(ignored, torch.zeros_like(per), per)
        if reduction == "none":
            loss = per
        elif reduction == "sum":
            loss = per.sum()
        else:
            loss = per.sum() / wsum.sum()
    else:
        loss = F.nll_loss(log_prob, target, weight=weight, reduction=reduction)
    return loss.to(dtype)


@_op("NegativeLogLikelihoodLoss")
def _nll_loss(spec):
    return lambda x, target, weight=None: _nll(spec, x, target, weight)


@_op("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(spec):
    def run(scores, labels, weights=None):
        log_prob = torch.log_softmax(scores, 1)
        loss = _nll(spec, log_prob, labels, weights)
        return loss if spec.n_outputs == 1 else (loss, log_prob)
    return run


SUPPORTED_OPS: frozenset = frozenset(_CONVERTERS)
