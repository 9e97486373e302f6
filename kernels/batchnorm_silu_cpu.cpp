// Fused batch norm + SiLU on the CPU (see batchnorm_silu.h). The chunking, the double sums and the
// chunk-ordered merge of partial sums are those of batchnorm_cpu.cpp, so the result does not
// depend on the thread count; z itself is one float multiply-add per element.
#include <numeric>
#include <type_traits>
#include <vector>

#include "kernels/batchnorm_cpu_common.h"
#include "kernels/batchnorm_silu.h"
#include "kernels/bf16_operands.h"
#include "kernels/cpu_simd.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise.h"

namespace kestrel::kernels {
namespace {

using namespace bn_cpu;

// y = silu(x a + b): BN's normalisation as one float multiply-add per element with per-channel
// a = weight * invstd and b = bias - mean * a (rounded from double once), as PyTorch's CPU batch
// norm computes it. Written once over the activations' storage S (float32, or bfloat16 bits read
// exactly and written rounded once), compiled per ISA by the wrappers.
template <class S>
[[gnu::always_inline]] inline void bn_silu_rows(const S* x, int64_t rows, int64_t C, const float* a, const float* b,
                                                S* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const S* xr = x + r * C;
    S* yr = y + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const float z = as_float(xr[c]) * a[c] + b[c];
      yr[c] = stored_as<S>(z * sigmoid_approx(z));
    }
  }
}

KESTREL_CPU_CLONES void bn_silu_rows_f32(const float* x, int64_t rows, int64_t C, const float* a, const float* b,
                                         float* y) {
  bn_silu_rows(x, rows, C, a, b, y);
}
KESTREL_CPU_CLONES void bn_silu_rows_bf16(const uint16_t* x, int64_t rows, int64_t C, const float* a,
                                          const float* b, uint16_t* y) {
  bn_silu_rows(x, rows, C, a, b, y);
}

// The per-channel a and b of x a + b from BN's double constants.
struct AffineF32 {
  std::vector<float> a, b;
  AffineF32(const double* mean, const double* scale, const double* bias, int64_t C) : a(C), b(C) {
    for (int64_t c = 0; c < C; ++c) {
      a[c] = float(scale[c]);
      b[c] = float(bias[c] - mean[c] * scale[c]);
    }
  }
};

// g = dy * silu'(z) with z = x a + b; sg[c] += g, sg_xmu[c] += g * (x - mean[c]); sg and sg_xmu
// start at zero; g is written out when kStoreG (float32: the buffer becomes dx; bfloat16
// recomputes g in its second pass instead, bn_silu_dx_rows). Four rows add into the sums at a
// time (pairwise), as the statistics pass does (batchnorm_cpu.cpp): the sums live in memory, and
// with few channels updating them every row cost as much as the data.
template <class S, bool kStoreG>
[[gnu::always_inline]] inline void bn_silu_grad_sums(const S* dy, const S* x, int64_t rows, int64_t C,
                                                     const double* mean, const float* a, const float* b, float* g,
                                                     double* sg, double* sg_xmu) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const S* d0 = dy + r * C;
    const S* x0 = x + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      double s = 0, sx = 0;
      for (int i = 0; i < 4; ++i) {  // unrolled: i is a compile-time count
        const float xv = as_float(x0[i * C + c]);
        const float gv = as_float(d0[i * C + c]) * silu_grad_approx(xv * a[c] + b[c]);
        if constexpr (kStoreG) g[(r + i) * C + c] = gv;
        s += gv;
        sx += double(gv) * (double(xv) - mean[c]);
      }
      sg[c] += s;
      sg_xmu[c] += sx;
    }
  }
  for (; r < rows; ++r) {
    const S* dr = dy + r * C;
    const S* xr = x + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const float xv = as_float(xr[c]);
      const float gv = as_float(dr[c]) * silu_grad_approx(xv * a[c] + b[c]);
      if constexpr (kStoreG) g[r * C + c] = gv;
      sg[c] += gv;
      sg_xmu[c] += double(gv) * (double(xv) - mean[c]);
    }
  }
}

KESTREL_CPU_CLONES void bn_silu_grad_sums_f32(const float* dy, const float* x, int64_t rows, int64_t C,
                                              const double* mean, const float* a, const float* b, float* g,
                                              double* sg, double* sg_xmu) {
  bn_silu_grad_sums<float, true>(dy, x, rows, C, mean, a, b, g, sg, sg_xmu);
}
KESTREL_CPU_CLONES void bn_silu_grad_sums_bf16(const uint16_t* dy, const uint16_t* x, int64_t rows, int64_t C,
                                               const double* mean, const float* a, const float* b, double* sg,
                                               double* sg_xmu) {
  bn_silu_grad_sums<uint16_t, false>(dy, x, rows, C, mean, a, b, nullptr, sg, sg_xmu);
}

