// Swish, y = x * sigmoid(BETA * x), written the way a Deep500 user writes an operator:
// a class template on DTYPE, the length taken from the input descriptor, OpenMP loops.
// Compile with additional_definitions={"BETA": ...} to change the slope (default 1).
#include <deep500lite/deep500lite.h>

#include <cmath>
#include <cstdint>

#ifndef BETA
#define BETA 1
#endif

template <typename T>
class SwishOp : public deep500lite::CustomOperator {
protected:
    int64_t m_len;

public:
    explicit SwishOp(int64_t len) : m_len(len) {}
    virtual ~SwishOp() {}

    void forward(const T *x, T *y) {
        #pragma omp parallel for
        for (int64_t i = 0; i < m_len; ++i) {
            T s = T(1) / (T(1) + std::exp(-T(BETA) * x[i]));
            y[i] = x[i] * s;
        }
    }

    void backward(const T *grad_y, const T *x, const T *y, T *grad_x) {
        (void)y;
        #pragma omp parallel for
        for (int64_t i = 0; i < m_len; ++i) {
            T s = T(1) / (T(1) + std::exp(-T(BETA) * x[i]));
            grad_x[i] = grad_y[i] * (s + T(BETA) * x[i] * s * (T(1) - s));
        }
    }
};

D500_EXPORTED void *create_new_op(deep500lite::tensor_t *input_descriptors, int num_inputs,
                                  deep500lite::tensor_t *output_descriptors, int num_outputs) {
    return new SwishOp<DTYPE>(deep500lite::num_elements(input_descriptors[0]));
}

D500_REGISTER_OP(SwishOp<DTYPE>);
