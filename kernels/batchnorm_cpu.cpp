// Batch norm on the CPU over [rows, channels] (NHWC: channels innermost).
//
// float64 is the reference: plain loops with double accumulators; statistics take two passes
// (mean, then squared deviations from it), the most accurate order.
//
// float32 is the fast path, with the same double arithmetic per element, so that its results
// differ from the reference only by the order of summation (and FMA contraction in double): the
// rows are cut into fixed chunks of ~32K elements, spread over OpenMP threads; each chunk
// accumulates per-channel partials in double, in loops that vectorise across channels under
// runtime ISA dispatch; the partials are merged serially in chunk order. Chunk bounds depend only
// on the shape, so the result is the same bits for any number of threads. The statistics take one
// pass: per chunk, sums of x - k and (x - k)^2 with k the chunk's first row (a sample of the
// channel, so the shifted mean is O(std) and q - s^2/n cancels only a few bits of a double), then
// Chan's formula across chunks. Relative error of the variance, ~1e-15 times (mean - k)^2 / var,
// far below the float32 output's rounding.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/batchnorm.h"
#include "kernels/batchnorm_cpu_common.h"
#include "kernels/bf16_operands.h"
#include "kernels/cpu_simd.h"
#include "kernels/dispatch.h"

namespace kestrel::kernels {
namespace {

using namespace bn_cpu;

// The row kernels are written once over the activations' storage S (float32, or bfloat16 bits
// for the CPU's bfloat16 activations: read exactly as float, results rounded once) and compiled
// per ISA through the KESTREL_CPU_CLONES wrappers below them (target_clones takes no templates).

// s[c] += x - k[c], q[c] += (x - k[c])^2 over rows of x; s and q start at zero. Four rows add
// into s and q at a time (pairwise): the accumulators live in memory (C is not known here), and
// with few channels reading and writing them every row cost as much as reading x.
template <class S>
[[gnu::always_inline]] inline void shifted_sums(const S* x, int64_t rows, int64_t C, const S* k, double* s,
                                                double* q) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const S* x0 = x + r * C;
    const S *x1 = x0 + C, *x2 = x1 + C, *x3 = x2 + C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const double kc = as_float(k[c]);
      const double d0 = double(as_float(x0[c])) - kc, d1 = double(as_float(x1[c])) - kc,
                   d2 = double(as_float(x2[c])) - kc, d3 = double(as_float(x3[c])) - kc;
      s[c] += (d0 + d1) + (d2 + d3);
      q[c] += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
    }
  }
  for (; r < rows; ++r) {
    const S* xr = x + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const double d = double(as_float(xr[c])) - double(as_float(k[c]));
      s[c] += d;
      q[c] += d * d;
    }
  }
}

template <class S>
[[gnu::always_inline]] inline void normalize_rows(const S* x, int64_t rows, int64_t C, const double* mean,
                                                  const double* scale, const double* bias, S* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const S* xr = x + r * C;
    S* yr = y + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c)
      yr[c] = stored_as<S>(float(batch_norm_apply_fn<double>(as_float(xr[c]), mean[c], scale[c], bias[c])));
  }
}

// sdy[c] += dy, sdy_xmu[c] += dy * (x - mean[c]); both start at zero.
template <class S>
[[gnu::always_inline]] inline void backward_sums(const S* dy, const S* x, int64_t rows, int64_t C,
                                                 const double* mean, double* sdy, double* sdy_xmu) {
  for (int64_t r = 0; r < rows; ++r) {
    const S* gr = dy + r * C;
    const S* xr = x + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const double g = as_float(gr[c]);
      sdy[c] += g;
      sdy_xmu[c] += g * (double(as_float(xr[c])) - mean[c]);
    }
  }
}

template <class S>
[[gnu::always_inline]] inline void backward_apply_rows(const S* dy, const S* x, int64_t rows, int64_t C,
                                                       const double* mean, const double* k1,
                                                       const double* mean_dy, const double* k2, S* dx) {
  for (int64_t r = 0; r < rows; ++r) {
    const S* gr = dy + r * C;
    const S* xr = x + r * C;
    S* dr = dx + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c)
      dr[c] = stored_as<S>(float(batch_norm_dx_fn<double>(as_float(gr[c]), as_float(xr[c]), mean[c], k1[c],
                                                          mean_dy[c], k2[c])));
  }
}

