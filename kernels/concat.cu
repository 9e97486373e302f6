#include <cstdint>
#include <initializer_list>

#include "base/error.h"
#include "kernels/concat.h"
#include "kernels/launch.cuh"

namespace kestrel::kernels {
namespace {

// One thread per unit of the block. I is int32_t whenever every offset fits, since 64-bit
// division costs several times more instructions than the copy itself.
template <class U, class I>
__global__ void copy_rows_kernel(const U* __restrict__ src, U* __restrict__ dst, I cols, I src_ld,
                                 I dst_ld, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    const I i = static_cast<I>(k);
    const I row = i / cols, col = i - row * cols;
    dst[row_block_dst(row, col, dst_ld)] = src[row_block_src(row, col, src_ld)];
  }
}

// The block re-expressed in units of U (b's sizes are in bytes here).
template <class U>
void launch(const void* src, void* dst, const RowBlock& b, cudaStream_t s) {
  const int64_t w = sizeof(U);
  const int64_t cols = b.cols / w, src_ld = b.src_ld / w, dst_ld = b.dst_ld / w;
  const int64_t n = b.rows * cols;
  const int64_t largest = b.rows * (src_ld > dst_ld ? src_ld : dst_ld);
  const U* in = static_cast<const U*>(src);
  U* out = static_cast<U*>(dst);
  if (largest <= INT32_MAX)
    copy_rows_kernel<U, int32_t><<<cuda::blocks_for(n), cuda::kThreads, 0, s>>>(
        in, out, int32_t(cols), int32_t(src_ld), int32_t(dst_ld), n);
  else
    copy_rows_kernel<U, int64_t>
        <<<cuda::blocks_for(n), cuda::kThreads, 0, s>>>(in, out, cols, src_ld, dst_ld, n);
  KESTREL_CUDA_CHECK_LAUNCH();
}

}  // namespace

void copy_rows_cuda(size_t elem_size, const void* src, void* dst, const RowBlock& b,
                    cudaStream_t stream) {
  KESTREL_CHECK(elem_size == 1 || elem_size == 2 || elem_size == 4 || elem_size == 8,
                "copy_rows_cuda: element size ", elem_size, " is not 1, 2, 4 or 8 bytes");
  if (b.rows == 0 || b.cols == 0) return;
  const int64_t es = static_cast<int64_t>(elem_size);
  const RowBlock bytes{b.rows, b.cols * es, b.src_ld * es, b.dst_ld * es};
  switch (cuda::widest_access_bytes({uint64_t(bytes.cols), uint64_t(bytes.src_ld), uint64_t(bytes.dst_ld),
                      reinterpret_cast<uintptr_t>(src), reinterpret_cast<uintptr_t>(dst)})) {
    case 16: return launch<uint4>(src, dst, bytes, stream);
    case 8: return launch<uint2>(src, dst, bytes, stream);
    case 4: return launch<uint32_t>(src, dst, bytes, stream);
    case 2: return launch<uint16_t>(src, dst, bytes, stream);
    default: return launch<uint8_t>(src, dst, bytes, stream);
  }
}

}  // namespace kestrel::kernels
