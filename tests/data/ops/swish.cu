// Swish, y = x * sigmoid(BETA * x), with CPU (OpenMP) and CUDA implementations.
// Compile with is_cuda=True (nvcc); forward_cuda/backward_cuda receive device pointers.
#include <deep500lite/deep500lite.h>

#include <cmath>
#include <cstdint>

#ifndef BETA
#define BETA 1
#endif

template <typename T>
__host__ __device__ inline T swish_sigmoid(T x) {
    return T(1) / (T(1) + exp(-T(BETA) * x));
}

template <typename T>
__global__ void swish_forward_kernel(const T *x, T *y, int64_t n) {
    int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) y[i] = x[i] * swish_sigmoid(x[i]);
}

template <typename T>
__global__ void swish_backward_kernel(const T *grad_y, const T *x, T *grad_x, int64_t n) {
    int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) {
        T s = swish_sigmoid(x[i]);
        grad_x[i] = grad_y[i] * (s + T(BETA) * x[i] * s * (T(1) - s));
    }
}

template <typename T>
class SwishCudaOp : public deep500lite::CustomOperator {
protected:
    int64_t m_len;
    static constexpr int kThreads = 256;
    unsigned blocks() const { return static_cast<unsigned>((m_len + kThreads - 1) / kThreads); }

public:
    explicit SwishCudaOp(int64_t len) : m_len(len) {}
    virtual ~SwishCudaOp() {}
    bool supports_cuda() override { return true; }

    void forward(const T *x, T *y) {
        #pragma omp parallel for
        for (int64_t i = 0; i < m_len; ++i) y[i] = x[i] * swish_sigmoid(x[i]);
    }

    void backward(const T *grad_y, const T *x, const T *y, T *grad_x) {
        (void)y;
        #pragma omp parallel for
        for (int64_t i = 0; i < m_len; ++i) {
            T s = swish_sigmoid(x[i]);
            grad_x[i] = grad_y[i] * (s + T(BETA) * x[i] * s * (T(1) - s));
        }
    }

    void forward_cuda(const T *x, T *y) {
        if (m_len > 0) swish_forward_kernel<T><<<blocks(), kThreads>>>(x, y, m_len);
    }

    void backward_cuda(const T *grad_y, const T *x, const T *y, T *grad_x) {
        (void)y;
        if (m_len > 0) swish_backward_kernel<T><<<blocks(), kThreads>>>(grad_y, x, grad_x, m_len);
    }
};

D500_EXPORTED void *create_new_op(deep500lite::tensor_t *input_descriptors, int num_inputs,
                                  deep500lite::tensor_t *output_descriptors, int num_outputs) {
    return new SwishCudaOp<DTYPE>(deep500lite::num_elements(input_descriptors[0]));
}

D500_REGISTER_OP(SwishCudaOp<DTYPE>);
