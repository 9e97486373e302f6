#include "kernels/random.h"

namespace kestrel::kernels {
namespace {

// Block b's values go to out[4b, 4b + 4), cut at n.
template <class T, class BlockFn>
void fill_blocks(T* out, int64_t n, BlockFn block) {
  const int64_t blocks = static_cast<int64_t>(philox_blocks_for(n));
  for (int64_t b = 0; b < blocks; ++b) {
    T v[4];
    block(static_cast<uint64_t>(b), v);
    for (int64_t k = 0; k < 4 && 4 * b + k < n; ++k) out[4 * b + k] = v[k];
  }
}

}  // namespace

void random_bits_cpu(PhiloxPosition at, uint32_t* out, int64_t n) {
  fill_blocks(out, n, [&](uint64_t b, uint32_t* v) { bits_block(at, b, v); });
}

void uniform_cpu(PhiloxPosition at, philox::UniformParams p, float* out, int64_t n) {
  fill_blocks(out, n, [&](uint64_t b, float* v) { uniform_block(at, p, b, v); });
}

void normal_cpu(PhiloxPosition at, float mean, float stddev, float* out, int64_t n) {
  fill_blocks(out, n, [&](uint64_t b, float* v) { normal_block(at, mean, stddev, b, v); });
}

}  // namespace kestrel::kernels