KESTREL_CPU_CLONES void shifted_sums_f32(const float* x, int64_t rows, int64_t C, const float* k, double* s,
                                         double* q) {
  shifted_sums(x, rows, C, k, s, q);
}
KESTREL_CPU_CLONES void shifted_sums_bf16(const uint16_t* x, int64_t rows, int64_t C, const uint16_t* k,
                                          double* s, double* q) {
  shifted_sums(x, rows, C, k, s, q);
}
KESTREL_CPU_CLONES void normalize_f32(const float* x, int64_t rows, int64_t C, const double* mean,
                                      const double* scale, const double* bias, float* y) {
  normalize_rows(x, rows, C, mean, scale, bias, y);
}
KESTREL_CPU_CLONES void normalize_bf16(const uint16_t* x, int64_t rows, int64_t C, const double* mean,
                                       const double* scale, const double* bias, uint16_t* y) {
  normalize_rows(x, rows, C, mean, scale, bias, y);
}
KESTREL_CPU_CLONES void backward_sums_f32(const float* dy, const float* x, int64_t rows, int64_t C,
                                          const double* mean, double* sdy, double* sdy_xmu) {
  backward_sums(dy, x, rows, C, mean, sdy, sdy_xmu);
}
KESTREL_CPU_CLONES void backward_sums_bf16(const uint16_t* dy, const uint16_t* x, int64_t rows, int64_t C,
                                           const double* mean, double* sdy, double* sdy_xmu) {
  backward_sums(dy, x, rows, C, mean, sdy, sdy_xmu);
}
KESTREL_CPU_CLONES void backward_apply_f32(const float* dy, const float* x, int64_t rows, int64_t C,
                                           const double* mean, const double* k1, const double* mean_dy,
                                           const double* k2, float* dx) {
  backward_apply_rows(dy, x, rows, C, mean, k1, mean_dy, k2, dx);
}
KESTREL_CPU_CLONES void backward_apply_bf16(const uint16_t* dy, const uint16_t* x, int64_t rows, int64_t C,
                                            const double* mean, const double* k1, const double* mean_dy,
                                            const double* k2, uint16_t* dx) {
  backward_apply_rows(dy, x, rows, C, mean, k1, mean_dy, k2, dx);
}

// The float32 and bfloat16 statistics (moments float32): chunked shifted sums merged by Chan's
// formula, each chunk shifted by its first row.
template <class S, class Sums>
void stats_chunked(const S* x, BatchNormShape s, float* moments, Sums sums) {
  const int64_t C = s.channels, per = chunk_rows(s), chunks = chunk_count(s);
  std::vector<double> partial(chunks * 2 * C, 0.0);  // per chunk: s[C], q[C]
  parallel_chunks(s.rows, per, [&](int64_t b, int64_t e) {
    double* p = partial.data() + (b / per) * 2 * C;
    sums(x + b * C, e - b, C, x + b * C, p, p + C);
  });
  moments[0] = float(s.rows);
  for (int64_t c = 0; c < C; ++c) {
    Moments<double> acc;
    for (int64_t k = 0; k < chunks; ++k) {
      const double* p = partial.data() + k * 2 * C;
      const double n = double(std::min(s.rows, (k + 1) * per) - k * per);
      Moments<double> part = moments_from_shifted_sums(n, p[c], p[C + c]);
      part.mean += as_float(x[k * per * C + c]);
      acc = merge_moments(acc, part);
    }
    moments[1 + c] = float(acc.mean);
    moments[1 + C + c] = float(acc.count > 0 ? acc.m2 / acc.count : 0.0);
  }
}

}  // namespace

void batch_norm_stats_cpu(DType t, const void* x_, BatchNormShape s, void* moments_) {
  if (t == DType::F32)
    return stats_chunked(static_cast<const float*>(x_), s, static_cast<float*>(moments_), shifted_sums_f32);
  if (t == DType::BF16)
    return stats_chunked(static_cast<const uint16_t*>(x_), s, static_cast<float*>(moments_), shifted_sums_bf16);
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "batch_norm statistics", {
    const T* x = static_cast<const T*>(x_);
    T* moments = static_cast<T*>(moments_);
    const int64_t C = s.channels;
    std::vector<double> mean(C, 0.0), m2(C, 0.0);
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < C; ++c) mean[c] += x[r * C + c];
    for (int64_t c = 0; c < C; ++c) mean[c] = s.rows > 0 ? mean[c] / double(s.rows) : 0.0;
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const double d = x[r * C + c] - mean[c];
        m2[c] += d * d;
      }
    moments[0] = T(s.rows);
    for (int64_t c = 0; c < C; ++c) {
      moments[1 + c] = T(mean[c]);
      moments[1 + C + c] = T(s.rows > 0 ? m2[c] / double(s.rows) : 0.0);
    }
  });
}

