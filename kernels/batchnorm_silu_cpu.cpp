// Fused batch norm + SiLU on the CPU (see batchnorm_silu.h). The chunking, the double sums and the
// chunk-ordered merge of partial sums are those of batchnorm_cpu.cpp, so the result does not
// depend on the thread count; z itself is one float multiply-add per element.
#include <type_traits>
#include <vector>

#include "kernels/batchnorm_cpu_common.h"
#include "kernels/batchnorm_silu.h"
#include "kernels/cpu_simd.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise.h"

namespace kestrel::kernels {
namespace {

using namespace bn_cpu;

// y = silu(x a + b): BN's normalisation as one float multiply-add per element with per-channel
// a = weight * invstd and b = bias - mean * a (rounded from double once), as PyTorch's CPU batch
// norm computes it.
KESTREL_CPU_CLONES void bn_silu_rows_f32(const float* x, int64_t rows, int64_t C, const float* a,
                                         const float* b, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    float* yr = y + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const float z = xr[c] * a[c] + b[c];
      yr[c] = z * sigmoid_approx(z);
    }
  }
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
// start at zero. Four rows add into the sums at a time (pairwise), as the statistics pass does
// (batchnorm_cpu.cpp): the sums live in memory, and with few channels updating them every row
// cost as much as the data.
KESTREL_CPU_CLONES void bn_silu_grad_sums_f32(const float* dy, const float* x, int64_t rows,
                                              int64_t C, const double* mean, const float* a,
                                              const float* b, float* g, double* sg,
                                              double* sg_xmu) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* d0 = dy + r * C;
    const float* x0 = x + r * C;
    float* g0 = g + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      double s = 0, sx = 0;
      for (int i = 0; i < 4; ++i) {  // unrolled: i is a compile-time count
        const float xv = x0[i * C + c];
        const float gv = d0[i * C + c] * silu_grad_approx(xv * a[c] + b[c]);
        g0[i * C + c] = gv;
        s += gv;
        sx += double(gv) * (double(xv) - mean[c]);
      }
      sg[c] += s;
      sg_xmu[c] += sx;
    }
  }
  for (; r < rows; ++r) {
    const float* dr = dy + r * C;
    const float* xr = x + r * C;
    float* gr = g + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const float z = xr[c] * a[c] + b[c];
      const float gv = dr[c] * silu_grad_approx(z);
      gr[c] = gv;
      sg[c] += gv;
      sg_xmu[c] += double(gv) * (double(xr[c]) - mean[c]);
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

}  // namespace

void batch_norm_silu_forward_cpu(DType t, const void* x, BatchNormShape s, const void* mean,
                                 const void* var, const void* weight, const void* bias,
                                 double eps, void* y) {
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
