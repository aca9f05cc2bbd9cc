"""Same optimizer, same update: each reference optimizer against ``torch.optim`` and Keras 3.

Every optimizer takes the same 5 given gradients (through its real ``step``: a
``gradient_modifier`` replaces the network's gradient with the given one) on float64 parameters
of several shapes; ``torch.optim`` (``p.grad`` set, ``opt.step()``) and the Keras optimizer
(``apply_gradients`` on float64 ``keras.Variable``s) take the same 5. After every step the
parameters' displacement from their start must agree within 1e-6 relative, with no absolute
slack: each element's gradient keeps its sign over the steps, so no displacement cancels to
near zero. The gradients span 1e-4..1 with every element staying within a factor 1.5 of its own
scale, so the small ones keep the accumulators near epsilon and where epsilon goes matters:
:func:`test_the_forms_differ_on_these_gradients` shows the forms that are not supposed to agree
differ by far more than the tolerance.

The reference's default (``epsilon_placement="outside"``) is compared with torch; Keras puts
epsilon inside the root for Adagrad and RMSprop and adds it before bias correction in Adam, so
the reference is compared with Keras in ``"inside"`` (AdaGrad, RMSProp) and ``"keras"`` (Adam).
"""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import deep500lite as d5
from deep500lite.errors import UserError
from deep500lite.frameworks import reference as d5ref

SHAPES = {"w0": (3,), "w1": (2, 3), "w2": (2, 2, 3), "w3": (4, 1, 2)}
STEPS = 5

# Every hyperparameter but epsilon is a dyadic fraction that float32 holds exactly. Keras keeps the
# learning rate in a float32 variable (backend.floatx()), and its ops.cast of a Python float (the
# momentum, Adam's betas in the bias correction) goes through a float32 tensor: with beta2=0.999
# Keras's Adam steps 6.7e-6 relative shorter than the float64 formula, more than the tolerance.
# Epsilon's float32 rounding (6e-9 relative for 1e-8) changes the steps by far less than 1e-6.
CASES = {
    "GradientDescent": {"learning_rate": 2.0 ** -3},
    "MomentumOptimizer": {"learning_rate": 2.0 ** -4, "momentum": 0.875},
    "NesterovOptimizer": {"learning_rate": 2.0 ** -4, "momentum": 0.75},
    "AdaGradOptimizer": {"learning_rate": 2.0 ** -3, "epsilon": 1e-8},
    "RMSPropOptimizer": {"learning_rate": 2.0 ** -7, "beta": 0.875, "epsilon": 1e-8},
    "AdamOptimizer": {"learning_rate": 2.0 ** -7, "beta1": 0.875, "beta2": 1 - 2.0 ** -10, "epsilon": 1e-8},
}
# the reference form that is Keras's update (the others need none)
KERAS_FORM = {"AdaGradOptimizer": "inside", "RMSPropOptimizer": "inside", "AdamOptimizer": "keras"}


def _gradients():
    """STEPS gradients per parameter: a fixed sign and scale per element, scales 1e-4..1."""
    rng = np.random.default_rng(14)
    size = sum(int(np.prod(s)) for s in SHAPES.values())
    exponents = rng.permutation(np.linspace(-4.0, 0.0, size))
    scales, signs, start = {}, {}, 0
    for name, shape in SHAPES.items():
        n = int(np.prod(shape))
        scales[name] = 10.0 ** exponents[start:start + n].reshape(shape)
        signs[name] = rng.choice([-1.0, 1.0], shape)
        start += n
    return [{n: signs[n] * scales[n] * rng.uniform(2 / 3, 1.5, SHAPES[n]) for n in SHAPES} for _ in range(STEPS)]


def _initial():
    rng = np.random.default_rng(3)
    return {n: rng.standard_normal(s) for n, s in SHAPES.items()}


