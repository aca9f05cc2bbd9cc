"""Checkpoint and resume: a run stopped after epoch k and resumed ends with the same parameters
as an uninterrupted run; broken or mismatched checkpoints give named errors."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets, networks
from deep500lite.frameworks import reference as d5ref
from deep500lite.lv2.checkpoint import CheckpointError, CheckpointEvent, load_checkpoint, save_checkpoint
from deep500lite.lv2.events import EpochHPSchedule
from deep500lite.lv2.trainer import Trainer
from support import framework_params


class Jitter:
    """A random per-batch transformation with its own generator (as the reference transforms have)."""

    def __init__(self, seed):
        self.random = np.random.default_rng(seed)

    def __call__(self, batch):
        x = batch["input"]
        return {**batch, "input": (x + self.random.normal(0, 0.05, x.shape)).astype(x.dtype)}


def _build(framework, model, optimizer, lr, hidden_seed=0):
    shape = (1, 8, 8)
    kwargs = {"hidden": (32,)} if model == "mlp" else {}
    net, inp, out = networks.create_model(model, 16, classes=10, shape=shape, seed=hidden_seed, **kwargs)
    net.add_operation(datasets.dataset_loss("digits")([out, "label"], "loss"))
    train, test = datasets.load_dataset("digits", inp, "label")
    train = d5.NumpyDataset(train.data[:112], inp, train.labels[:112], "label")
    test = d5.NumpyDataset(test.data[:40], inp, test.labels[:40], "label")
    ex = d5.executor(net, framework)
    module = d5ref if optimizer.startswith("reference") else importlib.import_module(f"deep500lite.frameworks.{framework}")
    if optimizer.endswith("Adam"):
        opt = module.AdamOptimizer(ex, learning_rate=lr)
    else:
        opt = module.MomentumOptimizer(ex, learning_rate=lr, momentum=0.9)
    sampler = d5.ShuffleSampler(train, 16, seed=7, transformations=[Jitter(11)])
    # A schedule that changes the learning rate at epoch 2 (after the checkpoint) and is
    # stateless, so the resumed run only needs it passed again.
    schedule = EpochHPSchedule(learning_rate=[(0, lr), (2, lr / 2)])
    return Trainer(sampler, d5.OrderedSampler(test, 16), ex, opt, out, events=[schedule])


def _parameters(trainer):
    net = trainer.executor.network
    return dict(zip(net.parameters, net.fetch_tensors(net.parameters)))


CASES = [
    ("reference", "mlp", "reference Momentum", 0.05),
    ("reference", "mlp", "reference Adam", 0.01),
    ("onnxruntime", "mlp", "reference Momentum", 0.05),
    ("torch", "lenet", "native Momentum", 0.05),
    ("torch", "lenet", "native Adam", 0.01),
    ("tensorflow", "lenet", "native Momentum", 0.05),
]


@pytest.mark.parametrize("framework,model,optimizer,lr", [
    pytest.param(*case, marks=framework_params([case[0]])[0].marks, id=f"{case[0]}-{case[2].replace(' ', '_')}")
    for case in CASES])
def test_resumed_run_ends_with_the_parameters_of_an_uninterrupted_run(tmp_path, framework, model, optimizer, lr):
    full = _build(framework, model, optimizer, lr)
    initial = {k: v.copy() for k, v in _parameters(full).items()}
    full.run_loop(3)

    first = _build(framework, model, optimizer, lr)
    event = CheckpointEvent(tmp_path / "ckpt-{epoch}")
    first.run_loop(2, events=[event])
    assert [p.rsplit("/", 1)[-1] for p in event.saved] == ["ckpt-1.json", "ckpt-2.json"]

    resumed = _build(framework, model, optimizer, lr)
    meta = load_checkpoint(tmp_path / "ckpt-2", resumed)
    assert meta["epoch"] == 2 and meta["framework"] == framework
    resumed.run_loop(3)

    expected, got = _parameters(full), _parameters(resumed)
    assert set(expected) == set(got)
    for name in expected:
        assert not np.array_equal(expected[name], initial[name]), f"{name} did not train"
        if framework in ("reference", "onnxruntime"):
            np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
        else:
            np.testing.assert_allclose(got[name], expected[name], rtol=0, atol=1e-6, err_msg=name)
    assert [e["epoch"] for e in resumed.stats.epochs] == [0, 1, 2]
    assert [e["test_accuracy"] for e in resumed.stats.epochs] == [e["test_accuracy"] for e in full.stats.epochs]
    assert resumed.stats.global_step == full.stats.global_step
    assert resumed.stats.epochs[2]["elapsed"] > resumed.stats.epochs[1]["elapsed"]


@pytest.mark.parametrize("restore", ["parameters only", "no sampler state"])
def test_resume_without_the_full_state_differs(tmp_path, restore):
    """The equality above depends on the optimizer and sampler state, not on parameters alone."""
    full = _build("reference", "mlp", "reference Momentum", 0.05)
    full.run_loop(3)
    first = _build("reference", "mlp", "reference Momentum", 0.05)
    first.run_loop(2)
    save_checkpoint(tmp_path / "c", first)
    resumed = _build("reference", "mlp", "reference Momentum", 0.05)
    if restore == "parameters only":
        for name, value in _parameters(first).items():
            resumed.executor.network.feed_tensor(name, value)
        resumed.stats.epoch, resumed.stats.global_step = 2, first.stats.global_step
    else:
        load_checkpoint(tmp_path / "c", resumed)
        resumed.train_sampler.random = np.random.default_rng(7)
    resumed.run_loop(3)
    diff = max(np.abs(a - b).max() for a, b in zip(_parameters(full).values(), _parameters(resumed).values()))
    assert diff > 1e-4


# ------------------------------------------------------------------------------ errors
def _saved(tmp_path):
    trainer = _build("reference", "mlp", "reference Momentum", 0.05)
    trainer.run_loop(1)
    return save_checkpoint(tmp_path / "c", trainer)


def test_missing_and_corrupt_files_are_named(tmp_path):
    json_path, npz_path = _saved(tmp_path)
    target = _build("reference", "mlp", "reference Momentum", 0.05)
    with pytest.raises(CheckpointError, match=r"other\.json does not exist"):
        load_checkpoint(tmp_path / "other", target)
    data = bytearray(open(npz_path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(npz_path, "wb").write(bytes(data))
    with pytest.raises(CheckpointError, match=r"c\.npz does not match .*c\.json \(SHA-256 differs\)"):
        load_checkpoint(json_path, target)
    open(json_path, "w").write("{not json")
    with pytest.raises(CheckpointError, match=r"c\.json' is not valid JSON"):
        load_checkpoint(npz_path, target)
    open(json_path, "w").write(json.dumps({"format": "something else"}))
    with pytest.raises(CheckpointError, match="is not a deep500lite checkpoint"):
        load_checkpoint(tmp_path / "c", target)


def test_a_checkpoint_for_another_network_or_optimizer_is_refused(tmp_path):
    json_path, _ = _saved(tmp_path)
    other_net = _build("reference", "lenet", "reference Momentum", 0.05)
    with pytest.raises(CheckpointError, match=r"does not fit this network: 'conv1.weight' not in the checkpoint; .*"
                                                 r"'fc1.weight' is float32\[120, 64\] here and float32\[32, 64\] in"):
        load_checkpoint(json_path, other_net)
    other_opt = _build("reference", "mlp", "reference Adam", 0.05)
    before = {k: v.copy() for k, v in _parameters(other_opt).items()}
    with pytest.raises(CheckpointError, match="holds the state of a MomentumOptimizer; .* is a AdamOptimizer"):
        load_checkpoint(json_path, other_opt)
    for name, value in _parameters(other_opt).items():  # the refused load changed nothing
        np.testing.assert_array_equal(value, before[name])
    assert other_opt.stats.epoch == 0


def test_state_that_cannot_be_saved_is_named(tmp_path):
    trainer = _build("reference", "mlp", "reference Momentum", 0.05)
    trainer.optimizer.schedule = object()
    with pytest.raises(TypeError, match=r"Cannot checkpoint optimizer.attrs.schedule: a object"):
        save_checkpoint(tmp_path / "c", trainer)
