#include "kernels/dispatch.h"
#include "kernels/maxpool.h"

namespace kestrel::kernels {

void maxpool2d_forward_cpu(DType t, const void* x_, void* y_, uint8_t* window, const PoolShape& s) {
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "max_pool2d", {
    const T* x = static_cast<const T*>(x_);
    T* y = static_cast<T*>(y_);
    int64_t o = 0;
    for (int64_t n = 0; n < s.n; ++n)
      for (int64_t oh = 0; oh < s.out_h; ++oh)
        for (int64_t ow = 0; ow < s.out_w; ++ow)
          for (int64_t c = 0; c < s.c; ++c, ++o) {
            const PoolChoice<int64_t> best = maxpool_choose(x, s, n, oh, ow, c);
            y[o] = x[best.input];
            if (window) window[o] = static_cast<uint8_t>(best.window);
          }
  });
}

void maxpool2d_backward_cpu(DType t, const void* dy_, const uint8_t* window, void* dx_,
                            const PoolShape& s) {
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "max_pool2d backward", {
    const T* dy = static_cast<const T*>(dy_);
    T* dx = static_cast<T*>(dx_);
    int64_t i = 0;
    for (int64_t n = 0; n < s.n; ++n)
      for (int64_t h = 0; h < s.h; ++h)
        for (int64_t w = 0; w < s.w; ++w)
          for (int64_t c = 0; c < s.c; ++c, ++i)
            dx[i] = maxpool_input_grad(dy, window, s, n, h, w, c);
  });
}

}  // namespace kestrel::kernels
