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

As in Deep500, ``custom_op`` returns a ``torch.nn.Module`` whose call returns a tuple with one
tensor per output, also for one output (``y, = fn(x)``). An input whose descriptor has a fixed
shape may come in another shape with the same number of elements (as a compiled operator sees
only the buffer): the operator gets it in the declared shape and its gradient has the input's
own shape. ``desc_from_tensor`` and ``custom_op_from_native`` keep Deep500's names and arguments.

Under ``torch.compile`` the module calls :func:`library_op` instead: the operator registered as
a ``torch.library`` custom operator (with a fake implementation and its backward), which
TorchDynamo keeps as one opaque node of the compiled graph.
"""

from __future__ import annotations

import itertools
import re
from typing import Sequence

import numpy as np
import onnx
import torch

from deep500lite.errors import UserError, UserTypeError
from deep500lite.frameworks.torch.dtypes import ONNX_TO_TORCH_DTYPE
from deep500lite.lv0.custom import as_tuple, check_outputs, input_shape_for
from deep500lite.lv0.operator import CustomOp
from deep500lite.lv0.tensordesc import TensorDescriptor

__all__ = ["custom_op", "library_op", "CustomOpFunction", "CustomOpModule", "desc_from_tensor",
           "custom_op_from_native"]

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
        shape = input_shape_for(op, i, t.shape)
        if shape is not None:
            t = t.reshape(shape)
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
        ctx.shapes = [tuple(t.shape) for t in inputs]
        ctx.mark_non_differentiable(*[y for y in ys if not y.is_floating_point()])
        return tuple(ys) if len(ys) > 1 else ys[0]

    @staticmethod
    def backward(ctx, *grads):
        op = ctx.op
        saved = ctx.saved_tensors
        xs, ys = list(saved[:ctx.n_in]), list(saved[ctx.n_in:])
        gys = [torch.zeros_like(y) if g is None else g.contiguous().to(y.dtype) for g, y in zip(grads, ys)]
        gxs = _run_backward(op, gys, xs, ys)
        return (None, *[g.reshape(shape) if x.is_floating_point() else None
                        for g, x, shape in zip(gxs, xs, ctx.shapes)])


_library_names = itertools.count()


def _library_name(op) -> str:
    stem = re.sub(r"\W", "_", type(op).__name__) or "op"
    return f"deep500lite::{stem}_{next(_library_names)}"


def library_op(op):
    """The operator as a ``torch.library`` custom operator, which ``torch.compile`` keeps opaque.

    TorchDynamo cannot trace into numpy or a ctypes call, so under ``torch.compile`` the module
    :func:`custom_op` returns calls this instead of its ``torch.autograd.Function``: a custom
    operator ``deep500lite::<Class>_<n>`` taking and returning lists of tensors, with a fake
    (meta) implementation from the output descriptors, and its backward (``op.backward``,
    itself such an operator) registered with ``register_autograd``. One is made per operator
    object and kept on it.

    Returns:
        The custom operator: call it with a list of tensors; it returns a list of tensors.
    """
    found = getattr(op, "_torch_library_op", None)
    if found is not None:
        return found
    name = _library_name(op)
    in_descs, out_descs = list(op.input_descriptors), list(op.output_descriptors)

    def forward_impl(xs: list[torch.Tensor]) -> list[torch.Tensor]:
        return [y.clone() if any(y is x for x in xs) else y for y in _run_forward(op, _prepare(op, xs, in_descs))]

    def forward_fake(xs):
        device = xs[0].device if xs else None
        return [torch.empty(d.shape, dtype=_torch_dtype(d.dtype), device=device) for d in out_descs]

    def backward_impl(gys: list[torch.Tensor], xs: list[torch.Tensor], ys: list[torch.Tensor]) -> list[torch.Tensor]:
        gxs = _run_backward(op, [g.contiguous() for g in gys], _prepare(op, xs, in_descs),
                            [y.contiguous() for y in ys])
        return [g.reshape(x.shape) for g, x in zip(gxs, xs)]  # the gradient has the input's own shape

    def backward_fake(gys, xs, ys):
        return [torch.empty_like(x) for x in xs]

    forward_impl.__annotations__ = {"xs": list[torch.Tensor], "return": list[torch.Tensor]}
    backward_impl.__annotations__ = {"gys": list[torch.Tensor], "xs": list[torch.Tensor], "ys": list[torch.Tensor],
                                     "return": list[torch.Tensor]}
    fwd = torch.library.custom_op(name, forward_impl, mutates_args=())
    fwd.register_fake(forward_fake)
    bwd = torch.library.custom_op(name + "_backward", backward_impl, mutates_args=())
    bwd.register_fake(backward_fake)

    def setup_context(ctx, inputs, output):
        xs = list(inputs[0])
        ctx.n_in = len(xs)
        ctx.save_for_backward(*xs, *output)

    def backward(ctx, grads):
        saved = ctx.saved_tensors
        xs, ys = list(saved[:ctx.n_in]), list(saved[ctx.n_in:])
        gys = [torch.zeros_like(y) if g is None else g.to(y.dtype) for g, y in zip(grads, ys)]
        gxs = bwd(gys, xs, ys)
        return [g if x.is_floating_point() else None for g, x in zip(gxs, xs)]

    fwd.register_autograd(backward, setup_context=setup_context)
    op._torch_library_op = fwd
    return fwd



class CustomOpModule(torch.nn.Module):
    """A deep500lite operator as a ``torch.nn.Module`` (what :func:`custom_op` returns).

    Attributes:
        op: the wrapped operator.
        use_autodiff: whether ``op.forward`` runs on torch tensors with autograd.
    """

    def __init__(self, op, use_autodiff: bool = False):
        super().__init__()
        self.op = op
        self.use_autodiff = use_autodiff
        self.__name__ = f"custom_{type(op).__name__}"
        # made here, outside any compiled region, for torch.compile to call (see library_op)
        self._library_op = None if use_autodiff else library_op(op)

    def forward(self, *tensors):
        if self.use_autodiff:
            return tuple(as_tuple(self.op.forward(*tensors)))
        if torch.compiler.is_compiling():
            # torch.compile cannot trace into numpy or a ctypes call: an opaque torch.library operator
            return tuple(self._library_op(list(tensors)))
        out = CustomOpFunction.apply(self.op, *tensors)
        return out if isinstance(out, tuple) else (out,)


def custom_op(op, use_autodiff: bool = False) -> CustomOpModule:
    """The operator as a differentiable function (a ``torch.nn.Module``) of torch tensors.

    Args:
        op: a deep500lite operator with input and output descriptors (a ``d5.CustomPythonOp``
            subclass or a compiled C++/CUDA op).
        use_autodiff: Deep500's option: call ``op.forward`` on the torch tensors themselves and
            let autograd differentiate it (``op.backward`` is not used). The forward must then
            use torch operations, not numpy.

    Returns:
        A module; calling it returns a tuple of tensors, one per output (Deep500's form, also for
        one output); gradients flow through ``op.backward``.

    Example:
        >>> swish = custom_op(my_op)
        >>> y, = swish(torch.randn(1024, requires_grad=True)); y.sum().backward()
    """
    if not hasattr(op, "input_descriptors") or not hasattr(op, "output_descriptors"):
        raise UserTypeError(f"custom_op needs a d5.CustomOp with descriptors. Received: {type(op).__name__}")
    if not isinstance(use_autodiff, (bool, np.bool_)):
        raise UserTypeError(f"use_autodiff must be True or False. Received: {use_autodiff!r}")
    return CustomOpModule(op, bool(use_autodiff))


def desc_from_tensor(tensor: torch.Tensor) -> TensorDescriptor:
    """The descriptor (numpy dtype and shape) of a torch tensor (Deep500's name)."""
    if not isinstance(tensor, torch.Tensor):
        raise UserTypeError(f"desc_from_tensor takes a torch.Tensor. Received: {type(tensor).__name__}")
    dtype = torch.empty((), dtype=tensor.dtype).numpy().dtype
    return TensorDescriptor(dtype, tuple(tensor.shape))


def custom_op_from_native(op_class, inputs: Sequence[TensorDescriptor],
                          outputs: Sequence[TensorDescriptor]) -> CustomOp:
    """A torch function or module as a deep500lite operator on numpy arrays (Deep500's name).

    ``forward`` calls ``op_class(*tensors)`` (a module, a function, or a class whose instance
    is then called) on CPU tensors made from the arrays; ``backward`` differentiates that call
    with ``torch.autograd.grad``.

    Args:
        op_class: a ``torch.nn.Module``, a function of tensors, or a module class taking the inputs.
        inputs: one descriptor per input.
        outputs: one descriptor per output.

    Returns:
        A :class:`~deep500lite.CustomOp`.
    """

    def call(tensors):
        result = op_class(*tensors)
        if not isinstance(result, (torch.Tensor, tuple, list)) and callable(result):
            result = result(*tensors)
        return as_tuple(result)

    def tensors_of(arrays, descs, grad=False):
        return tuple(torch.tensor(np.asarray(a), dtype=_torch_dtype(d.dtype), requires_grad=grad)
                     for a, d in zip(arrays, descs))

    class NativeTorchOp(CustomOp):
        def forward(self, *arrays):
            with torch.no_grad():
                outs = call(tensors_of(arrays, self.input_descriptors))
            results = tuple(o.detach().cpu().numpy() for o in outs)
            return results[0] if len(results) == 1 else results

        def backward(self, grads, fwd_inputs, fwd_outputs):
            xs = tensors_of(fwd_inputs, self.input_descriptors, grad=True)
            outs = call(xs)
            gys = [torch.as_tensor(np.asarray(g)).to(o.dtype) for g, o in zip(grads, outs)]
            gxs = torch.autograd.grad(outs, xs, gys, allow_unused=True)
            results = tuple(np.zeros(x.shape, dtype=np.asarray(a).dtype) if g is None else g.detach().numpy()
                            for g, x, a in zip(gxs, xs, fwd_inputs))
            return results[0] if len(results) == 1 else results

    return NativeTorchOp(inputs, outputs)
