"""Normalization operators and Dropout as torch functions: BatchNormalization (inference and
training mode), InstanceNormalization, LayerNormalization, GroupNormalization, LRN, Dropout — the operators
whose training mode differs from inference live here with their training forms.

Converters follow the contract of :mod:`deep500lite.frameworks.torch.ops`.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from deep500lite.frameworks.torch.ops._common import _scalar, registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict[str, Callable] = {}
"""ONNX op type -> converter (``NodeSpec -> function of tensors``) of this family."""
_op = registrar(CONVERTERS)


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


@_op("GroupNormalization")
def _group_norm(spec):
    eps = spec.attr("epsilon", 1e-5)
    groups = spec.attr("num_groups")
    stash = spec.attr("stash_type", 1)
    # Opset 18 has one scale and bias per group, opset 21 one per channel.
    per_group = spec.opset < 21

    def run(x, scale, b):
        n, c = x.shape[0], x.shape[1]
        xs = x.to(torch.float32) if stash == 1 and x.dtype in (torch.float16, torch.bfloat16) else x
        g = xs.reshape(n, groups, -1)
        mean = g.mean(dim=-1, keepdim=True)
        var = ((g - mean) ** 2).mean(dim=-1, keepdim=True)
        y = ((g - mean) * torch.rsqrt(var + eps)).reshape(x.shape).to(x.dtype)
        if per_group:
            scale, b = scale.repeat_interleave(c // groups), b.repeat_interleave(c // groups)
        shape = (1, c) + (1,) * (x.dim() - 2)
        return y * scale.reshape(shape) + b.reshape(shape)
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
