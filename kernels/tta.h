// Test-time augmentation (the reference's `--augment`, models/yolo.py _forward_augment): the
// batch is run again at smaller scales, once mirrored, and the predictions are mapped back.
//
// tta_scale: the reference's scale_img on NHWC images, mirrored first where asked, in one pass.
// Output pixel (y, x) of the [n, padded_h, padded_w, c] result is, inside the scaled size
// (y < out_h, x < out_w), torch's bilinear interpolation with align_corners=False of the input
// (mirrored left-right: column j read as in_w - 1 - j), else the padding value (0.447, the
// ImageNet mean, in the reference). Bilinear per axis: source = scale * (dst + 0.5) - 0.5 with
// scale = in / out in the accumulator type, clamped at 0; i0 = floor(source), i1 = i0 + 1 unless
// i0 is the last index; weights 1 - l and l with l = source - i0. The four neighbours mix as
// torch's CPU kernel sums them: (a w0 + b w1) h0 + (c w0 + d w1) h1.
//
// tta_descale: predictions (rows, no) back into the unscaled image, in place, as the reference's
// _descale_pred: x, y, w, h divided by the scale, then a mirrored pass's x becomes img_w - x.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "base/dtype.h"

namespace kestrel::kernels {

struct TtaScaleShape {
  int64_t n = 0, in_h = 0, in_w = 0, c = 0;
  int64_t out_h = 0, out_w = 0;        // the resized image
  int64_t padded_h = 0, padded_w = 0;  // the output, >= out_h, out_w
  bool flip_lr = false;
  float pad_value = 0.447f;
};

// One axis's two source indices and their weights for output index `dst`.
template <class A>
struct BilinearTap {
  int64_t i0, i1;
  A w0, w1;
};

template <class A>
KESTREL_HD inline BilinearTap<A> bilinear_tap(int64_t dst, int64_t in_size, int64_t out_size) {
  if (in_size == out_size) return {dst, dst, A(1), A(0)};  // torch's copy for an unchanged size
  const A scale = static_cast<A>(in_size) / static_cast<A>(out_size);
  A source = scale * (static_cast<A>(dst) + A(0.5)) - A(0.5);
  if (source < A(0)) source = A(0);
  const auto i0 = static_cast<int64_t>(source);
  const int64_t i1 = i0 < in_size - 1 ? i0 + 1 : i0;
  const A w1 = source - static_cast<A>(i0);
  return {i0, i1, A(1) - w1, w1};
}

template <class A>
KESTREL_HD inline A bilinear_mix(A top_left, A top_right, A bottom_left, A bottom_right,
                                 const BilinearTap<A>& x, const BilinearTap<A>& y) {
  return (top_left * x.w0 + top_right * x.w1) * y.w0 + (bottom_left * x.w0 + bottom_right * x.w1) * y.w1;
}

// The input column that output column j reads, mirrored or not.
KESTREL_HD inline int64_t tta_source_column(int64_t j, int64_t in_w, bool flip_lr) {
  return flip_lr ? in_w - 1 - j : j;
}

// Column `col` of a prediction row after descaling.
template <class A>
KESTREL_HD inline A tta_descale_value(A v, int64_t col, A scale, bool flip_lr, A img_w) {
  if (col >= 4) return v;
  v = v / scale;
  return col == 0 && flip_lr ? img_w - v : v;
}

// x [n, in_h, in_w, c] -> y [n, padded_h, padded_w, c]. CPU: float and double; CUDA: float,
// float16 and bfloat16 (computed in float).
void tta_scale_cpu(DType t, const void* x, void* y, const TtaScaleShape& s);
void tta_scale_cuda(DType t, const void* x, void* y, const TtaScaleShape& s, cudaStream_t stream);

// p [rows, no], contiguous, in place.
void tta_descale_cpu(DType t, void* p, int64_t rows, int64_t no, double scale, bool flip_lr, double img_w);
void tta_descale_cuda(DType t, void* p, int64_t rows, int64_t no, double scale, bool flip_lr, double img_w,
                      cudaStream_t stream);

}  // namespace kestrel::kernels
