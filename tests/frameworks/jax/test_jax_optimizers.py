"""Same optimizer, same trajectory: each native jax optimizer against the reference optimizer.

The network's loss is ``sum_i sum(w_i * c_i)`` over float64 parameters ``w_i`` of several shapes,
so the gradient of ``w_i`` is the feed ``c_i``: both optimizers take the same given gradients
through their real ``step`` (the jax one in its fused compiled step). The gradients span 1e-4..1,
each element keeping its sign and scale, so where epsilon goes matters (as in
``tests/frameworks/reference/test_optimizer_equality.py``). After every step the displacement of
every parameter from its start must agree within 1e-6 relative, with no absolute slack.
"""

import numpy as np
import pytest

pytest.importorskip("jax", reason="needs jax")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import deep500lite as d5  # noqa: E402
from deep500lite.errors import UserError, UserTypeError  # noqa: E402
from deep500lite.frameworks import jax as d5jax  # noqa: E402
from deep500lite.frameworks import reference as d5ref  # noqa: E402

SHAPES = {"w0": (3,), "w1": (2, 3), "w2": (2, 2, 3), "w3": (4, 1, 2)}
STEPS = 5
CASES = {
    "GradientDescent": {"learning_rate": 2.0 ** -3},
    "MomentumOptimizer": {"learning_rate": 2.0 ** -4, "momentum": 0.875},
    "NesterovOptimizer": {"learning_rate": 2.0 ** -4, "momentum": 0.75},
    "AdaGradOptimizer": {"learning_rate": 2.0 ** -3, "epsilon": 1e-8},
    "RMSPropOptimizer": {"learning_rate": 2.0 ** -7, "beta": 0.875, "epsilon": 1e-8},
    "AdamOptimizer": {"learning_rate": 2.0 ** -7, "beta1": 0.875, "beta2": 1 - 2.0 ** -10, "epsilon": 1e-8},
}


def _gradients():
    rng = np.random.default_rng(14)
    size = sum(int(np.prod(s)) for s in SHAPES.values())
    exponents = rng.permutation(np.linspace(-4.0, 0.0, size))
    scales, signs, start = {}, {}, 0
    for name, shape in SHAPES.items():
        n = int(np.prod(shape))
        scales[name] = 10.0 ** exponents[start:start + n].reshape(shape)
        signs[name] = rng.choice([-1.0, 1.0], shape)
        start += n
    return [{f"c_{n}": signs[n] * scales[n] * rng.uniform(2 / 3, 1.5, SHAPES[n]) for n in SHAPES}
            for _ in range(STEPS)]


def _initial():
    rng = np.random.default_rng(3)
    return {n: rng.standard_normal(s) for n, s in SHAPES.items()}


def _network():
    nodes, terms = [], []
    for name in SHAPES:
        nodes += [helper.make_node("Mul", [name, f"c_{name}"], [f"{name}_c"]),
                  helper.make_node("ReduceSum", [f"{name}_c"], [f"{name}_sum"], keepdims=0)]
        terms.append(f"{name}_sum")
    nodes.append(helper.make_node("Sum", terms, ["loss"]))
    inputs = [helper.make_tensor_value_info(f"c_{n}", TensorProto.DOUBLE, list(s)) for n, s in SHAPES.items()]
    graph = helper.make_graph(nodes, "params", inputs, [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, [])],
                              initializer=[numpy_helper.from_array(v, n) for n, v in _initial().items()])
    return d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _run(module, framework, name, between=None, **extra):
    """The displacements ``w_t - w_0`` after each step of ``module.<name>`` on a ``framework`` executor."""
    ex = d5.executor(_network(), framework)
    optimizer = getattr(module, name)(ex, **CASES[name], **extra)
    start, runs = _initial(), []
    for t, feeds in enumerate(_gradients()):
        optimizer.step(feeds)
        runs.append({n: ex.network.fetch_tensor(n) - start[n] for n in SHAPES})
        if between is not None:
            between(t, optimizer, ex)
    return runs


