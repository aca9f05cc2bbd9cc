// An operator written for Deep500, unchanged: it includes deep500/deep500.h and uses the
// namespace deep500. To build it with deep500lite, make the two edits
//   #include "deep500/deep500.h"  ->  #include "deep500lite/deep500lite.h"
//   deep500::                     ->  deep500lite::
// (tests/lv0/test_cppop.py does exactly that). It computes y = SCALE * x^2.
#include "deep500/deep500.h"

#include <cstdint>
#include <deque>

#ifndef SCALE
#define SCALE 1
#endif

template<typename T>
class ScaledSquareLayer : public deep500::CustomOperator {
protected:
    const std::deque<uint32_t> m_shape;
    uint32_t m_size;

public:
    ScaledSquareLayer(std::deque<uint32_t> shape) : m_shape(shape) {
        m_size = 1;
        for (const auto& s : shape)
            m_size *= s;
    }

    virtual ~ScaledSquareLayer() {}

    virtual bool supports_cuda() { return false; }

    void forward(const T *input_tensor, T *output_tensor) {
        #pragma omp parallel for
        for (int i = 0; i < (int)m_size; ++i)
            output_tensor[i] = T(SCALE) * input_tensor[i] * input_tensor[i];
    }

    void backward(const T *nextop_grad,
                  const T *fwd_input_tensor,
                  const T *fwd_output_tensor,
                  T *input_tensor_grad) {
        #pragma omp parallel for
        for (int i = 0; i < (int)m_size; ++i)
            input_tensor_grad[i] = T(2 * SCALE) * fwd_input_tensor[i] * nextop_grad[i];
    }
};

D500_EXPORTED void *create_new_op(deep500::tensor_t *input_descriptors,
                                  int num_inputs,
                                  deep500::tensor_t *output_descriptors,
                                  int num_outputs) {
    std::deque<uint32_t> shape(input_descriptors[0].sizes,
                               input_descriptors[0].sizes + input_descriptors[0].dims);
    return new ScaledSquareLayer<DTYPE>(shape);
}

D500_REGISTER_OP(ScaledSquareLayer<DTYPE>);
