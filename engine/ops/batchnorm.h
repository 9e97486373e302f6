// Batch normalisation of NHWC activations, per channel over N, H and W.
#pragma once
#include "engine/tensor.h"

namespace kestrel::ops {

// PyTorch's F.batch_norm on x [N, H, W, C] (YOLOv5 uses eps 1e-3, momentum 0.03).
// weight, bias, running_mean and running_var are [C] and contiguous, float32 (master precision,
// also for float16/bfloat16 x on CUDA), or float64 when x is float64.
// training: normalises with the batch mean and biased variance and updates the running statistics
//   in place, not recorded by autograd: running = (1 - momentum) * running + momentum * batch,
//   with the unbiased variance for running_var. Needs more than one value per channel.
// eval: normalises with the running statistics.
// Differentiable in x, weight and bias.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum, double eps);

}  // namespace kestrel::ops
