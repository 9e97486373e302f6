// CUDA batch norm over [rows, channels] (NHWC). A block is a tile of up to 32 consecutive channels
// (threadIdx.x, so a warp reads contiguous memory) times 256/tile row lanes (threadIdx.y); the grid
// is channel tiles x row blocks. Reductions are deterministic without float atomics: each block
// reduces its rows in a fixed tree and writes one partial per channel, and a second kernel folds
// the partials of each channel in a fixed order.
#include <algorithm>

#include "kernels/batchnorm.h"
#include "kernels/dispatch.h"
#include "kernels/launch.cuh"

namespace kestrel::kernels {
namespace {

constexpr int kMaxTile = 32;
// Reductions: enough blocks to fill an H100 (132 SMs x 8 resident blocks of 256 threads) in about
// one wave, each thread still summing at least kMinRowsPerThread rows.
constexpr int64_t kTargetBlocks = 1024;
constexpr int64_t kMinRowsPerThread = 16;
// Elementwise passes: a few rows per thread amortise the per-channel setup (invstd, scales).
constexpr int64_t kApplyRowsPerThread = 8;

struct Geometry {
  int tile = 1;   // channels per block (blockDim.x), a power of two
  int lanes = 1;  // rows in flight per block (blockDim.y), a power of two
  int64_t channel_tiles = 1;
  dim3 block() const { return dim3(tile, lanes); }
};

Geometry geometry(BatchNormShape s) {
  Geometry g;
  while (g.tile < s.channels && g.tile < kMaxTile) g.tile *= 2;
  g.lanes = cuda::kThreads / g.tile;
  g.channel_tiles = (s.channels + g.tile - 1) / g.tile;
  return g;
}

// Row blocks of the reduction kernels (also the number of partials per channel).
int64_t reduce_row_blocks(BatchNormShape s, const Geometry& g) {
  const int64_t rows_per_block = g.lanes * kMinRowsPerThread;
  const int64_t by_rows = (s.rows + rows_per_block - 1) / rows_per_block;
  const int64_t by_occupancy = std::max<int64_t>(1, kTargetBlocks / g.channel_tiles);
  return std::clamp<int64_t>(std::min(by_rows, by_occupancy), 1, 65535);
}

int64_t apply_row_blocks(BatchNormShape s, const Geometry& g) {
  const int64_t rows_per_block = g.lanes * kApplyRowsPerThread;
  return std::clamp<int64_t>((s.rows + rows_per_block - 1) / rows_per_block, 1, 65535);
}

struct Sums {
  float dy, dy_xmu;  // sum(dy), sum(dy * (x - mean))
};

struct AddSums {
  __device__ Sums operator()(const Sums& a, const Sums& b) const {
    return {a.dy + b.dy, a.dy_xmu + b.dy_xmu};
  }
};

struct MergeMoments {
  __device__ Moments<float> operator()(const Moments<float>& a, const Moments<float>& b) const {
    return merge_moments(a, b);
  }
};

// Combines the blockDim.y values of each channel column in a fixed tree; the result is valid in
// threadIdx.y == 0. Every thread of the block must call it.
template <class V, class Combine>
__device__ V block_reduce_rows(V v, Combine combine) {
  __shared__ __align__(16) unsigned char raw[cuda::kThreads * sizeof(V)];
  V* shared = reinterpret_cast<V*>(raw);
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  for (int half = blockDim.y / 2; half > 0; half /= 2) {
    if (threadIdx.y >= half && threadIdx.y < 2 * half) shared[tid] = v;
    __syncthreads();
    if (threadIdx.y < half) v = combine(v, shared[tid + half * blockDim.x]);
    __syncthreads();
  }
  return v;
}

// Per-block moments of each channel, relative to the channel's first value k = x[0, c]. Each
// thread sums its rows shifted by k (see moments_from_shifted_sums): three flops an element where
// Welford needs a division.
template <class T>
__global__ void stats_partial_kernel(const T* __restrict__ x, int64_t rows, int64_t channels,
                                     float* __restrict__ partial) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  Moments<float> m;
  if (c < channels && rows > 0) {
    const float k = to_acc(x[c]);
    const int64_t step = int64_t(gridDim.y) * blockDim.y;
    int64_t r = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
    float s = 0.f, q = 0.f, n = 0.f;
    // Four independent loads in flight per thread before their arithmetic.
    for (; r + 3 * step < rows; r += 4 * step) {
      float v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = to_acc(x[(r + u * step) * channels + c]);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const float d = v[u] - k;
        s += d;
        q += d * d;
      }
      n += 4.f;
    }
    for (; r < rows; r += step) {
      const float d = to_acc(x[r * channels + c]) - k;
      s += d;
      q += d * d;
      n += 1.f;
    }
    m = moments_from_shifted_sums(n, s, q);
  }
  m = block_reduce_rows(m, MergeMoments());
  if (threadIdx.y == 0 && c < channels) {
    const int64_t plane = int64_t(gridDim.y) * channels;
    const int64_t i = int64_t(blockIdx.y) * channels + c;
    partial[i] = m.count;
    partial[plane + i] = m.mean;
    partial[2 * plane + i] = m.m2;
  }
}

