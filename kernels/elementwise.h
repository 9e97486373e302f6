// Elementwise arithmetic and activations. The per-element math lives here as __host__ __device__
// functions shared by the CPU reference and the CUDA kernels (and by fused kernels later).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "base/dtype.h"

namespace kestrel::kernels {

KESTREL_HD inline float k_exp(float x) { return expf(x); }
KESTREL_HD inline double k_exp(double x) { return exp(x); }

template <class T> KESTREL_HD inline T sigmoid_fn(T x) { return T(1) / (T(1) + k_exp(-x)); }
// d sigmoid / dx expressed through the output y = sigmoid(x).
template <class T> KESTREL_HD inline T sigmoid_grad_fn(T y) { return y * (T(1) - y); }
template <class T> KESTREL_HD inline T silu_fn(T x) { return x * sigmoid_fn(x); }
// d silu / dx = s + x s (1 - s), s = sigmoid(x).
template <class T> KESTREL_HD inline T silu_grad_fn(T x) {
  T s = sigmoid_fn(x);
  return s * (T(1) + x * (T(1) - s));
}

enum class Unary { Silu, Sigmoid };
enum class Binary { Add, Sub, Mul };

template <class T> KESTREL_HD inline T binary_fn(Binary op, T a, T b) {
  switch (op) {
    case Binary::Add: return a + b;
    case Binary::Sub: return a - b;
    case Binary::Mul: return a * b;
  }
  return T(0);
}

// All buffers contiguous with n elements, of the same dtype (float/double/bfloat16 on the CPU,
// float/half/bfloat16 on CUDA; the 16-bit types computed in float and rounded once).
void unary_forward_cpu(Unary op, DType t, const void* x, void* y, int64_t n);
void unary_forward_cuda(Unary op, DType t, const void* x, void* y, int64_t n, cudaStream_t s);
// dx = dy * f'(x). For Sigmoid `saved` is the output y, for Silu the input x.
void unary_backward_cpu(Unary op, DType t, const void* saved, const void* dy, void* dx, int64_t n);
void unary_backward_cuda(Unary op, DType t, const void* saved, const void* dy, void* dx, int64_t n,
                         cudaStream_t s);

// out = alpha * op(a, b) (same n); out may alias a (in-place accumulation).
void binary_cpu(Binary op, DType t, const void* a, const void* b, void* out, int64_t n,
                double alpha = 1.0);
void binary_cuda(Binary op, DType t, const void* a, const void* b, void* out, int64_t n,
                 double alpha, cudaStream_t s);

// out = a * scale + shift
void affine_scalar_cpu(DType t, const void* a, void* out, int64_t n, double scale, double shift);
void affine_scalar_cuda(DType t, const void* a, void* out, int64_t n, double scale, double shift,
                        cudaStream_t s);

}  // namespace kestrel::kernels
