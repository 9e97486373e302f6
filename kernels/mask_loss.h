// The mask term of YOLOv5's segmentation loss (the reference v7.0 utils/segment/loss.py,
// single_mask_loss with crop_mask), fused per positive, CPU reference and CUDA.
//
// A positive p (a matched anchor) has nm mask coefficients c_p, the image b_p whose prototypes
// P_b (mh, mw, nm) NHWC it reads, a crop box (x1, y1, x2, y2) in prototype pixels, its box's
// normalised area a_p (w * h in [0, 1] units) and a ground-truth mask. Per pixel (y, x):
//   z = c_p · P_b[y, x],  t = gt_p(y, x),  l = BCEWithLogits(z, t)
//   inside = (x >= x1) & (x < x2) & (y >= y1) & (y < y2)   (pixel indices as floats, crop_mask)
//   loss_p = sum over inside pixels of l / (mh * mw) / a_p
// i.e. the reference's crop(loss).mean((1, 2)) / area, which is the cropped sum divided by the
// box's area in prototype pixels. The gradients, for an incoming gout_p and
// e_p(y, x) = (sigmoid(z) - t) * gout_p / (mh * mw) / a_p on inside pixels (0 outside):
//   d c_p = sum over pixels of e_p(y, x) P_b[y, x]
//   d P_b[y, x] = sum over the positives p of image b of e_p(y, x) c_p
//
// The ground truth: masks (G, gh, gw) of u8 or float, resized to (mh, mw) by nearest neighbour
// as F.interpolate(mode='nearest') picks its source pixels (no copy is made). Positive p reads
// mask gt_row[p]: with overlap, masks hold instance labels (0 background, k the k-th instance)
// and t = (mask == gt_label[p]); without, t is the mask's value.
//
// Coefficients are read in place from rows of a matrix (R, coef_stride), positive p's at row
// coef_row[p], columns [coef_column, coef_column + nm) (e.g. a Segment level's raw output seen as
// (cells, no) with the coefficients from column 5 + nc; or a plain (P, nm) matrix with
// coef_row[p] = p). Positives must come sorted by image
// and, within it, by coefficient row (image[] and coef_row[] non-decreasing), which a list in
// cell order is: then the positives of one image, and those sharing one row, are contiguous runs.
// The backward writes the whole (R, coef_stride) coefficient gradient (zero outside the rows and
// columns read) and the whole prototype gradient, each element once: d c of a row sums its run's
// positives in order, d P of a pixel its image's positives in order. No floating-point atomics:
// results repeat bit for bit on each device.
//
// Types: coefficients and prototypes share T (CPU float/double with double accumulation; CUDA
// float/half/bfloat16 with float math). The loss and gout are T on the CPU, float on CUDA; the
// gradients are T. Masks: u8 or float32 (and float64 on the CPU).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "base/dtype.h"
#include "kernels/yolo_loss.h"

namespace kestrel::kernels {

constexpr int kMaskMaxCoefficients = 64;  // the reference's nm is 32

struct MaskLossShape {
  int64_t positives = 0;         // P
  int64_t nm = 0;                // coefficients per positive and prototype channels
  int64_t coef_rows = 0;         // R: rows of the coefficient matrix
  int64_t coef_stride = 0;       // elements from one coefficient row to the next
  int64_t coef_column = 0;       // a row's first coefficient (coef_column + nm <= coef_stride)
  int64_t batch = 0;             // B: images of prototypes
  int64_t mh = 0, mw = 0;        // prototype height and width
  int64_t masks = 0;             // G: ground-truth masks
  int64_t gh = 0, gw = 0;        // their height and width
  bool overlap = false;          // masks hold instance labels (see above)

