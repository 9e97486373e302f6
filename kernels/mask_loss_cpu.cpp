// The CPU reference of the segmentation mask loss (kernels/mask_loss.h): plain loops, double
// accumulators, the per-pixel math shared with CUDA, and the same summation orders (a positive's
// pixels row by row; a row's or a pixel's positives in list order).
#include <vector>

#include "base/error.h"
#include "kernels/dispatch.h"
#include "kernels/mask_loss.h"

namespace kestrel::kernels {
namespace {

// The crop of positive p: rows [y0, y1), columns [x0, x1).
struct Crop {
  int64_t y0 = 0, y1 = 0, x0 = 0, x1 = 0;
};
Crop crop_of(const MaskLossShape& s, const MaskLossInputs& in, int64_t p) {
  const float* b = in.box + 4 * p;
  Crop c;
  mask_crop_range(b[0], b[2], s.mw, &c.x0, &c.x1);
  mask_crop_range(b[1], b[3], s.mh, &c.y0, &c.y1);
  return c;
}

template <class T, class M>
void forward_typed(const MaskLossShape& s, const MaskLossInputs& in, T* loss) {
  const T* coef = static_cast<const T*>(in.coef);
  const T* protos = static_cast<const T*>(in.protos);
  const M* masks = static_cast<const M*>(in.masks);
  for (int64_t p = 0; p < s.positives; ++p) {
    const T* c = coef + int64_t(in.coef_row[p]) * s.coef_stride + s.coef_column;
    const T* proto = protos + int64_t(in.image[p]) * s.pixels() * s.nm;
    const Crop r = crop_of(s, in, p);
    double sum = 0;
    for (int64_t y = r.y0; y < r.y1; ++y) {
      for (int64_t x = r.x0; x < r.x1; ++x) {
        const double z = mask_logit<double>(c, proto + (y * s.mw + x) * s.nm, s.nm);
        const double t = mask_target<double>(masks, s, in.gt_row[p], in.gt_label[p], y, x);
        double dz;
        sum += mask_pixel_bce(z, t, &dz);
      }
    }
    loss[p] = static_cast<T>(sum / mask_norm<double>(s, in.area[p]));
  }
}

// e_p(y, x) of the header: the pixel's BCE derivative times the positive's gradient scale.
template <class T, class M>
double pixel_error(const MaskLossShape& s, const MaskLossInputs& in, const T* c, const T* proto_px,
                   const M* masks, int64_t p, int64_t y, int64_t x, double scale) {
  const double z = mask_logit<double>(c, proto_px, s.nm);
  const double t = mask_target<double>(masks, s, in.gt_row[p], in.gt_label[p], y, x);
  double dz;
  mask_pixel_bce(z, t, &dz);
  return dz * scale;
}

template <class T, class M>
void backward_typed(const MaskLossShape& s, const MaskLossInputs& in, const T* gout, T* dcoef,
                    T* dprotos) {
  const T* coef = static_cast<const T*>(in.coef);
  const T* protos = static_cast<const T*>(in.protos);
  const M* masks = static_cast<const M*>(in.masks);
  const int64_t P = s.positives, nm = s.nm;
  std::vector<double> scale(P);
  for (int64_t p = 0; p < P; ++p) scale[p] = double(gout[p]) / mask_norm<double>(s, in.area[p]);

  // Coefficients: zero, then each run of one row sums its positives in order.
  for (int64_t i = 0; i < s.coef_rows * s.coef_stride; ++i) dcoef[i] = T(0);
  std::vector<double> g(nm);
  for (int64_t p = 0; p < P;) {
    const int32_t row = in.coef_row[p];
    const T* c = coef + int64_t(row) * s.coef_stride + s.coef_column;
    std::fill(g.begin(), g.end(), 0.0);
    int64_t q = p;
    for (; q < P && in.coef_row[q] == row; ++q) {
      const T* proto = protos + int64_t(in.image[q]) * s.pixels() * nm;
      const Crop r = crop_of(s, in, q);
      for (int64_t y = r.y0; y < r.y1; ++y) {
        for (int64_t x = r.x0; x < r.x1; ++x) {
          const T* px = proto + (y * s.mw + x) * nm;
          const double e = pixel_error(s, in, c, px, masks, q, y, x, scale[q]);
          for (int64_t k = 0; k < nm; ++k) g[k] += e * double(px[k]);
        }
      }
    }
    T* d = dcoef + int64_t(row) * s.coef_stride + s.coef_column;
    for (int64_t k = 0; k < nm; ++k) d[k] = static_cast<T>(g[k]);
    p = q;
  }

  // Prototypes: each pixel sums its image's positives in order.
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t first = mask_first_positive(in.image, P, b);
    const int64_t end = mask_first_positive(in.image, P, b + 1);
    std::vector<Crop> crops;
    for (int64_t p = first; p < end; ++p) crops.push_back(crop_of(s, in, p));
    for (int64_t y = 0; y < s.mh; ++y) {
      for (int64_t x = 0; x < s.mw; ++x) {
        const int64_t pix = (b * s.mh + y) * s.mw + x;
        const T* px = protos + pix * nm;
        std::fill(g.begin(), g.end(), 0.0);
        for (int64_t p = first; p < end; ++p) {
          const Crop& r = crops[p - first];
          if (y < r.y0 || y >= r.y1 || x < r.x0 || x >= r.x1) continue;
          const T* c = coef + int64_t(in.coef_row[p]) * s.coef_stride + s.coef_column;
          const double e = pixel_error(s, in, c, px, masks, p, y, x, scale[p]);
          for (int64_t k = 0; k < nm; ++k) g[k] += e * double(c[k]);
        }
        for (int64_t k = 0; k < nm; ++k) dprotos[pix * nm + k] = static_cast<T>(g[k]);
      }
    }
  }
}

#define KESTREL_DISPATCH_MASKS(mask_dtype, M, ...)                                             \
  switch (mask_dtype) {                                                                        \
    KESTREL_DISPATCH_CASE(U8, uint8_t, M, __VA_ARGS__)                                         \
    KESTREL_DISPATCH_CASE(F32, float, M, __VA_ARGS__)                                          \
    KESTREL_DISPATCH_CASE(F64, double, M, __VA_ARGS__)                                         \
    default:                                                                                   \
      KESTREL_FAIL("mask loss: masks on the CPU must be uint8, float32 or float64, got ",      \
                   ::kestrel::dtype_name(mask_dtype));                                         \
  }

}  // namespace

