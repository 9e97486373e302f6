#include <algorithm>
#include <cstdint>

#include "kernels/dispatch.h"
#include "kernels/launch.cuh"
#include "kernels/layout.h"

namespace kestrel::kernels {
namespace {

// One block per tile (grid-stride over tiles), the tile staged in shared memory.
template <class U>
__global__ void transpose_kernel(const U* __restrict__ src, U* __restrict__ dst, TransposeShape s,
                                 TransposeTiling t) {
  __shared__ U tile[kTileCapacity];
  const int64_t tiles = s.batch * t.row_tiles * t.col_tiles;
  for (int64_t id = blockIdx.x; id < tiles; id += gridDim.x) {
    const TileSpan span = tile_span(s, t, id);
    const U* from = src + transpose_src(span.b, span.r0, span.c0, s.rows, s.cols);
    U* to = dst + transpose_dst(span.b, span.r0, span.c0, s.rows, s.cols);
    int r, c;
    for (int e = threadIdx.x; e < span.rows * span.cols; e += blockDim.x) {
      tile_load_element(span, e, r, c);
      tile[r * t.pitch + c] = from[r * s.cols + c];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < span.rows * span.cols; e += blockDim.x) {
      tile_store_element(span, e, r, c);
      to[c * s.rows + r] = tile[r * t.pitch + c];
    }
    __syncthreads();
  }
}

template <class U>
void launch_transpose(const void* src, void* dst, const TransposeShape& s, cudaStream_t stream) {
  const TransposeTiling t = transpose_tiling(s);
  const int blocks = static_cast<int>(std::min<int64_t>(t.count(s), 65535LL * 8));
  transpose_kernel<U><<<blocks, cuda::kThreads, 0, stream>>>(static_cast<const U*>(src),
                                                             static_cast<U*>(dst), s, t);
  KESTREL_CUDA_CHECK_LAUNCH();
}


}  // namespace

void transpose_batched_cuda(size_t elem_size, const void* src, void* dst, const TransposeShape& s,
                            cudaStream_t stream) {
  if (s.batch * s.rows * s.cols == 0) return;
  switch (elem_size) {
    case 1: return launch_transpose<uint8_t>(src, dst, s, stream);
    case 2: return launch_transpose<uint16_t>(src, dst, s, stream);
    case 4: return launch_transpose<uint32_t>(src, dst, s, stream);
    case 8: return launch_transpose<uint64_t>(src, dst, s, stream);
  }
  KESTREL_FAIL("transpose_batched_cuda: element size ", elem_size, " is not 1, 2, 4 or 8 bytes");
}

void images_to_input_cuda(const uint8_t* src, DType t, void* dst_, int64_t n, double scale,
                          cudaStream_t stream) {
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "images_to_input", {
    T* dst = static_cast<T*>(dst_);
    // Four pixels' bytes per thread: one 4-byte load, one 4-element store.
    const bool vectorized = n % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 4 == 0 &&
                            reinterpret_cast<uintptr_t>(dst) % (4 * sizeof(T)) == 0;
    if (vectorized) {
      const auto* in = reinterpret_cast<const uchar4*>(src);
      auto* out = reinterpret_cast<cuda::Pack<T, 4>*>(dst);
      cuda::launch_map(n / 4, stream, [=] __device__(int64_t i) {
        const uchar4 q = in[i];
        cuda::Pack<T, 4> p;
        p.v[0] = scaled_pixel<T>(q.x, scale);
        p.v[1] = scaled_pixel<T>(q.y, scale);
        p.v[2] = scaled_pixel<T>(q.z, scale);
        p.v[3] = scaled_pixel<T>(q.w, scale);
        out[i] = p;
      });
    } else {
      cuda::launch_map(n, stream,
                       [=] __device__(int64_t i) { dst[i] = scaled_pixel<T>(src[i], scale); });
    }
  });
}

}  // namespace kestrel::kernels
