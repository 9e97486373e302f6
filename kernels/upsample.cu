#include <cstdint>

#include "kernels/dispatch.h"
#include "kernels/launch.cuh"
#include "kernels/upsample.h"

namespace kestrel::kernels {
namespace {

// Channels move in groups of up to 16 bytes per thread. I is int32_t whenever every offset fits,
// since 64-bit division costs more instructions than the copy itself.
template <class U, class I>
__global__ void upsample2x_forward_kernel(const U* __restrict__ x, U* __restrict__ y, I units, I w,
                                          int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    const I i = static_cast<I>(k);
    const I p = i / units;
    const I t = upsample2x_first_target(p, w) * units + (i - p * units);
    const I below = 2 * w * units;
    const U v = x[i];
    y[t] = v;
    y[t + units] = v;
    y[t + below] = v;
    y[t + below + units] = v;
  }
}


template <class T, int V, class I>
__global__ void upsample2x_backward_kernel(const cuda::Pack<T, V>* __restrict__ dy,
                                           cuda::Pack<T, V>* __restrict__ dx, I packs, I w,
                                           int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    const I i = static_cast<I>(k);
    const I p = i / packs;
    const I t = upsample2x_first_target(p, w) * packs + (i - p * packs);
    const I below = 2 * w * packs;
    const cuda::Pack<T, V> a = dy[t], b = dy[t + packs], c = dy[t + below],
                           d = dy[t + below + packs];
    cuda::Pack<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j)
      out.v[j] = from_acc<T>(
          upsample2x_block_sum(to_acc(a.v[j]), to_acc(b.v[j]), to_acc(c.v[j]), to_acc(d.v[j])));
    dx[i] = out;
  }
}

template <class U>
void launch_forward(const void* x, void* y, const Upsample2xShape& s, int64_t pixel_bytes,
                    cudaStream_t stream) {
  const int64_t units = pixel_bytes / int64_t(sizeof(U));
  const int64_t n = s.n * s.h * s.w * units;
  const U* in = static_cast<const U*>(x);
  U* out = static_cast<U*>(y);
  if (4 * n <= INT32_MAX)
    upsample2x_forward_kernel<U, int32_t><<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(
        in, out, int32_t(units), int32_t(s.w), n);
  else
    upsample2x_forward_kernel<U, int64_t>
        <<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(in, out, units, s.w, n);
  KESTREL_CUDA_CHECK_LAUNCH();
}

template <class T, int V>
void launch_backward(const void* dy, void* dx, const Upsample2xShape& s, cudaStream_t stream) {
  const int64_t packs = s.c / V;
  const int64_t n = s.n * s.h * s.w * packs;
  const auto* in = static_cast<const cuda::Pack<T, V>*>(dy);
  auto* out = static_cast<cuda::Pack<T, V>*>(dx);
  if (4 * n <= INT32_MAX)
    upsample2x_backward_kernel<T, V, int32_t><<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(
        in, out, int32_t(packs), int32_t(s.w), n);
  else
    upsample2x_backward_kernel<T, V, int64_t>
        <<<cuda::blocks_for(n), cuda::kThreads, 0, stream>>>(in, out, packs, s.w, n);
  KESTREL_CUDA_CHECK_LAUNCH();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void upsample2x_forward_cuda(size_t elem_size, const void* x, void* y, const Upsample2xShape& s,
                             cudaStream_t stream) {
  const int64_t pixel_bytes = s.c * static_cast<int64_t>(elem_size);
  if (s.n * s.h * s.w * pixel_bytes == 0) return;
  switch (cuda::widest_access_bytes({uint64_t(pixel_bytes), reinterpret_cast<uintptr_t>(x),
                                      reinterpret_cast<uintptr_t>(y)})) {
    case 16: return launch_forward<uint4>(x, y, s, pixel_bytes, stream);
    case 8: return launch_forward<uint2>(x, y, s, pixel_bytes, stream);
    case 4: return launch_forward<uint32_t>(x, y, s, pixel_bytes, stream);
    case 2: return launch_forward<uint16_t>(x, y, s, pixel_bytes, stream);
    default: return launch_forward<uint8_t>(x, y, s, pixel_bytes, stream);
  }
}

void upsample2x_backward_cuda(DType t, const void* dy, void* dx, const Upsample2xShape& s,
                              cudaStream_t stream) {
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "upsample_nearest2x backward", {
    if (s.n * s.h * s.w * s.c == 0) return;
    constexpr int V = 16 / sizeof(T);
    if (s.c % V == 0 && aligned16(dy) && aligned16(dx))
      launch_backward<T, V>(dy, dx, s, stream);
    else
      launch_backward<T, 1>(dy, dx, s, stream);
  });
}

}  // namespace kestrel::kernels
