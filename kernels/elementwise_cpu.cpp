// CPU elementwise ops. float64: the plain reference loops over the shared per-element math (what
// the gradient checks run). float32: the same formulas with exp_approx in place of libm's expf, in
// loops that vectorise under runtime ISA dispatch, spread over OpenMP threads in fixed chunks (so
// the bits do not depend on the thread count). Outputs may alias an input exactly (in-place
// accumulation), never partially: the loops are marked `omp simd`, which holds for distance 0.
#include "kernels/bf16_operands.h"
#include "kernels/cpu_simd.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise.h"

namespace kestrel::kernels {
namespace {

// 128 KiB of float per chunk: the smaller activations of a step run on the calling thread alone.
constexpr int64_t kGrain = int64_t(1) << 15;

// The activations over values stored as S (float32, or bfloat16 bits read exactly and rounded once:
// the CPU's bfloat16 activations, where SyncBN runs BN and SiLU as two ops), one loop per op so that
// each vectorises; compiled per ISA by the wrappers.
template <class S>
[[gnu::always_inline]] inline void unary_values(Unary op, const S* x, S* y, int64_t n) {
  if (op == Unary::Silu) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = stored_as<S>(as_float(x[i]) * sigmoid_approx(as_float(x[i])));
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = stored_as<S>(sigmoid_approx(as_float(x[i])));
  }
}

// dx from the saved x (SiLU) or y (sigmoid) and dy.
template <class S>
[[gnu::always_inline]] inline void unary_grad_values(Unary op, const S* saved, const S* dy, S* dx, int64_t n) {
  if (op == Unary::Silu) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dx[i] = stored_as<S>(as_float(dy[i]) * silu_grad_approx(as_float(saved[i])));
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dx[i] = stored_as<S>(as_float(dy[i]) * sigmoid_grad_fn(as_float(saved[i])));
  }
}

KESTREL_CPU_CLONES void unary_f32(Unary op, const float* x, float* y, int64_t n) { unary_values(op, x, y, n); }
KESTREL_CPU_CLONES void unary_bf16(Unary op, const uint16_t* x, uint16_t* y, int64_t n) { unary_values(op, x, y, n); }
KESTREL_CPU_CLONES void unary_grad_f32(Unary op, const float* saved, const float* dy, float* dx, int64_t n) {
  unary_grad_values(op, saved, dy, dx, n);
}
KESTREL_CPU_CLONES void unary_grad_bf16(Unary op, const uint16_t* saved, const uint16_t* dy, uint16_t* dx, int64_t n) {
  unary_grad_values(op, saved, dy, dx, n);
}

// out = alpha * (a op b) over values stored as S (float32, or bfloat16 bits: the float32 op on the
// exact values, rounded once to nearest even), one loop per op so that each vectorises.
template <class S>
[[gnu::always_inline]] inline void binary_values(Binary op, const S* a, const S* b, S* out, int64_t n, float alpha) {
  switch (op) {
    case Binary::Add:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = stored_as<S>(alpha * (as_float(a[i]) + as_float(b[i])));
      break;
    case Binary::Sub:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = stored_as<S>(alpha * (as_float(a[i]) - as_float(b[i])));
      break;
    case Binary::Mul:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = stored_as<S>(alpha * (as_float(a[i]) * as_float(b[i])));
      break;
  }
}

KESTREL_CPU_CLONES void binary_f32(Binary op, const float* a, const float* b, float* out, int64_t n, float alpha) {
  binary_values(op, a, b, out, n, alpha);
}

// bfloat16 activations (the CPU's --amp bf16 and --half).
KESTREL_CPU_CLONES void binary_bf16(Binary op, const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n,
                                    float alpha) {
  binary_values(op, a, b, out, n, alpha);
}

