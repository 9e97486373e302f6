#include <cstdint>

#include "kernels/launch.cuh"
#include "kernels/random.h"

namespace kestrel::kernels {
namespace {

// One thread per Philox block: 4 values from one 10-round evaluation, written as one 16-byte
// store where the output is aligned and the block is whole.
template <class T, class Vec4, class BlockFn>
__global__ void fill_blocks_kernel(T* out, int64_t n, bool aligned16, BlockFn block) {
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; b < blocks;
       b += int64_t(gridDim.x) * blockDim.x) {
    T v[4];
    block(static_cast<uint64_t>(b), v);
    const int64_t i = 4 * b;
    if (aligned16 && i + 4 <= n) {
      reinterpret_cast<Vec4*>(out)[b] = Vec4{v[0], v[1], v[2], v[3]};
    } else {
      for (int k = 0; k < 4 && i + k < n; ++k) out[i + k] = v[k];
    }
  }
}

template <class T, class Vec4, class BlockFn>
void launch_fill(T* out, int64_t n, cudaStream_t s, BlockFn block) {
  if (n == 0) return;
  const bool aligned16 = reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const int64_t blocks = static_cast<int64_t>(philox_blocks_for(n));
  fill_blocks_kernel<T, Vec4><<<cuda::blocks_for(blocks), cuda::kThreads, 0, s>>>(out, n, aligned16,
                                                                                  block);
  KESTREL_CUDA_CHECK_LAUNCH();
}

struct BitsBlock {
  PhiloxPosition at;
  __device__ void operator()(uint64_t b, uint32_t* v) const { bits_block(at, b, v); }
};

struct UniformBlock {
  PhiloxPosition at;
  philox::UniformParams p;
  __device__ void operator()(uint64_t b, float* v) const { uniform_block(at, p, b, v); }
};

struct NormalBlock {
  PhiloxPosition at;
  float mean, stddev;
  __device__ void operator()(uint64_t b, float* v) const { normal_block(at, mean, stddev, b, v); }
};

}  // namespace

void random_bits_cuda(PhiloxPosition at, uint32_t* out, int64_t n, cudaStream_t s) {
  launch_fill<uint32_t, uint4>(out, n, s, BitsBlock{at});
}

void uniform_cuda(PhiloxPosition at, philox::UniformParams p, float* out, int64_t n,
                  cudaStream_t s) {
  launch_fill<float, float4>(out, n, s, UniformBlock{at, p});
}

void normal_cuda(PhiloxPosition at, float mean, float stddev, float* out, int64_t n,
                 cudaStream_t s) {
  launch_fill<float, float4>(out, n, s, NormalBlock{at, mean, stddev});
}

}  // namespace kestrel::kernels
