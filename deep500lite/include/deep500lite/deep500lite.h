// deep500lite C++ operator API.
//
// An operator is a class (usually a template on DTYPE) with non-virtual members taking typed
// pointers, one per tensor:
//
//   void forward(const T *in0, ..., T *out0, ...);
//   void backward(const T *grad_out0, ..., const T *fwd_in0, ..., const T *fwd_out0, ...,
//                 T *grad_in0, ...);
//
// and, optionally, forward_cuda / backward_cuda with the same signatures on device pointers.
// The source also defines the factory
//
//   D500_EXPORTED void *create_new_op(deep500lite::tensor_t *input_descriptors, int num_inputs,
//                                     deep500lite::tensor_t *output_descriptors, int num_outputs);
//
// and ends with D500_REGISTER_OP(MyOp<DTYPE>), which generates the C entry points that
// deep500lite.lv0.cppop loads with ctypes. An operator written for Deep500 compiles unchanged:
// <deep500/deep500.h> (beside this folder) includes this header and makes the namespace deep500
// another name of deep500lite.
//
// Every entry point returns an error code (D5_OK on success) and never lets a C++ exception
// cross into the calling process: the message is kept for d5_last_error().

#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <type_traits>
#include <utility>

#ifdef __CUDACC__
#include <cuda_runtime.h>
#endif

// Bumped whenever the entry points or tensor_t change; the Python loader refuses other versions.
#define D500LITE_ABI_VERSION 1
#define D500_MAX_DIMS 8

#if defined(_WIN32)
#define D500_EXPORTED extern "C" __declspec(dllexport)
#else
#define D500_EXPORTED extern "C" __attribute__((visibility("default")))
#endif

namespace deep500lite {

// Element types, numbered as in Deep500 (TT_BOOL added).
enum tensortype_t {
    TT_VOID = 0,
    TT_INT8,
    TT_INT16,
    TT_INT32,
    TT_INT64,
    TT_UINT8,
    TT_UINT16,
    TT_UINT32,
    TT_UINT64,
    TT_HALF,
    TT_FLOAT,
    TT_DOUBLE,
    TT_BITSET,
    TT_BOOL,
    TT_LEN,
};

// Shape (and element type) of one operator input or output, as passed to create_new_op.
struct tensor_t {
    int dims;                     // rank
    int sizes[D500_MAX_DIMS];     // sizes[0 .. dims-1]
    tensortype_t type;            // element type of the descriptor
};

// Number of elements of a tensor (1 for a scalar).
inline int64_t num_elements(const tensor_t &t) {
    int64_t n = 1;
    for (int i = 0; i < t.dims; ++i) n *= t.sizes[i];
    return n;
}

// Base class of C++ operators (the class in D500_REGISTER_OP need not derive from it, but
// Deep500 operators do).
class CustomOperator {
public:
    CustomOperator() {}
    virtual ~CustomOperator() {}

    // CUDA support is detected from a forward_cuda member; an operator that overrides this and
    // returns false turns it off.
    virtual bool supports_cuda() { return false; }

