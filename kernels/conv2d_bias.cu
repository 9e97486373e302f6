// The convolution's bias on CUDA: a broadcast over the channel (last) dimension of the NHWC
// output, and its gradient, a column sum of dy viewed as rows x channels. The sum runs in two
// passes with a split that depends only on the shape: blocks of 32 channels x 8 row lanes reduce
// a chunk of rows each into float partials, then one thread per channel adds its chunks in order.
// No atomics, so the result is the same bits on every run.
#include <algorithm>

#include "kernels/conv2d.h"
#include "kernels/dispatch.h"
#include "kernels/launch.cuh"

namespace kestrel::kernels {
namespace {

constexpr int kChannelsPerBlock = 32;  // one warp across consecutive channels: coalesced rows
constexpr int kRowLanes = 8;
constexpr int64_t kRowsPerChunkMin = 1024;
constexpr int64_t kMaxChunks = 1024;

int64_t chunk_count(int64_t rows) {
  return std::clamp<int64_t>((rows + kRowsPerChunkMin - 1) / kRowsPerChunkMin, 1, kMaxChunks);
}

template <class T>
__global__ void bias_grad_partials(const T* __restrict__ dy, int64_t rows, int64_t channels,
                                   int64_t rows_per_chunk, float* __restrict__ partials) {
  __shared__ float lanes[kRowLanes][kChannelsPerBlock + 1];
  const int64_t c = int64_t(blockIdx.x) * kChannelsPerBlock + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t end = std::min(rows, (chunk + 1) * rows_per_chunk);
  float acc = 0.0f;
  if (c < channels)
    for (int64_t r = chunk * rows_per_chunk + threadIdx.y; r < end; r += kRowLanes)
      acc += to_acc(dy[r * channels + c]);
  lanes[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    float sum = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) sum += lanes[lane][threadIdx.x];
    partials[chunk * channels + c] = sum;
  }
}

template <class T>
__global__ void bias_grad_finish(const float* __restrict__ partials, int64_t chunks,
                                 int64_t channels, T* __restrict__ db) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  float sum = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) sum += partials[k * channels + c];
  db[c] = from_acc<T>(sum);
}

}  // namespace

void conv2d_fill_bias_cuda(DType t, int64_t rows, int64_t channels, const void* bias_, void* y_,
                           cudaStream_t stream) {
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "conv2d bias", {
    const T* bias = static_cast<const T*>(bias_);
    T* y = static_cast<T*>(y_);
    cuda::launch_map(rows * channels, stream,
                     [=] __device__(int64_t i) { y[i] = bias[i % channels]; });
  });
}

int64_t conv2d_bias_grad_partials(int64_t rows, int64_t channels) {
  return chunk_count(rows) * channels;
}

void conv2d_backward_bias_cuda(DType t, int64_t rows, int64_t channels, const void* dy,
                               void* db, float* partials, cudaStream_t stream) {
  if (channels == 0) return;
  const int64_t chunks = chunk_count(rows);
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "conv2d bias backward", {
    const dim3 grid(unsigned((channels + kChannelsPerBlock - 1) / kChannelsPerBlock),
                    unsigned(chunks));
    bias_grad_partials<T><<<grid, dim3(kChannelsPerBlock, kRowLanes), 0, stream>>>(
        static_cast<const T*>(dy), rows, channels, rows_per_chunk, partials);
    KESTREL_CUDA_CHECK_LAUNCH();
    bias_grad_finish<T><<<cuda::blocks_for(channels), cuda::kThreads, 0, stream>>>(
        partials, chunks, channels, static_cast<T*>(db));
    KESTREL_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kestrel::kernels
