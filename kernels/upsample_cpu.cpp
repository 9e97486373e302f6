#include <cstring>
#include <initializer_list>

#include "kernels/dispatch.h"
#include "kernels/upsample.h"

namespace kestrel::kernels {

void upsample2x_forward_cpu(size_t elem_size, const void* x_, void* y_, const Upsample2xShape& s) {
  const auto* x = static_cast<const unsigned char*>(x_);
  auto* y = static_cast<unsigned char*>(y_);
  const size_t pixel_bytes = static_cast<size_t>(s.c) * elem_size;
  if (pixel_bytes == 0) return;
  const int64_t pixels = s.n * s.h * s.w;
  for (int64_t p = 0; p < pixels; ++p) {
    const int64_t t = upsample2x_first_target(p, s.w);
    const unsigned char* src = x + p * pixel_bytes;
    for (int64_t target : {t, t + 1, t + 2 * s.w, t + 2 * s.w + 1})
      std::memcpy(y + target * pixel_bytes, src, pixel_bytes);
  }
}

void upsample2x_backward_cpu(DType t, const void* dy_, void* dx_, const Upsample2xShape& s) {
  // Over T's stored values; bfloat16 summed in float and rounded once (to_acc / from_acc, as CUDA).
  auto sum_blocks = [&]<class T>(const T* dy, T* dx) {
    const int64_t pixels = s.n * s.h * s.w, c = s.c, below = 2 * s.w * c;
    for (int64_t p = 0; p < pixels; ++p) {
      const T* top = dy + upsample2x_first_target(p, s.w) * c;
      for (int64_t ch = 0; ch < c; ++ch)
        dx[p * c + ch] = from_acc<T>(upsample2x_block_sum(to_acc(top[ch]), to_acc(top[c + ch]), to_acc(top[below + ch]),
                                                          to_acc(top[below + c + ch])));
    }
  };
  if (t == DType::BF16) return sum_blocks(static_cast<const bf16*>(dy_), static_cast<bf16*>(dx_));
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "upsample_nearest2x backward",
                             { sum_blocks(static_cast<const T*>(dy_), static_cast<T*>(dx_)); });
}

}  // namespace kestrel::kernels
