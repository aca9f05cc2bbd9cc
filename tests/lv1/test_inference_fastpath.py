"""The inference fast paths give the answers of the full path and refuse the same feeds.

``Network.check_feeds`` remembers the feed signatures it accepted; the torch executor converts plain
arrays with ``torch.from_numpy``; the TensorFlow executor calls its traced concrete function once a
signature is known. Each test compares with the reference executor (onnx.reference) or with the
error a network that never saw a feed raises.
"""

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import networks
from deep500lite.errors import FeedError

FAST_FRAMEWORKS = [pytest.param(fw, marks=pytest.mark.requires(fw)) for fw in ("torch", "tensorflow", "onnxruntime")]


def _lenet(batch=None):
    return networks.create_model("lenet", batch, classes=10, shape=(1, 8, 8), seed=2)[0]


def _refusal(net, feeds) -> str:
    with pytest.raises(FeedError) as info:
        net.check_feeds(feeds)
    return str(info.value)


def test_cached_signature_refuses_what_a_fresh_check_refuses():
    warm = _lenet()
    x = np.random.default_rng(0).standard_normal((4, 1, 8, 8)).astype(np.float32)
    assert warm.check_feeds({"input": x})["input"] is x
    assert warm.check_feeds({"input": x})["input"] is x  # the remembered signature
    bad = [{"input": x.astype(np.float64)}, {"input": x[:, :, :4]}, {"image": x}, {"input": x, "extra": x}, {},
           [x]]
    for feeds in bad:
        assert _refusal(warm, feeds) == _refusal(_lenet(), feeds)


def test_cached_check_returns_a_new_dict_in_declared_order():
    net = _lenet()
    x = np.zeros((2, 1, 8, 8), np.float32)
    feeds = {"input": x}
    first, second = net.check_feeds(feeds), net.check_feeds(feeds)
    assert second == {"input": x} and second is not feeds and first is not second
    # Lists are never remembered: checked (here refused, as float64) on every call.
    assert _refusal(net, {"input": x.tolist()}) == _refusal(_lenet(), {"input": x.tolist()})


@pytest.mark.parametrize("framework", FAST_FRAMEWORKS)
def test_repeated_inference_matches_reference(framework):
    net = _lenet()
    ex = d5.executor(net, framework)
    reference = d5.executor(_lenet(), "reference")
    rng = np.random.default_rng(1)
    for batch in (3, 5, 3):
        x = rng.standard_normal((batch, 1, 8, 8)).astype(np.float32)
        expected = reference.inference({"input": x})["output"]
        first = ex.inference({"input": x})["output"]
        again = ex.inference({"input": x})["output"]
        np.testing.assert_array_equal(first, again)
        np.testing.assert_allclose(first, expected, rtol=1e-4, atol=1e-5)
        # Arrays torch cannot share as they are (a strided view, a read-only array) give the same answer.
        view = np.repeat(x, 2, axis=3)[:, :, :, ::2]  # equal to x, not contiguous
        frozen = x.copy()
        frozen.flags.writeable = False
        np.testing.assert_array_equal(ex.inference({"input": view})["output"], first)
        np.testing.assert_array_equal(ex.inference({"input": frozen})["output"], first)


@pytest.mark.parametrize("framework", FAST_FRAMEWORKS)
def test_inference_after_warmup_refuses_bad_feeds_as_before(framework):
    ex = d5.executor(_lenet(4), framework)
    x = np.zeros((4, 1, 8, 8), np.float32)
    ex.inference({"input": x})
    ex.inference({"input": x})
    for feeds in ({"input": x.astype(np.float64)}, {"input": np.zeros((5, 1, 8, 8), np.float32)}, {"image": x}):
        with pytest.raises(FeedError) as info:
            ex.inference(feeds)
        assert str(info.value) == _refusal(_lenet(4), feeds)


@pytest.mark.parametrize("framework", FAST_FRAMEWORKS)
def test_fed_parameters_reach_the_fast_path(framework):
    net = _lenet()
    ex = d5.executor(net, framework)
    x = np.random.default_rng(3).standard_normal((2, 1, 8, 8)).astype(np.float32)
    ex.inference({"input": x})
    ex.inference({"input": x})
    reference_net = _lenet()
    for name in ("fc3.weight", "fc3.bias"):
        value = ex.network.fetch_tensor(name) * np.float32(2)
        ex.network.feed_tensor(name, value)
        reference_net.feed_tensor(name, value)
    expected = d5.executor(reference_net, "reference").inference({"input": x})["output"]
    np.testing.assert_allclose(ex.inference({"input": x})["output"], expected, rtol=1e-4, atol=1e-5)
