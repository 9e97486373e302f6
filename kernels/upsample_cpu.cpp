#include <cstring>
#include <initializer_list>

#include "kernels/bf16_operands.h"
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
  if (t == DType::BF16) {  // bfloat16 bits: summed in float and rounded once, as CUDA does
    const auto* dy = static_cast<const uint16_t*>(dy_);
    auto* dx = static_cast<uint16_t*>(dx_);
    const int64_t pixels = s.n * s.h * s.w, c = s.c, below = 2 * s.w * c;
    for (int64_t p = 0; p < pixels; ++p) {
      const uint16_t* top = dy + upsample2x_first_target(p, s.w) * c;
      for (int64_t ch = 0; ch < c; ++ch)
        dx[p * c + ch] = bf16_bits(upsample2x_block_sum(as_float(top[ch]), as_float(top[c + ch]),
                                                        as_float(top[below + ch]), as_float(top[below + c + ch])));
    }
    return;
  }
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "upsample_nearest2x backward", {
    const T* dy = static_cast<const T*>(dy_);
    T* dx = static_cast<T*>(dx_);
    const int64_t pixels = s.n * s.h * s.w, c = s.c, below = 2 * s.w * c;
    for (int64_t p = 0; p < pixels; ++p) {
      const T* top = dy + upsample2x_first_target(p, s.w) * c;
      for (int64_t ch = 0; ch < c; ++ch)
        dx[p * c + ch] =
            upsample2x_block_sum(top[ch], top[c + ch], top[below + ch], top[below + c + ch]);
    }
  });
}

}  // namespace kestrel::kernels
