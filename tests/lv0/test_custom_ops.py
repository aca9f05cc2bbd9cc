"""Custom operators as nodes of ONNX networks and as native operators of every framework.

The expected values come from the same network written with standard ONNX operators (Swish as
``x * Sigmoid(x)``) run on the reference executor, or from the frameworks' own Swish (SiLU).
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import deep500lite as d5
from deep500lite import registry
from deep500lite.datasets import dataset_loss
from deep500lite.errors import UnsupportedOperatorError

B, D, H, C = 8, 16, 32, 10
_names = itertools.count()


class Swish(d5.CustomPythonOp):
    """x * sigmoid(x) in numpy."""

    def forward(self, x):
        return (x / (1 + np.exp(-x))).astype(x.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = fwd_inputs[0]
        s = 1 / (1 + np.exp(-x))
        return (grads[0] * (s + x * s * (1 - s))).astype(x.dtype)


def swish_op(shape=(B, H), dtype=np.float32):
    return Swish([d5.tensordesc(dtype, shape)], [d5.tensordesc(dtype, shape)])


@pytest.fixture
def op_type():
    """A fresh op type per test, unregistered afterwards."""
    name = f"TestSwish{next(_names)}"
    yield name
    d5.unregister_op(name)


def _network(custom_op=None, op_type=None):
    """MatMul -> Swish -> MatMul -> softmax cross-entropy; Swish custom or from standard ops."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.normal(size=(D, H)) * 0.3).astype(np.float32), "W1"),
             numpy_helper.from_array((rng.normal(size=(H, C)) * 0.3).astype(np.float32), "W2")]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"])]
    if custom_op is None:
        nodes += [helper.make_node("Sigmoid", ["h"], ["sg"]), helper.make_node("Mul", ["h", "sg"], ["s"]),
                  helper.make_node("MatMul", ["s", "W2"], ["logits"])]
        out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, C])
    else:
        out = helper.make_tensor_value_info("h", TensorProto.FLOAT, [B, H])
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, D])], [out],
                              initializer=inits)
    net = d5.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    if custom_op is not None:
        net.add_custom_operation(op_type, ["h"], ["s"], op=custom_op)
        net.add_operation(helper.make_node("MatMul", ["s", "W2"], ["logits"]))
    net.add_operation(dataset_loss("digits")(["logits", "label"], "loss"))
    return net


def _feeds(seed=1):
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=(B, D)).astype(np.float32), "label": rng.integers(0, C, B).astype(np.int64)}


def _train(net, framework, steps=5):
    """A few momentum steps with the reference optimizer; returns the losses and final parameters."""
    from deep500lite.frameworks.reference import MomentumOptimizer

    ex = d5.executor(net, framework)
    opt = MomentumOptimizer(ex, learning_rate=0.1, momentum=0.9, loss="loss")
    losses = [float(opt.step(_feeds(seed))["loss"]) for seed in range(steps)]
    return losses, {k: ex.network.fetch_tensors([k])[0] for k in ("W1", "W2")}


@pytest.fixture(scope="module")
def expected():
    """Outputs, gradients and a short training run of the standard-op network on the reference executor."""
    net = _network()
    ex = d5.executor(net, "reference")
    out = ex.inference_and_backprop(_feeds(), "loss")
    grads = {k: net.fetch_tensors([k + "_grad"])[0] for k in ("W1", "W2")}
    losses, params = _train(_network(), "reference")
    return out, grads, losses, params


def _require_custom_ops(framework):
    if not registry.spec(framework).custom_ops:
        pytest.skip(f"{framework} does not run custom operators in its graphs (its spec: custom_ops=False)")


