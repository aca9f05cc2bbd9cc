"""Custom operators as differentiable torch functions.

``custom_op(op)`` returns a function of torch tensors backed by a ``torch.autograd.Function``:
``forward`` calls the operator's ``forward`` and autograd calls its ``backward``.

Memory: a compiled C++/CUDA operator (it has ``forward_ptrs``) reads and writes the tensors'
memory directly, with no copy, when they are contiguous and of the declared dtype (outputs are
allocated by torch on the inputs' device); a non-contiguous input is made contiguous first. On a
CUDA device the operator's ``forward_cuda``/``backward_cuda`` get the device pointers after the
current stream is synchronized; an operator without CUDA support runs on host copies. A Python
operator gets numpy views of CPU tensors (``Tensor.numpy()``, no copy) and its results are wrapped
with ``torch.from_numpy`` (no copy); on CUDA, inputs are copied to the host and results back.
"""

from __future__ import annotations

import numpy as np
import onnx
import torch

from deep500lite.errors import UserError, UserTypeError
from deep500lite.frameworks.torch.dtypes import ONNX_TO_TORCH_DTYPE
from deep500lite.lv0.custom import as_tuple, check_outputs

__all__ = ["custom_op", "CustomOpFunction"]

def _torch_dtype(dtype) -> torch.dtype:
    try:
        return ONNX_TO_TORCH_DTYPE[onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))]
    except (KeyError, TypeError, ValueError):
        raise UserTypeError(f"torch custom operators take the dtypes torch has. Received: {np.dtype(dtype)}") from None


def _prepare(op, tensors, descs):
    out = []
    for i, (t, d) in enumerate(zip(tensors, descs)):
        want = _torch_dtype(d.dtype)
        if t.dtype != want:
            raise UserTypeError(f"{type(op).__name__} input {i} must be {d}. Received: a {t.dtype} tensor")
        if d.shape is not None and (len(d.shape) != t.dim() or any(
                s is not None and s != n for s, n in zip(d.shape, t.shape))):
            raise UserError(f"{type(op).__name__} input {i} must be {d}. Received: shape {list(t.shape)}")
        out.append(t.detach().contiguous())
    return out


def _empty(descs, device):
    return [torch.empty(d.shape, dtype=_torch_dtype(d.dtype), device=device) for d in descs]


def _host(tensors):
    return [t.detach().cpu().numpy() for t in tensors]


def _run_forward(op, xs):
    if not xs:
        raise UserError(f"{type(op).__name__}: custom operators need at least one input. Received: no inputs")
    device = xs[0].device
    cuda = device.type == "cuda"
    if hasattr(op, "forward_ptrs") and (not cuda or op.supports_cuda()):
        outs = _empty(op.output_descriptors, device)
        if cuda:
            torch.cuda.current_stream(device).synchronize()
        op.forward_ptrs([x.data_ptr() for x in xs], [o.data_ptr() for o in outs], cuda=cuda)
        return outs
    results = check_outputs(op, as_tuple(op.forward(*_host(xs))))
    return [torch.from_numpy(np.ascontiguousarray(r)).to(device) for r in results]


def _run_backward(op, gys, xs, ys):
    device = xs[0].device
    cuda = device.type == "cuda"
    if hasattr(op, "backward_ptrs") and (not cuda or op.supports_cuda()):
        gxs = _empty(op.input_descriptors, device)
        if cuda:
            torch.cuda.current_stream(device).synchronize()
        op.backward_ptrs([g.data_ptr() for g in gys], [x.data_ptr() for x in xs], [y.data_ptr() for y in ys],
                         [g.data_ptr() for g in gxs], cuda=cuda)
        return gxs
    results = as_tuple(op.backward(_host(gys), _host(xs), _host(ys)))
    if len(results) != len(xs):
        raise UserError(f"{type(op).__name__}.backward returned {len(results)} gradients for {len(xs)} inputs; "
                        f"it must return one gradient per input. Received: {len(results)} gradients")
    return [torch.from_numpy(np.ascontiguousarray(np.asarray(r, dtype=x.detach().cpu().numpy().dtype)
                                                  .reshape(tuple(x.shape)))).to(device)
            for r, x in zip(results, xs)]


class CustomOpFunction(torch.autograd.Function):
    """``torch.autograd.Function`` running a deep500lite operator (used by :func:`custom_op`)."""

    @staticmethod
    def forward(ctx, op, *inputs):
        xs = _prepare(op, inputs, op.input_descriptors)
        ys = _run_forward(op, xs)
        ctx.op = op
        ctx.save_for_backward(*xs, *ys)
        ctx.n_in = len(xs)
        ctx.mark_non_differentiable(*[y for y in ys if not y.is_floating_point()])
        return tuple(ys) if len(ys) > 1 else ys[0]

    @staticmethod
    def backward(ctx, *grads):
        op = ctx.op
        saved = ctx.saved_tensors
        xs, ys = list(saved[:ctx.n_in]), list(saved[ctx.n_in:])
        gys = [torch.zeros_like(y) if g is None else g.contiguous().to(y.dtype) for g, y in zip(grads, ys)]
        gxs = _run_backward(op, gys, xs, ys)
        return (None, *[g if x.is_floating_point() else None for g, x in zip(gxs, xs)])


def custom_op(op):
    """The operator as a differentiable function of torch tensors.

    Args:
        op: a deep500lite operator with input and output descriptors (a ``d5.CustomPythonOp``
            subclass or a compiled C++/CUDA op).

    Returns:
        ``fn(*tensors)`` returning a tensor (one output) or a tuple of tensors; gradients flow
        through ``op.backward``.

    Example:
        >>> swish = custom_op(my_op)
        >>> y = swish(torch.randn(1024, requires_grad=True)); y.sum().backward()
    """
    if not hasattr(op, "input_descriptors") or not hasattr(op, "output_descriptors"):
        raise UserTypeError(f"custom_op needs a d5.CustomOp with descriptors. Received: {type(op).__name__}")

    def fn(*tensors):
        return CustomOpFunction.apply(op, *tensors)

    fn.op = op
    fn.__name__ = f"custom_{type(op).__name__}"
    return fn
