#include "kernels/dispatch.h"
#include "kernels/fold_bn.h"

namespace kestrel::kernels {

void fold_bn_cpu(DType t, const FoldBnShape& s, const void* w_, const void* gamma_, const void* beta_,
                 const void* mean_, const void* var_, void* w_out_, void* b_out_) {
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "fold_bn", {
    const T* w = static_cast<const T*>(w_);
    const T *gamma = static_cast<const T*>(gamma_), *beta = static_cast<const T*>(beta_);
    const T *mean = static_cast<const T*>(mean_), *var = static_cast<const T*>(var_);
    T* w_out = static_cast<T*>(w_out_);
    T* b_out = static_cast<T*>(b_out_);
    for (int64_t o = 0; o < s.out_channels; ++o) {
      const T scale = bn_fold_scale(gamma[o], var[o], s.eps);
      b_out[o] = bn_fold_bias(beta[o], mean[o], scale);
      for (int64_t k = 0; k < s.per_channel; ++k) w_out[o * s.per_channel + k] = w[o * s.per_channel + k] * scale;
    }
  });
}

}  // namespace kestrel::kernels
