"""The numpy reference optimizers, each checked against its formula (the seeds list them).

The optimizers run on a real executor with real gradients (a torch module through
``TorchNativeExecutor``, differentiated by autograd); the expected parameters are recomputed in
the test from the fetched gradients with the textbook formula.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch for a real executor with gradients")

from deep500lite.frameworks import reference as d5ref  # noqa: E402
from deep500lite.frameworks.torch import TorchNativeExecutor  # noqa: E402


def _executor(seed=0):
    torch.manual_seed(seed)
    module = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    return TorchNativeExecutor(module, input_names=["x"], output_names=["y"],
                               loss_fn=torch.nn.functional.mse_loss, label_name="label")


def _feeds(step):
    rng = np.random.default_rng(step)
    return {"x": rng.standard_normal((8, 5)).astype(np.float32),
            "label": rng.standard_normal((8, 2)).astype(np.float32)}


def _run(optimizer, steps, formula):
    """Step the optimizer and compare each new parameter with ``formula(t, name, w, g)``."""
    net = optimizer.network
    names = [p for p, _ in net.gradient("loss")]
    assert len(names) == 4
    for t in range(1, steps + 1):
        before = {n: net.fetch_tensor(n).astype(np.float64) for n in names}
        optimizer.step(_feeds(t))
        for n in names:
            g = net.fetch_tensor(f"{n}_grad").astype(np.float64)
            expected = formula(t, n, before[n], g)
            np.testing.assert_allclose(net.fetch_tensor(n), expected, rtol=2e-5, atol=2e-6, err_msg=f"step {t} {n}")


def test_gradient_descent():
    _run(d5ref.GradientDescent(_executor(), learning_rate=0.3), 3, lambda t, n, w, g: w - 0.3 * g)


def test_momentum():
    v = {}

    def formula(t, n, w, g):
        v[n] = 0.9 * v.get(n, 0) - 0.1 * g
        return w + v[n]

    _run(d5ref.MomentumOptimizer(_executor(), learning_rate=0.1, momentum=0.9), 4, formula)


def test_momentum_is_qian_form():
    """w_{t+1} = w_t + mu (w_t - w_{t-1}) - lr g_t, written without a velocity."""
    opt = d5ref.MomentumOptimizer(_executor(), learning_rate=0.05, momentum=0.8)
    net, name = opt.network, opt.network.gradient("loss")[0][0]
    history = [net.fetch_tensor(name).astype(np.float64)]
    for t in range(1, 4):
        opt.step(_feeds(t))
        g = net.fetch_tensor(f"{name}_grad").astype(np.float64)
        prev = history[-2] if len(history) > 1 else history[-1]
        expected = history[-1] + 0.8 * (history[-1] - prev) - 0.05 * g
        np.testing.assert_allclose(net.fetch_tensor(name), expected, rtol=2e-5, atol=2e-6)
        history.append(net.fetch_tensor(name).astype(np.float64))


def test_nesterov():
    v = {}

    def formula(t, n, w, g):
        v[n] = 0.9 * v.get(n, 0) - 0.1 * g
        return w + 0.9 * v[n] - 0.1 * g

    _run(d5ref.NesterovOptimizer(_executor(), learning_rate=0.1, momentum=0.9), 3, formula)


def _denominator(placement, a, eps):
    """The module docstring's forms: ``sqrt(A) + eps`` (the default, torch.optim) or ``sqrt(A + eps)``."""
    return np.sqrt(a + eps) if placement == "inside" else np.sqrt(a) + eps


# None: the default, "outside"; "inside": the seeds' formula, kept as an option
PLACEMENTS = pytest.mark.parametrize("placement", [None, "outside", "inside"])


def _placement_kw(placement):
    return {} if placement is None else {"epsilon_placement": placement}


@PLACEMENTS
def test_adagrad(placement):
    acc = {}

    def formula(t, n, w, g):
        acc[n] = acc.get(n, 0) + g * g
        return w - 0.2 * g / _denominator(placement, acc[n], 1e-8)

    _run(d5ref.AdaGradOptimizer(_executor(), learning_rate=0.2, **_placement_kw(placement)), 3, formula)


