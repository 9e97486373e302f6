#include "layers/conv.h"

#include <cmath>

#include "engine/autograd.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/batchnorm_silu.h"
#include "engine/ops/conv.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/fold_bn.h"

namespace kestrel::layers {
namespace {

// bfloat16 activations on the CPU (its --amp bf16, and val's and detect's --half there): the
// convolution takes the float32 weights as they are, rounded by its filter reorder, and in
// training gives the float32 weights their gradients directly (CUDA casts them to the activations'
// type instead, through an autograd cast).
bool cpu_bf16(const Tensor& x) { return x.device().is_cpu() && x.dtype() == DType::BF16; }

bool cpu_bf16_inference(const Tensor& x) { return cpu_bf16(x) && !autograd::grad_enabled(); }

}  // namespace

Conv2d::Conv2d(int64_t c1, int64_t c2, int64_t k, int64_t s, int64_t p, bool with_bias,
               Generator& gen)
    : in_channels(c1), out_channels(c2), kernel(k), stride(s), padding(p) {
  KESTREL_CHECK(c1 > 0 && c2 > 0 && k > 0 && s > 0 && p >= 0, "Conv2d(", c1, ", ", c2, ", k=", k,
                ", s=", s, ", p=", p, "): channels, kernel and stride must be positive");
  const double bound = 1.0 / std::sqrt(static_cast<double>(c1 * k * k));
  weight = Tensor::empty({c2, k, k, c1});
  gen.fill_uniform(weight, -bound, bound);
  weight.set_requires_grad();
  register_parameter("weight", &weight, /*ohwi_conv_weight=*/true);
  if (with_bias) {
    bias = Tensor::empty({c2});
    gen.fill_uniform(bias, -bound, bound);
    bias.set_requires_grad();
    register_parameter("bias", &bias);
  }
}

Tensor Conv2d::forward(const Tensor& x) { return forward_with(x, weight, bias); }

Tensor Conv2d::forward_with(const Tensor& x, Tensor w, Tensor b) {
  // Inference on the CPU's bfloat16 activations (the Detect head's convolutions): the float32
  // weights as they are, rounded by the convolution's filter reorder.
  if (cpu_bf16_inference(x)) return forward_inference(x, w, b, ops::ConvActivation::None, kernels::kUncachedWeights);
  if (x.dtype() != w.dtype() && !cpu_bf16(x)) {  // mixed precision: compute in the activations' type
    w = w.to(x.dtype());
    if (b.defined()) b = b.to(x.dtype());
  }
  ops::Conv2dParams params{stride, stride, padding, padding};
  params.operands = operands;
  params.allow_tf32 = allow_tf32;
  params.deterministic = deterministic;
  Tensor y = ops::conv2d(x, w, b, params);
  last_macs_ = y.numel() * in_channels * kernel * kernel;
  return y;
}

Tensor Conv2d::forward_inference(const Tensor& x, Tensor w, Tensor b, ops::ConvActivation act,
                                 kernels::WeightVersion version) {
  if (x.dtype() != w.dtype() && !cpu_bf16(x)) {  // mixed precision: compute in the activations' type
    w = w.to(x.dtype());
    if (b.defined()) b = b.to(x.dtype());
    version = kernels::kUncachedWeights;
  }
  ops::Conv2dParams params{stride, stride, padding, padding};
  params.allow_tf32 = allow_tf32;  // training's --tf32 and --deterministic reach its validation too
  params.deterministic = deterministic;
  Tensor y = ops::conv2d_inference(x, w, b, params, act, version);
  last_macs_ = y.numel() * in_channels * kernel * kernel;
  return y;
}

BatchNorm2d::BatchNorm2d(int64_t channels, double eps, double momentum)
    : eps(eps), momentum(momentum) {
  weight = Tensor::ones({channels}).set_requires_grad();
  bias = Tensor::zeros({channels}).set_requires_grad();
  running_mean = Tensor::zeros({channels});
  running_var = Tensor::ones({channels});
  num_batches_tracked = Tensor::zeros({}, DType::I64);
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
  register_buffer("running_mean", &running_mean);
  register_buffer("running_var", &running_var);
  register_buffer("num_batches_tracked", &num_batches_tracked);
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  if (norm_)
    return norm_(x, weight, bias, running_mean, running_var, is_training(), momentum, eps,
                num_batches_tracked);
  return ops::batch_norm(x, weight, bias, running_mean, running_var, is_training(), momentum, eps,
                         num_batches_tracked);
}

Tensor BatchNorm2d::forward_silu(const Tensor& x) {
  if (norm_) return ops::silu(forward(x));
  return ops::batch_norm_silu(x, weight, bias, running_mean, running_var, is_training(), momentum,
                              eps, num_batches_tracked);
}

Conv::Conv(int64_t c1, int64_t c2, int64_t k, int64_t s, std::optional<int64_t> p, Generator& gen) {
  conv = register_module("conv", std::make_shared<Conv2d>(c1, c2, k, s, p.value_or(k / 2), false, gen));
  bn = register_module("bn", std::make_shared<BatchNorm2d>(c2, 1e-3, 0.03));
}

Conv::Folded Conv::fold() const {
  const ops::FoldedConv f = ops::fold_batch_norm(conv->weight, bn->weight, bn->bias,
                                                 bn->running_mean, bn->running_var, bn->eps);
  return {f.weight, f.bias, kernels::kUncachedWeights};
}

void Conv::fuse() {
  fused_ = fold();
  fused_->version = kernels::conv2d_dnnl_new_weight_version();
}

// Inference (eval mode without gradients) folds BN into the convolution and applies SiLU in the
// convolution's pass, as the reference's val and detect run a fused model: two passes over the
// activations fewer. Training, and eval that tracks gradients, run conv -> fused BN + SiLU.
Tensor Conv::forward(const Tensor& x) {
  if (is_training()) unfuse();  // weights are about to change
  if (is_training() || autograd::grad_enabled()) return bn->forward_silu(conv->forward(x));
  if (fused_ && fused_->weight.device() != conv->weight.device()) fuse();
  const Folded f = fused_ ? *fused_ : fold();
  return conv->forward_inference(x, f.weight, f.bias, ops::ConvActivation::Silu, f.version);
}

void fuse_convs(Module& m) {
  m.visit([](Module& child) {
    if (auto* c = dynamic_cast<Conv*>(&child)) c->fuse();
  });
}

void set_conv_operands(Module& m, ops::ConvOperands operands) {
  m.visit([operands](Module& child) {
    if (auto* c = dynamic_cast<Conv2d*>(&child)) c->operands = operands;
  });
}

void set_conv_math(Module& m, bool allow_tf32, bool deterministic) {
  m.visit([=](Module& child) {
    if (auto* c = dynamic_cast<Conv2d*>(&child)) {
      c->allow_tf32 = allow_tf32;
      c->deterministic = deterministic;
    }
  });
}

void set_batch_norm(Module& m, const BatchNorm2d::NormFn& norm) {
  m.visit([&norm](Module& child) {
    if (auto* bn = dynamic_cast<BatchNorm2d*>(&child)) bn->norm_ = norm;
  });
}

void unfuse_convs(Module& m) {
  m.visit([](Module& child) {
    if (auto* c = dynamic_cast<Conv*>(&child)) c->unfuse();
  });
}

}  // namespace kestrel::layers
