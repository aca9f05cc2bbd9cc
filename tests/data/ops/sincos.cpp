// An operator with two outputs: (sin x, cos x). Backward receives both output gradients first:
// dx = g_sin * cos(x) - g_cos * sin(x).
#include <deep500lite/deep500lite.h>

#include <cmath>
#include <cstdint>

template <typename T>
class SinCosOp : public deep500lite::CustomOperator {
    int64_t m_len;

public:
    explicit SinCosOp(int64_t len) : m_len(len) {}

    void forward(const T *x, T *sin_x, T *cos_x) {
        #pragma omp parallel for
        for (int64_t i = 0; i < m_len; ++i) {
            sin_x[i] = std::sin(x[i]);
            cos_x[i] = std::cos(x[i]);
        }
    }

    void backward(const T *grad_sin, const T *grad_cos, const T *x, const T *sin_x,
                  const T *cos_x, T *grad_x) {
        (void)x;
        #pragma omp parallel for
        for (int64_t i = 0; i < m_len; ++i)
            grad_x[i] = grad_sin[i] * cos_x[i] - grad_cos[i] * sin_x[i];
    }
};

D500_EXPORTED void *create_new_op(deep500lite::tensor_t *input_descriptors, int num_inputs,
                                  deep500lite::tensor_t *output_descriptors, int num_outputs) {
    return new SinCosOp<DTYPE>(deep500lite::num_elements(input_descriptors[0]));
}

D500_REGISTER_OP(SinCosOp<DTYPE>);
