"""Deep500's ``test_nativeop_forward`` and ``test_nativeop_gradient`` for torch operators.

They measure a torch function or module on torch tensors where they are (no numpy round trip
inside the measured runs), with Deep500's metric protocol and result list
(:mod:`deep500lite.lv0.validation.native`). On a CUDA device every run is followed by
``torch.cuda.synchronize()`` before the metrics end, so timings cover the kernels.

Deep500's torch version returned nothing unless some metric had reruns (its result loop was
inside the rerun loop); here the results always come back, as its documentation says.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from deep500lite.errors import UserTypeError
from deep500lite.frameworks.torch.custom import custom_op_from_native, desc_from_tensor
from deep500lite.lv0.validation.native import default_op_metrics, measure_outputs, numerical_gradients, run_with_metrics

__all__ = ["test_nativeop_forward", "test_nativeop_gradient"]


def _check_inputs(inputs, name):
    if not isinstance(inputs, (list, tuple)) or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise UserTypeError(f"{name} takes inputs as a list of torch tensors. Received: {inputs!r:.200}")


def _as_list(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _numpy(t) -> np.ndarray:
    return t.detach().cpu().numpy()


def _sync_for(inputs) -> Callable[[], None] | None:
    if any(t.device.type == "cuda" for t in inputs):
        return torch.cuda.synchronize
    return None


def test_nativeop_forward(op, inputs: Sequence[torch.Tensor], reference_outputs: Sequence,
                          metrics: Sequence | None = None) -> list:
    """Run a torch operator on ``inputs`` and measure it with ``metrics`` (Deep500's signature).

    Args:
        op: a torch module or function of the input tensors, returning a tensor or a tuple.
        inputs: the input tensors (on any device).
        reference_outputs: one numpy array per output (``None`` where only timing is measured).
        metrics: ``TestMetric`` objects (default: ``L2Error``, ``MaxError``, ``WallclockTime``).

    Returns:
        For each output, the value of each metric, in order (e.g. ``l2, maxerr, times``).
    """
    _check_inputs(inputs, "test_nativeop_forward")
    metrics = default_op_metrics() if metrics is None else list(metrics)
    inputs = list(inputs)
    with torch.no_grad():
        op(*inputs)  # warm-up, as Deep500's first call
        outputs = run_with_metrics(lambda: op(*inputs), metrics, inputs, _sync_for(inputs))
    outs = [_numpy(o) for o in _as_list(outputs)]
    return measure_outputs(metrics, [_numpy(t) for t in inputs], outs, reference_outputs, "native inference")


def test_nativeop_gradient(op, inputs: Sequence[torch.Tensor], grad_inputs: Sequence[torch.Tensor] | None = None,
                           eps: float = 1e-5, metrics: Sequence | None = None) -> list:
    """Compare a torch operator's autograd gradient with central differences (Deep500's signature).

    The analytical gradient of ``sum_i <grad_inputs[i], op(*inputs)[i]>`` with respect to every
    input comes from ``torch.autograd.grad``; the numerical one from central differences with
    step ``eps`` on a numpy copy of the inputs (via ``custom_op_from_native``). Use float64
    inputs for tight agreement.

    Args:
        op: a torch module or function of the input tensors.
        inputs: the input tensors; they must have ``requires_grad=True``.
        grad_inputs: one tensor per output, the gradient flowing in (default: ones).
        eps: the finite-difference step.
        metrics: ``TestMetric`` objects comparing analytical with numerical gradients.

    Returns:
        For each output, the value of each metric, in order.
    """
    _check_inputs(inputs, "test_nativeop_gradient")
    metrics = default_op_metrics() if metrics is None else list(metrics)
    inputs = list(inputs)
    outputs = _as_list(op(*inputs))
    if grad_inputs is None:
        grad_inputs = [torch.ones_like(o) for o in outputs]
    grad_inputs = list(grad_inputs)

    def analytical():
        return torch.autograd.grad(outputs, inputs, grad_inputs, retain_graph=True, allow_unused=True)

    grads = run_with_metrics(analytical, metrics, grad_inputs, _sync_for(inputs))
    analytic = [np.zeros(tuple(x.shape), _numpy(x).dtype) if g is None else _numpy(g) for g, x in zip(grads, inputs)]
    native = custom_op_from_native(op, [desc_from_tensor(x) for x in inputs], [desc_from_tensor(o) for o in outputs])
    weights = [_numpy(g) for g in grad_inputs]
    numeric = numerical_gradients(lambda xs: _as_list(native.forward(*xs)), [_numpy(x) for x in inputs], weights,
                                  eps)
    return measure_outputs(metrics, [_numpy(x) for x in inputs], [analytic], [numeric], "native gradient")


test_nativeop_forward.__test__ = False  # library functions, not pytest tests
test_nativeop_gradient.__test__ = False
