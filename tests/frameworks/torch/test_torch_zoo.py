"""torch's side of the real-model zoo: errors, exports against onnxruntime, gradients against finite differences."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from deep500lite.errors import FrameworkNotAvailableError, ModelExportError, UserError

torch = pytest.importorskip("torch")
zoo = pytest.importorskip("deep500lite.frameworks.torch.zoo")
zoo_models = pytest.importorskip("deep500lite.frameworks.torch.zoo_models")

# one CNN with BatchNorm, one text Transformer, one recurrent layer
MODELS = ["resnet", "bert", "lstm"]


@functools.lru_cache(maxsize=None)
def _built(name, exporter, fold_constants=True):
    return zoo.build(name, exporter, fold_constants=fold_constants)


def _fresh_model(name, seed=0):
    """The zoo model rebuilt from its spec with the same seed, float64, eval mode."""
    torch.manual_seed(seed)
    module, _ = zoo_models.build_module(name)
    zoo_models.perturb(module, seed)
    return module.eval()


def _loss(model, zm):
    x = torch.from_numpy(next(iter(zm.feeds.values())))
    if x.is_floating_point():
        x = x.double()
    return torch.nn.functional.cross_entropy(model(x), torch.from_numpy(zm.labels)).item()


def _finite_difference(model, zm, pname, index, h=1e-6):
    param = dict(model.named_parameters())[pname]
    with torch.no_grad():
        old = param.view(-1)[index].item()
        param.view(-1)[index] = old + h
        up = _loss(model, zm)
        param.view(-1)[index] = old - h
        down = _loss(model, zm)
        param.view(-1)[index] = old
    return (up - down) / (2 * h)


def test_unknown_model_and_exporter():
    with pytest.raises(UserError, match="Received: 'no_such_net'") as info:
        zoo.build("no_such_net", "torchscript")
    assert "'resnet'" in str(info.value) and "'bert'" in str(info.value)
    with pytest.raises(UserError, match="Received: 'onnxscript'") as info:
        zoo.build("lstm", "onnxscript")
    assert "'torchscript', 'dynamo'" in str(info.value)
    with pytest.raises(UserError, match="Received: 'nope'"):
        zoo.model_source("nope")


def test_export_failure_names_model_exporter_and_reason(monkeypatch):
    def failing_export(*args, **kwargs):
        try:
            raise ValueError("Unsupported: aten::frobnicate\n  a long trace\n  more trace")
        except ValueError as inner:
            raise RuntimeError("export failed, see above") from inner

    monkeypatch.setattr(zoo.torch.onnx, "export", failing_export)
    with pytest.raises(ModelExportError) as info:
        zoo.build("rnn", "dynamo")
    message = str(info.value)
    assert "'rnn'" in message and "dynamo" in message and "Unsupported: aten::frobnicate" in message
    assert "long trace" not in message


def test_missing_transformers_is_reported(monkeypatch):
    monkeypatch.setattr(zoo, "is_package_available", lambda package: package != "transformers")
    with pytest.raises(FrameworkNotAvailableError, match="pip install transformers"):
        zoo.build("bert", "torchscript")


def test_model_list():
    names = zoo.model_names()
    assert len(names) >= 24 and len(set(names)) == len(names)
    assert names == zoo.model_names()
    assert zoo.model_source("lstm") == "torch.nn"
    assert zoo.model_source("bert") == "transformers"
    assert zoo.EXPORTERS == ("torchscript", "dynamo")


@pytest.mark.requires("transformers", "onnxruntime")
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("name", MODELS)
def test_export_matches_onnxruntime(name, exporter):
    import onnxruntime as ort

    zm = _built(name, exporter)
    assert (zm.name, zm.exporter, zm.source) == (name, exporter, zoo.model_source(name))
    assert [o.name for o in zm.proto.graph.output] == [zm.output]
    named = {pname for pname, _ in _fresh_model(name).named_parameters()}
    assert set(zm.parameters) | set(zm.unmapped) == named
    assert not set(zm.parameters) & set(zm.unmapped)
    assert set(zm.gradients64) == set(zm.gradients32) == named
    if name == "bert" and exporter == "torchscript":
        assert zm.unmapped == []
    assert zm.logits64.dtype == np.float64 and zm.logits64.shape == (2, zoo_models.CLASSES)
    assert zm.labels.dtype == np.int64 and set(zm.labels) <= set(range(zoo_models.CLASSES))

    session = ort.InferenceSession(zm.proto.SerializeToString(), providers=["CPUExecutionProvider"])
    out = session.run([zm.output], zm.feeds)[0]
    scale = np.abs(zm.logits64).max()
    assert scale > 1e-3
    np.testing.assert_allclose(out, zm.logits64, rtol=0, atol=1e-4 * scale)
    np.testing.assert_allclose(zm.logits32, zm.logits64, rtol=0, atol=1e-4 * scale)


@pytest.mark.requires("transformers")
@pytest.mark.parametrize("name", MODELS)
def test_gradients_match_finite_differences(name):
    zm = _built(name, "torchscript")
    model = _fresh_model(name).double()
    x = torch.from_numpy(next(iter(zm.feeds.values())))
    with torch.no_grad():
        logits = model(x.double() if x.is_floating_point() else x).numpy()
    # the rebuilt model is the one the zoo exported
    np.testing.assert_allclose(logits, zm.logits64, rtol=1e-12, atol=1e-12)
    names = list(zm.gradients64)
    for pname in (names[0], names[len(names) // 2], names[-1]):
        grad = zm.gradients64[pname].reshape(-1)
        for index in (0, grad.size - 1):
            fd = _finite_difference(model, zm, pname, index)
            assert abs(fd - grad[index]) <= 1e-6 * max(1.0, abs(fd)), (pname, index, fd, grad[index])
        # float32 gradients are the same up to float32 round-off
        g32 = zm.gradients32[pname]
        assert np.abs(g32 - zm.gradients64[pname]).max() <= 1e-3 * max(np.abs(zm.gradients64[pname]).max(), 1e-6)


@pytest.mark.requires("transformers")
def test_unfolded_dynamo_export_keeps_every_parameter():
    # with fixed shapes dynamo folds the position-embedding lookups into constants
    folded = _built("bert", "dynamo")
    assert "model.bert.embeddings.position_embeddings.weight" in folded.unmapped
    unfolded = _built("bert", "dynamo", fold_constants=False)
    assert unfolded.unmapped == [] and "without constant folding" in unfolded.notes
    np.testing.assert_allclose(unfolded.logits64, folded.logits64, rtol=1e-12, atol=1e-12)
    for pname, grad in unfolded.gradients64.items():
        np.testing.assert_allclose(grad, folded.gradients64[pname], rtol=1e-12, atol=1e-15)


@pytest.mark.requires("transformers")
def test_batchnorm_gradients_follow_the_graph():
    folded = _built("resnet", "torchscript")
    kept = _built("resnet", "torchscript", fold_constants=False)
    assert not zoo.graph_has_batchnorm(folded.proto) and "folded" in folded.notes
    assert zoo.graph_has_batchnorm(kept.proto) and "train mode" in kept.notes
    # folding leaves the convolutions and BatchNorms in no initializer; keeping them maps every one
    assert any(".convolution.weight" in p for p in folded.unmapped)
    assert kept.unmapped == []
    np.testing.assert_allclose(kept.logits64, folded.logits64, rtol=1e-12, atol=1e-12)

    pname = "model.resnet.embedder.embedder.convolution.weight"
    model = _fresh_model("resnet").double()
    fd_eval = _finite_difference(model, kept, pname, 0)
    for sub in model.modules():
        if isinstance(sub, torch.nn.modules.batchnorm._BatchNorm):
            sub.train()
    fd_train = _finite_difference(model, kept, pname, 0)
    # the mode matters: batch statistics give a different gradient than running statistics
    assert abs(fd_train - fd_eval) > 1e-3 * max(abs(fd_train), abs(fd_eval))
    assert abs(kept.gradients64[pname].reshape(-1)[0] - fd_train) <= 1e-6 * max(1.0, abs(fd_train))
    assert abs(folded.gradients64[pname].reshape(-1)[0] - fd_eval) <= 1e-6 * max(1.0, abs(fd_eval))


@pytest.mark.requires("transformers")
def test_no_model_drops_anything_in_training_mode():
    # dropout (or drop-path) left on would make two training-mode passes differ
    for name in zoo.model_names():
        spec = zoo_models.SPECS[name]
        module = _fresh_model(name).train()
        if spec.kind == "image":
            x = torch.randn(2, 3, spec.image, spec.image)
        elif spec.kind == "text":
            x = torch.randint(1, zoo_models.VOCAB, (2, zoo_models.SEQ_LEN))
        else:
            x = torch.randn(2, zoo_models.SEQ_STEPS, zoo_models.SEQ_FEATURES)
        with torch.no_grad():
            first, second = module(x), module(x)
        assert first.shape == (2, zoo_models.CLASSES), name
        assert torch.equal(first, second), name
        assert zoo_models.active_dropout(module) == [], name
