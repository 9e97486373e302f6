// Eval-mode BatchNorm folded into the convolution before it (the reference's fuse_conv_and_bn,
// which its val.py and detect.py apply): with s[o] = gamma[o] / sqrt(var[o] + eps),
//
//   w'[o, ...] = w[o, ...] * s[o]          b'[o] = beta[o] - mean[o] * s[o]
//
// so that conv(x, w') + b' equals BN(conv(x, w)) with running statistics, and the normalisation
// pass over the activations disappears. Weights are OHWI: each output channel's `per_channel`
// elements are contiguous. Parameters and statistics are float32 (double on the CPU reference);
// the folded weight has the weight's dtype, the bias float32 (double with double weights).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "base/dtype.h"

namespace kestrel::kernels {

struct FoldBnShape {
  int64_t out_channels = 0;
  int64_t per_channel = 0;  // kh * kw * c_in
  double eps = 1e-5;
};

// s[o], computed as the reference computes it (in the statistics' precision).
template <class P>
KESTREL_HD inline P bn_fold_scale(P gamma, P var, double eps) {
  return gamma / sqrt(var + static_cast<P>(eps));
}
template <class P>
KESTREL_HD inline P bn_fold_bias(P beta, P mean, P scale) {
  return beta - mean * scale;
}

// t: dtype of w and w_out (float32 or float64); the parameters have the same dtype.
void fold_bn_cpu(DType t, const FoldBnShape& s, const void* w, const void* gamma, const void* beta,
                 const void* mean, const void* var, void* w_out, void* b_out);

// t: dtype of w and w_out (float32, float16 or bfloat16); gamma, beta, mean, var and b_out are
// float32. Never synchronises.
void fold_bn_cuda(DType t, const FoldBnShape& s, const void* w, const float* gamma, const float* beta,
                  const float* mean, const float* var, void* w_out, float* b_out, cudaStream_t stream);

}  // namespace kestrel::kernels
