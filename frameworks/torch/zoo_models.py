"""The architectures of torch's side of the real-model zoo, at tiny sizes with random weights.

Each entry builds a ``torch.nn.Module`` whose ``forward`` takes one tensor (an NCHW float32 image
batch, int64 token ids or a float32 ``[batch, seq, features]`` sequence) and returns the logits
``[batch, CLASSES]``. ``transformers`` models come from config objects (nothing is downloaded),
with every dropout probability set to 0 and eager attention; ``torch.nn`` models wrap one
recurrent or Transformer layer. :mod:`deep500lite.frameworks.torch.zoo` exports and checks them.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

__all__ = ["CLASSES", "VOCAB", "SEQ_LEN", "SEQ_STEPS", "SEQ_FEATURES", "ModelSpec", "SPECS", "LogitsOnly",
           "T5EncoderClassifier", "SequenceClassifier", "build_module", "perturb", "active_dropout"]

#: classes of every zoo model's head
CLASSES = 5
#: vocabulary size of the text models
VOCAB = 100
#: tokens per text sample
SEQ_LEN = 8
#: time steps and features of a torch.nn sequence model's sample
SEQ_STEPS, SEQ_FEATURES = 6, 8

_NO_DROPOUT_BERT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
_TINY_VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                 image_size=32, patch_size=8, **_NO_DROPOUT_BERT)
_TINY_BERT = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=64, max_position_embeddings=32, classifier_dropout=0.0, **_NO_DROPOUT_BERT)
_TINY_DECODER = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32,
                     attention_dropout=0.0, pad_token_id=0)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """How to build one zoo model.

    Attributes:
        source: ``"transformers"`` or ``"torch.nn"``.
        kind: ``"image"``, ``"text"`` or ``"sequence"`` (what the single input holds).
        config: transformers config class name (transformers models).
        model: transformers model class name, or the torch.nn layer's name.
        kwargs: the config's (or the layer's) arguments.
        image: image side in pixels (image models).
    """

    source: str
    kind: str
    config: str = ""
    model: str = ""
    kwargs: dict = dataclasses.field(default_factory=dict)
    image: int = 32


def _vision(config: str, model: str, image: int = 32, **kwargs) -> ModelSpec:
    return ModelSpec("transformers", "image", config, model, kwargs, image)


def _text(config: str, model: str, **kwargs) -> ModelSpec:
    return ModelSpec("transformers", "text", config, model, kwargs)


def _seq(layer: str) -> ModelSpec:
    return ModelSpec("torch.nn", "sequence", model=layer)


SPECS: dict[str, ModelSpec] = {
    # --- transformers vision ---
    "resnet": _vision("ResNetConfig", "ResNetForImageClassification", embedding_size=16,
                      hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic"),
    "resnet_bottleneck": _vision("ResNetConfig", "ResNetForImageClassification", embedding_size=16,
                                 hidden_sizes=[32, 64], depths=[1, 1], layer_type="bottleneck"),
    "mobilenet_v1": _vision("MobileNetV1Config", "MobileNetV1ForImageClassification", image_size=32,
                            depth_multiplier=0.25, min_depth=8, classifier_dropout_prob=0.0),
    "mobilenet_v2": _vision("MobileNetV2Config", "MobileNetV2ForImageClassification", image_size=32,
                            depth_multiplier=0.25, min_depth=8, classifier_dropout_prob=0.0),
    "efficientnet": _vision("EfficientNetConfig", "EfficientNetForImageClassification", image_size=32,
                            width_coefficient=0.25, depth_coefficient=0.1, hidden_dim=320,
                            dropout_rate=0.0, drop_connect_rate=0.0),
    "convnext": _vision("ConvNextConfig", "ConvNextForImageClassification", patch_size=4, num_stages=2,
                        hidden_sizes=[16, 32], depths=[1, 1], drop_path_rate=0.0),
    "convnextv2": _vision("ConvNextV2Config", "ConvNextV2ForImageClassification", patch_size=4, num_stages=2,
                          hidden_sizes=[16, 32], depths=[1, 1], drop_path_rate=0.0),
    "regnet": _vision("RegNetConfig", "RegNetForImageClassification", embedding_size=16,
                      hidden_sizes=[16, 32], depths=[1, 1], groups_width=8, layer_type="y"),
    "vit": _vision("ViTConfig", "ViTForImageClassification", **_TINY_VIT),
    "deit": _vision("DeiTConfig", "DeiTForImageClassification", **_TINY_VIT),
    "beit": _vision("BeitConfig", "BeitForImageClassification", drop_path_rate=0.0,
                    use_relative_position_bias=True, **_TINY_VIT),
    "data2vec_vision": _vision("Data2VecVisionConfig", "Data2VecVisionForImageClassification",
                               drop_path_rate=0.0, **_TINY_VIT),
    "dinov2": _vision("Dinov2Config", "Dinov2ForImageClassification", drop_path_rate=0.0, **_TINY_VIT),
    "swin": _vision("SwinConfig", "SwinForImageClassification", patch_size=4, embed_dim=16, depths=[1, 1],
                    num_heads=[2, 2], window_size=4, drop_path_rate=0.0, **_NO_DROPOUT_BERT),
    "swinv2": _vision("Swinv2Config", "Swinv2ForImageClassification", patch_size=4, embed_dim=16,
                      depths=[1, 1], num_heads=[2, 2], window_size=4, drop_path_rate=0.0, **_NO_DROPOUT_BERT),
    "mobilevit": _vision("MobileViTConfig", "MobileViTForImageClassification", image_size=32, patch_size=2,
                         hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 48],
                         num_attention_heads=2, expand_ratio=2.0, hidden_dropout_prob=0.0,
                         attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0),
    "poolformer": _vision("PoolFormerConfig", "PoolFormerForImageClassification", num_encoder_blocks=2,
                          depths=[1, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2],
                          padding=[2, 1], pool_size=3, drop_path_rate=0.0, hidden_dropout_prob=0.0),
    "levit": _vision("LevitConfig", "LevitForImageClassification", image=64, image_size=64,
                     hidden_sizes=[32, 48], num_attention_heads=[2, 2], depths=[1, 1], key_dim=[8, 8],
                     mlp_ratio=[2, 2], attention_ratio=[2, 2], drop_path_rate=0,
                     down_ops=[["Subsample", 8, 32 // 8, 4, 2, 2]]),
    "cvt": _vision("CvtConfig", "CvtForImageClassification", embed_dim=[16, 32], num_heads=[1, 2],
                   depth=[1, 2], patch_sizes=[7, 3], patch_stride=[4, 2], patch_padding=[2, 1],
                   mlp_ratio=[2.0, 2.0], attention_drop_rate=[0.0, 0.0], drop_rate=[0.0, 0.0],
                   drop_path_rate=[0.0, 0.0], qkv_bias=[True, True], cls_token=[False, True],
                   qkv_projection_method=["dw_bn", "dw_bn"], kernel_qkv=[3, 3], padding_kv=[1, 1],
                   stride_kv=[2, 2], padding_q=[1, 1], stride_q=[1, 1]),
    "bit": _vision("BitConfig", "BitForImageClassification", embedding_size=16, hidden_sizes=[16, 32],
                   depths=[1, 1], layer_type="preactivation", num_groups=4, drop_path_rate=0.0),
    "segformer": _vision("SegformerConfig", "SegformerForImageClassification", num_encoder_blocks=2,
                         depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3],
                         strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                         decoder_hidden_size=32, drop_path_rate=0.0, **_NO_DROPOUT_BERT,
                         classifier_dropout_prob=0.0),
    "focalnet": _vision("FocalNetConfig", "FocalNetForImageClassification", patch_size=4, embed_dim=16,
                        depths=[1, 1], focal_levels=[2, 2], focal_windows=[3, 3], drop_path_rate=0.0,
                        hidden_dropout_prob=0.0),
    "pvt_v2": _vision("PvtV2Config", "PvtV2ForImageClassification", num_encoder_blocks=2, depths=[1, 1],
                      sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2],
                      num_attention_heads=[1, 2], mlp_ratios=[2, 2], drop_path_rate=0.0, **_NO_DROPOUT_BERT),
    # --- transformers text ---
    "bert": _text("BertConfig", "BertForSequenceClassification", **_TINY_BERT),
    "roberta": _text("RobertaConfig", "RobertaForSequenceClassification", pad_token_id=0,
                     **{**_TINY_BERT, "max_position_embeddings": 40}),
    "electra": _text("ElectraConfig", "ElectraForSequenceClassification", embedding_size=16, **_TINY_BERT),
    "albert": _text("AlbertConfig", "AlbertForSequenceClassification", embedding_size=16,
                    classifier_dropout_prob=0.0,
                    **{k: v for k, v in _TINY_BERT.items() if k != "classifier_dropout"}),
    "distilbert": _text("DistilBertConfig", "DistilBertForSequenceClassification", vocab_size=VOCAB, dim=32,
                        n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=32, dropout=0.0,
                        attention_dropout=0.0, seq_classif_dropout=0.0),
    "deberta_v2": _text("DebertaV2Config", "DebertaV2ForSequenceClassification", pooler_dropout=0.0,
                        pooler_hidden_size=32, relative_attention=True, position_buckets=8,
                        pos_att_type=["c2p", "p2c"],
                        **{k: v for k, v in _TINY_BERT.items() if k != "classifier_dropout"}),
    "gpt2": _text("GPT2Config", "GPT2ForSequenceClassification", vocab_size=VOCAB, n_embd=32, n_layer=2,
                  n_head=2, n_positions=32, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                  summary_first_dropout=0.0, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "t5_encoder": _text("T5Config", "T5EncoderModel", vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64,
                        num_layers=2, num_heads=2, dropout_rate=0.0, relative_attention_num_buckets=8),
    "llama": _text("LlamaConfig", "LlamaForSequenceClassification", **_TINY_DECODER),
    "mistral": _text("MistralConfig", "MistralForSequenceClassification", **_TINY_DECODER),
    "qwen2": _text("Qwen2Config", "Qwen2ForSequenceClassification", **_TINY_DECODER),
    "opt": _text("OPTConfig", "OPTForSequenceClassification", vocab_size=VOCAB, hidden_size=32,
                 num_hidden_layers=2, ffn_dim=64, num_attention_heads=2, word_embed_proj_dim=32,
                 max_position_embeddings=32, dropout=0.0, attention_dropout=0.0, layerdrop=0.0,
                 pad_token_id=0),
    # --- torch.nn ---
    "lstm": _seq("LSTM"),
    "gru": _seq("GRU"),
    "rnn": _seq("RNN"),
    "transformer_encoder": _seq("TransformerEncoder"),
    # --- torch.nn convolutional networks from their papers (frameworks/torch/zoo_convnets.py) ---
    "repvgg": ModelSpec("torch.nn", "image", model="repvgg"),
    "ghostnet": ModelSpec("torch.nn", "image", model="ghostnet"),
}


class LogitsOnly(nn.Module):
    """A transformers model called with one named input, returning only its ``logits``."""

    def __init__(self, model: nn.Module, input_name: str):
        super().__init__()
        self.model = model
        self.input_name = input_name

    def forward(self, x):
        return self.model(**{self.input_name: x}).logits


class T5EncoderClassifier(nn.Module):
    """A T5 encoder, the mean over tokens of its last hidden state, then a Linear to the classes."""

    def __init__(self, encoder: nn.Module, width: int):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(width, CLASSES)

    def forward(self, input_ids):
        hidden = self.encoder(input_ids=input_ids).last_hidden_state
        return self.head(hidden.mean(dim=1))


class SequenceClassifier(nn.Module):
    """One torch.nn sequence layer (batch first) and a Linear on its last time step."""

    def __init__(self, layer: str, hidden: int = 16):
        super().__init__()
        if layer == "TransformerEncoder":
            block = nn.TransformerEncoderLayer(SEQ_FEATURES, nhead=2, dim_feedforward=32, dropout=0.0,
                                               batch_first=True)
            # enable_nested_tensor only matters for padded batches; off, the fast path is not taken
            self.layer = nn.TransformerEncoder(block, num_layers=2, enable_nested_tensor=False)
            width = SEQ_FEATURES
        else:
            self.layer = getattr(nn, layer)(SEQ_FEATURES, hidden, num_layers=1, batch_first=True, dropout=0.0)
            width = hidden
        self.head = nn.Linear(width, CLASSES)

    def forward(self, x):
        out = self.layer(x)
        if isinstance(out, tuple):
            out = out[0]
        return self.head(out[:, -1])


def build_module(name: str) -> tuple[nn.Module, str]:
    """Build the zoo model ``name`` with the current torch seed's random weights.

    Args:
        name: a key of :data:`SPECS`.

    Returns:
        ``(module, input_name)``: the module in eval mode, its forward taking one tensor, and the
        name its graph input gets.
    """
    spec = SPECS[name]
    if spec.source == "torch.nn" and spec.kind == "image":
        from deep500lite.frameworks.torch.zoo_convnets import ARCHITECTURES

        return ARCHITECTURES[spec.model](CLASSES).eval(), "x"
    if spec.source == "torch.nn":
        return SequenceClassifier(spec.model).eval(), "x"
    import transformers

    config_cls = getattr(transformers, spec.config)
    kwargs = dict(spec.kwargs)
    if spec.model != "T5EncoderModel":
        kwargs["num_labels"] = CLASSES
    if spec.kind == "image":
        kwargs.setdefault("num_channels", 3)
    config = config_cls(**kwargs)
    # eager attention: plain MatMul/Softmax graphs on every exporter, identical in float64
    config._attn_implementation = "eager"
    model = getattr(transformers, spec.model)(config)
    if spec.model == "T5EncoderModel":
        return T5EncoderClassifier(model, config.d_model).eval(), "input_ids"
    input_name = "pixel_values" if spec.kind == "image" else "input_ids"
    return LogitsOnly(model, input_name).eval(), input_name


def active_dropout(module: nn.Module) -> list[str]:
    """The submodules that would drop anything in training mode (none in the zoo)."""
    active = []
    for mname, sub in module.named_modules():
        p = getattr(sub, "p", None)
        if isinstance(sub, nn.modules.dropout._DropoutNd) and p:
            active.append(mname)
        drop_prob = getattr(sub, "drop_prob", None)
        if isinstance(drop_prob, float) and drop_prob > 0:
            active.append(mname)
    return active


def perturb(module: nn.Module, seed: int) -> None:
    """Add seeded noise to every float parameter and give BatchNorm non-trivial running statistics.

    After init LayerNorm weights are all ones and biases zeros; the noise makes every value unique,
    so :func:`~deep500lite.bench.zoo_model.map_parameters` can find each parameter by its values.
    """
    gen = torch.Generator().manual_seed(seed + 7919)
    with torch.no_grad():
        for _, p in module.named_parameters():
            if p.is_floating_point():
                scale = max(float(p.abs().mean()), 1e-2) * 0.1
                p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * scale)
        for sub in module.modules():
            if isinstance(sub, nn.modules.batchnorm._BatchNorm) and sub.running_mean is not None:
                sub.running_mean.copy_(torch.randn(sub.running_mean.shape, generator=gen) * 0.1)
                sub.running_var.copy_(0.5 + torch.rand(sub.running_var.shape, generator=gen))