void check_mask_loss_shape(const MaskLossShape& s) {
  KESTREL_CHECK(s.positives >= 0 && s.nm >= 1 && s.nm <= kMaskMaxCoefficients &&
                    s.coef_column >= 0 && s.coef_column + s.nm <= s.coef_stride &&
                    s.batch >= 1 && s.mh >= 1 && s.mw >= 1 &&
                    s.gh >= 1 && s.gw >= 1 && s.masks >= 0 && s.coef_rows >= 0,
                "mask loss: bad shape (P ", s.positives, ", nm ", s.nm, " (1..",
                kMaskMaxCoefficients, "), rows ", s.coef_rows, " x ", s.coef_stride, ", protos ",
                s.batch, "x", s.mh, "x", s.mw, ", masks ", s.masks, "x", s.gh, "x", s.gw, ")");
}

void check_mask_loss_inputs(const MaskLossShape& s, const MaskLossInputs& in) {
  check_mask_loss_shape(s);
  for (int64_t p = 0; p < s.positives; ++p) {
    const int32_t row = in.coef_row[p], img = in.image[p], gt = in.gt_row[p];
    KESTREL_CHECK(row >= 0 && row < s.coef_rows && img >= 0 && img < s.batch && gt >= 0 &&
                      gt < s.masks,
                  "mask loss: positive ", p, " has coefficient row ", row, " (of ", s.coef_rows,
                  "), image ", img, " (of ", s.batch, "), mask ", gt, " (of ", s.masks, ")");
    KESTREL_CHECK(p == 0 || (img >= in.image[p - 1] && row >= in.coef_row[p - 1]),
                  "mask loss: positive ", p, " (image ", img, ", coefficient row ", row,
                  ") comes after image ", p == 0 ? 0 : in.image[p - 1], ", row ",
                  p == 0 ? 0 : in.coef_row[p - 1],
                  "; sort the positives by image and coefficient row (cell order does both)");
  }
}

void mask_loss_forward_cpu(DType t, DType mask_dtype, const MaskLossShape& s,
                           const MaskLossInputs& in, void* loss) {
  check_mask_loss_inputs(s, in);
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "mask loss", {
    KESTREL_DISPATCH_MASKS(mask_dtype, M, { forward_typed<T, M>(s, in, static_cast<T*>(loss)); });
  });
}

void mask_loss_backward_cpu(DType t, DType mask_dtype, const MaskLossShape& s,
                            const MaskLossInputs& in, const void* gout, void* dcoef,
                            void* dprotos) {
  check_mask_loss_inputs(s, in);
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "mask loss backward", {
    KESTREL_DISPATCH_MASKS(mask_dtype, M, {
      backward_typed<T, M>(s, in, static_cast<const T*>(gout), static_cast<T*>(dcoef),
                           static_cast<T*>(dprotos));
    });
  });
}

}  // namespace kestrel::kernels
