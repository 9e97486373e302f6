#include <algorithm>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/reduce.h"

namespace kestrel::kernels {
namespace {

template <class T>
void sum_typed(const T* in, T* out, const ReduceShape& s, double scale) {
  if (s.inner == 1) {
    // Independent partial sums: one accumulator would serialise on the latency of each add.
    constexpr int64_t kLanes = 8;
    for (int64_t o = 0; o < s.outer; ++o) {
      const T* row = in + o * s.reduce;
      double lane[kLanes] = {};
      int64_t r = 0;
      for (; r + kLanes <= s.reduce; r += kLanes)
        for (int64_t k = 0; k < kLanes; ++k) lane[k] += row[r + k];
      double acc = 0;
      for (; r < s.reduce; ++r) acc += row[r];
      for (int64_t k = 0; k < kLanes; ++k) acc += lane[k];
      out[o] = static_cast<T>(acc * scale);
    }
    return;
  }
  // Row by row over the reduced axis, so the input is read once, in memory order.
  std::vector<double> acc(s.inner);
  for (int64_t o = 0; o < s.outer; ++o) {
    std::fill(acc.begin(), acc.end(), 0.0);
    const T* block = in + o * s.reduce * s.inner;
    for (int64_t r = 0; r < s.reduce; ++r) {
      const T* row = block + r * s.inner;
      for (int64_t i = 0; i < s.inner; ++i) acc[i] += row[i];
    }
    for (int64_t i = 0; i < s.inner; ++i) out[o * s.inner + i] = static_cast<T>(acc[i] * scale);
  }
}

}  // namespace

void sum_cpu(DType t, const void* in, void* out, const ReduceShape& shape, double scale) {
  KESTREL_CHECK(shape.outer >= 0 && shape.reduce >= 0 && shape.inner >= 0,
                "sum_cpu: negative extent in [", shape.outer, ", ", shape.reduce, ", ", shape.inner,
                "]");
  KESTREL_DISPATCH_CPU_FLOAT(
      t, T, "sum", { sum_typed(static_cast<const T*>(in), static_cast<T*>(out), shape, scale); });
}

}  // namespace kestrel::kernels