    // Deep500's reporting hook (for example, bytes communicated so far).
    virtual int64_t report(void *data) { (void)data; return 0; }
};

// Error codes of the entry points.
enum d5_status_t {
    D5_OK = 0,
    D5_ERR_EXCEPTION = 1,        // the operator threw a C++ exception
    D5_ERR_NOT_IMPLEMENTED = 2,  // the class lacks the member (e.g. no forward_cuda)
    D5_ERR_ARITY = 3,            // wrong number of pointers for the member
    D5_ERR_CUDA = 4,             // a CUDA runtime call or kernel launch failed
    D5_ERR_NO_CUDA = 5,          // the library was not compiled with nvcc
    D5_ERR_NULL = 6,             // create_new_op returned NULL or a NULL handle was passed
};

namespace detail {

// The last error message of this thread (a fixed buffer: <string> would slow every build).
constexpr std::size_t kErrorCapacity = 4096;

inline char *last_error() {
    thread_local char message[kErrorCapacity] = {0};
    return message;
}

inline void clear_error() { last_error()[0] = '\0'; }

// Sets the message to the concatenation of the parts and returns code.
inline int fail(int code, const char *a, const char *b = "", const char *c = "", const char *d = "") {
    char *out = last_error();
    std::size_t n = 0;
    const char *parts[] = {a, b, c, d};
    for (const char *s : parts) {
        while (s != nullptr && *s != '\0' && n + 1 < kErrorCapacity) out[n++] = *s++;
    }
    out[n] = '\0';
    return code;
}

template <typename T>
constexpr int type_code() {
    using U = std::remove_cv_t<T>;
    if constexpr (std::is_same_v<U, bool>) {
        return TT_BOOL;
    } else if constexpr (std::is_same_v<U, float>) {
        return TT_FLOAT;
    } else if constexpr (std::is_same_v<U, double>) {
        return TT_DOUBLE;
    } else if constexpr (std::is_integral_v<U>) {
        constexpr bool s = std::is_signed_v<U>;
        switch (sizeof(U)) {
            case 1: return s ? TT_INT8 : TT_UINT8;
            case 2: return s ? TT_INT16 : TT_UINT16;
            case 4: return s ? TT_INT32 : TT_UINT32;
            case 8: return s ? TT_INT64 : TT_UINT64;
            default: return TT_VOID;
        }
    } else {
        return TT_VOID;  // unknown element type (e.g. __half, a struct): not checked
    }
}

// Traits of a member-function pointer: arity, argument type codes, and a call that unpacks a
// void* array into the typed arguments.
template <typename F>
struct member_fn;

#define D5_DETAIL_MEMBER_FN(QUALS)                                                                \
    template <typename R, typename B, typename... A>                                              \
    struct member_fn<R (B::*)(A...) QUALS> {                                                      \
        static_assert((std::is_pointer_v<A> && ...),                                              \
                      "deep500lite: forward/backward arguments must all be typed pointers "        \
                      "(const T* for inputs, T* for outputs)");                                    \
        static constexpr int arity = static_cast<int>(sizeof...(A));                              \
        static void codes(int *out) {                                                             \
            const int c[] = {type_code<std::remove_pointer_t<A>>()..., 0};                        \
            for (int i = 0; i < arity; ++i) out[i] = c[i];                                        \
        }                                                                                         \
        template <typename C, std::size_t... I>                                                   \
        static void call(C *obj, R (B::*fn)(A...) QUALS, void **p, std::index_sequence<I...>) {  \
            (void)p;                                                                              \
            (obj->*fn)(static_cast<A>(p[I])...);                                                  \
        }                                                                                         \
    };

D5_DETAIL_MEMBER_FN()
D5_DETAIL_MEMBER_FN(const)
D5_DETAIL_MEMBER_FN(noexcept)
D5_DETAIL_MEMBER_FN(const noexcept)
#undef D5_DETAIL_MEMBER_FN

enum member_t { M_FORWARD = 0, M_BACKWARD = 1, M_FORWARD_CUDA = 2, M_BACKWARD_CUDA = 3 };

inline const char *member_name(int m) {
    switch (m) {
        case M_FORWARD: return "forward";
        case M_BACKWARD: return "backward";
        case M_FORWARD_CUDA: return "forward_cuda";
        case M_BACKWARD_CUDA: return "backward_cuda";
        default: return "?";
    }
}

// has_<member><C>: whether C has exactly one (non-overloaded, non-template) member of that name.
#define D5_DETAIL_DETECT(NAME)                                                                    \
    template <typename C, typename = void>                                                        \
    struct has_##NAME : std::false_type {};                                                       \
    template <typename C>                                                                         \
    struct has_##NAME<C, std::void_t<decltype(&C::NAME)>> : std::true_type {};

D5_DETAIL_DETECT(forward)
D5_DETAIL_DETECT(backward)
D5_DETAIL_DETECT(forward_cuda)
D5_DETAIL_DETECT(backward_cuda)
D5_DETAIL_DETECT(supports_cuda)
#undef D5_DETAIL_DETECT

template <typename C, int M>
constexpr bool has_member() {
    if constexpr (M == M_FORWARD) return has_forward<C>::value;
    else if constexpr (M == M_BACKWARD) return has_backward<C>::value;
    else if constexpr (M == M_FORWARD_CUDA) return has_forward_cuda<C>::value;
    else return has_backward_cuda<C>::value;
}

template <typename C, int M>
constexpr auto member() {
    if constexpr (M == M_FORWARD) return &C::forward;
    else if constexpr (M == M_BACKWARD) return &C::backward;
    else if constexpr (M == M_FORWARD_CUDA) return &C::forward_cuda;
    else return &C::backward_cuda;
}

template <typename C>
constexpr void check_class() {
    static_assert(has_forward<C>::value || has_forward_cuda<C>::value,
                  "deep500lite: the class given to D500_REGISTER_OP needs one member function "
                  "forward(...) or forward_cuda(...) (not overloaded, not a template)");
}

template <typename C, int M>
int call(void *handle, void **ptrs, int n) {
    check_class<C>();
    clear_error();
    if (handle == nullptr) return fail(D5_ERR_NULL, "NULL operator handle");
    if constexpr (!has_member<C, M>()) {
        return fail(D5_ERR_NOT_IMPLEMENTED, "the operator class has no member function ",
                    member_name(M));
    } else {
        using traits = member_fn<decltype(member<C, M>())>;
        if (n != traits::arity) {
            char counts[96];
            std::snprintf(counts, sizeof(counts), " takes %d pointers, received %d", traits::arity, n);
            return fail(D5_ERR_ARITY, member_name(M), counts);
        }
        try {
            traits::call(static_cast<C *>(handle), member<C, M>(), ptrs,
                         std::make_index_sequence<static_cast<std::size_t>(traits::arity)>{});
        } catch (const std::exception &e) {
            return fail(D5_ERR_EXCEPTION, member_name(M), " threw: ", e.what());
        } catch (...) {
            return fail(D5_ERR_EXCEPTION, member_name(M), " threw a C++ exception of unknown type");
        }
#ifdef __CUDACC__
        if constexpr (M == M_FORWARD_CUDA || M == M_BACKWARD_CUDA) {
            cudaError_t err = cudaGetLastError();
            if (err != cudaSuccess) {
                return fail(D5_ERR_CUDA, member_name(M), ": CUDA error: ", cudaGetErrorString(err));
            }
        }
#endif
        return D5_OK;
    }
}

// Arity of member M and its argument type codes, or -1 when the class lacks it.
template <typename C, int M>
int signature(int *codes, int max_codes) {
    if constexpr (!has_member<C, M>()) {
        (void)codes;
        (void)max_codes;
        return -1;
    } else {
        using traits = member_fn<decltype(member<C, M>())>;
        if (codes != nullptr && max_codes >= traits::arity) traits::codes(codes);
        return traits::arity;
    }
}

template <typename C>
int supports_cuda(void *handle) {
    if constexpr (!has_forward_cuda<C>::value) {
        (void)handle;
        return 0;
    } else if constexpr (has_supports_cuda<C>::value &&
                         !std::is_same_v<decltype(&C::supports_cuda),
                                         bool (CustomOperator::*)()>) {
        // The class (or a base of its own) overrides supports_cuda(): ask it.
        if (handle == nullptr) return 0;
        try {
            return static_cast<C *>(handle)->supports_cuda() ? 1 : 0;
        } catch (...) {
            return 0;
        }
    } else {
        (void)handle;
        return 1;
    }
}

template <typename C>
int report(void *handle, void *data, int64_t *result) {
    clear_error();
    if (handle == nullptr) return fail(D5_ERR_NULL, "NULL operator handle");
    if constexpr (std::is_base_of_v<CustomOperator, C>) {
        try {
            *result = static_cast<C *>(handle)->report(data);
        } catch (const std::exception &e) {
            return fail(D5_ERR_EXCEPTION, "report threw: ", e.what());
        } catch (...) {
            return fail(D5_ERR_EXCEPTION, "report threw a C++ exception of unknown type");
        }
    } else {
        (void)data;
        *result = 0;
    }
    return D5_OK;
}

template <typename C>
int destroy(void *handle) {
    clear_error();
    if (handle == nullptr) return D5_OK;
    try {
        delete static_cast<C *>(handle);
    } catch (...) {
        return fail(D5_ERR_EXCEPTION, "the operator's destructor threw");
    }
    return D5_OK;
}

}  // namespace detail
}  // namespace deep500lite

