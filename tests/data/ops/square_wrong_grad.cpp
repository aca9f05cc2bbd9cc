// A deliberately wrong operator for validation tests: forward is y = x^2, but backward returns
// x * grad_y instead of 2 * x * grad_y. Gradient checks must fail on it.
#include <deep500lite/deep500lite.h>

#include <cstdint>

template <typename T>
class SquareWrongGradOp : public deep500lite::CustomOperator {
    int64_t m_len;

public:
    explicit SquareWrongGradOp(int64_t len) : m_len(len) {}

    void forward(const T *x, T *y) {
        #pragma omp parallel for
        for (int64_t i = 0; i < m_len; ++i) y[i] = x[i] * x[i];
    }

    void backward(const T *grad_y, const T *x, const T *y, T *grad_x) {
        (void)y;
        #pragma omp parallel for
        for (int64_t i = 0; i < m_len; ++i) grad_x[i] = x[i] * grad_y[i];  // wrong: misses the 2
    }
};

D500_EXPORTED void *create_new_op(deep500lite::tensor_t *input_descriptors, int num_inputs,
                                  deep500lite::tensor_t *output_descriptors, int num_outputs) {
    return new SquareWrongGradOp<DTYPE>(deep500lite::num_elements(input_descriptors[0]));
}

D500_REGISTER_OP(SquareWrongGradOp<DTYPE>);
