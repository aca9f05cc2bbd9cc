"""torch's side of the real-model zoo: tiny real architectures exported by torch's two ONNX exporters.

:func:`build` makes one model of :mod:`deep500lite.frameworks.torch.zoo_models` (transformers
vision and text models from config objects, torch.nn recurrent and Transformer layers) with seeded
random weights, exports it with the TorchScript exporter (opset 17) or the dynamo exporter (its
default opset), and returns a :class:`~deep500lite.bench.zoo_model.ZooModel` holding the graph,
its feeds and torch's own answers: float64 and float32 logits in inference mode, and the gradients
of the mean softmax cross-entropy in the semantics deep500lite trains with.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import os
import tempfile
import warnings

import numpy as np
import onnx
import torch
from torch import nn

from deep500lite.bench.contract import ZooModel, map_parameters
from deep500lite.errors import FrameworkNotAvailableError, ModelExportError, UserError, format_choices
from deep500lite.frameworks.torch import zoo_models
from deep500lite.utils import is_package_available

__all__ = ["EXPORTERS", "model_names", "model_source", "build", "graph_has_batchnorm"]

#: the torch ONNX exporters a zoo model can be exported with
EXPORTERS = ("torchscript", "dynamo")
_TORCHSCRIPT_OPSET = 17


def model_names() -> list[str]:
    """Every model this module can build, in a stable order (vision, text, then torch.nn)."""
    return list(zoo_models.SPECS)


def _spec(name):
    if not isinstance(name, str) or name not in zoo_models.SPECS:
        raise UserError(f"Unknown torch zoo model. Allowed: {format_choices(model_names())}. Received: {name!r}")
    return zoo_models.SPECS[name]


def model_source(name: str) -> str:
    """The library the model ``name`` comes from: ``"transformers"`` or ``"torch.nn"``.

    Raises:
        UserError: ``name`` is not one of :func:`model_names`.
    """
    return _spec(name).source


def graph_has_batchnorm(proto: onnx.ModelProto) -> bool:
    """Whether the graph (or a local function it calls) has a BatchNormalization node."""
    graphs = [proto.graph]
    nodes = []
    while graphs:
        g = graphs.pop()
        for node in g.node:
            nodes.append(node)
            graphs.extend(attr.g for attr in node.attribute if attr.HasField("g"))
    nodes.extend(n for f in proto.functions for n in f.node)
    return any(n.op_type == "BatchNormalization" and n.domain in ("", "ai.onnx") for n in nodes)


def _short_message(exc: BaseException) -> str:
    """The exporter's own reason in one line: the innermost cause's first non-empty line."""
    root = exc
    while root.__cause__ is not None and root.__cause__ is not root:
        root = root.__cause__
    lines = [ln.strip() for ln in str(root).splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    text = f"{type(root).__name__}: {text}" if text else type(root).__name__
    return text if len(text) <= 300 else text[:297] + "..."


@contextlib.contextmanager
def _quiet():
    """Silence the exporters' warnings, progress prints and log records."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch._dynamo", "torch.export", "onnxscript",
                                              "torch._export", "torch.fx.experimental.symbolic_shapes")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _export(name: str, module: nn.Module, x: torch.Tensor, input_name: str, exporter: str,
            fold_constants: bool) -> onnx.ModelProto:
    with tempfile.TemporaryDirectory(prefix="d5zoo_") as tmp:
        path = os.path.join(tmp, f"{name}.onnx")
        # not under torch.no_grad(): without autograd nn.TransformerEncoder takes its fused fast
        # path (aten::_transformer_encoder_layer_fwd), which the TorchScript exporter cannot export
        try:
            with _quiet():
                if exporter == "torchscript":
                    # PRESERVE skips the eval-mode peephole pass that folds BatchNorm into Conv
                    extra = {} if fold_constants else {"training": torch.onnx.TrainingMode.PRESERVE,
                                                       "do_constant_folding": False}
                    torch.onnx.export(module, (x,), path, dynamo=False, opset_version=_TORCHSCRIPT_OPSET,
                                      input_names=[input_name], output_names=["logits"], **extra)
                else:
                    # the dynamo exporter's optimizer is what folds BatchNorm into Conv
                    extra = {} if fold_constants else {"optimize": False}
                    torch.onnx.export(module, (x,), path, dynamo=True, input_names=[input_name],
                                      output_names=["logits"], verbose=False, **extra)
        except Exception as exc:  # the exporters raise many unrelated types
            raise ModelExportError(f"torch's {exporter} exporter failed on zoo model {name!r}: "
                                   f"{_short_message(exc)}") from exc
        # load_external_data: a larger model's weights may sit beside the graph file
        proto = onnx.load(path, load_external_data=True)
    if exporter == "dynamo" and not fold_constants:
        # Unoptimized dynamo graphs keep sequences (SplitToSequence/SequenceAt,
        # SequenceConstruct) and shape arithmetic that onnxscript's optimizer turns into plain
        # operators; input_size_limit=0 keeps its constant folding from folding any parameter
        # (its rewriter may still fuse a BatchNorm into a Conv: that BatchNorm then counts as
        # folded, in eval mode, for the gradients).
        import onnxscript.optimizer

        proto = onnxscript.optimizer.optimize(proto, input_size_limit=0)
    return proto


