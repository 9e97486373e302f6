// Launch helpers shared by the CUDA kernels: grid sizing and a grid-stride elementwise map.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "kernels/cuda_check.h"

namespace kestrel::cuda {

constexpr int kThreads = 256;

inline int blocks_for(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(std::clamp<int64_t>(b, 1, 65535LL * 8));
}

// f(i) for every i in [0, n).
template <class F>
__global__ void map_kernel(int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    f(i);
}

// V elements of T moved as one aligned access.
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// The widest power-of-two access (at most 16 bytes) dividing every byte count and address given.
inline int widest_access_bytes(std::initializer_list<uint64_t> values) {
  uint64_t bits = 0;
  for (uint64_t v : values) bits |= v;
  for (int w = 16; w > 1; w /= 2)
    if (bits % w == 0) return w;
  return 1;
}

template <class F>
void launch_map(int64_t n, cudaStream_t stream, F f) {
  if (n == 0) return;
  map_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, f);
  KESTREL_CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::cuda
