// A two-input operator: C = A @ B for A of shape (M, K) and B of shape (K, N), with
// dA = dC @ B^T and dB = A^T @ dC. The sizes come from the descriptors.
#include <deep500lite/deep500lite.h>

#include <stdexcept>

template <typename T>
class MatMulOp : public deep500lite::CustomOperator {
protected:
    int m_m, m_k, m_n;

public:
    MatMulOp(int m, int k, int n) : m_m(m), m_k(k), m_n(n) {}

    void forward(const T *a, const T *b, T *c) {
        #pragma omp parallel for
        for (int i = 0; i < m_m; ++i) {
            for (int j = 0; j < m_n; ++j) {
                T acc = T(0);
                for (int p = 0; p < m_k; ++p) acc += a[i * m_k + p] * b[p * m_n + j];
                c[i * m_n + j] = acc;
            }
        }
    }

    void backward(const T *grad_c, const T *a, const T *b, const T *c, T *grad_a, T *grad_b) {
        (void)c;
        #pragma omp parallel for
        for (int i = 0; i < m_m; ++i) {
            for (int p = 0; p < m_k; ++p) {
                T acc = T(0);
                for (int j = 0; j < m_n; ++j) acc += grad_c[i * m_n + j] * b[p * m_n + j];
                grad_a[i * m_k + p] = acc;
            }
        }
        #pragma omp parallel for
        for (int p = 0; p < m_k; ++p) {
            for (int j = 0; j < m_n; ++j) {
                T acc = T(0);
                for (int i = 0; i < m_m; ++i) acc += a[i * m_k + p] * grad_c[i * m_n + j];
                grad_b[p * m_n + j] = acc;
            }
        }
    }
};

D500_EXPORTED void *create_new_op(deep500lite::tensor_t *input_descriptors, int num_inputs,
                                  deep500lite::tensor_t *output_descriptors, int num_outputs) {
    const deep500lite::tensor_t &a = input_descriptors[0], &b = input_descriptors[1];
    if (num_inputs != 2 || a.dims != 2 || b.dims != 2 || a.sizes[1] != b.sizes[0])
        throw std::invalid_argument("MatMulOp needs inputs of shapes (M, K) and (K, N)");
    return new MatMulOp<DTYPE>(a.sizes[0], a.sizes[1], b.sizes[1]);
}

D500_REGISTER_OP(MatMulOp<DTYPE>);
