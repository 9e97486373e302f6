// Test values for the CPU's bfloat16 activations: float32 tensors that bfloat16 holds exactly (so
// float32 and bfloat16 ops read the same values), float32 results rounded as the bfloat16 ops must
// give them, and bit equality.
#pragma once
#include <cstring>

#include "engine/tensor.h"
#include "kernels/bf16_operands.h"
#include "tests/support/testing.h"

namespace kestrel::testing {

inline bool native_bf16() { return kernels::cpu_bf16_support().native(); }

// Uniform in [lo, hi), rounded to bfloat16's values, float32.
inline Tensor representable(const Shape& shape, uint64_t seed, double lo = -2.0, double hi = 2.0) {
  Tensor t = random_tensor(shape, seed, DType::F32, lo, hi);
  kernels::round_to_bf16_cpu(t.data<float>(), t.data<float>(), t.numel());
  return t;
}

// A float32 tensor's values rounded to bfloat16 (still float32).
inline Tensor rounded(const Tensor& f32) {
  Tensor t = f32.contiguous().clone();
  kernels::round_to_bf16_cpu(t.data<float>(), t.data<float>(), t.numel());
  return t;
}

inline bool bits_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.numel() * a.element_size()) == 0;
}

}  // namespace kestrel::testing
