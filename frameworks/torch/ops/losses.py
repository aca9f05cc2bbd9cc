"""Loss operators as torch functions: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss.

Converters follow the contract of :mod:`deep500lite.frameworks.torch.ops`.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from deep500lite.frameworks.torch.ops._common import registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict[str, Callable] = {}
"""ONNX op type -> converter (``NodeSpec -> function of tensors``) of this family."""
_op = registrar(CONVERTERS)


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
