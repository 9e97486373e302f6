#include <vector>

#include "kernels/dispatch.h"
#include "kernels/tta.h"

namespace kestrel::kernels {

void tta_scale_cpu(DType t, const void* x_, void* y_, const TtaScaleShape& s) {
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "tta_scale", {
    const T* x = static_cast<const T*>(x_);
    T* y = static_cast<T*>(y_);
    std::vector<BilinearTap<T>> columns(s.out_w);
    for (int64_t j = 0; j < s.out_w; ++j) {
      columns[j] = bilinear_tap<T>(j, s.in_w, s.out_w);
      columns[j].i0 = tta_source_column(columns[j].i0, s.in_w, s.flip_lr);
      columns[j].i1 = tta_source_column(columns[j].i1, s.in_w, s.flip_lr);
    }
    const T pad = static_cast<T>(s.pad_value);
    for (int64_t b = 0; b < s.n; ++b) {
      const T* image = x + b * s.in_h * s.in_w * s.c;
      for (int64_t i = 0; i < s.padded_h; ++i) {
        T* out = y + ((b * s.padded_h + i) * s.padded_w) * s.c;
        if (i >= s.out_h) {
          for (int64_t k = 0; k < s.padded_w * s.c; ++k) out[k] = pad;
          continue;
        }
        const BilinearTap<T> row = bilinear_tap<T>(i, s.in_h, s.out_h);
        const T* top = image + row.i0 * s.in_w * s.c;
        const T* bottom = image + row.i1 * s.in_w * s.c;
        for (int64_t j = 0; j < s.padded_w; ++j) {
          T* px = out + j * s.c;
          if (j >= s.out_w) {
            for (int64_t ch = 0; ch < s.c; ++ch) px[ch] = pad;
            continue;
          }
          const BilinearTap<T>& col = columns[j];
          for (int64_t ch = 0; ch < s.c; ++ch)
            px[ch] = bilinear_mix(top[col.i0 * s.c + ch], top[col.i1 * s.c + ch], bottom[col.i0 * s.c + ch],
                                  bottom[col.i1 * s.c + ch], col, row);
        }
      }
    }
  });
}

void tta_descale_cpu(DType t, void* p_, int64_t rows, int64_t no, double scale, bool flip_lr, double img_w) {
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "tta_descale", {
    T* p = static_cast<T*>(p_);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t col = 0; col < 4 && col < no; ++col)
        p[r * no + col] = tta_descale_value<T>(p[r * no + col], col, static_cast<T>(scale), flip_lr,
                                               static_cast<T>(img_w));
  });
}

}  // namespace kestrel::kernels