def test_python_op_in_network_forward_and_gradients(framework, op_type, expected):
    _require_custom_ops(framework)
    out, grads, _, _ = expected
    net = _network(swish_op(), op_type)
    ex = d5.executor(net, framework)
    logits = ex.inference(_feeds())["logits"]
    np.testing.assert_allclose(logits, out["logits"], rtol=1e-5, atol=1e-5)
    result = ex.inference_and_backprop(_feeds(), "loss")
    np.testing.assert_allclose(result["loss"], out["loss"], rtol=1e-5)
    for k, g in grads.items():
        np.testing.assert_allclose(net.fetch_tensors([k + "_grad"])[0], g, rtol=1e-4, atol=1e-6)


def test_python_op_network_trains(framework, op_type, expected):
    _require_custom_ops(framework)
    _, _, want_losses, want_params = expected
    losses, params = _train(_network(swish_op(), op_type), framework)
    assert losses[-1] < losses[0]
    np.testing.assert_allclose(losses, want_losses, rtol=1e-4)
    for k, v in want_params.items():
        np.testing.assert_allclose(params[k], v, rtol=1e-4, atol=1e-5)


def test_unregistered_custom_node_is_refused_by_name(framework):
    net = _network()
    net.add_operation(helper.make_node("NoSuchOp", ["logits"], ["z"], domain=d5.CUSTOM_DOMAIN))
    with pytest.raises(UnsupportedOperatorError, match="NoSuchOp.*register_op"):
        d5.executor(net, framework)


def _convert_custom_node(framework, node, model):
    """Run ``framework``'s converter of custom-domain nodes on ``node`` directly (no support check)."""
    if framework == "reference":
        from deep500lite.frameworks.reference.custom import op_run_classes

        op_run_classes(model)
    elif framework == "torch":
        import torch

        from deep500lite.frameworks.torch.ops import NodeSpec, build_node

        build_node(NodeSpec(node, 17, [], torch.device("cpu")))
    elif framework == "tensorflow":
        from deep500lite.frameworks.tensorflow.ops import build_node

        build_node(node, 17)
    else:
        import onnxruntime

        from deep500lite.frameworks.onnxruntime.custom import session_options_for

        session_options_for(model, onnxruntime.SessionOptions(), {})


def test_unregistered_custom_node_gets_one_message_everywhere(framework):
    """Every executor's support check and every converter refuse an unregistered op with one message."""
    from deep500lite.lv0.custom import lookup_custom_op

    net = _network()
    node = helper.make_node("NoSuchOp", ["logits"], ["z"], name="unknown", domain=d5.CUSTOM_DOMAIN)
    net.add_operation(node)
    with pytest.raises(UnsupportedOperatorError) as expected:
        lookup_custom_op("NoSuchOp", d5.CUSTOM_DOMAIN, "unknown")
    message = str(expected.value)
    assert message.startswith("Operator 'ai.onnx.contrib::NoSuchOp' (node 'unknown') is not a registered custom "
                              "operator.")
    assert "d5.register_op(op, 'NoSuchOp'" in message and "Network.add_custom_operation" in message
    assert message.endswith("Received: op_type='NoSuchOp', domain='ai.onnx.contrib'.")
    with pytest.raises(UnsupportedOperatorError) as raised:
        d5.executor(net, framework)
    assert str(raised.value) == message
    with pytest.raises(UnsupportedOperatorError) as converted:
        _convert_custom_node(framework, node, net.to_onnx())
    assert str(converted.value) == message


def test_add_custom_operation_checks_arity(op_type):
    net = _network()
    with pytest.raises(d5.ModelError, match="takes 1 input"):
        net.add_custom_operation(op_type, ["logits", "logits"], ["z"], op=swish_op((B, C)))


def test_register_op_rejects_bad_names():
    with pytest.raises(d5.UserError, match="identifier"):
        d5.register_op(swish_op(), "not a name")
    with pytest.raises(d5.UserError, match="custom domain"):
        d5.register_op(swish_op(), "Fine", domain="")


def test_onnxruntime_refuses_other_custom_domains(op_type):
    pytest.importorskip("onnxruntime_extensions")
    net = _network()
    net.add_custom_operation(op_type, ["logits"], ["z"], op=swish_op((B, C)), domain="my.domain")
    with pytest.raises(UnsupportedOperatorError, match="ai.onnx.contrib"):
        d5.executor(net, "onnxruntime")
    assert d5.executor(net, "reference").inference(_feeds())["z"].shape == (B, C)