// Folds the row-block partials of each channel (lane ly takes blocks ly, ly + lanes, ...) and
// writes the packed moments [rows, mean, biased var], adding the shift back to the mean.
template <class T>
__global__ void stats_final_kernel(const float* __restrict__ partial, int64_t row_blocks,
                                   const T* __restrict__ x, int64_t rows, int64_t channels,
                                   float* __restrict__ moments) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t plane = row_blocks * channels;
  Moments<float> m;
  if (c < channels)
    for (int64_t b = threadIdx.y; b < row_blocks; b += blockDim.y) {
      const int64_t i = b * channels + c;
      m = merge_moments(m, Moments<float>{partial[i], partial[plane + i], partial[2 * plane + i]});
    }
  m = block_reduce_rows(m, MergeMoments());
  if (threadIdx.y == 0 && c < channels) {
    moments[1 + c] = rows > 0 ? to_acc(x[c]) + m.mean : 0.f;
    moments[1 + channels + c] = m.count > 0.f ? m.m2 / m.count : 0.f;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0) moments[0] = float(rows);
}

template <class T>
__global__ void backward_reduce_partial_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                               int64_t rows, int64_t channels,
                                               const float* __restrict__ mean,
                                               float* __restrict__ partial) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  Sums acc{0.f, 0.f};
  if (c < channels) {
    const float mu = mean[c];
    const int64_t step = int64_t(gridDim.y) * blockDim.y;
    int64_t r = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
    for (; r + 3 * step < rows; r += 4 * step) {
      float g[4], v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t i = (r + u * step) * channels + c;
        g[u] = to_acc(dy[i]);
        v[u] = to_acc(x[i]);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        acc.dy += g[u];
        acc.dy_xmu += g[u] * (v[u] - mu);
      }
    }
    for (; r < rows; r += step) {
      const int64_t i = r * channels + c;
      const float g = to_acc(dy[i]);
      acc.dy += g;
      acc.dy_xmu += g * (to_acc(x[i]) - mu);
    }
  }
  acc = block_reduce_rows(acc, AddSums());
  if (threadIdx.y == 0 && c < channels) {
    const int64_t plane = int64_t(gridDim.y) * channels;
    const int64_t i = int64_t(blockIdx.y) * channels + c;
    partial[i] = acc.dy;
    partial[plane + i] = acc.dy_xmu;
  }
}

// sums = [sum(dy), sum(dy * xhat)]; xhat's invstd is applied once per channel at the end.
__global__ void backward_reduce_final_kernel(const float* __restrict__ partial, int64_t row_blocks,
                                             int64_t channels, const float* __restrict__ var,
                                             float eps, float* __restrict__ sums) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t plane = row_blocks * channels;
  Sums acc{0.f, 0.f};
  if (c < channels)
    for (int64_t b = threadIdx.y; b < row_blocks; b += blockDim.y) {
      acc.dy += partial[b * channels + c];
      acc.dy_xmu += partial[plane + b * channels + c];
    }
  acc = block_reduce_rows(acc, AddSums());
  if (threadIdx.y == 0 && c < channels) {
    sums[c] = acc.dy;
    sums[channels + c] = acc.dy_xmu * batch_norm_invstd(var[c], eps);
  }
}

template <class T>
__global__ void forward_kernel(const T* __restrict__ x, int64_t rows, int64_t channels,
                               const float* __restrict__ mean, const float* __restrict__ var,
                               const float* __restrict__ weight, const float* __restrict__ bias,
                               float eps, T* __restrict__ y) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  const float mu = mean[c], scale = batch_norm_invstd(var[c], eps) * weight[c], b = bias[c];
  const int64_t step = int64_t(gridDim.y) * blockDim.y;
#pragma unroll 4
  for (int64_t r = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < rows; r += step) {
    const int64_t i = r * channels + c;
    y[i] = from_acc<T>(batch_norm_apply_fn(to_acc(x[i]), mu, scale, b));
  }
}

template <class T>
__global__ void backward_apply_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                      int64_t rows, int64_t channels,
                                      const float* __restrict__ mean, const float* __restrict__ var,
                                      const float* __restrict__ weight, float eps,
                                      const float* __restrict__ sums,
                                      const float* __restrict__ count, T* __restrict__ dx) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  const float mu = mean[c], invstd = batch_norm_invstd(var[c], eps);
  const float k1 = weight[c] * invstd;
  float mean_dy = 0.f, k2 = 0.f;
  if (sums) {
    const float inv_count = 1.f / *count;
    mean_dy = sums[c] * inv_count;
    k2 = invstd * sums[channels + c] * inv_count;
  }
  const int64_t step = int64_t(gridDim.y) * blockDim.y;
