// Pieces the CPU batch-norm kernels share (batchnorm_cpu.cpp and the fused BN + SiLU in
// batchnorm_silu_cpu.cpp): the fixed row chunks that make results independent of the thread count,
// and the per-channel constants computed in double. CPU only.
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/batchnorm.h"
#include "kernels/cpu_simd.h"

namespace kestrel::kernels::bn_cpu {

// Rows per chunk: ~32K elements (128 KiB of float), at least one row.
inline int64_t chunk_rows(BatchNormShape s) {
  constexpr int64_t kChunkElements = int64_t(1) << 15;
  return std::max<int64_t>(1, kChunkElements / std::max<int64_t>(1, s.channels));
}

inline int64_t chunk_count(BatchNormShape s) {
  const int64_t per = chunk_rows(s);
  return (s.rows + per - 1) / per;
}

template <class T>
std::vector<double> channel_invstd(const T* var, int64_t channels, double eps) {
  std::vector<double> invstd(channels);
  for (int64_t c = 0; c < channels; ++c) invstd[c] = batch_norm_invstd<double>(var[c], eps);
  return invstd;
}

template <class T>
std::vector<double> to_double(const T* v, int64_t n) {
  return std::vector<double>(v, v + n);
}

// weight * invstd per channel: y = (x - mean) * scale + bias.
template <class T>
std::vector<double> channel_scale(const T* var, const T* weight, int64_t channels, double eps) {
  std::vector<double> scale = channel_invstd(var, channels, eps);
  for (int64_t c = 0; c < channels; ++c) scale[c] *= double(weight[c]);
  return scale;
}

// Per-channel sums of the chunks, added in chunk order.
inline std::vector<double> sum_partials(const std::vector<double>& partial, int64_t chunks,
                                        int64_t width) {
  std::vector<double> total(width, 0.0);
  for (int64_t k = 0; k < chunks; ++k)
    for (int64_t i = 0; i < width; ++i) total[i] += partial[k * width + i];
  return total;
}

// The vectorised passes (float32, and the CPU's bfloat16 activations): rows(lo, hi) on the fixed
// row chunks, in parallel.
template <class Rows>
void chunked_rows(BatchNormShape s, Rows&& rows) {
  parallel_chunks(s.rows, chunk_rows(s), rows);
}

// Two per-channel sums over the fixed chunks, as 2C doubles (a[C], then b[C]): each chunk's
// rows(lo, hi, a, b) adds into partials of its own (zeroed), merged in chunk order.
template <class Rows>
std::vector<double> chunked_sum_pairs(BatchNormShape s, Rows&& rows) {
  const int64_t C = s.channels, per = chunk_rows(s), chunks = chunk_count(s);
  std::vector<double> partial(chunks * 2 * C, 0.0);
  parallel_chunks(s.rows, per, [&](int64_t lo, int64_t hi) {
    double* p = partial.data() + (lo / per) * 2 * C;
    rows(lo, hi, p, p + C);
  });
  return sum_partials(partial, chunks, 2 * C);
}

// A channel-wise pass over [rows, C]: float32 calls `rows_f32(lo, hi)` on the fixed row chunks,
// in parallel (the vectorised kernels); other types call `element(i, c)` for every element in
// order (the double reference). Pass `rows_f32` as a generic lambda (`auto lo, auto hi`), so that
// it is compiled for float32 only.
template <class T, class RowsF32, class Element>
void map_rows(BatchNormShape s, RowsF32&& rows_f32, Element&& element) {
  if constexpr (std::is_same_v<T, float>) {
    chunked_rows(s, rows_f32);
  } else {
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.channels; ++c) element(r * s.channels + c, c);
  }
}

// Two per-channel sums over [rows, C], returned as 2C doubles (a[C], then b[C]). float32: each
// chunk's `rows_f32(lo, hi, a, b)` adds into partials of its own (chunked_sum_pairs); other types:
// `element(i, c, a_c, b_c)` adds into the totals' references, element by element.
template <class T, class RowsF32, class Element>
std::vector<double> channel_sum_pairs(BatchNormShape s, RowsF32&& rows_f32, Element&& element) {
  if constexpr (std::is_same_v<T, float>) {
    return chunked_sum_pairs(s, rows_f32);
  } else {
    const int64_t C = s.channels;
    std::vector<double> total(2 * C, 0.0);
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < C; ++c) element(r * C + c, c, total[c], total[C + c]);
    return total;
  }
}

// The backward reduction's output from sum(g) and sum(g * (x - mean)) per channel:
// sums[c] = sum(g), sums[C + c] = sum(g * (x - mean)) * invstd.
template <class T>
void write_backward_sums(const std::vector<double>& total, const T* var, int64_t C, double eps,
                         T* sums) {
  const std::vector<double> invstd = channel_invstd(var, C, eps);
  for (int64_t c = 0; c < C; ++c) {
    sums[c] = T(total[c]);
    sums[C + c] = T(total[C + c] * invstd[c]);
  }
}

// BN's backward-apply constants per channel, in double: k1 = w * invstd, and from the backward sums
// mean_dy = sum(dy) / count and k2 = invstd * sum(dy * xhat) / count (zero where sums is null: eval
// mode, constant statistics). P is the parameters' type.
struct BackwardConstants {
  std::vector<double> k1, mean_dy, k2;
};
template <class P>
BackwardConstants backward_constants(const P* var, const P* weight, int64_t C, double eps, const P* sums,
                                     const P* count) {
  const std::vector<double> invstd = channel_invstd(var, C, eps);
  BackwardConstants k{std::vector<double>(C), std::vector<double>(C, 0.0), std::vector<double>(C, 0.0)};
  const double n = sums ? double(*count) : 0.0;
  for (int64_t c = 0; c < C; ++c) {
    k.k1[c] = double(weight[c]) * invstd[c];
    if (sums) {
      k.mean_dy[c] = double(sums[c]) / n;
      k.k2[c] = invstd[c] * double(sums[C + c]) / n;
    }
  }
  return k;
}

}  // namespace kestrel::kernels::bn_cpu