def _answers(module: nn.Module, x: torch.Tensor, labels: torch.Tensor, dtype, batch_stats: set[str]):
    """Eval-mode logits, and loss gradients with the BatchNorms in ``batch_stats`` in train mode.

    Works on a fresh copy in ``dtype``, so ``module``'s running statistics stay untouched.
    """
    model = copy.deepcopy(module).to(dtype).eval()
    xin = x.to(dtype) if x.is_floating_point() else x
    with torch.no_grad():
        logits = model(xin).detach().numpy().astype(np.float64 if dtype == torch.float64 else np.float32)
    for sub in model.modules():
        # LeViT caches its gathered attention biases in eval mode; a cache filled under no_grad
        # would cut their gradient
        if isinstance(getattr(sub, "attention_bias_cache", None), dict):
            sub.attention_bias_cache = {}
    for mname, sub in model.named_modules():
        if mname in batch_stats:
            sub.train()
    model.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(xin), labels)
    loss.backward()
    grads = {pname: (p.grad.detach().numpy().astype(np.float64) if p.grad is not None
                     else np.zeros(tuple(p.shape), np.float64))
             for pname, p in model.named_parameters()}
    return logits, grads


def _batchnorm_modes(module: nn.Module, proto: onnx.ModelProto, parameters) -> tuple[set[str], set[str]]:
    """Split the BatchNorm modules into those kept as graph nodes and those folded into constants.

    deep500lite trains every BatchNormalization node with batch statistics; a BatchNorm the
    exporter folded into a Conv (its weight is in no initializer) is a constant in eval mode.
    """
    kept, folded = set(), set()
    has_node = graph_has_batchnorm(proto)
    for mname, sub in module.named_modules():
        if isinstance(sub, nn.modules.batchnorm._BatchNorm):
            if sub.weight is not None:
                in_graph = f"{mname}.weight" in parameters
            else:
                in_graph = has_node
            (kept if in_graph else folded).add(mname)
    return kept, folded


def _feed(spec, batch: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 104729)
    if spec.kind == "image":
        return rng.standard_normal((batch, 3, spec.image, spec.image)).astype(np.float32)
    if spec.kind == "text":
        return rng.integers(1, zoo_models.VOCAB, size=(batch, zoo_models.SEQ_LEN), dtype=np.int64)
    return rng.standard_normal((batch, zoo_models.SEQ_STEPS, zoo_models.SEQ_FEATURES)).astype(np.float32)


