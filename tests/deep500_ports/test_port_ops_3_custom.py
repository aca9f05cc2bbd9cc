"""Deep500's EuroMPI'19 notebook ``3_custom``: custom operators, a dataset and an optimizer of one's own.

The API paths of the notebook, with operators and data of our own:

- a ``d5.CustomPythonOp`` with runtime-shaped descriptors, made a torch module by
  ``d5fw.custom_op``; calling it gives Deep500's tuple, one tensor per output, also for one;
- a C++ operator in Deep500's form (``#include <deep500/deep500.h>``, ``deep500::CustomOperator``,
  ``create_new_op``, ``D500_REGISTER_OP``) built by ``d5.compile_custom_cppop_inline`` with
  ``live_output``, ``is_cuda`` and ``additional_definitions``, used from torch with autograd;
- the operator inside a ``torch.nn.Module`` fed inputs of shape ``[n, 1]`` although it was built
  for ``[n]`` (Deep500's compiled operators saw only the buffer), trained through
  ``PyTorchNativeGraphExecutor`` with a ``d5.Dataset`` subclass and a ``GradientDescent``
  subclass overriding ``update_rule``, by ``d5.test_training(..., epochs=, batch_size=, metrics=[])``;
- the CUDA build (``is_cuda=True``) on a machine with nvcc and a GPU.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import deep500lite as d5  # noqa: E402
from deep500lite.frameworks import pytorch as d5fw  # noqa: E402
from deep500lite.frameworks import reference as d5ref  # noqa: E402

N = 8  # the compiled operator's length


class Softsign(d5.CustomPythonOp):
    """y = x / (1 + |x|), elementwise, for inputs of any shape."""

    def __init__(self):
        any_shape = [d5.tensordesc.runtime_shape(np.float32)]
        super().__init__(any_shape, any_shape)

    def forward(self, x):
        return x / (1 + np.abs(x))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return grads[0] / (1 + np.abs(fwd_inputs[0])) ** 2


SIGNED_SQUARE = r"""
#include <deep500/deep500.h>
#include <cstddef>

// y = GAIN * x * |x| on a buffer of fixed length
template <typename Real>
class SignedSquare : public deep500::CustomOperator {
    std::size_t count_;
    static Real magnitude(Real v) { return v < Real(0) ? -v : v; }
public:
    explicit SignedSquare(std::size_t count) : count_(count) {}
    bool supports_cuda() override { return false; }
    void forward(const Real *x, Real *y) {
        for (std::size_t k = 0; k < count_; ++k) y[k] = Real(GAIN) * x[k] * magnitude(x[k]);
    }
    void backward(const Real *dy, const Real *x, const Real *, Real *dx) {
        for (std::size_t k = 0; k < count_; ++k) dx[k] = Real(2 * GAIN) * magnitude(x[k]) * dy[k];
    }
};

D500_EXPORTED void *create_new_op(deep500::tensor_t *ins, int, deep500::tensor_t *, int) {
    std::size_t count = 1;
    for (int axis = ins[0].dims - 1; axis >= 0; --axis) count *= ins[0].sizes[axis];
    return new SignedSquare<float>(count);
}

