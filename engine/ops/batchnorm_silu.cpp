#include "engine/ops/batchnorm_silu.h"

#include "engine/autograd.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/launch.h"
#include "engine/ops/elementwise.h"
#include "engine/profiler.h"
#include "kernels/batchnorm_silu.h"

namespace kestrel::ops {
namespace {

kernels::BatchNormShape shape_of(const Tensor& x) { return {x.numel() / x.size(3), x.size(3)}; }

struct BatchNormSiluBackward : autograd::Node, bn_steps::SavedForward {
  autograd::SavedTensor bias;  // silu'(z) needs z, so the bias too

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor xs = x.unpack(), w = weight.unpack(), b = bias.unpack();
    const Tensor mu = mean.unpack(), v = var.unpack(), n = count.unpack();
    const Tensor dy = bn_steps::checked_grad(grads[0], xs, "batch_norm_silu");
    if (xs.dtype() == DType::BF16) return apply_bf16(dy, xs, w, b, mu, v, n);
    const kernels::BatchNormShape s = shape_of(xs);
    // g = dy * silu'(z) and BN's sums over it in one pass; g's buffer then becomes dx in place.
    Tensor g = Tensor::empty_like(xs);
    Tensor sums = Tensor::empty({2 * s.channels}, mu.dtype());
    if (xs.numel() > 0)
      kernels::batch_norm_silu_backward_reduce_cpu(xs.dtype(), dy.data_ptr(), xs.data_ptr(), s,
                                                   mu.data_ptr(), v.data_ptr(), w.data_ptr(),
                                                   b.data_ptr(), eps, g.data_ptr(),
                                                   sums.data_ptr());
    else
      sums.zero_();
    const bool training = n.defined();
    Tensor dx;
    if (next_edges[0].fn) {
      if (xs.numel() > 0)
        kernels::batch_norm_backward_apply_cpu(xs.dtype(), g.data_ptr(), xs.data_ptr(), s,
                                               mu.data_ptr(), v.data_ptr(), w.data_ptr(), eps,
                                               training ? sums.data_ptr() : nullptr,
                                               training ? n.data_ptr() : nullptr, g.data_ptr());
      dx = g;
    }
    const bn_steps::ParamGrads d = bn_steps::param_grads(
        sums, s.channels, next_edges[1].fn != nullptr, next_edges[2].fn != nullptr);
    return {dx, d.weight, d.bias};
  }
  // bfloat16 activations: sums and dx in one kernel call (g recomputed, not stored).
  std::vector<Tensor> apply_bf16(const Tensor& dy, const Tensor& xs, const Tensor& w, const Tensor& b,
                                 const Tensor& mu, const Tensor& v, const Tensor& n) {
    const kernels::BatchNormShape s = shape_of(xs);
    Tensor sums = Tensor::empty({2 * s.channels}, DType::F32);
    Tensor dx = next_edges[0].fn ? Tensor::empty_like(xs) : Tensor();
    if (xs.numel() > 0)
      kernels::batch_norm_silu_backward_cpu_bf16(
          static_cast<const uint16_t*>(dy.data_ptr()), static_cast<const uint16_t*>(xs.data_ptr()), s,
          mu.data<float>(), v.data<float>(), w.data<float>(), b.data<float>(), eps,
          n.defined() ? n.data<float>() : nullptr, sums.data<float>(),
          dx.defined() ? static_cast<uint16_t*>(dx.data_ptr()) : nullptr);
    else
      sums.zero_();
    const bn_steps::ParamGrads d = bn_steps::param_grads(
        sums, s.channels, next_edges[1].fn != nullptr, next_edges[2].fn != nullptr);
    return {dx, d.weight, d.bias};
  }
  void release_saved() override {
    release();
    bias.release();
  }
  std::string name() const override { return "BatchNormSiluBackward"; }
};

// The CPU's fused forward, recording BatchNormSiluBackward.
Tensor fused_cpu(const Tensor& x_, const Tensor& weight_, const Tensor& bias_,
                 const Tensor& running_mean, const Tensor& running_var, bool training,
                 double momentum, double eps, const Tensor& batches_tracked) {
  const profiler::Scope timed("BatchNormSilu", profiler::Phase::Forward);
  bn_steps::check_args(x_, weight_, bias_, running_mean, running_var, training, momentum, eps);
  const Tensor x = x_.contiguous(), weight = weight_.contiguous(), bias = bias_.contiguous();
  const bn_steps::Statistics st =
      bn_steps::statistics(x, running_mean, running_var, training, momentum, batches_tracked);
  Tensor y = Tensor::empty_like(x);
  if (x.numel() > 0)
    kernels::batch_norm_silu_forward_cpu(x.dtype(), x.data_ptr(), shape_of(x), st.mean.data_ptr(),
                                         st.var.data_ptr(), weight.data_ptr(), bias.data_ptr(),
                                         eps, y.data_ptr());
  if (auto node = autograd::make_node<BatchNormSiluBackward>({&x_, &weight_, &bias_})) {
    node->save(x, weight, st, eps);
    node->bias = autograd::SavedTensor(bias);
    autograd::set_history(y, node);
  }
  return y;
}

}  // namespace

Tensor batch_norm_silu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var, bool training,
                       double momentum, double eps, const Tensor& batches_tracked) {
  // CUDA runs the two ops, each with its own kernels and backward.
  return launch(
      x.device(),
      [&] {
        return fused_cpu(x, weight, bias, running_mean, running_var, training, momentum, eps,
                         batches_tracked);
      },
      [&](cudaStream_t) {
        return silu(batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps,
                               batches_tracked));
      });
}

}  // namespace kestrel::ops