def _network():
    """A float64 network whose parameters are SHAPES and whose loss depends on all of them."""
    nodes, terms = [], []
    for name in SHAPES:
        nodes += [helper.make_node("Mul", [name, "x"], [f"{name}_x"]),
                  helper.make_node("ReduceSum", [f"{name}_x"], [f"{name}_sum"], keepdims=0)]
        terms.append(f"{name}_sum")
    nodes.append(helper.make_node("Sum", terms, ["loss"]))
    graph = helper.make_graph(nodes, "params", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [])],
                              [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, [])],
                              initializer=[numpy_helper.from_array(v, n) for n, v in _initial().items()])
    return d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _reference_run(name, **extra):
    """The displacements ``w_t - w_0`` after each step of the reference optimizer's ``step``."""
    net = _network()
    given = {}

    def given_gradient(param_name, param, grad):
        assert grad.shape == given[param_name].shape and param.dtype == np.float64
        return given[param_name]

    optimizer = getattr(d5ref, name)(d5.executor(net, "reference"), gradient_modifier=given_gradient,
                                     **CASES[name], **extra)
    assert sorted(p for p, _ in net.gradient("loss")) == sorted(SHAPES)
    start = _initial()
    runs = []
    for grads in _gradients():
        given.update(grads)
        optimizer.step({"x": np.array(1.0)})
        runs.append({n: net.fetch_tensor(n) - start[n] for n in SHAPES})
    return runs


def _torch_run(name):
    import torch

    kw = CASES[name]
    params = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in _initial().items()}
    lr, plist = kw["learning_rate"], list(params.values())
    optimizer = {
        "GradientDescent": lambda: torch.optim.SGD(plist, lr=lr),
        "MomentumOptimizer": lambda: torch.optim.SGD(plist, lr=lr, momentum=kw["momentum"], dampening=0),
        "NesterovOptimizer": lambda: torch.optim.SGD(plist, lr=lr, momentum=kw["momentum"], dampening=0,
                                                     nesterov=True),
        "AdaGradOptimizer": lambda: torch.optim.Adagrad(plist, lr=lr, lr_decay=0, initial_accumulator_value=0,
                                                        eps=kw["epsilon"]),
        "RMSPropOptimizer": lambda: torch.optim.RMSprop(plist, lr=lr, alpha=kw["beta"], eps=kw["epsilon"],
                                                        momentum=0, centered=False),
        "AdamOptimizer": lambda: torch.optim.Adam(plist, lr=lr, betas=(kw["beta1"], kw["beta2"]),
                                                  eps=kw["epsilon"]),
    }[name]()
    start = _initial()
    runs = []
    for grads in _gradients():
        for n, p in params.items():
            p.grad = torch.tensor(grads[n], dtype=torch.float64)
        optimizer.step()
        runs.append({n: p.detach().numpy() - start[n] for n, p in params.items()})
    return runs


def _keras_run(name):
    import keras

    kw = CASES[name]
    lr = kw["learning_rate"]
    optimizer = {
        "GradientDescent": lambda: keras.optimizers.SGD(learning_rate=lr),
        "MomentumOptimizer": lambda: keras.optimizers.SGD(learning_rate=lr, momentum=kw["momentum"]),
        "NesterovOptimizer": lambda: keras.optimizers.SGD(learning_rate=lr, momentum=kw["momentum"],
                                                          nesterov=True),
        "AdaGradOptimizer": lambda: keras.optimizers.Adagrad(learning_rate=lr, initial_accumulator_value=0.0,
                                                             epsilon=kw["epsilon"]),
        "RMSPropOptimizer": lambda: keras.optimizers.RMSprop(learning_rate=lr, rho=kw["beta"], momentum=0.0,
                                                             epsilon=kw["epsilon"], centered=False),
        "AdamOptimizer": lambda: keras.optimizers.Adam(learning_rate=lr, beta_1=kw["beta1"],
                                                       beta_2=kw["beta2"], epsilon=kw["epsilon"]),
    }[name]()
    start = _initial()
    variables = {n: keras.Variable(v, dtype="float64", name=n) for n, v in start.items()}
    runs = []
    for grads in _gradients():
        optimizer.apply_gradients([(keras.ops.convert_to_tensor(grads[n], dtype="float64"), variables[n])
                                   for n in SHAPES])
        runs.append({n: np.asarray(keras.ops.convert_to_numpy(v)) - start[n] for n, v in variables.items()})
    return runs