// dx = BN's input gradient of g = dy * silu'(x a + b), g recomputed in float exactly as
// bn_silu_grad_sums computed it (so float32's stored g and bfloat16's recomputed g agree), BN's step
// in float (as CUDA's kernels compute it; the result is rounded to bfloat16's 8 bits, where
// float32's path keeps double), rounded once.
KESTREL_CPU_CLONES void bn_silu_dx_rows_bf16(const uint16_t* dy, const uint16_t* x, int64_t rows, int64_t C,
                                             const float* a, const float* b, const float* mean, const float* k1,
                                             const float* mean_dy, const float* k2, uint16_t* dx) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* dr = dy + r * C;
    const uint16_t* xr = x + r * C;
    uint16_t* out = dx + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const float xv = as_float(xr[c]);
      const float gv = as_float(dr[c]) * silu_grad_approx(xv * a[c] + b[c]);
      out[c] = stored_as<uint16_t>(batch_norm_dx_fn<float>(gv, xv, mean[c], k1[c], mean_dy[c], k2[c]));
    }
  }
}

template <class T>
void forward_typed(const T* x, BatchNormShape s, const T* mean, const T* var, const T* weight,
                   const T* bias, double eps, T* y) {
  const int64_t C = s.channels;
  const std::vector<double> scale = channel_scale(var, weight, C, eps);
  const std::vector<double> m = to_double(mean, C), b = to_double(bias, C);
  const AffineF32 f(m.data(), scale.data(), b.data(), C);  // once, for every chunk
  map_rows<T>(
      s,
      [&](auto lo, auto hi) { bn_silu_rows_f32(x + lo * C, hi - lo, C, f.a.data(), f.b.data(), y + lo * C); },
      [&](int64_t i, int64_t c) {
        y[i] = T(silu_fn<double>(batch_norm_apply_fn<double>(x[i], m[c], scale[c], b[c])));
      });
}

template <class T>
void backward_reduce_typed(const T* dy, const T* x, BatchNormShape s, const T* mean, const T* var,
                           const T* weight, const T* bias, double eps, T* g, T* sums) {
  const int64_t C = s.channels;
  const std::vector<double> scale = channel_scale(var, weight, C, eps);
  const std::vector<double> m = to_double(mean, C), b = to_double(bias, C);
  const AffineF32 f(m.data(), scale.data(), b.data(), C);
  const std::vector<double> total = channel_sum_pairs<T>(
      s,
      [&](auto lo, auto hi, double* sg, double* sg_xmu) {
        bn_silu_grad_sums_f32(dy + lo * C, x + lo * C, hi - lo, C, m.data(), f.a.data(),
                              f.b.data(), g + lo * C, sg, sg_xmu);
      },
      [&](int64_t i, int64_t c, double& sg, double& sg_xmu) {
        const double z = batch_norm_apply_fn<double>(x[i], m[c], scale[c], b[c]);
        const double gv = double(dy[i]) * silu_grad_fn<double>(z);
        g[i] = T(gv);
        sg += gv;
        sg_xmu += gv * (double(x[i]) - m[c]);
      });
  write_backward_sums(total, var, C, eps, sums);
}

// Rows of fewer than 32 channels (yolov5n's 16), grouped k at a time into one row of k C with the
// per-channel constants tiled k times: the vectoriser sizes the bfloat16 loops at 32 lanes (their
// 2-byte values), so a 16-channel row alone ran in the loop's remainder. Only for loops that sum
// nothing across rows, so each element's arithmetic, and its bits, stay the same.
int64_t rows_per_group(int64_t C) { return C >= 32 ? 1 : 32 / std::gcd(C, int64_t(32)); }

std::vector<float> tiled(const float* v, int64_t C, int64_t k) {
  std::vector<float> t(k * C);
  for (int64_t i = 0; i < k * C; ++i) t[i] = v[i % C];
  return t;
}

// rows(first_row, row_count, channels, constants) over [lo, hi): whole groups of k rows with the
// tiled constants, then the rows left over with the plain ones.
template <class Rows>
void grouped_rows(int64_t lo, int64_t hi, int64_t C, int64_t k, Rows&& rows) {
  const int64_t whole = (hi - lo) / k * k;
  if (whole > 0) rows(lo, whole / k, k * C, true);
  if (whole < hi - lo) rows(lo + whole, hi - lo - whole, C, false);
}