def build(name: str, exporter: str, batch: int = 2, seed: int = 0, fold_constants: bool = True) -> ZooModel:
    """Build zoo model ``name`` with seeded random weights, export it and compute torch's answers.

    Every float parameter gets seeded noise (so each value is unique and
    :func:`~deep500lite.bench.zoo_model.map_parameters` finds it), BatchNorm running statistics are
    random, and no dropout is active. ``logits64`` / ``logits32`` come from eval mode.
    ``gradients64`` / ``gradients32`` are d(mean cross-entropy)/d(parameter) in the semantics
    deep500lite trains the graph with: each BatchNorm that is still a BatchNormalization node in
    the graph uses batch statistics (train mode); one the exporter folded into a convolution is a
    constant affine map (eval mode), as are all other modules (no dropout is active anyway).

    Both exporters fold constants by default: eval-mode BatchNorm into the preceding
    convolution, and (dynamo, with the fixed shapes used here) lookups of position embeddings and
    relative-position tables. The folded parameters are in no initializer (``unmapped``), so their
    gradients cannot be compared. ``fold_constants=False`` stops that: TorchScript exports with
    ``training=TrainingMode.PRESERVE`` (the model is in eval mode, so BatchNormalization nodes keep
    their running statistics) and ``do_constant_folding=False``, dynamo with ``optimize=False``.

    Args:
        name: one of :func:`model_names`.
        exporter: one of :data:`EXPORTERS`.
        batch: samples in the feeds.
        seed: seeds the weights (``torch.manual_seed``), the feeds and the labels.
        fold_constants: let the exporter fold constants (its default); ``False`` keeps every
            parameter an initializer and BatchNorm a BatchNormalization node.

    Returns:
        The :class:`~deep500lite.bench.zoo_model.ZooModel`; its graph output is ``"logits"``.

    Raises:
        UserError: unknown ``name`` or ``exporter``, or ``batch`` not a positive integer.
        FrameworkNotAvailableError: a transformers model while transformers is not installed.
        ModelExportError: the exporter failed (the message holds its one-line reason).
    """
    spec = _spec(name)
    if exporter not in EXPORTERS:
        raise UserError(f"Unknown torch exporter. Allowed: {format_choices(EXPORTERS)}. Received: {exporter!r}")
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise UserError(f"batch must be a positive integer. Received: {batch!r}")
    if spec.source == "transformers" and not is_package_available("transformers"):
        raise FrameworkNotAvailableError(f"The torch zoo model {name!r} comes from transformers, which is not "
                                         f"installed: pip install transformers")
    torch.manual_seed(seed)
    with _quiet():
        module, input_name = zoo_models.build_module(name)
    zoo_models.perturb(module, seed)
    module.eval()
    feed = _feed(spec, int(batch), seed)
    labels = np.random.default_rng(seed + 15485863).integers(0, zoo_models.CLASSES, size=int(batch),
                                                               dtype=np.int64)
    x = torch.from_numpy(feed)
    proto = _export(name, copy.deepcopy(module), x, input_name, exporter, bool(fold_constants))
    params = {pname: p.detach().numpy() for pname, p in module.named_parameters()}
    parameters, unmapped = map_parameters(params, proto)

    kept, folded = _batchnorm_modes(module, proto, parameters)
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
    notes = [f"opset {opset}"]
    if not fold_constants:
        notes.append("exported without constant folding")
    if folded:
        notes.append(f"the exporter folded {len(folded)} of {len(kept) + len(folded)} BatchNorm layers into "
                     f"constants (gradients with those in eval mode)")
    if kept:
        notes.append(f"gradients with {len(kept)} BatchNorm layers in train mode (batch statistics)")
    torch_labels = torch.from_numpy(labels)
    logits64, grads64 = _answers(module, x, torch_labels, torch.float64, kept)
    logits32, grads32 = _answers(module, x, torch_labels, torch.float32, kept)
    out_name = proto.graph.output[0].name
    graph_input = [i.name for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}][0]
    return ZooModel(name=name, source=spec.source, exporter=exporter, proto=proto, feeds={graph_input: feed},
                    output=out_name, labels=labels, logits64=logits64, logits32=logits32,
                    parameters=parameters, gradients64=grads64, gradients32=grads32, unmapped=unmapped,
                    notes="; ".join(notes))
