"""Deep500's EuroMPI'19 tutorial 3_custom.ipynb, operator cells, on deep500lite.

Cell groups: the Python operator (IPowOp through ``d5fw.custom_op``, forward and autograd), the
C++ operator (``d5.compile_custom_cppop_inline`` with Deep500's header, ``live_output=True``,
``is_cuda=False`` and ``additional_definitions={'DPOWER': '3'}``), and the checks Deep500 offered
for operators (``d5.test_op_gradient``, which must also catch a wrong backward). The CUDA cell
needs nvcc and a GPU and is skipped without them. Changed from the notebook: the imports only.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import deep500lite as d5  # noqa: E402
from deep500lite.frameworks import pytorch as d5fw  # noqa: E402


class IPowOp(d5.CustomPythonOp):
    def __init__(self, power):
        super(IPowOp, self).__init__([d5.tensordesc.runtime_shape(np.float32)],
                                     [d5.tensordesc.runtime_shape(np.float32)])
        self.power = power
        assert int(power) == power

    def forward(self, inputs):
        return inputs ** self.power

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return (grads[0] * self.power *
                (fwd_inputs[0] ** (self.power - 1)))


CPP_SRC = """
#include <deep500/deep500.h>
#include <cmath>

template<typename T>
class ipowop : public deep500::CustomOperator {
protected:
    int m_len;
public:
    ipowop(size_t len) : m_len((int)len) {}
    virtual ~ipowop() {}
    virtual bool supports_cuda() { return false; }

    void forward(const T *input, T *output) {
        #pragma omp parallel for
        for (int i = 0; i < m_len; ++i)
            output[i] = std::pow(input[i], DPOWER);
    }

    void backward(const T *nextop_grad, const T *fwd_input_tensor, const T *fwd_output_tensor,
                  T *input_tensor_grad) {
        #pragma omp parallel for
        for (int i = 0; i < m_len; ++i)
            input_tensor_grad[i] = nextop_grad[i] * DPOWER * std::pow(fwd_input_tensor[i], DPOWER - 1);
    }
};

D500_EXPORTED void *create_new_op(deep500::tensor_t *input_descriptors, int num_inputs,
                                  deep500::tensor_t *output_descriptors, int num_outputs) {
    size_t total = 1;
    for (int i = 0; i < input_descriptors[0].dims; ++i)
        total *= input_descriptors[0].sizes[i];
    return new ipowop<float>(total);
}

D500_REGISTER_OP(ipowop<float>);
"""


def test_python_operator_forward_and_autograd():
    fw_pow = d5fw.custom_op(IPowOp(3.0))
    t = torch.tensor([1, 2, 3, 4, 5], dtype=torch.float32)
    out = fw_pow(t)
    np.testing.assert_array_equal(out.detach().numpy(), np.arange(1, 6, dtype=np.float32) ** 3)

    from torch.autograd import Variable
    v = Variable(t, requires_grad=True)
    output, = fw_pow(v)
    result = torch.sum(output)
    result.backward()
    np.testing.assert_allclose(v.grad.numpy(), 3 * np.arange(1, 6, dtype=np.float32) ** 2)


def test_python_operator_gradient_check_passes_and_catches_a_wrong_backward():
    x = np.random.default_rng(0).uniform(0.5, 2.0, size=(6,)).astype(np.float64)
    op = IPowOp(3.0)
    op.input_descriptors = [d5.tensordesc(np.float64, [6])]
    op.output_descriptors = [d5.tensordesc(np.float64, [6])]
    assert d5.test_op_gradient(op, [x], verbose=False).passed

    class WrongPow(IPowOp):
        def backward(self, grads, fwd_inputs, fwd_outputs):
            return grads[0] * self.power * fwd_inputs[0] ** (self.power - 2)  # wrong exponent

    wrong = WrongPow(3.0)
    wrong.input_descriptors, wrong.output_descriptors = op.input_descriptors, op.output_descriptors
    assert not d5.test_op_gradient(wrong, [x], verbose=False).passed


def test_cpp_operator_with_deep500_header_and_arguments(tmp_path, monkeypatch, capsys):
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        pytest.skip("needs a C++ compiler")
    monkeypatch.setenv("DEEP500LITE_CACHE", str(tmp_path))
    opdesc = d5.compile_custom_cppop_inline('ipowop', CPP_SRC,
                                            [d5.tensordesc(np.float32, [5])],
                                            [d5.tensordesc(np.float32, [5])],
                                            live_output=True,
                                            is_cuda=False,
                                            additional_definitions={'DPOWER': '3'})
    fwcpp_op = d5fw.custom_op(opdesc)
    assert "ipowop" in capsys.readouterr().out  # live_output printed the compiler command

    y, = fwcpp_op(torch.tensor([5., 4., 3., 2., 1.], dtype=torch.float32))
    np.testing.assert_allclose(y.numpy(), np.array([125., 64., 27., 8., 1.], np.float32))

    v = torch.tensor([1., 2., 3., 4., 5.], requires_grad=True)
    out, = fwcpp_op(v)
    torch.sum(out * torch.arange(5.0)).backward()
    np.testing.assert_allclose(v.grad.numpy(), np.arange(5.0) * 3 * np.arange(1.0, 6.0) ** 2, rtol=1e-6)

    # The compiled operator passes Deep500's gradient check on its own.
    x = np.random.default_rng(2).uniform(0.5, 1.5, size=5).astype(np.float32)
    assert d5.test_op_gradient(opdesc, [x], verbose=False).passed


@pytest.mark.skipif(shutil.which("nvcc") is None or not torch.cuda.is_available(), reason="needs nvcc and a GPU")
def test_cuda_operator_cell(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEP500LITE_CACHE", str(tmp_path))
    cuda_src = CPP_SRC.replace("#include <cmath>\n", """#include <cmath>

template<typename T>
__global__ void fwd_kernel(const T *inp, T *out, int n) {
    int tid = blockIdx.x * 32 + threadIdx.x;
    if (tid < n) out[tid] = std::pow(inp[tid], DPOWER) + T(1);  // + 1 shows the kernel ran
}
""", 1).replace("return false;", "return true;").replace("class ipowop ", "class ipowop2 ").replace(
        "ipowop(size_t", "ipowop2(size_t").replace("~ipowop()", "~ipowop2()").replace(
        "new ipowop<float>", "new ipowop2<float>").replace("D500_REGISTER_OP(ipowop<float>)",
                                                          "D500_REGISTER_OP(ipowop2<float>)").replace(
        "    void backward(", """    void forward_cuda(const T *input, T *output) {
        fwd_kernel<T><<<(m_len + 31) / 32, 32>>>(input, output, m_len);
    }

    void backward(""", 1)
    opdesc = d5.compile_custom_cppop_inline('ipowop2', cuda_src, [d5.tensordesc(np.float32, [5])],
                                            [d5.tensordesc(np.float32, [5])], live_output=True, is_cuda=True,
                                            additional_definitions={'DPOWER': '3'})
    fwcuda_op = d5fw.custom_op(opdesc)
    y, = fwcuda_op(torch.tensor([5., 4., 3., 2., 1.], dtype=torch.float32).cuda())
    np.testing.assert_allclose(y.cpu().numpy(), np.array([126., 65., 28., 9., 2.], np.float32))