# ------------------------------------------------------------------ native operators per framework
def _x(seed=0, shape=(B, H)):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def test_torch_custom_op_matches_silu_and_its_gradient():
    torch = pytest.importorskip("torch")
    from deep500lite.frameworks.torch import custom_op

    fn = custom_op(swish_op())
    x = torch.tensor(_x(), requires_grad=True)
    y, = fn(x)  # a tuple, one tensor per output (Deep500's form)
    (y * torch.arange(H, dtype=torch.float32)).sum().backward()
    x2 = torch.tensor(_x(), requires_grad=True)
    y2 = torch.nn.functional.silu(x2)
    (y2 * torch.arange(H, dtype=torch.float32)).sum().backward()
    torch.testing.assert_close(y, y2.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="input 0 must be float32\\[8x32\\]"):
        fn(torch.zeros(3, 3))
    # as many elements in another shape: run in the declared shape, the gradient in the input's
    flat = torch.tensor(_x().reshape(-1), requires_grad=True)
    z, = fn(flat)
    z.sum().backward()
    assert z.shape == (B, H) and flat.grad.shape == (B * H,)
    torch.testing.assert_close(z, y.detach(), rtol=0, atol=0)


def test_tensorflow_custom_op_matches_silu_and_its_gradient():
    tf = pytest.importorskip("tensorflow")
    from deep500lite.frameworks.tensorflow import custom_op

    custom = custom_op(swish_op())

    def fn(x):
        y, = custom(x)  # a tuple, one tensor per output
        return y

    w = tf.range(H, dtype=tf.float32)

    @tf.function
    def grad_of(f, x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
            loss = tf.reduce_sum(y * w)
        return y, tape.gradient(loss, x)

    x = tf.constant(_x())
    y, g = grad_of(fn, x)
    y2, g2 = grad_of(tf.nn.silu, x)
    np.testing.assert_allclose(y.numpy(), y2.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g.numpy(), g2.numpy(), rtol=1e-5, atol=1e-6)


def test_onnxruntime_custom_op_runs_in_a_session_with_standard_ops(op_type):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxruntime_extensions")
    from deep500lite.frameworks.onnxruntime import custom_op

    native = custom_op(swish_op(), op_type)
    x = _x()
    (alone,) = native(x)
    np.testing.assert_allclose(alone, x / (1 + np.exp(-x)), rtol=1e-6)
    graph = helper.make_graph(
        [native.node(["x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, H])])
    model = helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(d5.CUSTOM_DOMAIN, 1)])
    session = ort.InferenceSession(model.SerializeToString(), native.session_options(),
                                   providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": x})
    np.testing.assert_allclose(y, np.maximum(x / (1 + np.exp(-x)), 0), rtol=1e-6)


def test_reference_custom_op_is_an_op_run_class():
    from onnx.reference.op_run import OpRun

    from deep500lite.frameworks.reference import custom_op

    cls = custom_op(swish_op(), "Swish")
    assert issubclass(cls, OpRun) and cls.op_domain == d5.CUSTOM_DOMAIN
    node = d5.custom_node("Swish", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, H])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, H])])
    model = helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(d5.CUSTOM_DOMAIN, 1)])
    x = _x()
    (y,) = onnx.reference.ReferenceEvaluator(model, new_ops=[cls]).run(None, {"x": x})
    np.testing.assert_allclose(y, x / (1 + np.exp(-x)), rtol=1e-6)


# ------------------------------------------------------------------ the same with a compiled C++ operator
OPS = Path(__file__).resolve().parents[1] / "data" / "ops"


@pytest.fixture(scope="module")
def cpp_swish(tmp_path_factory):
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        pytest.skip("no C++ compiler on this machine")
    d = d5.tensordesc(np.float32, (B, H))
    return d5.compile_custom_cppop("test_swish", OPS / "swish.cpp", [d], [d],
                                   build_dir=tmp_path_factory.mktemp("ops"))