def _assert_same_steps(got, expected, what):
    for t, (g, e) in enumerate(zip(got, expected, strict=True), start=1):
        for n in SHAPES:
            assert g[n].dtype == np.float64
            np.testing.assert_allclose(g[n], e[n], rtol=1e-6, atol=0, err_msg=f"{what}, step {t}, {n}")


def _max_relative_difference(a, b):
    return max(float(np.max(np.abs(x[n] - y[n]) / np.abs(y[n]))) for x, y in zip(a, b) for n in SHAPES)


@pytest.mark.requires("torch")
@pytest.mark.parametrize("name", list(CASES))
def test_reference_default_takes_the_steps_of_torch_optim(name):
    _assert_same_steps(_reference_run(name), _torch_run(name), f"reference {name} vs torch.optim")


@pytest.mark.requires("tensorflow", "keras")
@pytest.mark.parametrize("name", list(CASES))
def test_reference_in_keras_form_takes_the_steps_of_keras(name):
    extra = {"epsilon_placement": KERAS_FORM[name]} if name in KERAS_FORM else {}
    _assert_same_steps(_reference_run(name, **extra), _keras_run(name), f"reference {name} {extra} vs Keras")


@pytest.mark.parametrize("name", list(KERAS_FORM))
def test_the_forms_differ_on_these_gradients(name):
    """Each pair of epsilon forms differs by far more than the 1e-6 the equality tests allow."""
    forms = ("outside", "inside", "keras") if name == "AdamOptimizer" else ("outside", "inside")
    runs = {form: _reference_run(name, epsilon_placement=form) for form in forms}
    for i, a in enumerate(forms):
        for b in forms[i + 1:]:
            assert _max_relative_difference(runs[a], runs[b]) > 1e-4, (a, b)


def test_default_is_outside_and_inside_is_the_seeds_formula():
    default, inside = _reference_run("AdaGradOptimizer"), _reference_run("AdaGradOptimizer",
                                                                          epsilon_placement="inside")
    _assert_same_steps(default, _reference_run("AdaGradOptimizer", epsilon_placement="outside"), "default")
    lr, eps, start = CASES["AdaGradOptimizer"]["learning_rate"], CASES["AdaGradOptimizer"]["epsilon"], _initial()
    w, acc = dict(start), {n: 0.0 for n in SHAPES}
    for t, grads in enumerate(_gradients()):
        for n in SHAPES:
            acc[n] = acc[n] + grads[n] ** 2
            w[n] = w[n] - lr * grads[n] / np.sqrt(acc[n] + eps)
            np.testing.assert_allclose(inside[t][n], w[n] - start[n], rtol=1e-12, atol=0)


@pytest.mark.parametrize("name,bad", [("AdaGradOptimizer", "keras"), ("RMSPropOptimizer", "Outside"),
                                      ("AdamOptimizer", "torch"), ("AdamOptimizer", None)])
def test_unknown_epsilon_placement_is_refused(name, bad):
    allowed = "'outside', 'inside', 'keras'" if name == "AdamOptimizer" else "'outside', 'inside'"
    with pytest.raises(UserError, match=rf"{name}: epsilon_placement must be one of {allowed} .*Received: {bad!r}"):
        getattr(d5ref, name)(d5.executor(_network(), "reference"), epsilon_placement=bad)


def test_set_parameter_changes_the_form_and_checks_it():
    net = _network()
    optimizer = d5ref.RMSPropOptimizer(d5.executor(net, "reference"), learning_rate=0.01)
    assert optimizer.epsilon_placement == "outside"
    optimizer.set_parameter("epsilon_placement", "inside")
    optimizer.set_parameter("epsilon", 1e-6)
    before = net.fetch_tensor("w0")
    optimizer.step({"x": np.array(1.0)})  # the gradient of w0 is x = 1 everywhere
    a = 0.1 * 1.0
    np.testing.assert_allclose(net.fetch_tensor("w0"), before - 0.01 / np.sqrt(a + 1e-6), rtol=1e-12)
    optimizer.set_parameter("epsilon_placement", "center")
    with pytest.raises(UserError, match="epsilon_placement must be one of 'outside', 'inside'.*Received: 'center'"):
        optimizer.step({"x": np.array(1.0)})
