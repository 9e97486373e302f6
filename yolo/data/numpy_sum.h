// np.add.reduce of float64 values as numpy computes it: the identity 0.0 plus numpy's pairwise
// summation (8 accumulators up to 128 elements, halves above). A 2-D array's .sum(1) is this
// per row. Kestrel's metrics and --image-weights add up as the reference's numpy code does.
#pragma once
#include <cstdint>

namespace kestrel::yolo::data {

double numpy_pairwise_sum(const double* a, int64_t n, int64_t stride = 1);
inline double numpy_sum(const double* a, int64_t n, int64_t stride = 1) {
  return 0.0 + numpy_pairwise_sum(a, n, stride);
}

}  // namespace kestrel::yolo::data
