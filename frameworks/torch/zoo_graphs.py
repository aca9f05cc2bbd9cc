"""torch's graphs beyond classifiers for the real-model zoo: control flow, dynamic axes, a decoder with a cache.

Each builder makes a module with seeded random weights, exports it with one of torch's ONNX
exporters and returns a :class:`~deep500lite.bench.zoo_model.GraphModel` (nothing is downloaded):

- ``scan_if``: a recurrent encoder written with ``torch._higher_order_ops.scan`` and a head chosen
  by ``torch.cond`` on a computed value; the dynamo exporter writes ONNX ``Scan`` and ``If``.
- ``loop``: a residual refinement ``for i in range(x.size(1) // 4)`` and a branch on the data,
  compiled by ``torch.jit.script``; the TorchScript exporter writes ``Loop`` (its trip count a
  constant of the exported graph) and ``If``.
- ``bert_dynamic``: transformers' BERT classifier exported with dynamic batch and sequence axes,
  run at batches 1, 2 and 4 and sequences of 8 and 16 tokens.
- ``gpt2_kv``: transformers' GPT-2 language model, one decoding step with its key/value cache as
  an input (``past``, of any length, 0 included) and an output (``present``), exported with dynamic
  axes; the zoo generates 16 tokens with it.
"""

from __future__ import annotations

import copy
import os
import tempfile

import numpy as np
import onnx
import torch
from torch import nn

from deep500lite.bench.contract import GraphModel
from deep500lite.errors import ModelExportError, UserError, format_choices
from deep500lite.frameworks.torch.zoo import _quiet, _short_message
from deep500lite.frameworks.torch.zoo_models import CLASSES, VOCAB, perturb

__all__ = ["GRAPH_MODELS", "graph_model_names", "build_graph"]

_OPSET = 17
#: the decoder's layers, heads and head width
_LAYERS, _HEADS, _HEAD_DIM = 2, 2, 16


class _ScanIf(nn.Module):
    """``h_t = tanh(W h_{t-1} + U x_t)`` over the sequence, then one of two heads by the sign of the mean state."""

    def __init__(self, features: int = 4, hidden: int = 8):
        super().__init__()
        self.inp = nn.Linear(features, hidden)
        self.cell = nn.Linear(hidden, hidden)
        self.pos = nn.Linear(hidden, hidden)
        self.neg = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, CLASSES)

    def forward(self, x):  # [T, B, features]
        from torch._higher_order_ops.scan import scan

        xs = self.inp(x)

        def step(h, xt):
            h2 = torch.tanh(self.cell(h) + xt)
            return h2, h2.clone()

        h, states = scan(step, torch.zeros_like(xs[0]), xs)
        h = torch.cond(states.mean() > 0, lambda t: self.pos(t), lambda t: torch.tanh(self.neg(t)), (h,))
        return self.head(h)