def _assert_same(runs, expected):
    for t, (got, want) in enumerate(zip(runs, expected)):
        for n in SHAPES:
            assert got[n].dtype == np.float64
            np.testing.assert_allclose(got[n], want[n], rtol=1e-6, atol=0, err_msg=f"{n} after step {t + 1}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_native_optimizer_takes_the_reference_steps(name):
    _assert_same(_run(d5jax, "jax", name), _run(d5ref, "reference", name))


def test_forms_differ_on_these_gradients():
    """The comparison can fail: optax's own AdaGrad (epsilon inside the root) is off by far more than 1e-6."""
    import optax

    grads = _gradients()
    w, opt = {n: v.copy() for n, v in _initial().items()}, optax.adagrad(2.0 ** -3, initial_accumulator_value=0.0,
                                                                         eps=1e-8)
    state = opt.init(w)
    for g in grads:
        upd, state = opt.update({n: g[f"c_{n}"] for n in SHAPES}, state)
        w = optax.apply_updates(w, upd)
    ours = _run(d5jax, "jax", "AdaGradOptimizer")[-1]
    worst = max(np.max(np.abs((np.asarray(w[n]) - _initial()[n]) / ours[n] - 1)) for n in SHAPES)
    assert worst > 1e-3


def test_set_parameter_changes_the_rate_without_recompiling():
    compiled = {}

    def halve(t, optimizer, ex):
        if t == 1:
            compiled.setdefault("before", ex.compile_seconds)
            optimizer.set_parameter("learning_rate", CASES["AdamOptimizer"]["learning_rate"] / 2)
        if t == STEPS - 1:
            compiled.setdefault("after", ex.compile_seconds)

    ours = _run(d5jax, "jax", "AdamOptimizer", between=halve)
    _assert_same(ours, _run(d5ref, "reference", "AdamOptimizer", between=halve))
    assert compiled["after"] == compiled["before"] > 0


def test_gradient_modifier_runs_between_backward_and_update():
    def modifier(name, param, grad):
        assert param.shape == grad.shape == SHAPES[name]
        return 2 * grad + 0.5 * param

    _assert_same(_run(d5jax, "jax", "MomentumOptimizer", gradient_modifier=modifier),
                 _run(d5ref, "reference", "MomentumOptimizer", gradient_modifier=modifier))


def test_weight_decay_matches_a_modifier_adding_it():
    def decay(name, param, grad):
        return grad + 0.25 * param

    _assert_same(_run(d5jax, "jax", "RMSPropOptimizer", weight_decay=0.25),
                 _run(d5ref, "reference", "RMSPropOptimizer", gradient_modifier=decay))


def test_weight_decay_switched_on_and_off_between_steps_keeps_the_state():
    # A zero weight decay compiles no decay at all; turning it on (and off) rebuilds the transform
    # but keeps Adam's moments, so the steps stay the reference's (decay as a modifier there).
    def switch(t, optimizer, ex):
        if t in (1, 3):
            optimizer.set_parameter("weight_decay", 0.25 if t == 1 else 0.0)

    def decay(name, param, grad):
        return grad + state["wd"] * param

    state = {"wd": 0.0}

    def switch_reference(t, optimizer, ex):
        if t in (1, 3):
            state["wd"] = 0.25 if t == 1 else 0.0

    _assert_same(_run(d5jax, "jax", "AdamOptimizer", between=switch),
                 _run(d5ref, "reference", "AdamOptimizer", between=switch_reference, gradient_modifier=decay))


def test_deep500_call_form_and_argument_errors():
    ex = d5.executor(_network(), "jax")
    adam = d5jax.AdamOptimizer(ex, "loss", 0.01, 0.8)
    assert (adam.loss, adam.learning_rate, adam.beta1) == ("loss", 0.01, 0.8)
    with pytest.raises(UserError, match="dampening"):
        d5jax.MomentumOptimizer(ex, dampening=0.5)
    with pytest.raises(UserError, match="beta1"):
        d5jax.AdamOptimizer(ex, beta1=1.5)
    with pytest.raises(UserTypeError, match="JaxExecutor"):
        d5jax.GradientDescent(d5.executor(_network(), "reference"))
