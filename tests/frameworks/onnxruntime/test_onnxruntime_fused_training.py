"""Fused ONNX Runtime training (frameworks/onnxruntime/training_session.py): one session run per
step with the optimizer update in the graph and the state kept in OrtValues gives the host path's
losses, parameters, optimizer state, running statistics and gradients; values fetched, fed and
restored between steps are honoured; other optimizers take the host path."""

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

import deep500lite as d5  # noqa: E402
import deep500lite.frameworks.onnxruntime as ortfw  # noqa: E402
import deep500lite.frameworks.reference as d5ref  # noqa: E402
from deep500lite import datasets, networks  # noqa: E402
from deep500lite.frameworks.onnxruntime.training_session import DeviceTensors  # noqa: E402

STEPS = 3


def _net(name):
    net, _, out = networks.create_model(name, 8, classes=10, seed=0)
    net.add_operation(datasets.dataset_loss("digits")([out, "label"], "loss"))
    return net


def _batches(name, seed=0):
    rng = np.random.default_rng(seed)
    shape = (8,) + networks.default_shape(name)
    return [{"input": rng.standard_normal(shape).astype(np.float32), "label": rng.integers(0, 10, 8)}
            for _ in range(STEPS)]


def _train(name, fw, fused, cls, kwargs, batches):
    ex = d5.executor(_net(name), fw)
    if fw == "onnxruntime":
        ex.fused_training = fused
    opt = cls(ex, **kwargs)
    losses = [float(np.asarray(opt.step(b)["loss"])) for b in batches]
    return ex, opt, losses


def _values(ex):
    return {k: np.array(v) for k, v in zip(ex.network.initializers, ex.network.fetch_tensors(ex.network.initializers))}


CASES = [
    ("lenet", ortfw.GradientDescent, {"learning_rate": 0.05}),
    ("lenet", ortfw.MomentumOptimizer, {"learning_rate": 0.02, "momentum": 0.9}),
    ("bn_cnn", ortfw.MomentumOptimizer, {"learning_rate": 0.02, "momentum": 0.9}),
    ("bn_cnn", ortfw.NesterovOptimizer, {"learning_rate": 0.02, "momentum": 0.8}),
    ("lenet", ortfw.AdamOptimizer, {"learning_rate": 0.01}),
    ("lenet", ortfw.AdamOptimizer, {"learning_rate": 0.01, "epsilon_placement": "inside"}),
    ("lenet", ortfw.AdamOptimizer, {"learning_rate": 0.01, "epsilon_placement": "keras"}),
    ("bn_cnn", ortfw.RMSPropOptimizer, {"learning_rate": 0.01}),
    ("lenet", ortfw.AdaGradOptimizer, {"learning_rate": 0.01, "epsilon_placement": "inside"}),
]


@pytest.mark.parametrize("name, cls, kwargs", CASES, ids=lambda c: getattr(c, "__name__", str(c)))
def test_fused_steps_equal_the_host_path(name, cls, kwargs):
    batches = _batches(name)
    fused, fopt, flosses = _train(name, "onnxruntime", True, cls, kwargs, batches)
    host, hopt, hlosses = _train(name, "onnxruntime", False, cls, kwargs, batches)
    assert isinstance(fused._tensors, DeviceTensors) and not isinstance(host._tensors, DeviceTensors)
    np.testing.assert_allclose(flosses, hlosses, rtol=1e-5)
    initial, after, expected = _values(d5.executor(_net(name), "onnxruntime")), _values(fused), _values(host)
    changed = [k for k in expected if not np.array_equal(expected[k], initial[k])]
    assert len(changed) > 2  # the parameters (and the running statistics of bn_cnn) moved
    if name == "bn_cnn":
        assert any("mean" in k or "var" in k for k in changed)
    for k in expected:
        np.testing.assert_allclose(after[k], expected[k], rtol=1e-5, atol=1e-6, err_msg=k)
    # the optimizer's state dicts hold the host path's values when read
    for attr in ("velocity", "first", "second", "accumulator"):
        if hasattr(hopt, attr):
            got, want = dict(getattr(fopt, attr).items()), getattr(hopt, attr)
            assert set(got) == set(want)
            for k in want:
                np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-7, err_msg=f"{attr}[{k}]")
    # the last step's gradients are fetchable, as after the host path
    for p, g in fused.network.gradient("loss"):
        np.testing.assert_allclose(fused.network.fetch_tensor(g), host.network.fetch_tensor(g), rtol=1e-4,
                                   atol=1e-6, err_msg=g)