class _Loop(nn.Module):
    """Residual refinements in a loop (two for 8 features), then a branch on the data (scripted by torch.jit.script)."""

    def __init__(self, features: int = 8):
        super().__init__()
        self.refine = nn.Linear(features, features)
        self.scale = nn.Linear(features, features)
        self.head = nn.Linear(features, CLASSES)

    def forward(self, x):
        h = x
        # a trip count read from the input's shape, so torch.jit.script keeps the loop (it unrolls constant ranges)
        for _ in range(x.size(1) // 4):
            h = h + torch.tanh(self.refine(h))
        if bool(h.sum() > 0):
            h = self.scale(h)
        else:
            h = -h
        return self.head(h)


class _DecoderStep(nn.Module):
    """One GPT-2 step: ``(input_ids [B, S], past [L, 2, B, H, P, D]) -> (logits, present [L, 2, B, H, P+S, D])``."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids, past):
        from transformers.cache_utils import DynamicCache

        cache = DynamicCache()
        for layer in range(_LAYERS):
            cache.update(past[layer, 0], past[layer, 1], layer)
        start = past.shape[4]
        positions = torch.arange(start, start + input_ids.shape[1]).unsqueeze(0)
        out = self.lm(input_ids=input_ids, past_key_values=cache, position_ids=positions, use_cache=True)
        layers = out.past_key_values.layers
        present = torch.stack([torch.stack([layers[k].keys, layers[k].values]) for k in range(_LAYERS)])
        return out.logits, present


def _export(name: str, module, args: tuple, input_names, output_names, dynamo: bool, dynamic_axes=None):
    with tempfile.TemporaryDirectory(prefix="d5zoo_") as tmp:
        path = os.path.join(tmp, f"{name}.onnx")
        try:
            with _quiet():
                if dynamo:
                    program = torch.onnx.export(module, args, dynamo=True, input_names=input_names,
                                                output_names=output_names, verbose=False)
                    program.save(path)
                else:
                    torch.onnx.export(module, args, path, dynamo=False, opset_version=_OPSET, input_names=input_names,
                                      output_names=output_names, dynamic_axes=dynamic_axes)
        except Exception as exc:  # the exporters raise many unrelated types
            raise ModelExportError(f"torch's {'dynamo' if dynamo else 'torchscript'} exporter failed on zoo model "
                                   f"{name!r}: {_short_message(exc)}") from exc
        return onnx.load(path, load_external_data=True)


def _scan_if(seed: int) -> GraphModel:
    module = _ScanIf().eval()
    perturb(module, seed)
    x = np.random.default_rng(seed + 1).standard_normal((6, 2, 4)).astype(np.float32)
    proto = _export("scan_if", module, (torch.from_numpy(x),), ["x"], ["logits"], dynamo=True)
    return GraphModel("scan_if", "torch (scan, cond)", "dynamo", proto, [{proto.graph.input[0].name: x}], train=True,
                      loss="cross_entropy", notes="torch._higher_order_ops.scan -> Scan, torch.cond -> If")


def _loop(seed: int) -> GraphModel:
    module = _Loop().eval()
    perturb(module, seed)
    x = np.random.default_rng(seed + 1).standard_normal((2, 8)).astype(np.float32)
    with _quiet():
        scripted = torch.jit.script(module)
    proto = _export("loop", scripted, (torch.from_numpy(x),), ["x"], ["logits"], dynamo=False)
    return GraphModel("loop", "torch (torch.jit.script)", "torchscript", proto, [{"x": x}], train=True,
                      loss="cross_entropy", notes="for i in range(x.size(1) // 4) -> Loop, if on the data -> If")


def _bert_dynamic(seed: int) -> GraphModel:
    from deep500lite.frameworks.torch.zoo_models import build_module

    with _quiet():
        module, input_name = build_module("bert")
    perturb(module, seed)
    rng = np.random.default_rng(seed + 1)
    example = rng.integers(1, VOCAB, size=(2, 8), dtype=np.int64)
    proto = _export("bert_dynamic", copy.deepcopy(module), (torch.from_numpy(example),), [input_name], ["logits"],
                    dynamo=False, dynamic_axes={input_name: {0: "batch", 1: "sequence"}, "logits": {0: "batch"}})
    feeds = [{input_name: rng.integers(1, VOCAB, size=(batch, seq), dtype=np.int64)}
             for seq in (8, 16) for batch in (1, 2, 4)]
    return GraphModel("bert_dynamic", "transformers", "torchscript", proto, feeds, train=True, loss="cross_entropy",
                      notes="dynamic batch and sequence axes: batches 1, 2, 4 x sequences 8, 16 on one executor")


def _gpt2_kv(seed: int) -> GraphModel:
    import transformers

    with _quiet():
        config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=_HEADS * _HEAD_DIM, n_layer=_LAYERS, n_head=_HEADS,
                                         n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                         bos_token_id=1, eos_token_id=2)
        config._attn_implementation = "eager"
        lm = transformers.GPT2LMHeadModel(config).eval()
    perturb(lm, seed)
    step = _DecoderStep(lm)
    rng = np.random.default_rng(seed + 1)
    ids = rng.integers(1, VOCAB, size=(2, 1), dtype=np.int64)
    past = rng.standard_normal((_LAYERS, 2, 2, _HEADS, 3, _HEAD_DIM)).astype(np.float32)
    proto = _export("gpt2_kv", step, (torch.from_numpy(ids), torch.from_numpy(past)), ["input_ids", "past"],
                    ["logits", "present"], dynamo=False,
                    dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "past": {2: "batch", 4: "past"},
                                  "logits": {0: "batch", 1: "sequence"}, "present": {2: "batch", 4: "total"}})
    prompt = rng.integers(1, VOCAB, size=(2, 4), dtype=np.int64)
    empty = np.zeros((_LAYERS, 2, 2, _HEADS, 0, _HEAD_DIM), np.float32)
    return GraphModel("gpt2_kv", "transformers", "torchscript", proto, [{"input_ids": prompt, "past": empty}],
                      train=True, loss="mse:logits", generate=16,
                      notes="one decoding step with its key/value cache as input and output; 16 tokens generated")


#: zoo name -> (builder(seed), source, exporter) of torch's graph models
GRAPH_MODELS = {"scan_if": (_scan_if, "torch (scan, cond)", "dynamo"),
                "loop": (_loop, "torch (torch.jit.script)", "torchscript"),
                "bert_dynamic": (_bert_dynamic, "transformers", "torchscript"),
                "gpt2_kv": (_gpt2_kv, "transformers", "torchscript")}


def graph_model_names() -> list[str]:
    """The graph models this module builds."""
    return list(GRAPH_MODELS)


def build_graph(name: str, seed: int = 0) -> GraphModel:
    """Build graph model ``name`` with seeded random weights (see the module docs).

    Raises:
        UserError: an unknown ``name``.
        ModelExportError: the exporter failed.
    """
    if name not in GRAPH_MODELS:
        raise UserError(f"Unknown torch zoo graph. Allowed: {format_choices(GRAPH_MODELS)}. Received: {name!r}")
    torch.manual_seed(seed)
    return GRAPH_MODELS[name][0](seed)