// The factory every operator source defines (declared here so that D500_REGISTER_OP may come
// before or after it).
D500_EXPORTED void *create_new_op(deep500lite::tensor_t *input_descriptors, int num_inputs,
                                  deep500lite::tensor_t *output_descriptors, int num_outputs);

namespace deep500lite {
namespace detail {

inline int create(tensor_t *in, int nin, tensor_t *out, int nout, void **handle) {
    clear_error();
    *handle = nullptr;
    try {
        *handle = ::create_new_op(in, nin, out, nout);
    } catch (const std::exception &e) {
        return fail(D5_ERR_EXCEPTION, "create_new_op threw: ", e.what());
    } catch (...) {
        return fail(D5_ERR_EXCEPTION, "create_new_op threw a C++ exception of unknown type");
    }
    if (*handle == nullptr) return fail(D5_ERR_NULL, "create_new_op returned NULL");
    return D5_OK;
}

#ifdef __CUDACC__
inline int cuda_status(cudaError_t err, const char *what) {
    if (err == cudaSuccess) return D5_OK;
    return fail(D5_ERR_CUDA, what, ": ", cudaGetErrorString(err));
}
#endif

}  // namespace detail
}  // namespace deep500lite

#ifdef __CUDACC__
// CUDA runtime helpers (only in libraries built with nvcc), so that the Python side can check
// for a device and run the CUDA members on numpy arrays without another CUDA package.
#define D5_DETAIL_CUDA_HELPERS                                                                    \
    D500_EXPORTED int d5_compiled_with_cuda() { return 1; }                                       \
    D500_EXPORTED int d5_cuda_device_count(int *count) {                                          \
        *count = 0;                                                                               \
        return ::deep500lite::detail::cuda_status(cudaGetDeviceCount(count),                      \
                                                  "cudaGetDeviceCount");                          \
    }                                                                                             \
    D500_EXPORTED int d5_cuda_malloc(void **ptr, size_t bytes) {                                  \
        *ptr = nullptr;                                                                           \
        return ::deep500lite::detail::cuda_status(cudaMalloc(ptr, bytes > 0 ? bytes : 1),         \
                                                  "cudaMalloc");                                  \
    }                                                                                             \
    D500_EXPORTED int d5_cuda_free(void *ptr) {                                                   \
        return ::deep500lite::detail::cuda_status(cudaFree(ptr), "cudaFree");                     \
    }                                                                                             \
    D500_EXPORTED int d5_cuda_memcpy(void *dst, const void *src, size_t bytes, int to_device) {  \
        return ::deep500lite::detail::cuda_status(                                                \
            cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice                       \
                                                  : cudaMemcpyDeviceToHost),                      \
            "cudaMemcpy");                                                                        \
    }                                                                                             \
    D500_EXPORTED int d5_cuda_synchronize() {                                                     \
        return ::deep500lite::detail::cuda_status(cudaDeviceSynchronize(),                        \
                                                  "cudaDeviceSynchronize");                       \
    }
