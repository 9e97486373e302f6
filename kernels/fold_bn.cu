#include "kernels/dispatch.h"
#include "kernels/fold_bn.h"
#include "kernels/launch.cuh"

namespace kestrel::kernels {

// One thread per weight element; the first element of each output channel also writes the bias.
// The scale is recomputed per element (one sqrt): cheaper than a second launch for these sizes.
void fold_bn_cuda(DType t, const FoldBnShape& s, const void* w_, const float* gamma, const float* beta,
                  const float* mean, const float* var, void* w_out_, float* b_out, cudaStream_t stream) {
  KESTREL_DISPATCH_CUDA_FLOAT(t, T, "fold_bn", {
    const T* w = static_cast<const T*>(w_);
    T* w_out = static_cast<T*>(w_out_);
    const FoldBnShape g = s;
    cuda::launch_map(s.out_channels * s.per_channel, stream, [=] __device__(int64_t i) {
      const int64_t o = i / g.per_channel;
      const float scale = bn_fold_scale(gamma[o], var[o], g.eps);
      w_out[i] = from_acc<T>(to_acc(w[i]) * scale);
      if (i % g.per_channel == 0) b_out[o] = bn_fold_bias(beta[o], mean[o], scale);
    });
  });
}

}  // namespace kestrel::kernels
