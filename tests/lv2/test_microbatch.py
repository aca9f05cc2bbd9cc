"""Micro-batching (d5.transforms.microbatch): equal to the full batch on every executor, BatchNorm
semantics, the trainer unchanged, errors, and lower measured peak memory.

Tolerance: float32 round-off, ``rtol=1e-5, atol=1e-6`` (the measured differences are about 2e-7).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import deep500lite as d5
from deep500lite.errors import UserError, UserTypeError
from deep500lite.frameworks import reference as d5ref
from deep500lite.registry import import_framework

TOL = {"rtol": 1e-5, "atol": 1e-6}
FRAMEWORKS = ["reference", "torch", "tensorflow", "onnxruntime", "jax"]
NATIVE = ("torch", "tensorflow", "jax")


def _net(bn=False, reduction="mean", batch="N", weighted=False):
    """Conv(2->4, 3x3) [BatchNorm] Relu MaxPool Flatten Gemm(36->5) SoftmaxCrossEntropyLoss."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((4, 2, 3, 3)) * 0.5).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal(4) * 0.1).astype(np.float32), "b1"),
             numpy_helper.from_array((rng.standard_normal((5, 36)) * 0.3).astype(np.float32), "w2"),
             numpy_helper.from_array((rng.standard_normal(5) * 0.1).astype(np.float32), "b2")]
    nodes = [helper.make_node("Conv", ["input", "w1", "b1"], ["c"], pads=[1, 1, 1, 1])]
    x = "c"
    if bn:
        inits += [numpy_helper.from_array(np.full(4, 1.1, np.float32), "gamma"),
                  numpy_helper.from_array(np.full(4, 0.1, np.float32), "beta"),
                  numpy_helper.from_array(np.zeros(4, np.float32), "running_mean"),
                  numpy_helper.from_array(np.ones(4, np.float32), "running_var")]
        nodes.append(helper.make_node("BatchNormalization", ["c", "gamma", "beta", "running_mean", "running_var"],
                                      ["bn"], momentum=0.9))
        x = "bn"
    loss_inputs = ["output", "label"]
    if weighted:
        inits.append(numpy_helper.from_array(np.linspace(0.5, 1.5, 5).astype(np.float32), "class_weight"))
        loss_inputs.append("class_weight")
    nodes += [helper.make_node("Relu", [x], ["r"]),
              helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
              helper.make_node("Flatten", ["p"], ["f"]),
              helper.make_node("Gemm", ["f", "w2", "b2"], ["output"], transB=1),
              helper.make_node("SoftmaxCrossEntropyLoss", loss_inputs, ["loss"], reduction=reduction)]
    graph = helper.make_graph(nodes, "mb", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 2, 6, 6]),
                                            helper.make_tensor_value_info("label", TensorProto.INT64, [batch])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 5]),
                               helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    return d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _feeds(batch=10, seed=1):
    rng = np.random.default_rng(seed)
    return {"input": rng.standard_normal((batch, 2, 6, 6)).astype(np.float32),
            "label": rng.integers(0, 5, batch).astype(np.int64)}


def _params(ex):
    return dict(zip(ex.network.parameters, ex.network.fetch_tensors(ex.network.parameters)))


def _grads(network, y="loss"):
    pairs = network.gradient(y)
    return dict(zip([p for p, _ in pairs], network.fetch_tensors([g for _, g in pairs])))


def _assert_same(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], err_msg=k, **TOL)


def _need(fw):
    if not d5.is_framework_available(fw):
        pytest.skip(f"{fw} is not installed")


# --------------------------------------------------------------------------------------------- pieces
def test_split_batch_sizes_and_contents():
    feeds = _feeds(10)
    parts = d5.transforms.split_batch(feeds, 4)
    assert [b for _, b in parts] == [3, 3, 3, 1]
    np.testing.assert_array_equal(np.concatenate([p["input"] for p, _ in parts]), feeds["input"])
    np.testing.assert_array_equal(np.concatenate([p["label"] for p, _ in parts]), feeds["label"])
    assert [b for _, b in d5.transforms.split_batch(feeds, 5)] == [2] * 5
    assert [b for _, b in d5.transforms.split_batch(feeds, 1)] == [10]
    assert [b for _, b in d5.transforms.split_batch(feeds, 32)] == [1] * 10


