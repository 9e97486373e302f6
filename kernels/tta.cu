#include "kernels/dispatch.h"
#include "kernels/launch.cuh"
#include "kernels/tta.h"

namespace kestrel::kernels {

// One thread per output element; the taps are recomputed per element (a few flops against the
// four loads), which keeps the kernel free of side tables.
void tta_scale_cuda(DType t, const void* x_, void* y_, const TtaScaleShape& s, cudaStream_t stream) {
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "tta_scale", {
    const T* x = static_cast<const T*>(x_);
    T* y = static_cast<T*>(y_);
    const int64_t n = s.n * s.padded_h * s.padded_w * s.c;
    cuda::launch_map(n, stream, [=] __device__(int64_t k) {
      const int64_t ch = k % s.c;
      const int64_t j = (k / s.c) % s.padded_w;
      const int64_t i = (k / (s.c * s.padded_w)) % s.padded_h;
      const int64_t b = k / (s.c * s.padded_w * s.padded_h);
      if (i >= s.out_h || j >= s.out_w) {
        y[k] = from_acc<T>(s.pad_value);
        return;
      }
      const BilinearTap<float> row = bilinear_tap<float>(i, s.in_h, s.out_h);
      const BilinearTap<float> col = bilinear_tap<float>(j, s.in_w, s.out_w);
      const int64_t c0 = tta_source_column(col.i0, s.in_w, s.flip_lr);
      const int64_t c1 = tta_source_column(col.i1, s.in_w, s.flip_lr);
      const T* image = x + b * s.in_h * s.in_w * s.c + ch;
      const T* top = image + row.i0 * s.in_w * s.c;
      const T* bottom = image + row.i1 * s.in_w * s.c;
      y[k] = from_acc<T>(bilinear_mix(to_acc(top[c0 * s.c]), to_acc(top[c1 * s.c]), to_acc(bottom[c0 * s.c]),
                                      to_acc(bottom[c1 * s.c]), col, row));
    });
  });
}

void tta_descale_cuda(DType t, void* p_, int64_t rows, int64_t no, double scale, bool flip_lr, double img_w,
                      cudaStream_t stream) {
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "tta_descale", {
    T* p = static_cast<T*>(p_);
    const auto scale_a = static_cast<float>(scale), width = static_cast<float>(img_w);
    cuda::launch_map(rows * 4, stream, [=] __device__(int64_t k) {
      const int64_t r = k / 4, col = k % 4;
      if (col >= no) return;
      T& v = p[r * no + col];
      v = from_acc<T>(tta_descale_value<float>(to_acc(v), col, scale_a, flip_lr, width));
    });
  });
}

}  // namespace kestrel::kernels
