"""Deep500's call forms of the training API next to deep500lite's: optimizers taking ``loss``
second, ``lr=``/``.lr``, ``set_parameter(name, value, predicate)``, ``Optimizer.train``,
``gradient_modifier(name, param, grad)``, ``DefaultTrainerEvents``, ``AccuracyAbortEvent`` and
``test_training`` over Datasets and native executors."""

import numpy as np
import pytest

import deep500lite as d5
import deep500lite.frameworks.reference as d5ref
from deep500lite import datasets, networks
from deep500lite.errors import UserTypeError
from support import framework_params


def _net(seed=0):
    net, _, out = networks.create_model("mlp", 8, classes=3, shape=(5,), seed=seed)
    net.add_operation(datasets.dataset_loss("digits")([out, "label"], "loss"))
    return net


def _feeds(seed=1):
    rng = np.random.default_rng(seed)
    return {"input": rng.standard_normal((8, 5)).astype(np.float32), "label": rng.integers(0, 3, 8)}


def _executor(fw, seed=0):
    return d5.executor(_net(seed), fw)


def _module(fw):
    return {"reference": d5ref, "torch": None, "tensorflow": None}[fw] or __import__(
        f"deep500lite.frameworks.{fw}", fromlist=["x"])


def test_reference_optimizers_take_deep500s_positional_forms():
    ex = _executor("reference")
    gd = d5ref.GradientDescent(ex, "loss", 0.25)
    assert (gd.loss, gd.learning_rate, gd.lr) == ("loss", 0.25, 0.25)
    mom = d5ref.MomentumOptimizer(ex, "loss")  # Deep500's reference defaults in its form
    assert (mom.learning_rate, mom.momentum) == (0.01, 0.1)
    mom = d5ref.MomentumOptimizer(ex, 0.3, 0.8)  # deep500lite's form is unchanged
    assert (mom.loss, mom.learning_rate, mom.momentum) == ("loss", 0.3, 0.8)
    ada = d5ref.AdaGradOptimizer(ex, "loss", lr=0.5, eps=1e-3)
    assert (ada.learning_rate, ada.epsilon) == (0.5, 1e-3)
    adam = d5ref.AdamOptimizer(ex, "loss", 0.01, 0.8, 0.9, 1e-6)
    assert (adam.beta1, adam.beta2, adam.epsilon, adam.epsilon_placement) == (0.8, 0.9, 1e-6, "inside")
    assert d5ref.GradientDescent(ex, lr=0.2).learning_rate == 0.2
    with pytest.raises(UserTypeError, match="given twice"):
        d5ref.GradientDescent(ex, "loss", loss="loss")
    with pytest.raises(UserTypeError, match="not both"):
        d5ref.GradientDescent(ex, lr=0.1, learning_rate=0.2)


def test_lr_attribute_and_set_parameter_with_predicate():
    opt = d5ref.GradientDescent(_executor("reference"), "loss", 0.1)
    opt.lr = 0.05
    assert opt.learning_rate == 0.05
    opt.set_parameter("lr", 0.02)
    assert opt.lr == 0.02
    opt.set_parameter("lr", 0.5, predicate=lambda current: current > 1)
    assert opt.lr == 0.02


@pytest.mark.parametrize("fw", framework_params(["torch", "tensorflow"]))
def test_native_optimizers_take_deep500s_positional_forms(fw):
    mod = _module(fw)
    ex = _executor(fw)
    opt = mod.MomentumOptimizer(ex, "loss", 0.2, 0.7)
    assert (opt.loss, opt.learning_rate, opt.lr, opt.momentum) == ("loss", 0.2, 0.2, 0.7)
    opt.set_parameter("lr", 0.1)
    assert opt.learning_rate == 0.1
    opt = mod.MomentumOptimizer(ex, learning_rate=0.1, momentum=0.9, loss="loss")
    assert (opt.learning_rate, opt.momentum) == (0.1, 0.9)
    assert mod.GradientDescent(ex, "loss").learning_rate == 0.1


def test_torch_momentum_takes_deep500s_weight_decay():
    d5torch = pytest.importorskip("deep500lite.frameworks.torch")
    plain, decayed = _executor("torch"), _executor("torch")
    w0 = plain.network.fetch_tensor("fc2.weight").astype(np.float64)
    d5torch.MomentumOptimizer(plain, "loss", 0.1, 0.9).step(_feeds())
    d5torch.MomentumOptimizer(decayed, "loss", 0.1, 0.9, 0.0, 1e-2).step(_feeds())
    diff = decayed.network.fetch_tensor("fc2.weight") - plain.network.fetch_tensor("fc2.weight")
    np.testing.assert_allclose(diff, -0.1 * 1e-2 * w0, rtol=1e-3, atol=1e-8)