void forward_bf16(const uint16_t* x, BatchNormShape s, const float* mean, const float* var, const float* weight,
                  const float* bias, double eps, uint16_t* y) {
  const int64_t C = s.channels, k = rows_per_group(C);
  const std::vector<double> scale = channel_scale(var, weight, C, eps);
  const std::vector<double> m = to_double(mean, C), b = to_double(bias, C);
  const AffineF32 f(m.data(), scale.data(), b.data(), C);
  const std::vector<float> a_k = tiled(f.a.data(), C, k), b_k = tiled(f.b.data(), C, k);
  chunked_rows(s, [&](int64_t lo, int64_t hi) {
    grouped_rows(lo, hi, C, k, [&](int64_t r, int64_t n, int64_t width, bool group) {
      bn_silu_rows_bf16(x + r * C, n, width, group ? a_k.data() : f.a.data(), group ? b_k.data() : f.b.data(),
                        y + r * C);
    });
  });
}

}  // namespace

void batch_norm_silu_backward_cpu_bf16(const uint16_t* dy, const uint16_t* x, BatchNormShape s, const float* mean,
                                       const float* var, const float* weight, const float* bias, double eps,
                                       const float* count, float* sums, uint16_t* dx) {
  const int64_t C = s.channels;
  const std::vector<double> scale = channel_scale(var, weight, C, eps);
  const std::vector<double> m = to_double(mean, C), b = to_double(bias, C);
  const AffineF32 f(m.data(), scale.data(), b.data(), C);
  const std::vector<double> total = chunked_sum_pairs(s, [&](int64_t lo, int64_t hi, double* sg, double* sg_xmu) {
    bn_silu_grad_sums_bf16(dy + lo * C, x + lo * C, hi - lo, C, m.data(), f.a.data(), f.b.data(), sg, sg_xmu);
  });
  write_backward_sums(total, var, C, eps, sums);
  if (!dx) return;
  // BN's backward constants, formed in double as batch_norm_backward_apply_cpu forms them, then
  // rounded to float for the float step.
  const BackwardConstants k = backward_constants(var, weight, C, eps, count ? sums : nullptr, count);
  // Tiled for grouped rows (rows_per_group): a, b, mean, k1, mean_dy, k2, each k C long.
  const int64_t g = rows_per_group(C);
  std::vector<float> c32(6 * C);
  for (int64_t c = 0; c < C; ++c) {
    c32[c] = f.a[c];
    c32[C + c] = f.b[c];
    c32[2 * C + c] = mean[c];
    c32[3 * C + c] = float(k.k1[c]);
    c32[4 * C + c] = float(k.mean_dy[c]);
    c32[5 * C + c] = float(k.k2[c]);
  }
  std::vector<float> grouped(6 * g * C);
  for (int j = 0; j < 6; ++j) {
    const std::vector<float> t = tiled(c32.data() + j * C, C, g);
    std::copy(t.begin(), t.end(), grouped.begin() + j * g * C);
  }
  chunked_rows(s, [&](int64_t lo, int64_t hi) {
    grouped_rows(lo, hi, C, g, [&](int64_t r, int64_t n, int64_t width, bool group) {
      const float* p = group ? grouped.data() : c32.data();
      bn_silu_dx_rows_bf16(dy + r * C, x + r * C, n, width, p, p + width, p + 2 * width, p + 3 * width,
                           p + 4 * width, p + 5 * width, dx + r * C);
    });
  });
}

void batch_norm_silu_forward_cpu(DType t, const void* x, BatchNormShape s, const void* mean,
                                 const void* var, const void* weight, const void* bias,
                                 double eps, void* y) {
  if (t == DType::BF16)
    return forward_bf16(static_cast<const uint16_t*>(x), s, static_cast<const float*>(mean),
                        static_cast<const float*>(var), static_cast<const float*>(weight),
                        static_cast<const float*>(bias), eps, static_cast<uint16_t*>(y));
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "batch_norm_silu", {
    forward_typed(static_cast<const T*>(x), s, static_cast<const T*>(mean),
                  static_cast<const T*>(var), static_cast<const T*>(weight),
                  static_cast<const T*>(bias), eps, static_cast<T*>(y));
  });
}

void batch_norm_silu_backward_reduce_cpu(DType t, const void* dy, const void* x, BatchNormShape s,
                                         const void* mean, const void* var, const void* weight,
                                         const void* bias, double eps, void* g, void* sums) {
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "batch_norm_silu backward", {
    backward_reduce_typed(static_cast<const T*>(dy), static_cast<const T*>(x), s,
                          static_cast<const T*>(mean), static_cast<const T*>(var),
                          static_cast<const T*>(weight), static_cast<const T*>(bias), eps,
                          static_cast<T*>(g), static_cast<T*>(sums));
  });
}

}  // namespace kestrel::kernels