D500_REGISTER_OP(SignedSquare<float>);
"""


def test_python_operator_call_is_a_one_tuple_and_differentiates():
    softsign = d5fw.custom_op(Softsign())
    x = torch.tensor([-3.0, -0.5, 0.0, 2.0], requires_grad=True)
    out = softsign(x)
    assert isinstance(out, tuple) and len(out) == 1  # Deep500's 1-tuple, not the tensor
    (y,) = out
    torch.testing.assert_close(y, x.detach() / (1 + x.detach().abs()))
    (y * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    expected = np.array([1.0, 2.0, 3.0, 4.0]) / (1 + np.abs([-3.0, -0.5, 0.0, 2.0])) ** 2
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6)


def test_gradient_check_accepts_the_operator_and_rejects_a_wrong_backward():
    desc = [d5.tensordesc(np.float64, [7])]
    good = Softsign()
    good.input_descriptors = good.output_descriptors = desc
    x = np.linspace(-2.0, 2.5, 7)
    assert d5.test_op_gradient(good, [x], verbose=False).passed

    class SignFlipped(Softsign):
        def backward(self, grads, fwd_inputs, fwd_outputs):
            return -super().backward(grads, fwd_inputs, fwd_outputs)

    bad = SignFlipped()
    bad.input_descriptors = bad.output_descriptors = desc
    assert not d5.test_op_gradient(bad, [x], verbose=False).passed


@pytest.fixture(scope="module")
def signed_square(tmp_path_factory):
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        pytest.skip("needs a C++ compiler")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DEEP500LITE_CACHE", str(tmp_path_factory.mktemp("ops")))
        desc = [d5.tensordesc(np.float32, [N])]
        op = d5.compile_custom_cppop_inline("signed_square", SIGNED_SQUARE, desc, desc, live_output=True,
                                            is_cuda=False, additional_definitions={"GAIN": "2"})
    return op


def test_cpp_operator_forward_backward_from_torch(signed_square, capfd):
    module = d5fw.custom_op(signed_square)
    x = torch.linspace(-1.5, 2.0, N, requires_grad=True)
    (y,) = module(x)
    xs = x.detach().numpy()
    np.testing.assert_allclose(y.detach().numpy(), 2 * xs * np.abs(xs), rtol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 4 * np.abs(xs), rtol=1e-6)
    probe = np.random.default_rng(5).uniform(0.3, 1.2, N).astype(np.float32)
    assert d5.test_op_gradient(signed_square, [probe], verbose=False).passed


def test_cpp_operator_takes_an_input_of_its_size_in_another_shape(signed_square):
    module = d5fw.custom_op(signed_square)
    column = torch.linspace(0.1, 0.8, N).reshape(N, 1).requires_grad_(True)
    (y,) = module(column)  # built for [8], fed [8, 1]: Deep500 ran this
    assert y.shape == (N,)
    y.sum().backward()
    assert column.grad.shape == (N, 1)
    np.testing.assert_allclose(column.grad.numpy().ravel(), 4 * column.detach().numpy().ravel(), rtol=1e-6)
    with pytest.raises(ValueError, match=r"input 0 must be float32\[8\] \(or hold as many elements\)"):
        module(torch.zeros(N + 1))


class Parabola(d5.Dataset):
    """x uniform in [0, 1), target 3 x^2 + 0.25; any index form (int, slice, list) draws anew."""

    def __init__(self, input_node, label_node, rng):
        super().__init__()
        self.input_node, self.label_node, self.rng = input_node, label_node, rng

    def __len__(self):
        return 160

    def __getitem__(self, index):
        count = 1 if isinstance(index, int) else len(range(*index.indices(len(self)))) \
            if isinstance(index, slice) else len(index)
        x = self.rng.random((count, 1), dtype=np.float32)
        x = x[0] if isinstance(index, int) else x
        return {self.input_node: x, self.label_node: 3 * x ** 2 + 0.25}


class DampedDescent(d5ref.GradientDescent):
    """Plain descent with a step that shrinks by 1% per update."""

    updates = 0

    def update_rule(self, grad, old_param, param_name):
        self.updates += 1
        return old_param - self.lr * 0.99 ** (self.updates // 2) * grad


def test_native_module_with_the_operator_trains_through_test_training(signed_square):
    class Quadratic(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.square = d5fw.custom_op(signed_square)
            self.head = torch.nn.Linear(1, 1)

        def forward(self, x):
            (sq,) = self.square(x)  # 2 x|x|, as many values as the batch has rows
            return self.head(sq.reshape(x.shape))

    model = Quadratic()
    ex = d5fw.PyTorchNativeGraphExecutor(module=model, loss=torch.nn.MSELoss(), device=d5.CPUDevice())
    rng = np.random.default_rng(0)
    train, held_out = (Parabola(ex.innode, ex.labelnode, rng) for _ in range(2))
    assert train[3][ex.innode].shape == (1,) and train[[1, 5, 9]][ex.labelnode].shape == (3, 1)
    assert train[0:40:10][ex.innode].shape == (4, 1)
    opt = DampedDescent(ex, lr=0.3, loss=ex.lossnode)
    with torch.no_grad():
        model.head.weight[:] = 0.0
        model.head.bias[:] = 0.0
    assert d5.test_training(ex, train, held_out, opt, epochs=8, batch_size=N, metrics=[]) == []
    # target 3 x^2 + 0.25 = 1.5 * (2 x^2) + 0.25
    assert abs(model.head.weight.item() - 1.5) < 0.15 and abs(model.head.bias.item() - 0.25) < 0.1
    assert opt.updates == 2 * 8 * (160 // N)


CUDA_SIGNED_SQUARE = SIGNED_SQUARE.replace("bool supports_cuda() override { return false; }", r"""
    bool supports_cuda() override { return true; }
    void forward_cuda(const Real *x, Real *y) { launch_forward(x, y, count_); }
    void backward_cuda(const Real *dy, const Real *x, const Real *, Real *dx) { launch_backward(dy, x, dx, count_); }
""").replace("// y = GAIN", r"""
template <typename Real> __global__ void forward_kernel(const Real *x, Real *y, std::size_t n) {
    std::size_t k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) y[k] = Real(GAIN) * x[k] * fabs(x[k]) + Real(10);  // + 10 marks the GPU's result
}
template <typename Real> __global__ void backward_kernel(const Real *dy, const Real *x, Real *dx, std::size_t n) {
    std::size_t k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) dx[k] = Real(2 * GAIN) * fabs(x[k]) * dy[k];
}
template <typename Real> void launch_forward(const Real *x, Real *y, std::size_t n) {
    forward_kernel<<<(n + 63) / 64, 64>>>(x, y, n);
}
template <typename Real> void launch_backward(const Real *dy, const Real *x, Real *dx, std::size_t n) {
    backward_kernel<<<(n + 63) / 64, 64>>>(dy, x, dx, n);
}
// y = GAIN""", 1)


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvcc") is None or not torch.cuda.is_available(), reason="needs nvcc and a CUDA GPU")
def test_cuda_operator_runs_its_kernel_on_gpu_tensors(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEP500LITE_CACHE", str(tmp_path))
    desc = [d5.tensordesc(np.float32, [N])]
    op = d5.compile_custom_cppop_inline("signed_square_gpu", CUDA_SIGNED_SQUARE, desc, desc, live_output=True,
                                        is_cuda=True, additional_definitions={"GAIN": "2"})
    x = torch.linspace(-1.0, 1.0, N)
    (y,) = d5fw.custom_op(op)(x.cuda())
    np.testing.assert_allclose(y.cpu().numpy(), 2 * x.numpy() * np.abs(x.numpy()) + 10, rtol=1e-6)
