"""``d5.ops``: Deep500's losses appended to a network, run and differentiated on every executor;
the dtype names; Deep500's compile arguments (``live_output``, ``other_files``, output folder)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import deep500lite as d5


def _linear_network(n=4, d=3, k=2):
    w = np.random.default_rng(0).normal(size=(d, k)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, k])],
        [onnx.numpy_helper.from_array(w, "w")])
    return d5.Network(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])), w


def test_dtype_names_are_numpy_types():
    assert d5.float32 is np.float32 and d5.int64 is np.int64 and d5.uint8 is np.uint8
    assert d5.tensordesc(d5.float32, [3]).dtype == np.dtype(np.float32)


@pytest.mark.parametrize("framework", ["reference", "torch", "tensorflow", "onnxruntime"])
def test_mean_squared_error_value_and_gradient(framework):
    if not d5.is_framework_available(framework):
        pytest.skip(f"{framework} is not installed")
    net, w = _linear_network()
    net.add_operation(d5.ops.MeanSquaredError(["y", "ground_truth"], "loss"))
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 3)).astype(np.float32)
    t = rng.normal(size=(4, 2)).astype(np.float32)
    ex = d5.executor(net, framework)
    out = ex.inference_and_backprop({"x": x, "ground_truth": t}, "loss")
    y = x.astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(float(out["loss"]), np.mean((y - t) ** 2), rtol=1e-5)
    expected_grad = x.T.astype(np.float64) @ (2 * (y - t) / y.size)
    np.testing.assert_allclose(ex.network.fetch_tensor("w_grad"), expected_grad, rtol=1e-4, atol=1e-6)


def test_softmax_cross_entropy_and_cross_entropy_values():
    net, w = _linear_network()
    net.add_operation(d5.ops.SoftmaxCrossEntropy(["y", "label"], "loss"))
    x = np.random.default_rng(2).normal(size=(4, 3)).astype(np.float32)
    labels = np.array([0, 1, 1, 0], np.int64)
    out = d5.executor(net, "reference").inference({"x": x, "label": labels})
    logits = x.astype(np.float64) @ w
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    np.testing.assert_allclose(float(out["loss"]), -logp[np.arange(4), labels].mean(), rtol=1e-5)

    net2, w2 = _linear_network()
    net2.add_operation(helper.make_node("Softmax", ["y"], ["p"], axis=-1))
    net2.add_operation(d5.ops.CrossEntropy(["p", "onehot"], "loss"))
    onehot = np.eye(2, dtype=np.float32)[labels]
    out2 = d5.executor(net2, "reference").inference({"x": x, "onehot": onehot})
    p = np.exp(logp)
    np.testing.assert_allclose(float(out2["loss"]), -np.sum(onehot * np.log(p + 1e-9)) / 4, rtol=1e-5)


@pytest.mark.parametrize("framework", ["reference", "torch"])
def test_label_cross_entropy_on_probabilities_and_on_logits(framework):
    if not d5.is_framework_available(framework):
        pytest.skip(f"{framework} is not installed")
    x = np.random.default_rng(3).normal(size=(4, 3)).astype(np.float32)
    labels = np.array([1, 0, 1, 1], np.int64)
    # on a Softmax's output: Deep500's reference formula, -sum(log(clip(p) + 1e-9)[label]) / N
    net, w = _linear_network()
    net.add_operation(helper.make_node("Softmax", ["y"], ["p"], axis=-1))
    net.add_operation(d5.ops.LabelCrossEntropy(["p", "labels"], "loss"))
    logits = x.astype(np.float64) @ w
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    expected = -np.sum(np.log(np.clip(p, 1e-12, 1 - 1e-12) + 1e-9)[np.arange(4), labels]) / 4
    ex = d5.executor(net, framework)
    out = ex.inference_and_backprop({"x": x, "labels": labels}, "loss")
    np.testing.assert_allclose(float(out["loss"]), expected, rtol=1e-5)
    onehot = np.eye(2)[labels]
    np.testing.assert_allclose(ex.network.fetch_tensor("w_grad"), x.T @ ((p - onehot) / 4), rtol=1e-4, atol=1e-6)
    # on logits (what Deep500's train_until sample gives it): softmax first, the same mean
    net2, _ = _linear_network()
    net2.add_operation(d5.ops.LabelCrossEntropy(["y", "labels"], "loss"))
    out2 = d5.executor(net2, framework).inference({"x": x, "labels": labels})
    np.testing.assert_allclose(float(out2["loss"]), -np.log(p[np.arange(4), labels]).mean(), rtol=1e-5)


def test_loss_arguments_are_checked():
    with pytest.raises(TypeError, match=r"input=\[prediction, target\]"):
        d5.ops.MeanSquaredError("y", "loss")
    with pytest.raises(ValueError, match="distinct"):
        d5.ops.MeanSquaredError(["y", "y"], "loss")


SRC = """
#include <deep500/deep500.h>
float scale_of();
template <typename T> struct scaler : public deep500::CustomOperator {
    int n;
    explicit scaler(int n) : n(n) {}
    void forward(const T *x, T *y) { for (int i = 0; i < n; ++i) y[i] = scale_of() * x[i]; }
};
D500_EXPORTED void *create_new_op(deep500::tensor_t *in, int, deep500::tensor_t *, int) {
    return new scaler<float>(in[0].sizes[0]);
}
D500_REGISTER_OP(scaler<float>);
"""


@pytest.mark.skipif(not any(shutil.which(c) for c in ("c++", "g++", "clang++")), reason="needs a C++ compiler")
def test_deep500_compile_arguments(tmp_path, capsys):
    main = tmp_path / "scaler.cpp"
    main.write_text(SRC)
    other = tmp_path / "scale.cpp"
    other.write_text("float scale_of() { return SCALE; }\n")
    desc = [d5.tensordesc(np.float32, [3])]
    # Deep500's positional order: other_files, live_output, additional_cmake_options,
    # additional_definitions, output_folder.
    op = d5.compile_custom_cppop("scaler", str(main), desc, desc, [str(other)], True, [], {"SCALE": "2.5f"},
                                 str(tmp_path / "build"))
    assert "scale.cpp" in capsys.readouterr().out
    np.testing.assert_allclose(op.forward(np.array([1, 2, 3], np.float32)), [2.5, 5, 7.5])
    assert os.path.isdir(tmp_path / "build")
    op2 = d5.compile_custom_cppop("scaler", str(main), desc, desc, other_files=[str(other)],
                                  additional_definitions={"SCALE": "3.0f"}, output_folder=str(tmp_path / "b2"))
    np.testing.assert_allclose(op2.forward(np.array([1, 2, 3], np.float32)), [3, 6, 9])
    with pytest.raises(ValueError, match="additional_cmake_options"):
        d5.compile_custom_cppop("scaler", str(main), desc, desc, other_files=[str(other)],
                                additional_cmake_options=["-DFOO=1"])


def test_op_forward_returns_deep500_metric_list():
    class Square(d5.CustomPythonOp):
        def forward(self, x):
            return x * x

        def backward(self, grads, fwd_inputs, fwd_outputs):
            return 2 * fwd_inputs[0] * grads[0]

    desc = [d5.tensordesc(d5.float32, [8])]
    op = Square(desc, desc)
    x = np.linspace(-1, 1, 8).astype(np.float32)
    result = d5.test_op_forward(op, [x], [x ** 2], metrics=[d5.L2Error(), d5.MaxError(), d5.WallclockTime(20, 5)],
                                verbose=False)
    l2, maxerr, times = result
    assert result.passed and l2 == 0.0 and maxerr == 0.0
    assert len(times) == 4 and all(t > 0 for t in times)
    assert result.forward_calls == 21  # one measured run, then the timer's 20 reruns
    wrong = d5.test_op_forward(op, [x], [x ** 3], metrics=[d5.MaxError()], verbose=False)
    assert not wrong.passed and wrong[0] == pytest.approx(np.abs(x ** 2 - x ** 3).max())


def test_torch_custom_op_deep500_forms():
    torch = pytest.importorskip("torch")
    from deep500lite.frameworks import torch as d5fw

    class TorchCube(d5.CustomPythonOp):  # forward on torch tensors, differentiated by autograd
        def forward(self, x):
            return x * x * x

        def backward(self, grads, fwd_inputs, fwd_outputs):
            raise AssertionError("use_autodiff=True must not call backward")

    desc = [d5.tensordesc.runtime_shape(np.float32)]
    cube = d5fw.custom_op(TorchCube(desc, desc), use_autodiff=True)
    assert isinstance(cube, torch.nn.Module)
    v = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y, = cube(v)
    y.sum().backward()
    np.testing.assert_allclose(v.grad.numpy(), [3.0, 12.0, 27.0])

    t = torch.zeros(2, 3, dtype=torch.float64)
    assert d5fw.desc_from_tensor(t) == d5.tensordesc(np.float64, [2, 3])
    native = d5fw.custom_op_from_native(torch.nn.functional.softplus, [d5fw.desc_from_tensor(t)],
                                        [d5fw.desc_from_tensor(t)])
    x = np.random.default_rng(3).normal(size=(2, 3))
    np.testing.assert_allclose(native.forward(x), np.log1p(np.exp(x)), rtol=1e-12)
    assert d5.test_op_gradient(native, [x], verbose=False).passed