#else
#define D5_DETAIL_CUDA_HELPERS                                                                    \
    D500_EXPORTED int d5_compiled_with_cuda() { return 0; }                                       \
    D500_EXPORTED int d5_cuda_device_count(int *count) {                                          \
        *count = 0;                                                                               \
        return ::deep500lite::detail::fail(::deep500lite::D5_ERR_NO_CUDA,                         \
                                           "the operator library was not compiled with nvcc");    \
    }
#endif

// Generates the C entry points for the operator class (a type, e.g. MyOp<DTYPE>). Use once per
// shared library.
#define D500_REGISTER_OP(...)                                                                     \
    namespace deep500lite_registered_op {                                                         \
    using op_type = __VA_ARGS__;                                                                  \
    }                                                                                             \
    D500_EXPORTED int d5_abi_version() { return D500LITE_ABI_VERSION; }                           \
    D500_EXPORTED int d5_max_dims() { return D500_MAX_DIMS; }                                     \
    D500_EXPORTED int d5_tensor_struct_size() {                                                   \
        return static_cast<int>(sizeof(::deep500lite::tensor_t));                                 \
    }                                                                                             \
    D500_EXPORTED const char *d5_last_error() { return ::deep500lite::detail::last_error(); }    \
    D500_EXPORTED int d5_create(::deep500lite::tensor_t *in, int nin,                             \
                                ::deep500lite::tensor_t *out, int nout, void **handle) {          \
        return ::deep500lite::detail::create(in, nin, out, nout, handle);                         \
    }                                                                                             \
    D500_EXPORTED int d5_delete_op(void *handle) {                                                \
        return ::deep500lite::detail::destroy<deep500lite_registered_op::op_type>(handle);        \
    }                                                                                             \
    D500_EXPORTED int d5_forward(void *handle, void **ptrs, int n) {                              \
        return ::deep500lite::detail::call<deep500lite_registered_op::op_type,                    \
                                           ::deep500lite::detail::M_FORWARD>(handle, ptrs, n);    \
    }                                                                                             \
    D500_EXPORTED int d5_backward(void *handle, void **ptrs, int n) {                             \
        return ::deep500lite::detail::call<deep500lite_registered_op::op_type,                    \
                                           ::deep500lite::detail::M_BACKWARD>(handle, ptrs, n);   \
    }                                                                                             \
    D500_EXPORTED int d5_forward_cuda(void *handle, void **ptrs, int n) {                         \
        return ::deep500lite::detail::call<deep500lite_registered_op::op_type,                    \
                                           ::deep500lite::detail::M_FORWARD_CUDA>(handle, ptrs,   \
                                                                                  n);             \
    }                                                                                             \
    D500_EXPORTED int d5_backward_cuda(void *handle, void **ptrs, int n) {                        \
        return ::deep500lite::detail::call<deep500lite_registered_op::op_type,                    \
                                           ::deep500lite::detail::M_BACKWARD_CUDA>(handle, ptrs,  \
                                                                                   n);            \
    }                                                                                             \
    D500_EXPORTED int d5_signature(int member, int *codes, int max_codes) {                       \
        using C = deep500lite_registered_op::op_type;                                             \
        namespace d = ::deep500lite::detail;                                                      \
        switch (member) {                                                                         \
            case d::M_FORWARD: return d::signature<C, d::M_FORWARD>(codes, max_codes);            \
            case d::M_BACKWARD: return d::signature<C, d::M_BACKWARD>(codes, max_codes);          \
            case d::M_FORWARD_CUDA: return d::signature<C, d::M_FORWARD_CUDA>(codes, max_codes);  \
            case d::M_BACKWARD_CUDA:                                                              \
                return d::signature<C, d::M_BACKWARD_CUDA>(codes, max_codes);                     \
            default: return -1;                                                                   \
        }                                                                                         \
    }                                                                                             \
    D500_EXPORTED int d5_supports_cuda(void *handle) {                                            \
        return ::deep500lite::detail::supports_cuda<deep500lite_registered_op::op_type>(handle);  \
    }                                                                                             \
    D500_EXPORTED int d5_report(void *handle, void *data, int64_t *result) {                      \
        return ::deep500lite::detail::report<deep500lite_registered_op::op_type>(handle, data,    \
                                                                                 result);         \
    }                                                                                             \
    D5_DETAIL_CUDA_HELPERS