void batch_norm_merge_moments_cpu(DType p, int64_t ranks, int64_t channels, const void* gathered_,
                                  void* merged_) {
  KESTREL_DISPATCH_CPU_FLOAT(p, P, "batch_norm moments merge", {
    const P* gathered = static_cast<const P*>(gathered_);
    P* merged = static_cast<P*>(merged_);
    const int64_t stride = moments_size(channels);
    double total = 0;
    for (int64_t r = 0; r < ranks; ++r) total += gathered[r * stride];
    merged[0] = P(total);
    for (int64_t c = 0; c < channels; ++c) {
      Moments<double> acc;
      for (int64_t r = 0; r < ranks; ++r) {
        const P* row = gathered + r * stride;
        const double n = row[0];
        acc = merge_moments(
            acc, Moments<double>{n, double(row[1 + c]), double(row[1 + channels + c]) * n});
      }
      merged[1 + c] = P(acc.mean);
      merged[1 + channels + c] = P(acc.count > 0 ? acc.m2 / acc.count : 0.0);
    }
  });
}

namespace {

template <class T>
void forward_typed(const T* x, BatchNormShape s, const T* mean, const T* var, const T* weight,
                   const T* bias, double eps, T* y) {
  const int64_t C = s.channels;
  const std::vector<double> scale = channel_scale(var, weight, C, eps);
  const std::vector<double> m = to_double(mean, C), b = to_double(bias, C);
  map_rows<T>(
      s,
      [&](auto lo, auto hi) { normalize_f32(x + lo * C, hi - lo, C, m.data(), scale.data(), b.data(), y + lo * C); },
      [&](int64_t i, int64_t c) { y[i] = T(batch_norm_apply_fn<double>(x[i], m[c], scale[c], b[c])); });
}

template <class T>
void backward_reduce_typed(const T* dy, const T* x, BatchNormShape s, const T* mean, const T* var,
                           double eps, T* sums) {
  const int64_t C = s.channels;
  const std::vector<double> m = to_double(mean, C);
  const std::vector<double> total = channel_sum_pairs<T>(
      s,
      [&](auto lo, auto hi, double* sum_dy, double* sum_dy_xmu) {
        backward_sums_f32(dy + lo * C, x + lo * C, hi - lo, C, m.data(), sum_dy, sum_dy_xmu);
      },
      [&](int64_t i, int64_t c, double& sum_dy, double& sum_dy_xmu) {
        const double g = dy[i];
        sum_dy += g;
        sum_dy_xmu += g * (double(x[i]) - m[c]);
      });
  write_backward_sums(total, var, C, eps, sums);
}

template <class T>
void backward_apply_typed(const T* dy, const T* x, BatchNormShape s, const T* mean, const T* var,
                          const T* weight, double eps, const T* sums, const T* count_, T* dx) {
  const int64_t C = s.channels;
  const BackwardConstants k = backward_constants(var, weight, C, eps, sums, count_);
  const std::vector<double> m = to_double(mean, C);
  map_rows<T>(
      s,
      [&](auto lo, auto hi) {
        backward_apply_f32(dy + lo * C, x + lo * C, hi - lo, C, m.data(), k.k1.data(),
                           k.mean_dy.data(), k.k2.data(), dx + lo * C);
      },
      [&](int64_t i, int64_t c) {
        dx[i] = T(batch_norm_dx_fn<double>(dy[i], x[i], m[c], k.k1[c], k.mean_dy[c], k.k2[c]));
      });
}

// bfloat16 activations (x, y, dy, dx as raw bits) with float32 statistics and parameters: the same
// double arithmetic per element as float32, over the same fixed chunks, the results rounded once to
// bfloat16.
void forward_bf16(const uint16_t* x, BatchNormShape s, const float* mean, const float* var, const float* weight,
                  const float* bias, double eps, uint16_t* y) {
  const int64_t C = s.channels;
  const std::vector<double> scale = channel_scale(var, weight, C, eps);
  const std::vector<double> m = to_double(mean, C), b = to_double(bias, C);
  chunked_rows(s, [&](int64_t lo, int64_t hi) {
    normalize_bf16(x + lo * C, hi - lo, C, m.data(), scale.data(), b.data(), y + lo * C);
  });
}

void backward_reduce_bf16(const uint16_t* dy, const uint16_t* x, BatchNormShape s, const float* mean,
                          const float* var, double eps, float* sums) {
  const int64_t C = s.channels;
  const std::vector<double> m = to_double(mean, C);
  const std::vector<double> total = chunked_sum_pairs(s, [&](int64_t lo, int64_t hi, double* sum_dy, double* sum_dy_xmu) {
    backward_sums_bf16(dy + lo * C, x + lo * C, hi - lo, C, m.data(), sum_dy, sum_dy_xmu);
  });
  write_backward_sums(total, var, C, eps, sums);
}

void backward_apply_bf16_rows(const uint16_t* dy, const uint16_t* x, BatchNormShape s, const float* mean,
                              const float* var, const float* weight, double eps, const float* sums,
                              const float* count_, uint16_t* dx) {
  const int64_t C = s.channels;
  const BackwardConstants k = backward_constants(var, weight, C, eps, sums, count_);
  const std::vector<double> m = to_double(mean, C);
  chunked_rows(s, [&](int64_t lo, int64_t hi) {
    backward_apply_bf16(dy + lo * C, x + lo * C, hi - lo, C, m.data(), k.k1.data(), k.mean_dy.data(), k.k2.data(),
                        dx + lo * C);
  });
}

const float* f32p(const void* p) { return static_cast<const float*>(p); }
const uint16_t* bf16p(const void* p) { return static_cast<const uint16_t*>(p); }

}  // namespace