#pragma unroll 4
  for (int64_t r = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < rows; r += step) {
    const int64_t i = r * channels + c;
    dx[i] = from_acc<T>(batch_norm_dx_fn(to_acc(dy[i]), to_acc(x[i]), mu, k1, mean_dy, k2));
  }
}

}  // namespace

int64_t batch_norm_workspace_floats(BatchNormShape s) {
  const Geometry g = geometry(s);
  return 3 * reduce_row_blocks(s, g) * s.channels;
}

void batch_norm_stats_cuda(DType t, const void* x_, BatchNormShape s, float* moments,
                           float* workspace, cudaStream_t stream) {
  if (s.channels == 0) return;
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "batch_norm statistics", {
    const T* x = static_cast<const T*>(x_);
    const Geometry g = geometry(s);
    const int64_t row_blocks = reduce_row_blocks(s, g);
    stats_partial_kernel<T><<<dim3(g.channel_tiles, row_blocks), g.block(), 0, stream>>>(
        x, s.rows, s.channels, workspace);
    KESTREL_CUDA_CHECK_LAUNCH();
    stats_final_kernel<T><<<dim3(g.channel_tiles, 1), g.block(), 0, stream>>>(
        workspace, row_blocks, x, s.rows, s.channels, moments);
    KESTREL_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_merge_moments_cuda(int64_t ranks, int64_t channels, const float* gathered,
                                   float* merged, cudaStream_t stream) {
  const int64_t stride = moments_size(channels);
  // Few ranks: one thread per channel folds them in rank order, in double for a merge that adds
  // no error of its own beyond the final rounding.
  cuda::launch_map(channels, stream, [=] __device__(int64_t c) {
    Moments<double> acc;
    for (int64_t r = 0; r < ranks; ++r) {
      const float* row = gathered + r * stride;
      const double n = row[0];
      acc = merge_moments(acc, Moments<double>{n, double(row[1 + c]),
                                               double(row[1 + channels + c]) * n});
    }
    merged[1 + c] = float(acc.mean);
    merged[1 + channels + c] = float(acc.count > 0 ? acc.m2 / acc.count : 0.0);
    if (c == 0) merged[0] = float(acc.count);
  });
}

void batch_norm_forward_cuda(DType t, const void* x_, BatchNormShape s, const float* mean,
                             const float* var, const float* weight, const float* bias, double eps,
                             void* y_, cudaStream_t stream) {
  if (s.rows == 0 || s.channels == 0) return;
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "batch_norm", {
    const Geometry g = geometry(s);
    forward_kernel<T><<<dim3(g.channel_tiles, apply_row_blocks(s, g)), g.block(), 0, stream>>>(
        static_cast<const T*>(x_), s.rows, s.channels, mean, var, weight, bias, float(eps),
        static_cast<T*>(y_));
    KESTREL_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_update_running_cuda(int64_t channels, const float* moments, double momentum,
                                    float* running_mean, float* running_var,
                                    int64_t* batches_tracked, cudaStream_t stream) {
  const float m = float(momentum);
  cuda::launch_map(channels, stream, [=] __device__(int64_t c) {
    if (c == 0 && batches_tracked) ++*batches_tracked;
    batch_norm_running_fn(moments[0], moments[1 + c], moments[1 + channels + c], m,
                          running_mean[c], running_var[c]);
  });
}

void batch_norm_backward_reduce_cuda(DType t, const void* dy_, const void* x_, BatchNormShape s,
                                     const float* mean, const float* var, double eps, float* sums,
                                     float* workspace, cudaStream_t stream) {
  if (s.channels == 0) return;
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "batch_norm backward", {
    const Geometry g = geometry(s);
    const int64_t row_blocks = reduce_row_blocks(s, g);
    backward_reduce_partial_kernel<T><<<dim3(g.channel_tiles, row_blocks), g.block(), 0, stream>>>(
        static_cast<const T*>(dy_), static_cast<const T*>(x_), s.rows, s.channels, mean,
        workspace);
    KESTREL_CUDA_CHECK_LAUNCH();
    backward_reduce_final_kernel<<<dim3(g.channel_tiles, 1), g.block(), 0, stream>>>(
        workspace, row_blocks, s.channels, var, float(eps), sums);
    KESTREL_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_backward_apply_cuda(DType t, const void* dy_, const void* x_, BatchNormShape s,
                                    const float* mean, const float* var, const float* weight,
                                    double eps, const float* sums, const float* count, void* dx_,
                                    cudaStream_t stream) {
  if (s.rows == 0 || s.channels == 0) return;
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "batch_norm backward", {
    const Geometry g = geometry(s);
    backward_apply_kernel<T><<<dim3(g.channel_tiles, apply_row_blocks(s, g)), g.block(), 0,
                               stream>>>(static_cast<const T*>(dy_), static_cast<const T*>(x_),
                                         s.rows, s.channels, mean, var, weight, float(eps), sums,
                                         count, static_cast<T*>(dx_));
    KESTREL_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kestrel::kernels
