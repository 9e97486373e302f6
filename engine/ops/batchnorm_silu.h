// silu(batch_norm(x)) as one op: the end of every YOLOv5 Conv block in training.
#pragma once
#include "engine/tensor.h"

namespace kestrel::ops {

// The same arguments, results, running-statistics update and gradients as
// silu(batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps,
// batches_tracked)).
// On the CPU one fused pass forward and one fused reduction backward, and the normalised z is not
// kept for the backward pass (it is recomputed from x): one activation-sized tensor less per
// block. On CUDA the two ops run as they are.
Tensor batch_norm_silu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var, bool training,
                       double momentum, double eps, const Tensor& batches_tracked = Tensor());

}  // namespace kestrel::ops
