// Synchronised batch norm: ops::batch_norm with the batch statistics of every rank's batch.
//
// Forward (training): local packed moments [count, mean[C], var[C]] -> all_gather -> Chan merge
// (stable for large means, unlike a sum of squares) -> normalise with the global mean and biased
// variance; the running statistics take the global unbiased variance. Backward: local
// [sum(dy), sum(dy * xhat)] -> one all_reduce(sum) -> dx with the global count. The weight and
// bias gradients are the local sums: they are per-rank gradients like any other parameter's and
// the Reducer averages them. Eval mode: running statistics, no communication.
//
// Every rank must call it in the same order (the collectives of forward and backward pair up
// across ranks). x is NHWC [N, H, W, C] on the CPU (float32/float64, Gloo) or CUDA (float32,
// float16, bfloat16; NCCL, or Gloo staging through host memory); parameters and statistics as for
// ops::batch_norm. A rank may hold an empty batch (N = 0) as long as some rank holds data.
#pragma once
#include <memory>

#include "dist/process_group.h"
#include "engine/tensor.h"

namespace kestrel::dist {

Tensor sync_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var, bool training,
                       double momentum, double eps, const std::shared_ptr<ProcessGroup>& group,
                       const Tensor& batches_tracked = Tensor());

}  // namespace kestrel::dist
