"""Helpers shared by the torch converter families: the per-family registration decorator,
:class:`NodeSpec` (what a converter knows about its node), attribute parsing, and small
conversions of constant inputs (``_ints``, ``_scalar``, ``_const_ints``), int64 widening of the
unsigned types torch barely computes with, and ONNX pads as ``F.pad`` lists.
"""

from __future__ import annotations

import numpy as np
import onnx
import torch

from deep500lite.errors import UnsupportedOperatorError
from deep500lite.lv1.converters import parse_attributes, registrar

__all__ = ["NodeSpec", "parse_attributes", "registrar"]

# Unsigned types torch stores but barely computes with: arithmetic runs in int64.
_WIDE_UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)


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
        captured: the outer-scope values an ``If``/``Loop``/``Scan`` node's subgraphs read; the
            node's function takes them after its declared inputs.
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
        #: outer-scope values the node's subgraphs read, passed after its declared inputs
        self.captured: list[str] = []

    def attr(self, key, default=None):
        return self.attrs.get(key, default)

    def has(self, i: int) -> bool:
        return i < len(self.present) and self.present[i]

    def const(self, i: int):
        return self.consts[i] if i < len(self.consts) else None

    def unsupported(self, what: str, allowed: str | None = None) -> UnsupportedOperatorError:
        """The error refusing this node: ``what`` is the offending value, ``allowed`` what is supported."""
        supported = f"; it supports {allowed}" if allowed else ""
        return UnsupportedOperatorError(
            f"The torch executor does not support this {self.op} node ('{self.name}'){supported}; another executor "
            f"may run it. Received: {what}")



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


def _torch_pad_list(begins, ends):
    """ONNX per-axis begin/end pads of the spatial axes as ``F.pad``'s last-axis-first list."""
    out = []
    for b, e in zip(reversed(begins), reversed(ends)):
        out += [b, e]
    return out
