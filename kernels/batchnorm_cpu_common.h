// Pieces the CPU batch-norm kernels share (batchnorm_cpu.cpp and the fused BN + SiLU in
// batchnorm_silu_cpu.cpp): the fixed row chunks that make results independent of the thread count,
// and the per-channel constants computed in double. CPU only.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/batchnorm.h"

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

}  // namespace kestrel::kernels::bn_cpu
