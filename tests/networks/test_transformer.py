"""The zoo's ``bert``: BERT-base's parameter count (by formula and against Hugging Face's BertModel),
the same outputs as Hugging Face's BertForSequenceClassification with the same weights, forward and
backward on every executor against the reference, and argument errors."""

from __future__ import annotations

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets, networks
from deep500lite.errors import UserError

from support import framework_params

SMALL = dict(vocab_size=40, hidden=16, layers=2, heads=4, intermediate=24, max_positions=12, dropout=0.0)


def _bert_base_encoder_formula(vocab=30522, hidden=768, layers=12, ffn=3072, positions=512, types=2):
    # Written out independently of the model: embeddings (3 tables + LayerNorm), then per layer
    # Q, K, V, attention output (4 dense with bias), 2 LayerNorms, and the two feed-forward dense layers.
    embeddings = vocab * hidden + positions * hidden + types * hidden + 2 * hidden
    per_layer = 4 * (hidden * hidden + hidden) + (hidden * ffn + ffn) + (ffn * hidden + hidden) + 2 * 2 * hidden
    return embeddings + layers * per_layer


def test_bert_base_parameter_count():
    encoder = _bert_base_encoder_formula()
    assert encoder == 108_891_648
    head = 768 * 2 + 2
    assert networks.model_parameter_count("bert", classes=2, shape=(128,), pooler=False) == encoder + head
    assert networks.model_parameter_count("bert", classes=2, shape=(128,)) == encoder + 768 * 768 + 768 + head


def test_bert_base_count_equals_hugging_face_bert_model():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    config = transformers.BertConfig()
    with torch.device("meta"):  # shapes only, no weights allocated
        with_pooler = sum(p.numel() for p in transformers.BertModel(config).parameters())
        without = sum(p.numel() for p in transformers.BertModel(config, add_pooling_layer=False).parameters())
    head = 768 * 3 + 3
    assert without == _bert_base_encoder_formula()
    assert networks.model_parameter_count("bert", classes=3, shape=(64,), pooler=False) == without + head
    assert networks.model_parameter_count("bert", classes=3, shape=(64,)) == with_pooler + head


def test_outputs_match_hugging_face_with_the_same_weights():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    config = transformers.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=24, max_position_embeddings=12, num_labels=3,
                                     hidden_act="gelu", attn_implementation="eager")
    hf = transformers.BertForSequenceClassification(config).eval()
    net, inp, out = networks.create_model("bert", 2, classes=3, shape=(7,), seed=3, **SMALL)
    state = {k.removeprefix("bert."): v for k, v in hf.state_dict().items()}
    values = net.host_values()
    assert set(net.parameters) == set(values) & set(state)  # every parameter has a Hugging Face twin
    assert {k for k in state if k not in net.parameters} <= {"embeddings.position_ids", "embeddings.token_type_ids"}
    for name in net.parameters:
        net.feed_tensor(name, state[name].detach().numpy())
    ids = np.random.default_rng(0).integers(0, 40, size=(2, 7)).astype(np.int64)
    mine = d5.executor(net, "reference").inference({inp: ids})[out]
    with torch.no_grad():
        theirs = hf(input_ids=torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5)


def _step(framework, ids, labels):
    net, inp, out = networks.create_model("bert", len(ids), classes=3, shape=(ids.shape[1],), seed=1, **SMALL)
    net.add_operation(datasets.dataset_loss("synthetic_tokens")([out, "label"], "loss"))
    ex = d5.executor(net, framework)
    outputs = ex.inference_and_backprop({inp: ids, "label": labels}, "loss")
    return outputs[out], {p: ex.network.fetch_tensor(g) for p, g in net.gradient("loss")}


@pytest.fixture(scope="module")
def reference_step():
    rng = np.random.default_rng(0)
    ids, labels = rng.integers(0, 40, size=(3, 6)).astype(np.int64), np.array([0, 2, 1], np.int64)
    return ids, labels, _step("reference", ids, labels)


@pytest.mark.parametrize("framework", framework_params(["torch", "tensorflow", "onnxruntime"]))
def test_forward_and_backward_agree_with_the_reference(framework, reference_step):
    ids, labels, (ref_out, ref_grads) = reference_step
    out, grads = _step(framework, ids, labels)
    np.testing.assert_allclose(out, ref_out, rtol=1e-4, atol=1e-5)
    assert set(grads) == set(ref_grads) and len(grads) == 3 + 2 + 2 * 16 + 2 + 2  # every parameter trained
    scale = max(float(np.abs(g).max()) for g in ref_grads.values())
    assert scale > 0
    for name, g in ref_grads.items():
        np.testing.assert_allclose(grads[name], g, rtol=0, atol=1e-4 * scale, err_msg=name)


def test_same_seed_same_weights_and_bert_initializer_range():
    a, _, _ = networks.create_model("bert", 1, shape=(8,), seed=5, **SMALL)
    b, _, _ = networks.create_model("bert", 1, shape=(8,), seed=5, **SMALL)
    c, _, _ = networks.create_model("bert", 1, shape=(8,), seed=6, **SMALL)
    name = "encoder.layer.1.attention.self.query.weight"
    np.testing.assert_array_equal(a.host_values()[name], b.host_values()[name])
    assert not np.array_equal(a.host_values()[name], c.host_values()[name])
    big, _, _ = networks.create_model("bert", 1, shape=(8,), vocab_size=2000, hidden=64, heads=4, layers=1)
    assert abs(float(big.host_values()["embeddings.word_embeddings.weight"].std()) - 0.02) < 0.001


def test_input_is_int64_token_ids():
    net, inp, out = networks.create_model("bert", None, classes=2, shape=(6,), **SMALL)
    assert net.inputs == ["input"] and (inp, out) == ("input", "output")
    assert net.graph.input[0].type.tensor_type.elem_type == 7  # TensorProto.INT64


@pytest.mark.parametrize("kwargs,match", [
    (dict(shape=(3, 8, 8)), r"bert takes samples of token ids shaped \(seq_len,\). Received: shape=\(3, 8, 8\)"),
    (dict(shape=(8,), hidden=10, heads=4), r"hidden must be a multiple of heads. Received: hidden=10, heads=4"),
    (dict(shape=(600,)), r"at most max_positions=512. Received: shape=\(600,\)"),
    (dict(shape=(8,), layers=0), r"bert option 'layers' must be an integer from 1 to 2,147,483,647. Received: 0"),
    (dict(shape=(8,), dropout=1), r"bert option 'dropout' must be a dropout probability in \[0, 1\). Received: 1"),
    (dict(shape=(8,), pooler="yes"), r"bert option 'pooler' must be True or False. Received: str 'yes'"),
    (dict(shape=(8,), depth=3), r"bert has no option 'depth'"),
])
def test_bad_arguments_are_user_errors(kwargs, match):
    with pytest.raises(UserError, match=match):
        networks.model_parameter_count("bert", **kwargs)
