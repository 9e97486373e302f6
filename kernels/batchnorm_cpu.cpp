// CPU reference: plain loops over [rows, channels] with double accumulators. Statistics take two
// passes (mean, then squared deviations from it), the most accurate order for a reference.
#include <vector>

#include "kernels/batchnorm.h"
#include "kernels/dispatch.h"

namespace kestrel::kernels {
namespace {

template <class T>
std::vector<double> channel_invstd(const T* var, int64_t channels, double eps) {
  std::vector<double> invstd(channels);
  for (int64_t c = 0; c < channels; ++c) invstd[c] = batch_norm_invstd<double>(var[c], eps);
  return invstd;
}

}  // namespace

void batch_norm_stats_cpu(DType t, const void* x_, BatchNormShape s, void* moments_) {
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

void batch_norm_forward_cpu(DType t, const void* x_, BatchNormShape s, const void* mean_,
                            const void* var_, const void* weight_, const void* bias_, double eps,
                            void* y_) {
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "batch_norm", {
    const T* x = static_cast<const T*>(x_);
    const T* mean = static_cast<const T*>(mean_);
    const T* weight = static_cast<const T*>(weight_);
    const T* bias = static_cast<const T*>(bias_);
    T* y = static_cast<T*>(y_);
    const int64_t C = s.channels;
    std::vector<double> scale = channel_invstd(static_cast<const T*>(var_), C, eps);
    for (int64_t c = 0; c < C; ++c) scale[c] *= weight[c];
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < C; ++c)
        y[r * C + c] = T(batch_norm_apply_fn<double>(x[r * C + c], mean[c], scale[c], bias[c]));
  });
}

void batch_norm_update_running_cpu(DType p, int64_t channels, const void* moments_,
                                   double momentum, void* running_mean_, void* running_var_) {
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

void batch_norm_backward_reduce_cpu(DType t, const void* dy_, const void* x_, BatchNormShape s,
                                    const void* mean_, const void* var_, double eps, void* sums_) {
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "batch_norm backward", {
    const T* dy = static_cast<const T*>(dy_);
    const T* x = static_cast<const T*>(x_);
    const T* mean = static_cast<const T*>(mean_);
    T* sums = static_cast<T*>(sums_);
    const int64_t C = s.channels;
    std::vector<double> sum_dy(C, 0.0), sum_dy_xmu(C, 0.0);
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const double g = dy[r * C + c];
        sum_dy[c] += g;
        sum_dy_xmu[c] += g * (double(x[r * C + c]) - double(mean[c]));
      }
    const std::vector<double> invstd = channel_invstd(static_cast<const T*>(var_), C, eps);
    for (int64_t c = 0; c < C; ++c) {
      sums[c] = T(sum_dy[c]);
      sums[C + c] = T(sum_dy_xmu[c] * invstd[c]);
    }
  });
}

void batch_norm_backward_apply_cpu(DType t, const void* dy_, const void* x_, BatchNormShape s,
                                   const void* mean_, const void* var_, const void* weight_,
                                   double eps, const void* sums_, const void* count_, void* dx_) {
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "batch_norm backward", {
    const T* dy = static_cast<const T*>(dy_);
    const T* x = static_cast<const T*>(x_);
    const T* mean = static_cast<const T*>(mean_);
    const T* weight = static_cast<const T*>(weight_);
    const T* sums = static_cast<const T*>(sums_);
    T* dx = static_cast<T*>(dx_);
    const int64_t C = s.channels;
    const std::vector<double> invstd = channel_invstd(static_cast<const T*>(var_), C, eps);
    std::vector<double> k1(C), mean_dy(C, 0.0), k2(C, 0.0);
    const double count = sums ? double(*static_cast<const T*>(count_)) : 0.0;
    for (int64_t c = 0; c < C; ++c) {
      k1[c] = double(weight[c]) * invstd[c];
      if (sums) {
        mean_dy[c] = double(sums[c]) / count;
        k2[c] = invstd[c] * double(sums[C + c]) / count;
      }
    }
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < C; ++c)
        dx[r * C + c] = T(batch_norm_dx_fn<double>(dy[r * C + c], x[r * C + c], mean[c], k1[c],
                                                   mean_dy[c], k2[c]));
  });
}

}  // namespace kestrel::kernels
