// Inference: a convolution's weights with the following eval-mode BatchNorm folded in
// (kernels/fold_bn.h). No autograd; the folded tensors are new, the inputs untouched.
#pragma once
#include "engine/tensor.h"

namespace kestrel::ops {

struct FoldedConv {
  Tensor weight;  // like w (OHWI)
  Tensor bias;    // [O], the statistics' dtype
};

// w [O, KH, KW, C]; gamma, beta, mean, var [O] in the same dtype as w (float32 or float64 on the
// CPU; float32 on CUDA, where w may also be float16 or bfloat16), all on one device.
FoldedConv fold_batch_norm(const Tensor& w, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                           const Tensor& var, double eps);

}  // namespace kestrel::ops
