// Counter-based random numbers (Philox4x32-10, kernels/philox.h). The numbers are a pure function
// of (seed, stream id, offset): the key is the seed, the 128-bit counter is (block offset, stream
// id), and element i of a fill uses lane i % 4 of block offset + i / 4. A Generator only tracks
// the offset, so a sequence of fills and draws is reproducible from its seed and stream alone, on
// the CPU and on CUDA alike (bitwise: see kernels/philox.h), and independent streams (e.g. one
// per rank and data-loader worker) never overlap.
#pragma once
#include <cstdint>

#include "engine/tensor.h"
#include "kernels/philox.h"

namespace kestrel {

class Generator {
 public:
  explicit Generator(uint64_t seed, uint64_t stream_id = 0) : seed_(seed), stream_(stream_id) {}

  uint64_t seed() const { return seed_; }
  uint64_t stream_id() const { return stream_; }
  // Blocks of 4 values used so far (a block partly used by host draws counts as used).
  uint64_t offset() const { return offset_; }
  // Continue from block `offset` (drops what is left of a block partly used by host draws).
  void set_offset(uint64_t offset);

  // Fill every element of a float32 tensor on any device, in row-major order of its shape (views
  // included), and advance the offset by the ceil(numel / 4) blocks used. Uniform values lie in
  // [lo, hi) after rounding lo and hi to float; normal values are mean + std * z, z from
  // Box-Muller (|z| <= 5.77, the tail beyond it has probability 8e-9). Not recorded by autograd.
  void fill_uniform(const Tensor& t, double lo, double hi);
  void fill_normal(const Tensor& t, double mean, double std);

  // Host draws for the data pipeline, taken lane by lane from the same stream.
  uint32_t next_u32();
  uint64_t next_u64();  // two lanes, the first in the high half
  double uniform();     // [0, 1) on a 2^-53 grid
  double uniform(double lo, double hi);  // [lo, hi)
  uint64_t randint(uint64_t n);          // [0, n), unbiased

 private:
  void fill(const Tensor& t, const char* what, bool normal, philox::UniformParams u, float mean,
            float stddev);

  uint64_t seed_;
  uint64_t stream_;
  uint64_t offset_ = 0;
  philox::Block block_{};  // the block host draws are reading
  int lane_ = 4;           // next unread lane of block_; 4 = none left
};

}  // namespace kestrel