def test_optimizer_train_runs_iterations_and_calls_deep500_events():
    ex = _executor("reference")
    opt = d5ref.GradientDescent(ex, "loss", 0.1)
    data = d5.NumpyDataset(np.random.default_rng(0).standard_normal((40, 5)).astype(np.float32), "input",
                           np.arange(40) % 3, "label")
    sampler = d5.ShuffleSampler(data, 8, seed=0)
    seen = []

    class Counter:
        def before_optimizer_step(self, executor, optimizer, inputs):
            seen.append(("before", executor is ex, optimizer is opt, len(inputs["label"])))

        def after_optimizer_step(self, executor, optimizer, outputs, loss):
            seen.append(("after", float(loss) == float(outputs["loss"])))

    loss = opt.train(3, sampler, [Counter()])
    assert np.isfinite(loss) and seen.count(("before", True, True, 8)) == 3 and seen.count(("after", True)) == 3
    seen.clear()
    sampler.reset()
    opt.train(0, sampler, [Counter()])  # 0: until the sampler ends (5 batches per epoch)
    assert len(seen) == 10


def test_default_trainer_events_and_accuracy_abort_event():
    events = d5.DefaultTrainerEvents(10)
    assert isinstance(events, list) and isinstance(events[0], d5.TerminalBarEvent)
    stop = d5.training_events.AccuracyAbortEvent(50)
    assert stop.max_accuracy == 50.0
    assert d5.AccuracyAbortEvent is d5.training_events.AccuracyAbortEvent


def _digits_sets():
    train, test = datasets.load_dataset("digits", "input", "label")
    return train, test


def test_test_training_takes_datasets_and_no_output_node():
    train, test = _digits_sets()
    net, _, out = networks.create_model("mlp", 32, classes=10, shape=(1, 8, 8), seed=0)
    net.add_operation(datasets.dataset_loss("digits")([out, "label"], "loss"))
    ex = d5.executor(net, "reference")
    opt = d5ref.MomentumOptimizer(ex, "loss", 0.05, 0.9)
    results = d5.test_training(ex, train, test, opt, 2, 32, out, metrics=[d5.TestAccuracy()])
    assert results[0] >= 80
    net, _, out = networks.create_model("mlp", 32, classes=10, shape=(1, 8, 8), seed=1)
    net.add_operation(datasets.dataset_loss("digits")([out, "label"], "loss"))
    ex = d5.executor(net, "reference")
    results = d5.test_training(ex, train, test, d5ref.MomentumOptimizer(ex, "loss", 0.05, 0.9), 1, 32)
    epoch = results.stats.epochs[-1]
    assert epoch["test_accuracy"] is None  # no output node: losses only
    assert epoch["test_loss"] < 0.5 * np.log(10)  # well below chance's cross-entropy after one epoch


def test_gradient_modifier_is_called_as_name_param_grad():
    ex = _executor("reference")
    params = dict(zip(ex.network.parameters, ex.network.fetch_tensors(ex.network.parameters)))
    seen = {}

    def modifier(name, param, grad):
        seen[name] = np.array_equal(param, params[name])
        return grad

    d5ref.GradientDescent(ex, "loss", 0.1, gradient_modifier=modifier).step(_feeds())
    assert seen and all(seen.values()) and set(seen) == {p for p, _ in ex.network.gradient("loss")}


@pytest.mark.parametrize("fw", framework_params(["torch"]))
def test_test_training_with_a_native_executor(fw):
    """Deep500 issue: test_training on a framework-native network failed in _padded."""
    import torch
    from deep500lite.frameworks.torch import TorchNativeExecutor
    import deep500lite.frameworks.torch as d5torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    ex = TorchNativeExecutor(model, input_names=["input"], output_names=["output"],
                             loss_fn=torch.nn.functional.cross_entropy, label_name="label")
    train, test = _digits_sets()
    opt = d5torch.MomentumOptimizer(ex, "loss", 0.05, 0.9)
    results = d5.test_training(ex, train, test, opt, 2, 32, "output", metrics=[d5.TestAccuracy()])
    assert results[0] >= 80


@pytest.mark.parametrize("fw", framework_params(["tensorflow"]))
def test_test_training_with_a_keras_executor(fw):
    """The same for a Keras model (TensorFlowNativeExecutor, formerly KerasExecutor)."""
    import keras
    from deep500lite.frameworks.tensorflow import TensorFlowNativeExecutor

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((1, 8, 8)), keras.layers.Flatten(), keras.layers.Dense(10)])
    ex = TensorFlowNativeExecutor(model, input_names=["input"], label_name="label",
                                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    train, test = _digits_sets()
    opt = d5ref.MomentumOptimizer(ex, "loss", 0.05, 0.9)
    results = d5.test_training(ex, train, test, opt, 2, 32, "output", metrics=[d5.TestAccuracy()])
    assert results[0] >= 80
