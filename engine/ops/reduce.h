// Differentiable sums and means over dimensions, and sum_to for the backward of broadcasting ops.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/tensor.h"

namespace kestrel::ops {

// Sum over `dims` (negative dims count from the end; an empty list means every dim). keepdim
// leaves the reduced dims in place with size 1. CPU: float32/float64 with double accumulation;
// CUDA: float32/float16/bfloat16 with float accumulation, deterministic.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
// Over every element: a 0-d tensor.
Tensor sum_all(const Tensor& x);
Tensor mean_all(const Tensor& x);

// Sums g down to `shape`, which g's shape broadcasts from: leading dims g has in excess are
// summed away, and dims where `shape` has 1 and g does not are summed with keepdim.
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace kestrel::ops
