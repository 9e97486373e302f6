#include <cstdint>

#include "kernels/dispatch.h"
#include "kernels/launch.cuh"
#include "kernels/maxpool.h"

namespace kestrel::kernels {
namespace {

// One thread per output element, channels fastest so a warp reads consecutive channels of the
// same pixel. Overlapping windows (stride < kernel) re-read their inputs from L1/L2, not HBM.
template <class T, class I>
__global__ void maxpool2d_forward_kernel(const T* __restrict__ x, T* __restrict__ y,
                                         uint8_t* __restrict__ window, PoolShape s, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    const I o = static_cast<I>(k);
    const I c = o % I(s.c), pixel = o / I(s.c);
    const I ow = pixel % I(s.out_w), row = pixel / I(s.out_w);
    const I oh = row % I(s.out_h), b = row / I(s.out_h);
    const PoolChoice<I> best = maxpool_choose(x, s, b, oh, ow, c);
    y[o] = x[best.input];
    if (window) window[o] = static_cast<uint8_t>(best.window);
  }
}

// One thread per input element: a gather over the windows that contain it.
template <class T, class I>
__global__ void maxpool2d_backward_kernel(const T* __restrict__ dy,
                                          const uint8_t* __restrict__ window, T* __restrict__ dx,
                                          PoolShape s, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    const I i = static_cast<I>(k);
    const I c = i % I(s.c), pixel = i / I(s.c);
    const I w = pixel % I(s.w), row = pixel / I(s.w);
    const I h = row % I(s.h), b = row / I(s.h);
    dx[i] = from_acc<T>(maxpool_input_grad(dy, window, s, b, h, w, c));
  }
}

// int32 indexing (several times cheaper division) whenever every offset fits.
bool fits_int32(const PoolShape& s) {
  const int64_t in = s.n * s.h * s.w * s.c, out = s.n * s.out_h * s.out_w * s.c;
  return (in > out ? in : out) <= INT32_MAX;
}

}  // namespace

void maxpool2d_forward_cuda(DType t, const void* x_, void* y_, uint8_t* window, const PoolShape& s,
                            cudaStream_t stream) {
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "max_pool2d", {
    const T* x = static_cast<const T*>(x_);
    T* y = static_cast<T*>(y_);
    const int64_t n = s.n * s.out_h * s.out_w * s.c;
    if (n == 0) return;
    if (fits_int32(s))
      maxpool2d_forward_kernel<T, int32_t>
          <<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(x, y, window, s, n);
    else
      maxpool2d_forward_kernel<T, int64_t>
          <<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(x, y, window, s, n);
    KESTREL_CUDA_CHECK_LAUNCH();
  });
}

void maxpool2d_backward_cuda(DType t, const void* dy_, const uint8_t* window, void* dx_,
                             const PoolShape& s, cudaStream_t stream) {
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "max_pool2d backward", {
    const T* dy = static_cast<const T*>(dy_);
    T* dx = static_cast<T*>(dx_);
    const int64_t n = s.n * s.h * s.w * s.c;
    if (n == 0) return;
    if (fits_int32(s))
      maxpool2d_backward_kernel<T, int32_t>
          <<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(dy, window, dx, s, n);
    else
      maxpool2d_backward_kernel<T, int64_t>
          <<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(dy, window, dx, s, n);
    KESTREL_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kestrel::kernels
