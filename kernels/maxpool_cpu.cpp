#include <algorithm>
#include <vector>

#include "kernels/bf16_operands.h"
#include "kernels/cpu_simd.h"
#include "kernels/dispatch.h"
#include "kernels/maxpool.h"

namespace kestrel::kernels {
namespace {

// Rows per parallel chunk: about 32K elements, so that a chunk outweighs waking a thread.
int64_t rows_per_chunk(int64_t row_elements) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(row_elements, 1)); }

// The forward of one output row, values stored as S (float, or bfloat16 bits: the maximum is one
// of the inputs, copied as it is): the same scan and tie/NaN rule as maxpool_choose, with the
// channel loop innermost so it vectorises (NHWC: a window tap is C contiguous values).
template <class S>
[[gnu::always_inline]] inline void maxpool_row(const S* x, S* y, uint8_t* window, const PoolShape& s, int64_t n,
                                               int64_t oh) {
  const int64_t H = s.h, W = s.w, C = s.c, K = s.kernel;
  const int64_t h0 = oh * s.stride - s.pad;
  const int64_t kh_begin = h0 < 0 ? -h0 : 0, kh_end = std::min(K, H - h0);
  for (int64_t ow = 0; ow < s.out_w; ++ow) {
    const int64_t o = ((n * s.out_h + oh) * s.out_w + ow) * C;
    S* __restrict__ yo = y + o;
    uint8_t* __restrict__ wo = window ? window + o : nullptr;
    const int64_t w0 = ow * s.stride - s.pad;
    const int64_t kw_begin = w0 < 0 ? -w0 : 0, kw_end = std::min(K, W - w0);
    bool first = true;
    for (int64_t kh = kh_begin; kh < kh_end; ++kh)
      for (int64_t kw = kw_begin; kw < kw_end; ++kw) {
        const S* __restrict__ xi = x + ((n * H + h0 + kh) * W + w0 + kw) * C;
        const uint8_t tap = static_cast<uint8_t>(kh * K + kw);
        if (first) {
          for (int64_t c = 0; c < C; ++c) yo[c] = xi[c];
          if (wo)
            for (int64_t c = 0; c < C; ++c) wo[c] = tap;
          first = false;
          continue;
        }
        if (wo) {
          for (int64_t c = 0; c < C; ++c) {
            const bool take = pool_replaces(as_float(xi[c]), as_float(yo[c]));
            yo[c] = take ? xi[c] : yo[c];
            wo[c] = take ? tap : wo[c];
          }
        } else {
          for (int64_t c = 0; c < C; ++c) yo[c] = pool_replaces(as_float(xi[c]), as_float(yo[c])) ? xi[c] : yo[c];
        }
      }
  }
}

KESTREL_CPU_CLONES void maxpool_row_f32(const float* x, float* y, uint8_t* window, const PoolShape& s,
                                        int64_t n, int64_t oh) {
  maxpool_row(x, y, window, s, n, oh);
}

// bfloat16 activations (the CPU's bfloat16 inference).
KESTREL_CPU_CLONES void maxpool_row_bf16(const uint16_t* x, uint16_t* y, uint8_t* window, const PoolShape& s,
                                         int64_t n, int64_t oh) {
  maxpool_row(x, y, window, s, n, oh);
}

// Rows in parallel through row(x, y, window, s, n, oh).
template <class S, class Row>
void maxpool_rows(const void* x, void* y, uint8_t* window, const PoolShape& s, Row row) {
  parallel_chunks(s.n * s.out_h, rows_per_chunk(s.out_w * s.c), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      row(static_cast<const S*>(x), static_cast<S*>(y), window, s, r / s.out_h, r % s.out_h);
  });
}

}  // namespace

void maxpool2d_forward_cpu(DType t, const void* x_, void* y_, uint8_t* window, const PoolShape& s) {
  // The fast paths: rows in parallel, channels vectorised.
  if (t == DType::F32) return maxpool_rows<float>(x_, y_, window, s, maxpool_row_f32);
  if (t == DType::BF16) return maxpool_rows<uint16_t>(x_, y_, window, s, maxpool_row_bf16);
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

namespace {

// One image's backward as a scatter: each output's gradient added, in float, to the input element
// its window chose, outputs in row-major (oh, ow) order. Every input element thus receives the
// additions of maxpool_input_grad's gather (windows in (oh, ow) order, starting from zero) in the
// same order: the same float sums, without the gather's per-element window search. acc: the
// image's h * w * c floats.
template <class S>
void scatter_image(const S* dy, const uint8_t* window, const PoolShape& s, int64_t n, float* acc) {
  const int64_t C = s.c, W = s.w;
  std::fill(acc, acc + s.h * W * C, 0.0f);
  for (int64_t oh = 0; oh < s.out_h; ++oh)
    for (int64_t ow = 0; ow < s.out_w; ++ow) {
      const int64_t o = ((n * s.out_h + oh) * s.out_w + ow) * C;
      // The window's corner (possibly in the padding): tap kh * K + kw lies at pixel corner + kh W + kw.
      const int64_t corner = (oh * s.stride - s.pad) * W + (ow * s.stride - s.pad);
      for (int64_t c = 0; c < C; ++c) {
        const int64_t tap = window[o + c];
        acc[(corner + (tap / s.kernel) * W + tap % s.kernel) * C + c] += as_float(dy[o + c]);
      }
    }
}

}  // namespace

// float32 and bfloat16: a scatter per image (scatter_image), images in parallel, bfloat16 rounded
// once from the float sums; float64 (the reference) gathers per input element. Both sum each
// element's gradients in the same order.
void maxpool2d_backward_cpu(DType t, const void* dy_, const uint8_t* window, void* dx_,
                            const PoolShape& s) {
  const int64_t image = s.h * s.w * s.c;
  if (t == DType::F32) {
    parallel_chunks(s.n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n)
        scatter_image(static_cast<const float*>(dy_), window, s, n, static_cast<float*>(dx_) + n * image);
    });
    return;
  }
  if (t == DType::BF16) {
    parallel_chunks(s.n, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> acc(image);
      for (int64_t n = begin; n < end; ++n) {
        scatter_image(static_cast<const uint16_t*>(dy_), window, s, n, acc.data());
        uint16_t* dx = static_cast<uint16_t*>(dx_) + n * image;
        for (int64_t i = 0; i < image; ++i) dx[i] = bf16_bits(acc[i]);
      }
    });
    return;
  }
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "max_pool2d backward", {
    const T* dy = static_cast<const T*>(dy_);
    T* dx = static_cast<T*>(dx_);
    for (int64_t r = 0; r < s.n * s.h; ++r) {
      const int64_t n = r / s.h, h = r % s.h;
      for (int64_t w = 0; w < s.w; ++w)
        for (int64_t c = 0; c < s.c; ++c) dx[(r * s.w + w) * s.c + c] = maxpool_input_grad(dy, window, s, n, h, w, c);
    }
  });
}

}  // namespace kestrel::kernels