def test_cpp_op_in_network_forward_gradients_and_training(framework, op_type, expected, cpp_swish):
    _require_custom_ops(framework)
    out, grads, want_losses, want_params = expected
    net = _network(cpp_swish, op_type)
    ex = d5.executor(net, framework)
    np.testing.assert_allclose(ex.inference(_feeds())["logits"], out["logits"], rtol=1e-5, atol=1e-5)
    ex.inference_and_backprop(_feeds(), "loss")
    for k, g in grads.items():
        np.testing.assert_allclose(net.fetch_tensors([k + "_grad"])[0], g, rtol=1e-4, atol=1e-6)
    losses, params = _train(_network(cpp_swish, op_type), framework)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-4)
    for k, v in want_params.items():
        np.testing.assert_allclose(params[k], v, rtol=1e-4, atol=1e-5)


def test_torch_runs_a_cpp_op_on_tensor_memory_without_numpy(cpp_swish, monkeypatch):
    torch = pytest.importorskip("torch")
    from deep500lite.frameworks.torch import custom_op

    def no_numpy(*args, **kwargs):
        raise AssertionError("the numpy path was taken")

    monkeypatch.setattr(cpp_swish, "forward", no_numpy)
    monkeypatch.setattr(cpp_swish, "backward", no_numpy)
    seen = []
    real = cpp_swish.forward_ptrs

    def spy(inputs, outputs, cuda=False):
        seen.append((list(inputs), list(outputs)))
        return real(inputs, outputs, cuda=cuda)

    monkeypatch.setattr(cpp_swish, "forward_ptrs", spy)
    x = torch.tensor(_x(), requires_grad=True)
    y, = custom_op(cpp_swish)(x)
    y.sum().backward()
    assert seen == [([x.data_ptr()], [y.data_ptr()])]
    torch.testing.assert_close(y, torch.nn.functional.silu(x).detach(), rtol=1e-5, atol=1e-6)
    x2 = torch.tensor(_x(), requires_grad=True)
    torch.nn.functional.silu(x2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ validation of both kinds of operator
def test_python_and_cpp_swish_validate(cpp_swish):
    x = _x(3)
    want = x / (1 + np.exp(-x.astype(np.float64)))
    for op in (swish_op(), cpp_swish):
        assert d5.test_op_forward(op, [x], [want.astype(np.float32)], verbose=False).passed
        result = d5.test_op_gradient(op, [x], verbose=False)
        assert result.passed, result.reason


def test_cpp_op_with_a_wrong_backward_fails_the_gradient_check(tmp_path):
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        pytest.skip("no C++ compiler on this machine")
    d = d5.tensordesc(np.float32, (1024,))
    wrong = d5.compile_custom_cppop("wrong_square", OPS / "square_wrong_grad.cpp", [d], [d], build_dir=tmp_path)
    x = np.random.default_rng(0).uniform(0.5, 2.0, 1024).astype(np.float32)
    assert d5.test_op_forward(wrong, [x], [x * x], verbose=False).passed
    result = d5.test_op_gradient(wrong, [x], verbose=False)
    assert not result.passed and "input" in result.reason


def test_adding_an_unregistered_custom_node_gives_the_executors_message():
    """Network.add_custom_operation looks the op up like every executor: one message."""
    from deep500lite.lv0.custom import lookup_custom_op

    net = d5.Network(onnx.helper.make_model(onnx.helper.make_graph(
        [], "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])])))
    with pytest.raises(d5.UnsupportedOperatorError) as expected:
        lookup_custom_op("NeverRegisteredOp", d5.CUSTOM_DOMAIN)
    with pytest.raises(d5.UnsupportedOperatorError) as got:
        net.add_custom_operation("NeverRegisteredOp", ["x"], ["y"])
    assert str(got.value) == str(expected.value)