// kernel(op, a, b, out, count, alpha) over n values of storage type S, in parallel chunks.
template <class S, class Kernel>
void binary_chunks(Kernel kernel, Binary op, const void* a_, const void* b_, void* out_, int64_t n, float alpha) {
  const S* a = static_cast<const S*>(a_);
  const S* b = static_cast<const S*>(b_);
  S* out = static_cast<S*>(out_);
  parallel_chunks(n, kGrain, [&](int64_t lo, int64_t hi) { kernel(op, a + lo, b + lo, out + lo, hi - lo, alpha); });
}

KESTREL_CPU_CLONES void affine_f32(const float* a, float* out, int64_t n, float scale,
                                   float shift) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * scale + shift;
}

}  // namespace

void unary_forward_cpu(Unary op, DType t, const void* x_, void* y_, int64_t n) {
  auto chunks = [&]<class S>(void (*kernel)(Unary, const S*, S*, int64_t)) {
    const S* x = static_cast<const S*>(x_);
    S* y = static_cast<S*>(y_);
    parallel_chunks(n, kGrain, [&](int64_t b, int64_t e) { kernel(op, x + b, y + b, e - b); });
  };
  if (t == DType::F32) return chunks(unary_f32);
  if (t == DType::BF16) return chunks(unary_bf16);
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "activation", {
    const T* x = static_cast<const T*>(x_);
    T* y = static_cast<T*>(y_);
    if (op == Unary::Silu)
      for (int64_t i = 0; i < n; ++i) y[i] = silu_fn(x[i]);
    else
      for (int64_t i = 0; i < n; ++i) y[i] = sigmoid_fn(x[i]);
  });
}

void unary_backward_cpu(Unary op, DType t, const void* saved_, const void* dy_, void* dx_,
                        int64_t n) {
  auto chunks = [&]<class S>(void (*kernel)(Unary, const S*, const S*, S*, int64_t)) {
    const S* saved = static_cast<const S*>(saved_);
    const S* dy = static_cast<const S*>(dy_);
    S* dx = static_cast<S*>(dx_);
    parallel_chunks(n, kGrain, [&](int64_t b, int64_t e) { kernel(op, saved + b, dy + b, dx + b, e - b); });
  };
  if (t == DType::F32) return chunks(unary_grad_f32);
  if (t == DType::BF16) return chunks(unary_grad_bf16);
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "activation backward", {
    const T* saved = static_cast<const T*>(saved_);
    const T* dy = static_cast<const T*>(dy_);
    T* dx = static_cast<T*>(dx_);
    if (op == Unary::Silu)
      for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * silu_grad_fn(saved[i]);
    else
      for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * sigmoid_grad_fn(saved[i]);
  });
}

void binary_cpu(Binary op, DType t, const void* a_, const void* b_, void* out_, int64_t n,
                double alpha) {
  if (t == DType::F32) return binary_chunks<float>(binary_f32, op, a_, b_, out_, n, static_cast<float>(alpha));
  if (t == DType::BF16) return binary_chunks<uint16_t>(binary_bf16, op, a_, b_, out_, n, static_cast<float>(alpha));
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "binary op", {
    const T* a = static_cast<const T*>(a_);
    const T* b = static_cast<const T*>(b_);
    T* out = static_cast<T*>(out_);
    const T al = static_cast<T>(alpha);
    for (int64_t i = 0; i < n; ++i) out[i] = al * binary_fn(op, a[i], b[i]);
  });
}

void affine_scalar_cpu(DType t, const void* a_, void* out_, int64_t n, double scale,
                       double shift) {
  if (t == DType::F32) {
    const float* a = static_cast<const float*>(a_);
    float* out = static_cast<float*>(out_);
    parallel_chunks(n, kGrain, [&](int64_t lo, int64_t hi) {
      affine_f32(a + lo, out + lo, hi - lo, static_cast<float>(scale), static_cast<float>(shift));
    });
    return;
  }
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "scalar affine", {
    const T* a = static_cast<const T*>(a_);
    T* out = static_cast<T*>(out_);
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] * T(scale) + T(shift);
  });
}

}  // namespace kestrel::kernels
