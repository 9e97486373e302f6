// Batch normalisation of NHWC activations, per channel over N, H and W.
#pragma once
#include "engine/autograd.h"
#include "engine/tensor.h"
#include "kernels/batchnorm.h"

namespace kestrel::ops {

// PyTorch's F.batch_norm on x [N, H, W, C] (YOLOv5 uses eps 1e-3, momentum 0.03).
// weight, bias, running_mean and running_var are [C] and contiguous, float32 (master precision,
// also for float16/bfloat16 x on CUDA), or float64 when x is float64.
// training: normalises with the batch mean and biased variance and updates the running statistics
//   in place, not recorded by autograd: running = (1 - momentum) * running + momentum * batch,
//   with the unbiased variance for running_var. Needs more than one value per channel.
// eval: normalises with the running statistics.
// batches_tracked (optional): BatchNorm's num_batches_tracked, an int64 scalar on x's device that
//   training advances by one on the device, in the running statistics' update (no host access, so
//   a CUDA graph replay counts its batches as an eager step does).
// Differentiable in x, weight and bias.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum, double eps, const Tensor& batches_tracked = Tensor());

// The steps of batch norm on packed per-channel buffers, for SyncBN (dist/sync_batchnorm.cpp),
// which inserts collectives between them. Not recorded by autograd. x is NHWC; statistics are
// float32 (float64 for float64 x); moments are packed [count, mean[C], biased var[C]].
namespace bn_steps {
// Statistics and parameters are float32 next to any activation dtype except float64 (gradcheck).
DType param_dtype(DType x);
// An NHWC activation as BN's (rows, channels).
kernels::BatchNormShape shape_of(const Tensor& x);
// The checks batch_norm makes of its arguments; a kestrel::Error naming the problem and the fix.
void check_args(const Tensor& x, const Tensor& weight, const Tensor& bias,
                const Tensor& running_mean, const Tensor& running_var, bool training,
                double momentum, double eps);
Tensor local_moments(const Tensor& x);
// The moments of `ranks` ranks, gathered end to end ([ranks * (1 + 2C)]), merged into the packed
// moments of their union (counts added, means and variances combined without cancellation).
Tensor merge_moments(const Tensor& gathered, int64_t ranks, int64_t channels);
// The statistics a forward pass normalises with. Training: the batch's mean and biased variance
// (slices of one moments buffer) and its row count, after updating the running statistics.
// Eval: copies of the running statistics (later training steps change those in place, and a
// backward pass needs the values used), count undefined.
struct Statistics {
  Tensor mean, var, count;
};
Statistics statistics(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                      bool training, double momentum, const Tensor& batches_tracked = Tensor());
Tensor normalize(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& weight,
                 const Tensor& bias, double eps);
// Also advances batches_tracked (see batch_norm) when it is defined.
void update_running(const Tensor& moments, double momentum, const Tensor& running_mean,
                    const Tensor& running_var, const Tensor& batches_tracked = Tensor());
// [sum(dy)[C], sum(dy * xhat)[C]]
Tensor backward_reduce(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& var,
                       double eps);
// sums and count undefined: eval-mode statistics, constants for the gradient.
Tensor backward_apply(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& var,
                      const Tensor& weight, double eps, const Tensor& sums, const Tensor& count);
// What a batch-norm backward node keeps of its forward pass: x, the weight, the statistics it
// normalised with and eps.
struct SavedForward {
  autograd::SavedTensor x, weight, mean, var;
  autograd::SavedTensor count;  // training only: the rows the batch statistics cover
  double eps = 0;
  void save(const Tensor& x_in, const Tensor& weight_in, const Statistics& st, double eps_in);
  void release();
};
// A backward node's checks of the incoming gradient: dy, made contiguous, of x's dtype and shape.
Tensor checked_grad(const Tensor& grad, const Tensor& x, const char* op);
// The weight and bias gradients as slices of backward_reduce's sums (undefined where not wanted).
struct ParamGrads {
  Tensor weight, bias;
};
ParamGrads param_grads(const Tensor& sums, int64_t channels, bool want_weight, bool want_bias);
}  // namespace bn_steps

}  // namespace kestrel::ops
