// The segmentation mask loss on CUDA (kernels/mask_loss.h), float math on float, half or bfloat16
// storage. Forward: one block per positive, threads over its crop's pixels, the block's sum in a
// fixed tree. Backward: the coefficient gradient one block per run of positives sharing a row
// (each positive's pixels reduced by a fixed warp-shuffle tree, the run's positives added in
// order); the prototype gradient one thread per (image, pixel) over its image's positives in
// order. No atomics: results repeat bit for bit. The per-pixel math is the header's, as on the CPU.
#include "kernels/cuda_check.h"
#include "kernels/dispatch.h"
#include "kernels/launch.cuh"
#include "kernels/mask_loss.h"

namespace kestrel::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ void crop_of(const MaskLossShape& s, const float* box, int64_t* y0, int64_t* y1,
                        int64_t* x0, int64_t* x1) {
  mask_crop_range(box[0], box[2], s.mw, x0, x1);
  mask_crop_range(box[1], box[3], s.mh, y0, y1);
}

// Sums v over the block in a fixed tree order; every thread gets the result.
__device__ double block_sum(double v) {
  __shared__ double sh[kThreads];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) sh[threadIdx.x] += sh[threadIdx.x + width];
    __syncthreads();
  }
  const double out = sh[0];
  __syncthreads();
  return out;
}

// The positive's coefficients into shared memory as float.
template <class T>
__device__ void load_coefficients(const MaskLossShape& s, const MaskLossInputs& in, int64_t p,
                                  float* c) {
  const T* src =
      static_cast<const T*>(in.coef) + int64_t(in.coef_row[p]) * s.coef_stride + s.coef_column;
  for (int k = threadIdx.x; k < s.nm; k += blockDim.x) c[k] = to_acc(src[k]);
  __syncthreads();
}

template <class T, class M>
__global__ void forward_kernel(MaskLossShape s, MaskLossInputs in, float* loss) {
  __shared__ float c[kMaskMaxCoefficients];
  const int64_t p = blockIdx.x;
  load_coefficients<T>(s, in, p, c);
  const T* proto = static_cast<const T*>(in.protos) + int64_t(in.image[p]) * s.pixels() * s.nm;
  const M* masks = static_cast<const M*>(in.masks);
  int64_t y0, y1, x0, x1;
  crop_of(s, in.box + 4 * p, &y0, &y1, &x0, &x1);
  const int64_t cw = x1 - x0, n = (y1 - y0) * cw;
  float sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t y = y0 + i / cw, x = x0 + i % cw;
    const T* px = proto + (y * s.mw + x) * s.nm;
    float z = 0;
    for (int64_t k = 0; k < s.nm; ++k) z += c[k] * to_acc(px[k]);
    float dz;
    sum += mask_pixel_bce(z, mask_target<float>(masks, s, in.gt_row[p], in.gt_label[p], y, x), &dz);
  }
  const double total = block_sum(double(sum));
  if (threadIdx.x == 0) loss[p] = float(total / double(mask_norm<float>(s, in.area[p])));
}

// Warp-shuffle tree sum (lane 0 gets the warp's total).
__device__ float warp_sum(float v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

template <class T, class M>
__global__ void coef_grad_kernel(MaskLossShape s, MaskLossInputs in, const float* gout, T* dcoef) {
  __shared__ float c[kMaskMaxCoefficients];
  __shared__ float red[kMaskMaxCoefficients][kWarps];
  const int64_t p = blockIdx.x;
  const int32_t row = in.coef_row[p];
  if (p > 0 && in.coef_row[p - 1] == row) return;  // not the first of its run: the first does it
  load_coefficients<T>(s, in, p, c);
  const M* masks = static_cast<const M*>(in.masks);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float acc = 0;  // thread k < nm: the run's gradient of coefficient k
  for (int64_t q = p; q < s.positives && in.coef_row[q] == row; ++q) {
    const T* proto = static_cast<const T*>(in.protos) + int64_t(in.image[q]) * s.pixels() * s.nm;
    const float scale = gout[q] / mask_norm<float>(s, in.area[q]);
    int64_t y0, y1, x0, x1;
    crop_of(s, in.box + 4 * q, &y0, &y1, &x0, &x1);
    const int64_t cw = x1 - x0, n = (y1 - y0) * cw;
    float g[kMaskMaxCoefficients];
#pragma unroll
    for (int k = 0; k < kMaskMaxCoefficients; ++k) g[k] = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const int64_t y = y0 + i / cw, x = x0 + i % cw;
      const T* px = proto + (y * s.mw + x) * s.nm;
      float z = 0;
      for (int64_t k = 0; k < s.nm; ++k) z += c[k] * to_acc(px[k]);
      float dz;
      mask_pixel_bce(z, mask_target<float>(masks, s, in.gt_row[q], in.gt_label[q], y, x), &dz);
      const float e = dz * scale;
#pragma unroll
      for (int k = 0; k < kMaskMaxCoefficients; ++k)
        if (k < s.nm) g[k] += e * to_acc(px[k]);
    }
#pragma unroll
    for (int k = 0; k < kMaskMaxCoefficients; ++k) {
      if (k < s.nm) {
        const float w = warp_sum(g[k]);
        if (lane == 0) red[k][warp] = w;
      }
    }
    __syncthreads();
    if (threadIdx.x < s.nm) {
      float v = 0;
      for (int w = 0; w < kWarps; ++w) v += red[threadIdx.x][w];
      acc += v;
    }
    __syncthreads();
  }
  if (threadIdx.x < s.nm)
    dcoef[int64_t(row) * s.coef_stride + s.coef_column + threadIdx.x] = from_acc<T>(acc);
}

