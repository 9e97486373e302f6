// Concatenation along one dimension (YOLOv5's Concat joins NHWC tensors on channels, dim -1).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/tensor.h"

namespace kestrel::ops {

// Joins xs along dim (negative counts from the end). Every input must have the same rank, dtype
// and device, and the same size in every other dimension; any dtype works (pure data movement).
// Backward hands each input that requires grad its slice of the gradient.
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);

}  // namespace kestrel::ops