  KESTREL_HD int64_t pixels() const { return mh * mw; }
};

struct MaskLossInputs {
  const void* coef = nullptr;        // T (R, coef_stride), from its first element
  const int32_t* coef_row = nullptr; // [P] non-decreasing
  const void* protos = nullptr;      // T (B, mh, mw, nm)
  const int32_t* image = nullptr;    // [P] non-decreasing, in [0, B)
  const float* box = nullptr;        // [P, 4] x1, y1, x2, y2 in prototype pixels
  const float* area = nullptr;       // [P] normalised box area
  const void* masks = nullptr;       // u8 / float (G, gh, gw)
  const int32_t* gt_row = nullptr;   // [P] in [0, G)
  const float* gt_label = nullptr;   // [P] the instance label (read with overlap only)
};

// ---- shared per-pixel math ---------------------------------------------------------------------

// The pixels i in [0, n) with float(i) >= lo and float(i) < hi (crop_mask's comparisons, exact
// for pixel indices below 2^24) are [*first, *end).
KESTREL_HD inline void mask_crop_range(float lo, float hi, int64_t n, int64_t* first,
                                       int64_t* end) {
  const double a = ceil(double(lo)), b = ceil(double(hi));
  if (a != a || b != b) {  // a NaN bound: every comparison is false, nothing is inside
    *first = *end = 0;
    return;
  }
  const double f = a < 0 ? 0 : (a > double(n) ? double(n) : a);
  const double e = b < f ? f : (b > double(n) ? double(n) : b);
  *first = static_cast<int64_t>(f);
  *end = static_cast<int64_t>(e);
}

// F.interpolate(mode='nearest')'s source index for output index i (ATen's nearest_idx: the same
// size copies, twice the size halves, otherwise floor(i * (float)in / out) clamped).
KESTREL_HD inline int64_t mask_nearest_source(int64_t i, int64_t in, int64_t out) {
  if (in == out) return i;
  if (out == 2 * in) return i >> 1;
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  const int64_t s = static_cast<int64_t>(floorf(static_cast<float>(i) * scale));
  return s < in - 1 ? s : in - 1;
}

KESTREL_HD inline double mask_value(const uint8_t* m, int64_t i) { return double(m[i]); }
KESTREL_HD inline double mask_value(const float* m, int64_t i) { return double(m[i]); }
KESTREL_HD inline double mask_value(const double* m, int64_t i) { return m[i]; }

// The target of prototype pixel (y, x) for a positive reading mask `row` (label: its instance
// label under overlap).
template <class A, class M>
KESTREL_HD inline A mask_target(const M* masks, const MaskLossShape& s, int64_t row, float label,
                                int64_t y, int64_t x) {
  const int64_t sy = mask_nearest_source(y, s.gh, s.mh), sx = mask_nearest_source(x, s.gw, s.mw);
  const double v = mask_value(masks, (row * s.gh + sy) * s.gw + sx);
  if (s.overlap) return v == double(label) ? A(1) : A(0);
  return A(v);
}

// z = c · p over nm values, accumulated in A.
template <class A, class T>
KESTREL_HD inline A mask_logit(const T* c, const T* p, int64_t nm) {
  A z = A(0);
  for (int64_t k = 0; k < nm; ++k) z += A(to_acc(c[k])) * A(to_acc(p[k]));
  return z;
}

// BCE with logits of one pixel (kernels/yolo_loss.h's bce_term, no pos_weight, no focal term);
// *dz = sigmoid(z) - t.
template <class A>
KESTREL_HD inline A mask_pixel_bce(A z, A t, A* dz) {
  return bce_term(z, t, A(1), A(0), dz);
}

// The per-positive divisor mh * mw * area.
template <class A>
KESTREL_HD inline A mask_norm(const MaskLossShape& s, float area) {
  return A(double(s.pixels())) * A(area);
}

// The first positive of image b in a list sorted by image (P when none is).
KESTREL_HD inline int64_t mask_first_positive(const int32_t* image, int64_t P, int64_t b) {
  int64_t lo = 0, hi = P;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (image[mid] < b) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// ---- entry points ------------------------------------------------------------------------------
// t: coefficients' and prototypes' dtype; mask_dtype: U8 or F32 (F64 on the CPU too).

// loss[p] for every positive. The CPU checks the index arrays (sorted, in range) and throws.
void mask_loss_forward_cpu(DType t, DType mask_dtype, const MaskLossShape& s,
                           const MaskLossInputs& in, void* loss);
void mask_loss_forward_cuda(DType t, DType mask_dtype, const MaskLossShape& s,
                            const MaskLossInputs& in, float* loss, cudaStream_t stream);

// dcoef (R, coef_stride) and dprotos (B, mh, mw, nm), every element written.
void mask_loss_backward_cpu(DType t, DType mask_dtype, const MaskLossShape& s,
                            const MaskLossInputs& in, const void* gout, void* dcoef,
                            void* dprotos);
void mask_loss_backward_cuda(DType t, DType mask_dtype, const MaskLossShape& s,
                             const MaskLossInputs& in, const float* gout, void* dcoef,
                             void* dprotos, cudaStream_t stream);

// Throws unless the sizes are consistent (1 <= nm <= kMaskMaxCoefficients, the coefficient
// columns inside a row, non-empty prototypes and masks): both devices' entry points check this.
void check_mask_loss_shape(const MaskLossShape& s);
// The shape, then the positives' index arrays (host memory): coef_row and image non-decreasing
// and in range, gt_row in range; throws naming the first bad positive. The CPU entry points check
// this; CUDA cannot read device memory without waiting, so its callers check the host copies.
void check_mask_loss_inputs(const MaskLossShape& s, const MaskLossInputs& in);

}  // namespace kestrel::kernels
