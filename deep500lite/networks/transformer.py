"""A BERT-style transformer encoder with a classification head, written directly as an ONNX graph.

Registered as ``bert`` in :mod:`deep500lite.networks`. The input is int64 token ids
``[batch, seq_len]`` (``shape=(seq_len,)``), the output the logits ``[batch, classes]``. The
defaults are BERT-base (Devlin et al. 2019): vocabulary 30,522, hidden size 768, 12 layers of 12
attention heads, feed-forward size 3,072, 512 positions, 2 token types. Parameter names follow
Hugging Face's ``BertForSequenceClassification`` (``bert.`` prefix dropped):
``embeddings.word_embeddings.weight``, ``encoder.layer.0.attention.self.query.weight``,
``pooler.dense.weight``, ``classifier.weight``.

Only standard ONNX (opset 17) operators that every executor runs and differentiates are used:
Gather (embeddings), Gemm (dense layers, on the tokens flattened to ``[batch * seq_len, hidden]``),
Reshape/Transpose/MatMul/Softmax (multi-head self-attention), LayerNormalization, Erf (exact GELU,
``0.5 x (1 + erf(x / sqrt 2))``), Tanh (pooler), Slice (the ``[CLS]`` tokens) and Dropout.
There is no attention mask: every position is a real token.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from deep500lite.errors import UserError
from deep500lite.lv1.network import Network
from deep500lite.networks.zoo import _batch, _choice, _number, register_model
from deep500lite.networks.builder import OPSET, GraphBuilder

__all__ = ["BERT_BASE", "bert_encoder_parameter_count"]

BERT_BASE = dict(vocab_size=30522, hidden=768, layers=12, heads=12, intermediate=3072, max_positions=512,
                 type_vocab_size=2)
_STD = 0.02  # BERT's initializer range: weights have standard deviation 0.02
_INT64_MAX = np.iinfo(np.int64).max


def bert_encoder_parameter_count(vocab_size: int = 30522, hidden: int = 768, layers: int = 12,
                                 intermediate: int = 3072, max_positions: int = 512, type_vocab_size: int = 2) -> int:
    """Parameters of a BERT encoder (embeddings and layers, no pooler and no head), by formula."""
    embeddings = (vocab_size + max_positions + type_vocab_size) * hidden + 2 * hidden
    attention = 4 * (hidden * hidden + hidden) + 2 * hidden
    feed_forward = 2 * hidden * intermediate + intermediate + hidden + 2 * hidden
    return embeddings + layers * (attention + feed_forward)


def _normal_weight(b, name, shape):
    # builder.weight draws uniformly with variance gain / fan_in: this gain gives std 0.02.
    return b.weight(name, shape, 1, gain=_STD ** 2)


def _linear(b, x, cin, cout, prefix):
    w = _normal_weight(b, f"{prefix}.weight", (cout, cin))
    return b.op("Gemm", [x, w, b.zeros(f"{prefix}.bias", (cout,))], name=prefix, transB=1)


def _layer_norm(b, x, hidden, prefix):
    return b.op("LayerNormalization", [x, b.ones(f"{prefix}.weight", (hidden,)), b.zeros(f"{prefix}.bias", (hidden,))],
                name=prefix, axis=-1, epsilon=1e-12)


def _gelu(b, x):
    scaled = b.op("Mul", [x, b.const_node(np.asarray(1 / math.sqrt(2), np.float32), "gelu_scale")])
    one_plus = b.op("Add", [b.op("Erf", [scaled]), b.const_node(np.asarray(1.0, np.float32), "gelu_one")])
    half_x = b.op("Mul", [x, b.const_node(np.asarray(0.5, np.float32), "gelu_half")])
    return b.op("Mul", [half_x, one_plus])


def _shape(b, dims, prefix):
    return b.const_node(np.asarray(dims, np.int64), prefix)


def _self_attention(b, x, seq_len, hidden, heads, dropout, prefix):
    """Multi-head self-attention on ``x`` ``[batch * seq_len, hidden]``; returns the same shape."""
    head = hidden // heads
    split = _shape(b, [-1, seq_len, heads, head], "heads_shape")
    q, k, v = (b.op("Reshape", [_linear(b, x, hidden, hidden, f"{prefix}.self.{n}"), split])
               for n in ("query", "key", "value"))
    q = b.op("Transpose", [q], perm=[0, 2, 1, 3])   # [batch, heads, seq, head]
    k = b.op("Transpose", [k], perm=[0, 2, 3, 1])   # [batch, heads, head, seq]
    v = b.op("Transpose", [v], perm=[0, 2, 1, 3])
    scores = b.op("Mul", [b.op("MatMul", [q, k]),
                          b.const_node(np.asarray(1 / math.sqrt(head), np.float32), "attention_scale")])
    probs = b.dropout(b.op("Softmax", [scores], axis=-1), dropout)
    context = b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    context = b.op("Reshape", [context, _shape(b, [-1, hidden], "tokens_shape")])
    out = b.dropout(_linear(b, context, hidden, hidden, f"{prefix}.output.dense"), dropout)
    return _layer_norm(b, b.op("Add", [out, x]), hidden, f"{prefix}.output.LayerNorm")


def _encoder_layer(b, x, seq_len, hidden, heads, intermediate, dropout, prefix):
    x = _self_attention(b, x, seq_len, hidden, heads, dropout, f"{prefix}.attention")
    h = _gelu(b, _linear(b, x, hidden, intermediate, f"{prefix}.intermediate.dense"))
    h = b.dropout(_linear(b, h, intermediate, hidden, f"{prefix}.output.dense"), dropout)
    return _layer_norm(b, b.op("Add", [h, x]), hidden, f"{prefix}.output.LayerNorm")


def _build(b, batch, seq_len, output, doc):
    """:meth:`GraphBuilder.build` with an int64 token-id input instead of a float one."""
    if b.dry:
        return b.build({}, output)
    b.op("Identity", [output], ["output"], name="output_identity")
    graph = helper.make_graph(b.nodes, b.name, [helper.make_tensor_value_info("input", TensorProto.INT64,
                                                                              [batch, seq_len])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)],
                              initializer=b.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="deep500lite",
                              doc_string=doc, ir_version=8)
    model = onnx.shape_inference.infer_shapes(model)
    onnx.checker.check_model(model)
    return Network(model, source=f"deep500lite.networks:{b.name}")


@register_model("bert", default_shape=(128,))
def _bert(batch_size, classes, shape, seed, vocab_size=30522, hidden=768, layers=12, heads=12, intermediate=None,
          max_positions=512, type_vocab_size=2, dropout=0.1, pooler=True):
    """BERT encoder with a sequence-classification head, on int64 token ids ``[batch, seq_len]``.

    Embeddings (word + position + token type 0, LayerNorm, dropout), ``layers`` post-LayerNorm
    encoder layers (multi-head self-attention with ``heads`` heads, feed-forward ``intermediate``
    (default ``4 * hidden``) with exact GELU, residual connections), then the ``[CLS]`` (first)
    token through the pooler (dense + tanh, unless ``pooler=False``), dropout and a dense layer
    to ``classes``. The defaults are BERT-base (110M parameters with the pooler and a 2-class
    head). ``shape`` is ``(seq_len,)`` with ``seq_len <= max_positions``; token ids must be in
    ``[0, vocab_size)``. Weights are drawn with standard deviation 0.02 (uniformly), LayerNorm
    scales 1 and biases 0.
    """
    if len(shape) != 1:
        raise UserError(f"bert takes samples of token ids shaped (seq_len,). Received: shape={shape}")
    seq_len = shape[0]
    for option, value in (("vocab_size", vocab_size), ("hidden", hidden), ("layers", layers), ("heads", heads),
                          ("max_positions", max_positions), ("type_vocab_size", type_vocab_size)):
        _number("bert", option, value, 1, integer=True)
    intermediate = 4 * hidden if intermediate is None else intermediate
    _number("bert", "intermediate", intermediate, 1, integer=True)
    _number("bert", "dropout", dropout, 0, 1)
    _choice("bert", "pooler", pooler, (True, False))
    if hidden % heads:
        raise UserError(f"bert hidden must be a multiple of heads. Received: hidden={hidden}, heads={heads}")
    if seq_len > max_positions:
        raise UserError(f"bert sequence length (shape[0]) must be at most max_positions={max_positions}. "
                        f"Received: shape={shape}")
    dropout = float(dropout)
    b = GraphBuilder("bert", seed)
    word = _normal_weight(b, "embeddings.word_embeddings.weight", (vocab_size, hidden))
    position = _normal_weight(b, "embeddings.position_embeddings.weight", (max_positions, hidden))
    token_type = _normal_weight(b, "embeddings.token_type_embeddings.weight", (type_vocab_size, hidden))
    x = b.op("Gather", [word, "input"], axis=0)                                             # [batch, seq, hidden]
    x = b.op("Add", [x, b.op("Gather", [position, _shape(b, np.arange(seq_len), "positions")], axis=0)])
    x = b.op("Add", [x, b.op("Gather", [token_type, _shape(b, [0], "token_types")], axis=0)])
    x = b.op("Reshape", [x, _shape(b, [-1, hidden], "tokens_shape")])                      # [batch*seq, hidden]
    x = b.dropout(_layer_norm(b, x, hidden, "embeddings.LayerNorm"), dropout)
    for i in range(layers):
        x = _encoder_layer(b, x, seq_len, hidden, heads, intermediate, dropout, f"encoder.layer.{i}")
    # Every seq_len-th row of [batch*seq, hidden] is a sequence's first ([CLS]) token.
    x = b.op("Slice", [x, _shape(b, [0], "cls_start"), _shape(b, [_INT64_MAX], "cls_end"),
                       _shape(b, [0], "cls_axis"), _shape(b, [seq_len], "cls_step")])
    if pooler:
        x = b.op("Tanh", [_linear(b, x, hidden, hidden, "pooler.dense")])
    x = _linear(b, b.dropout(x, dropout), hidden, classes, "classifier")
    return _build(b, _batch(batch_size), seq_len, x, doc=f"BERT ({layers} layers, hidden {hidden}, {heads} heads)")
