// Fills from a Philox4x32-10 stream. A position is (seed, stream id, offset in 4-value blocks);
// element i of a fill takes lane i % 4 of block offset + i / 4, so a fill of n values consumes
// ceil(n / 4) blocks and the numbers depend only on the position, never on the device or on how
// the work is split across threads. The per-block math lives here, shared by both versions.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/philox.h"

namespace kestrel::kernels {

struct PhiloxPosition {
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint64_t offset = 0;  // in blocks
};

inline uint64_t philox_blocks_for(int64_t n) { return static_cast<uint64_t>(n + 3) / 4; }

KESTREL_HD inline philox::Block philox_block(PhiloxPosition at, uint64_t b) {
  return philox::block_at(at.seed, at.stream, at.offset + b);
}

KESTREL_HD inline void bits_block(PhiloxPosition at, uint64_t b, uint32_t v[4]) {
  const philox::Block r = philox_block(at, b);
  for (int k = 0; k < 4; ++k) v[k] = r.v[k];
}

KESTREL_HD inline void uniform_block(PhiloxPosition at, philox::UniformParams p, uint64_t b,
                                     float v[4]) {
  const philox::Block r = philox_block(at, b);
  for (int k = 0; k < 4; ++k) v[k] = philox::uniform_from_bits(r.v[k], p);
}

// Lanes (0, 1) and (2, 3) each make one Box-Muller pair.
KESTREL_HD inline void normal_block(PhiloxPosition at, float mean, float stddev, uint64_t b,
                                    float v[4]) {
  const philox::Block r = philox_block(at, b);
  float z[4];
  philox::box_muller(r.v[0], r.v[1], &z[0], &z[1]);
  philox::box_muller(r.v[2], r.v[3], &z[2], &z[3]);
  for (int k = 0; k < 4; ++k) v[k] = philox::normal_from_standard(z[k], mean, stddev);
}

// out[0, n) contiguous. None of them advances anything: the caller owns the position.
void random_bits_cpu(PhiloxPosition at, uint32_t* out, int64_t n);
void random_bits_cuda(PhiloxPosition at, uint32_t* out, int64_t n, cudaStream_t s);
void uniform_cpu(PhiloxPosition at, philox::UniformParams p, float* out, int64_t n);
void uniform_cuda(PhiloxPosition at, philox::UniformParams p, float* out, int64_t n,
                  cudaStream_t s);
void normal_cpu(PhiloxPosition at, float mean, float stddev, float* out, int64_t n);
void normal_cuda(PhiloxPosition at, float mean, float stddev, float* out, int64_t n,
                 cudaStream_t s);

}  // namespace kestrel::kernels