void batch_norm_forward_cpu(DType t, const void* x, BatchNormShape s, const void* mean,
                            const void* var, const void* weight, const void* bias, double eps,
                            void* y) {
  if (t == DType::BF16)
    return forward_bf16(bf16p(x), s, f32p(mean), f32p(var), f32p(weight), f32p(bias), eps, static_cast<uint16_t*>(y));
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "batch_norm", {
    forward_typed(static_cast<const T*>(x), s, static_cast<const T*>(mean),
                  static_cast<const T*>(var), static_cast<const T*>(weight),
                  static_cast<const T*>(bias), eps, static_cast<T*>(y));
  });
}

void batch_norm_update_running_cpu(DType p, int64_t channels, const void* moments_,
                                   double momentum, void* running_mean_, void* running_var_,
                                   int64_t* batches_tracked) {
  if (batches_tracked) ++*batches_tracked;
  KESTREL_DISPATCH_CPU_FLOAT(p, P, "batch_norm running statistics", {
    const P* moments = static_cast<const P*>(moments_);
    P* running_mean = static_cast<P*>(running_mean_);
    P* running_var = static_cast<P*>(running_var_);
    for (int64_t c = 0; c < channels; ++c) {
      double rm = running_mean[c], rv = running_var[c];
      batch_norm_running_fn<double>(moments[0], moments[1 + c], moments[1 + channels + c],
                                    momentum, rm, rv);
      running_mean[c] = P(rm);
      running_var[c] = P(rv);
    }
  });
}

void batch_norm_backward_reduce_cpu(DType t, const void* dy, const void* x, BatchNormShape s,
                                    const void* mean, const void* var, double eps, void* sums) {
  if (t == DType::BF16)
    return backward_reduce_bf16(bf16p(dy), bf16p(x), s, f32p(mean), f32p(var), eps, static_cast<float*>(sums));
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "batch_norm backward", {
    backward_reduce_typed(static_cast<const T*>(dy), static_cast<const T*>(x), s,
                          static_cast<const T*>(mean), static_cast<const T*>(var), eps,
                          static_cast<T*>(sums));
  });
}

void batch_norm_backward_apply_cpu(DType t, const void* dy, const void* x, BatchNormShape s,
                                   const void* mean, const void* var, const void* weight,
                                   double eps, const void* sums, const void* count, void* dx) {
  if (t == DType::BF16)
    return backward_apply_bf16_rows(bf16p(dy), bf16p(x), s, f32p(mean), f32p(var), f32p(weight), eps, f32p(sums),
                                    f32p(count), static_cast<uint16_t*>(dx));
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "batch_norm backward", {
    backward_apply_typed(static_cast<const T*>(dy), static_cast<const T*>(x), s,
                         static_cast<const T*>(mean), static_cast<const T*>(var),
                         static_cast<const T*>(weight), eps, static_cast<const T*>(sums),
                         static_cast<const T*>(count), static_cast<T*>(dx));
  });
}

}  // namespace kestrel::kernels
