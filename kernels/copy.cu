#include "base/error.h"
#include "kernels/copy.h"
#include "kernels/launch.cuh"
#include "kernels/strided_index.h"

namespace kestrel::kernels {
namespace {

// Fewer than 2^31 elements and offsets: one set of 32-bit divisions (multiply-high and shift)
// gives both offsets.
template <class U>
__global__ void copy32_kernel(uint32_t n, const U* src, U* dst, StridedIndexer32 index) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    int32_t s, d;
    index.offsets(i, s, d);
    dst[d] = src[s];
  }
}

template <class U>
void copy_typed(const U* src, StridedLayout sl, U* dst, StridedLayout dl, cudaStream_t stream) {
  const int64_t n = sl.numel();
  if (n == 0) return;
  coalesce(sl, dl);
  StridedIndexer32 index;
  if (make_indexer32(sl, dl, index)) {
    copy32_kernel<<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(static_cast<uint32_t>(n), src,
                                                                      dst, index);
    KESTREL_CUDA_CHECK_LAUNCH();
    return;
  }
  cuda::launch_map(n, stream,
                   [=] __device__(int64_t i) { dst[dl.offset_of(i)] = src[sl.offset_of(i)]; });
}

template <class T>
void fill_typed(T* data, int64_t n, T value, cudaStream_t stream) {
  cuda::launch_map(n, stream, [=] __device__(int64_t i) { data[i] = value; });
}

}  // namespace

void copy_strided_cuda(size_t elem_size, const void* src, const StridedLayout& sl, void* dst,
                       const StridedLayout& dl, cudaStream_t stream) {
  switch (elem_size) {
    case 1: return copy_typed(static_cast<const uint8_t*>(src), sl, static_cast<uint8_t*>(dst), dl, stream);
    case 2: return copy_typed(static_cast<const uint16_t*>(src), sl, static_cast<uint16_t*>(dst), dl, stream);
    case 4: return copy_typed(static_cast<const uint32_t*>(src), sl, static_cast<uint32_t*>(dst), dl, stream);
    case 8: return copy_typed(static_cast<const uint64_t*>(src), sl, static_cast<uint64_t*>(dst), dl, stream);
  }
  KESTREL_FAIL("copy_strided_cuda: unsupported element size ", elem_size);
}

void fill_cuda(void* data, DType t, int64_t n, double value, cudaStream_t stream) {
  // The value's bit pattern is produced on the host, so fills agree bit for bit with fill_cpu.
  uint64_t bits = 0;
  store_from_double(&bits, t, 0, value);
  switch (dtype_size(t)) {
    case 1: return fill_typed(static_cast<uint8_t*>(data), n, static_cast<uint8_t>(bits), stream);
    case 2: return fill_typed(static_cast<uint16_t*>(data), n, static_cast<uint16_t>(bits), stream);
    case 4: return fill_typed(static_cast<uint32_t*>(data), n, static_cast<uint32_t>(bits), stream);
    case 8: return fill_typed(static_cast<uint64_t*>(data), n, bits, stream);
  }
  KESTREL_FAIL("fill_cuda: unsupported dtype ", dtype_name(t));
}

}  // namespace kestrel::kernels