def test_loss_reduction_read_from_graph():
    assert d5.transforms.loss_reduction(_net(), "loss") == "mean"
    assert d5.transforms.loss_reduction(_net(reduction="sum"), "loss") == "sum"
    with pytest.raises(UserError, match="class weights") as info:
        d5.transforms.loss_reduction(_net(weighted=True), "loss")
    assert str(info.value).split("Received: ")[-1] == "weights=True, ignore_index=None"


# ----------------------------------------------------------------------- equal to the full batch
@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_microbatched_training_equals_full_batch(fw):
    """Loss, gradients, outputs and parameters after 2 momentum steps: n=4 of a batch of 10
    (micro-batches 3, 3, 3, 1) against the full batch on the same executor."""
    _need(fw)
    feeds = _feeds(10)
    initial = _params(d5.executor(_net(), "reference"))
    # gradients and outputs of one forward/backward (the executor wrapper)
    ex_full, ex_mb = d5.executor(_net(), fw), d5.executor(_net(), fw)
    wrapped = d5.transforms.microbatch(ex_mb, 4)
    _assert_same(ex_full.inference_and_backprop(feeds, "loss"), wrapped.inference_and_backprop(feeds, "loss"))
    _assert_same(_grads(ex_full.network), _grads(wrapped.network))
    _assert_same(ex_full.inference(feeds), wrapped.inference(feeds))
    # k steps of a reference optimizer (a ThreeStepOptimizer) on the same executors, then of the native one
    optimizers = [(d5ref.MomentumOptimizer(ex_full, learning_rate=0.1, momentum=0.9),
                   d5ref.MomentumOptimizer(ex_mb, learning_rate=0.1, momentum=0.9))]
    if fw in NATIVE:
        native = import_framework(fw)
        ex_full, ex_mb = d5.executor(_net(), fw), d5.executor(_net(), fw)
        optimizers.append((native.MomentumOptimizer(ex_full, learning_rate=0.1, momentum=0.9),
                           native.MomentumOptimizer(ex_mb, learning_rate=0.1, momentum=0.9)))
    for opt_full, inner in optimizers:
        opt_mb = d5.transforms.microbatch(inner, 4)
        for _ in range(2):
            np.testing.assert_allclose(opt_full.step(feeds)["loss"], opt_mb.step(feeds)["loss"], **TOL)
        assert opt_mb.last_sizes == [3, 3, 3, 1]
        _assert_same(_params(opt_full.executor), _params(inner.executor))
        assert np.abs(_params(inner.executor)["w2"] - initial["w2"]).max() > 1e-2  # it trained


def test_sum_reduction_weights_are_one():
    feeds = _feeds(10)
    full, wrapped = d5.executor(_net(reduction="sum"), "torch"), d5.executor(_net(reduction="sum"), "torch")
    out_full = full.inference_and_backprop(feeds, "loss")
    mb = d5.transforms.microbatch(wrapped, 3)
    assert mb.inference_and_backprop(feeds, "loss")["loss"] == pytest.approx(float(out_full["loss"]), rel=1e-5)
    _assert_same(_grads(full.network), _grads(mb.network))


def test_network_with_fixed_batch_is_relaxed():
    """A network declaring batch 10 is micro-batched (its batch dimension freed) on ONNX Runtime;
    a reference optimizer trains through the executor wrapper."""
    feeds = _feeds(10)
    full = d5.executor(_net(batch=10), "onnxruntime")
    full.inference_and_backprop(feeds, "loss")
    mb = d5.transforms.microbatch(_net(batch=10), 4, framework="onnxruntime")
    mb.inference_and_backprop(feeds, "loss")
    _assert_same(_grads(full.network), _grads(mb.network))
    # a reference optimizer built on the wrapper steps with the accumulated gradients
    for ex in (full, mb):
        d5ref.GradientDescent(ex, learning_rate=0.1).step(feeds)
    _assert_same(_params(full), _params(mb))