@PLACEMENTS
def test_rmsprop(placement):
    acc = {}

    def formula(t, n, w, g):
        acc[n] = 0.8 * acc.get(n, 0) + 0.2 * g * g
        return w - 0.01 * g / _denominator(placement, acc[n], 1e-6)

    _run(d5ref.RMSPropOptimizer(_executor(), learning_rate=0.01, beta=0.8, epsilon=1e-6, **_placement_kw(placement)),
         3, formula)


@pytest.mark.parametrize("placement", [None, "outside", "inside", "keras"])
def test_adam_bias_corrected(placement):
    m, v = {}, {}

    def formula(t, n, w, g):
        m[n] = 0.9 * m.get(n, 0) + 0.1 * g
        v[n] = 0.999 * v.get(n, 0) + 0.001 * g * g
        m_hat, v_hat = m[n] / (1 - 0.9 ** t), v[n] / (1 - 0.999 ** t)
        if placement == "keras":  # epsilon added to sqrt(v) before bias correction
            return w - 0.01 * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t) * m[n] / (np.sqrt(v[n]) + 1e-8)
        return w - 0.01 * m_hat / _denominator(placement, v_hat, 1e-8)

    _run(d5ref.AdamOptimizer(_executor(), learning_rate=0.01, **_placement_kw(placement)), 4, formula)


def test_adam_first_step_moves_by_learning_rate():
    """With bias correction, Adam's first step is lr * sign(g) (up to epsilon)."""
    opt = d5ref.AdamOptimizer(_executor(), learning_rate=0.01, epsilon=1e-12)
    name = opt.network.gradient("loss")[0][0]
    before = opt.network.fetch_tensor(name).copy()
    opt.step(_feeds(1))
    g = opt.network.fetch_tensor(f"{name}_grad")
    np.testing.assert_allclose(opt.network.fetch_tensor(name) - before, -0.01 * np.sign(g), atol=1e-6)


def test_accelegrad():
    y, z, s = {}, {}, {}

    def formula(t, n, w, g):
        alpha = 1.0 if t <= 2 else (t + 1) / 4
        if n not in y:
            y[n], z[n] = w.copy(), w.copy()
        x = z[n] / alpha + (1 - 1 / alpha) * y[n]
        s[n] = s.get(n, 0) + alpha ** 2 * float((g * g).sum())
        eta = 2 * 5.0 / np.sqrt(1.0 + s[n])
        z[n] = z[n] - alpha * eta * g
        y[n] = x - eta * g
        return y[n]

    _run(d5ref.AcceleGradOptimizer(_executor(), diameter=5.0, gradient_bound=1.0), 5, formula)


def test_gradient_modifier_weight_decay():
    decay = lambda name, w, g: g + 0.1 * w  # noqa: E731
    _run(d5ref.GradientDescent(_executor(), learning_rate=0.3, gradient_modifier=decay), 2,
         lambda t, n, w, g: w - 0.3 * (g + 0.1 * w))


def test_set_parameter_changes_learning_rate():
    opt = d5ref.GradientDescent(_executor(), learning_rate=0.3)
    lrs = {1: 0.3, 2: 0.3, 3: 0.05}

    def formula(t, n, w, g):
        if t == 2 and n == opt.network.gradient("loss")[-1][0]:
            opt.set_parameter("learning_rate", 0.05)  # takes effect from step 3
        return w - lrs[t] * g

    _run(opt, 3, formula)
    with pytest.raises(AttributeError, match="GradientDescent has no hyperparameter 'rate'"):
        opt.set_parameter("rate", 0.1)


def test_training_lowers_the_loss():
    opt = d5ref.AdamOptimizer(_executor(), learning_rate=0.05)
    feeds = _feeds(0)
    first = float(opt.step(feeds)["loss"])
    for _ in range(30):
        last = float(opt.step(feeds)["loss"])
    assert last < 0.5 * first


@pytest.mark.parametrize("bad", [0, -1.0, "fast"])
def test_bad_hyperparameter(bad):
    with pytest.raises(ValueError, match=r"learning_rate must be a finite number > 0. Received: "):
        d5ref.GradientDescent(_executor(), learning_rate=bad)