def test_fused_momentum_matches_the_reference_executor():
    batches = _batches("bn_cnn", seed=3)
    kwargs = {"learning_rate": 0.02, "momentum": 0.9}
    fused, _, flosses = _train("bn_cnn", "onnxruntime", True, ortfw.MomentumOptimizer, kwargs, batches)
    ref, _, rlosses = _train("bn_cnn", "reference", False, d5ref.MomentumOptimizer, kwargs, batches)
    np.testing.assert_allclose(flosses, rlosses, rtol=2e-4)
    want, got = _values(ref), _values(fused)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-3, atol=1e-5, err_msg=k)


def test_values_fed_between_steps_and_hyperparameters_changed_are_honoured():
    batches = _batches("lenet", seed=5) * 2
    runs = []
    for fused in (True, False):
        ex = d5.executor(_net("lenet"), "onnxruntime")
        ex.fused_training = fused
        opt = ortfw.MomentumOptimizer(ex, learning_rate=0.02, momentum=0.9)
        losses = []
        for i, b in enumerate(batches):
            if i == 2:
                p = ex.network.gradient("loss")[0][0]
                ex.network.feed_tensor(p, np.full_like(ex.network.fetch_tensor(p), 0.01))
                opt.velocity[p] = np.zeros_like(ex.network.fetch_tensor(p))
                opt.lr = 0.005
            losses.append(float(np.asarray(opt.step(b)["loss"])))
        # inference after training reads the trained parameters
        outputs = ex.inference(batches[0])["output"]
        runs.append((losses, _values(ex), outputs))
    (fl, fv, fo), (hl, hv, ho) = runs
    np.testing.assert_allclose(fl, hl, rtol=1e-5)
    for k in hv:
        np.testing.assert_allclose(fv[k], hv[k], rtol=1e-5, atol=1e-6, err_msg=k)
    np.testing.assert_allclose(fo, ho, rtol=1e-5, atol=1e-5)


def test_host_path_between_fused_steps_and_fallbacks():
    """A gradient_modifier, a subclass or an optimizer switch takes the host path, from the fused state."""
    batches = _batches("bn_cnn", seed=7) * 2

    class Halved(d5ref.GradientDescent):
        def update_rule(self, grad, old_param, param_name):
            return old_param - 0.5 * self.learning_rate * grad

    def run(fused):
        ex = d5.executor(_net("bn_cnn"), "onnxruntime")
        ex.fused_training = fused
        gd = ortfw.GradientDescent(ex, learning_rate=0.02)
        modified = ortfw.GradientDescent(ex, learning_rate=0.02, gradient_modifier=lambda n, p, g: 2 * g)
        halved = Halved(ex, learning_rate=0.02)
        losses = [float(np.asarray(o.step(b)["loss"])) for o, b in zip([gd, modified, gd, halved, gd, gd], batches)]
        return ex, losses

    fused, flosses = run(True)
    host, hlosses = run(False)
    assert fused._fused is not None and getattr(host, "_fused", None) is None
    np.testing.assert_allclose(flosses, hlosses, rtol=1e-5)
    want, got = _values(host), _values(fused)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_test_training_uses_the_fused_path():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((32, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 32)
    results = []
    for fused in (True, False):
        ex = d5.executor(_net("lenet"), "onnxruntime")
        ex.fused_training = fused
        train = d5.ShuffleSampler(d5.NumpyDataset(x, "input", y, "label"), 8, seed=0)
        opt = ortfw.MomentumOptimizer(ex, learning_rate=0.02, momentum=0.9)
        d5.test_training(ex, train, None, opt, 2, 8, events=[])
        results.append((_values(ex), ex))
    (fv, fex), (hv, _) = results
    assert fex._fused is not None
    for k in hv:
        np.testing.assert_allclose(fv[k], hv[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_training_bench_sides_take_the_same_steps():
    from deep500lite.errors import UserError
    import importlib.util
    import pathlib

    script = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "onnxruntime_training_bench.py"
    spec = importlib.util.spec_from_file_location("onnxruntime_training_bench", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    training_step = module.training_step

    fused, fex = training_step("onnxruntime", "lenet", 8, fused=True)
    host, hex_ = training_step("onnxruntime", "lenet", 8, fused=False)
    torch_losses = None
    if d5.registry.is_framework_available("torch"):
        step, _ = training_step("torch", "lenet", 8)
        torch_losses = [float(np.asarray(step())) for _ in range(2)]
    flosses = [float(np.asarray(fused())) for _ in range(2)]
    hlosses = [float(np.asarray(host())) for _ in range(2)]
    assert fex._fused is not None and getattr(hex_, "_fused", None) is None
    np.testing.assert_allclose(flosses, hlosses, rtol=1e-5)
    if torch_losses is not None:  # the same graph and weights on torch
        np.testing.assert_allclose(flosses, torch_losses, rtol=1e-3)
    with pytest.raises(UserError, match="Unknown model for the training bench"):
        training_step("onnxruntime", "resnet1000", 8)