# ------------------------------------------------------------------------------------- BatchNorm
@pytest.mark.parametrize("fw", ["torch", "reference"])
def test_batchnorm_normalises_each_microbatch_alone(fw):
    """Documented: each micro-batch uses its own batch statistics and updates the running ones once.

    The step equals running the two halves one after the other on a second executor, weighting
    their gradients by 1/2 and taking the SGD step by hand in numpy; it differs from the full batch."""
    feeds, lr = _feeds(8), 0.1
    ex = d5.executor(_net(bn=True), fw)
    d5.transforms.microbatch(d5ref.GradientDescent(ex, learning_rate=lr), 2).step(feeds)

    by_hand = d5.executor(_net(bn=True), fw)
    start = _params(by_hand)
    acc = {}
    for half in (slice(0, 4), slice(4, 8)):
        by_hand.inference_and_backprop({k: v[half] for k, v in feeds.items()}, "loss")
        for name, g in _grads(by_hand.network).items():
            acc[name] = acc.get(name, 0.0) + 0.5 * g.astype(np.float64)
    expected = {k: (start[k] - lr * acc[k]).astype(np.float32) if k in acc else v for k, v in start.items()}
    expected["running_mean"], expected["running_var"] = by_hand.network.fetch_tensors(["running_mean",
                                                                                       "running_var"])
    _assert_same(expected, _params(ex))
    assert not np.allclose(expected["running_mean"], start["running_mean"])  # two updates happened

    full = d5.executor(_net(bn=True), fw)
    d5ref.GradientDescent(full, learning_rate=lr).step(feeds)
    assert np.abs(_params(full)["w1"] - _params(ex)["w1"]).max() > 1e-4


# --------------------------------------------------------------------------- the trainer unchanged
def test_test_training_takes_the_microbatched_optimizer():
    rng = np.random.default_rng(3)
    data = rng.standard_normal((36, 2, 6, 6)).astype(np.float32)
    labels = rng.integers(0, 5, 36).astype(np.int64)
    results = {}
    for n in (1, 5):
        ex = d5.executor(_net(), "torch")
        opt = d5.transforms.microbatch(d5ref.MomentumOptimizer(ex, learning_rate=0.05, momentum=0.9), n)
        sampler = d5.OrderedSampler(d5.NumpyDataset(data, "input", labels, "label"), 12)
        res = d5.test_training(ex, sampler, None, opt, epochs=2, batch_size=12, metrics=[], events=[])
        results[n] = (_params(ex), [s["loss"] for s in res.stats.steps])
    assert len(results[5][1]) == 6
    np.testing.assert_allclose(results[1][1], results[5][1], **TOL)
    _assert_same(results[1][0], results[5][0])
    assert opt.lr == 0.05 and opt.optimizer.momentum == 0.9


# ------------------------------------------------------------------------------------------ errors
def test_bad_arguments_are_refused():
    ex = d5.executor(_net(), "torch")
    with pytest.raises(UserError, match=r"integer >= 1\. Received: 0$"):
        d5.transforms.microbatch(ex, 0)
    with pytest.raises(UserTypeError, match=r"Received: int$"):
        d5.transforms.microbatch(3, 2)
    with pytest.raises(UserError, match=r"same batch size.*Received: first-axis sizes \{'input': 10, 'label': 9\}"):
        d5.transforms.microbatch(ex, 2).inference({"input": _feeds(10)["input"], "label": _feeds(9)["label"]})
    with pytest.raises(UserError, match="reduction must be one of"):
        d5.transforms.microbatch(ex, 2, reduction="max")


# ------------------------------------------------------------------------------------ peak memory
def test_peak_memory_lower_with_eight_microbatches():
    """torch, batch 256, two 32-channel 3x3 convolutions at 32x32: the warm step's peak RSS growth
    with n=8 is below n=1 by at least half of the 7/8 of the activations it no longer holds."""
    script = Path(__file__).with_name("microbatch_peak_memory.py")
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    runs = {}
    for n in (1, 8):
        proc = subprocess.run([sys.executable, str(script), "torch", str(n)], capture_output=True, text=True,
                              env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs[n] = json.loads(proc.stdout.strip().splitlines()[-1])
    activations = runs[1]["activation_bytes"]
    assert activations == 256 * 4 * (2 * 2 * 32 * 32 * 32 + 32 * 16 * 16 + 32 * 16 * 16)
    assert runs[1]["warm_loss"] == pytest.approx(runs[8]["warm_loss"], rel=1e-5)
    assert runs[1]["warm"] - runs[8]["warm"] >= 0.5 * activations * 7 / 8, runs