template <class T, class M>
void backward_typed(const MaskLossShape& s, const MaskLossInputs& in, const float* gout,
                    T* dcoef, T* dprotos, cudaStream_t stream) {
  cuda::launch_map(s.coef_rows * s.coef_stride, stream,
                   [=] __device__(int64_t i) { dcoef[i] = from_acc<T>(0.0f); });
  if (s.positives > 0) {
    coef_grad_kernel<T, M><<<static_cast<unsigned>(s.positives), kThreads, 0, stream>>>(
        s, in, gout, dcoef);
    KESTREL_CUDA_CHECK_LAUNCH();
  }
  const MaskLossShape sc = s;
  const MaskLossInputs ic = in;
  cuda::launch_map(s.batch * s.pixels(), stream, [=] __device__(int64_t pix) {
    const int64_t b = pix / sc.pixels(), yx = pix % sc.pixels(), y = yx / sc.mw, x = yx % sc.mw;
    const int64_t first = mask_first_positive(ic.image, sc.positives, b);
    const int64_t end = mask_first_positive(ic.image, sc.positives, b + 1);
    const T* px = static_cast<const T*>(ic.protos) + pix * sc.nm;
    const M* masks = static_cast<const M*>(ic.masks);
    float g[kMaskMaxCoefficients];
#pragma unroll
    for (int k = 0; k < kMaskMaxCoefficients; ++k) g[k] = 0;
    for (int64_t p = first; p < end; ++p) {
      int64_t y0, y1, x0, x1;
      crop_of(sc, ic.box + 4 * p, &y0, &y1, &x0, &x1);
      if (y < y0 || y >= y1 || x < x0 || x >= x1) continue;
      const T* c = static_cast<const T*>(ic.coef) + int64_t(ic.coef_row[p]) * sc.coef_stride +
                     sc.coef_column;
      const float z = mask_logit<float>(c, px, sc.nm);
      float dz;
      mask_pixel_bce(z, mask_target<float>(masks, sc, ic.gt_row[p], ic.gt_label[p], y, x), &dz);
      const float e = dz * (gout[p] / mask_norm<float>(sc, ic.area[p]));
#pragma unroll
      for (int k = 0; k < kMaskMaxCoefficients; ++k)
        if (k < sc.nm) g[k] += e * to_acc(c[k]);
    }
#pragma unroll
    for (int k = 0; k < kMaskMaxCoefficients; ++k)
      if (k < sc.nm) dprotos[pix * sc.nm + k] = from_acc<T>(g[k]);
  });
}

#define KESTREL_DISPATCH_CUDA_MASKS(mask_dtype, M, ...)                                        \
  switch (mask_dtype) {                                                                        \
    KESTREL_DISPATCH_CASE(U8, uint8_t, M, __VA_ARGS__)                                         \
    KESTREL_DISPATCH_CASE(F32, float, M, __VA_ARGS__)                                          \
    default:                                                                                   \
      KESTREL_FAIL("mask loss: masks on CUDA must be uint8 or float32, got ",                  \
                   ::kestrel::dtype_name(mask_dtype));                                         \
  }

}  // namespace

void mask_loss_forward_cuda(DType t, DType mask_dtype, const MaskLossShape& s,
                            const MaskLossInputs& in, float* loss, cudaStream_t stream) {
  check_mask_loss_shape(s);
  if (s.positives == 0) return;
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "mask loss", {
    KESTREL_DISPATCH_CUDA_MASKS(mask_dtype, M, {
      forward_kernel<T, M><<<static_cast<unsigned>(s.positives), kThreads, 0, stream>>>(s, in,
                                                                                        loss);
      KESTREL_CUDA_CHECK_LAUNCH();
    });
  });
}

void mask_loss_backward_cuda(DType t, DType mask_dtype, const MaskLossShape& s,
                             const MaskLossInputs& in, const float* gout, void* dcoef,
                             void* dprotos, cudaStream_t stream) {
  check_mask_loss_shape(s);
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "mask loss backward", {
    KESTREL_DISPATCH_CUDA_MASKS(mask_dtype, M, {
      backward_typed<T, M>(s, in, gout, static_cast<T*>(dcoef), static_cast<T*>(dprotos),
                           stream);
    });
  });
}

}  // namespace kestrel::kernels
