// The classifier's head, the reference's models.common.Classify (x(b,c1,h,w) -> (b,c2)), and the
// modules it is made of: Linear, AdaptiveAvgPool2d (to 1x1), Dropout. Activations are NHWC.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/random.h"
#include "layers/conv.h"
#include "layers/module.h"

namespace kestrel::layers {

// nn.Linear(in, out): y = x W^T + b on x [B, in] -> [B, out]. weight [out, in] (the reference's
// layout, in memory and in files) and bias [out]. The product runs as a 1x1 convolution of a
// [B, 1, 1, in] NHWC view (ops::conv2d: oneDNN / cuDNN, float64 im2col + BLAS on the CPU).
class Linear : public UnaryModule {
 public:
  // The reference's default initialisation: weight and bias uniform in ±1/sqrt(in), the weight's
  // values drawn from `gen` first, then the bias's (as Conv2d's).
  Linear(int64_t in, int64_t out, Generator& gen);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "torch.nn.modules.linear.Linear"; }

  // A freshly initialised layer of `out` outputs in place of this one's parameters (same in
  // features, same device), drawn from `gen` as the constructor draws: the reference's
  // `m.linear = nn.Linear(m.linear.in_features, n)`. State-dict names stay "weight" and "bias".
  void reset(int64_t out, Generator& gen);

  Tensor weight;  // [out, in]
  Tensor bias;    // [out]
  int64_t in_features, out_features;

 private:
  void init(Generator& gen, Device device);
};

// nn.AdaptiveAvgPool2d(1) followed by flatten(1): the mean over height and width, NHWC
// [B, H, W, C] -> [B, C]. Differentiable (ops::mean).
class AdaptiveAvgPool2d : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override {
    return "torch.nn.modules.pooling.AdaptiveAvgPool2d";
  }
};

// nn.Dropout(p): in training with p > 0, inverted dropout (ops::dropout); the identity in eval
// or at p == 0 (the reference's Classify uses p = 0.0). Its randomness is the module's own
// Generator, seeded at construction (seed, stream 0) and replaceable: a trainer that wants
// per-rank streams assigns `generator = Generator(seed, rank)`. Constructing one draws nothing
// from any other generator, so a model's parameter initialisation is the same with or without it.
class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p, uint64_t seed = 0);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "torch.nn.modules.dropout.Dropout"; }

  double p;
  Generator generator;
};

// Classify(c1, c2, k=1, s=1, p=None): Conv(c1, 1280, k, s, p) (its BatchNorm with PyTorch's
// defaults, eps 1e-5 and momentum 0.1, as the reference's head) -> AdaptiveAvgPool2d(1) -> flatten
// -> Dropout(0.0) -> Linear(1280, c2). Children, in the reference's order and names: conv, pool,
// drop, linear (state dict: conv.conv.weight, conv.bn.{weight, bias, running_mean, running_var,
// num_batches_tracked}, linear.weight, linear.bias). Eval without gradients runs the Conv's fused
// inference path (layers::Conv folds its BN itself).
class Classify : public UnaryModule {
 public:
  static constexpr int64_t kHiddenChannels = 1280;  // the reference's c_ (efficientnet_b0 size)

  Classify(int64_t c1, int64_t c2, Generator& gen, int64_t k = 1, int64_t s = 1,
           std::optional<int64_t> p = std::nullopt);
  // x NHWC [B, H, W, c1] -> logits [B, c2].
  Tensor forward(const Tensor& x) override;
  // The reference's list input: the tensors joined on channels first.
  Tensor forward(const std::vector<Tensor>& xs);
  std::string type_name() const override { return "models.common.Classify"; }

  // The reference's reshape_classifier_output for this head: when the head predicts another count
  // than `classes`, a fresh Linear(1280, classes) drawn from `gen` replaces the old one's
  // parameters. Returns whether it changed.
  bool set_classes(int64_t classes, Generator& gen);
  int64_t classes() const { return linear->out_features; }

  std::shared_ptr<Conv> conv;
  std::shared_ptr<AdaptiveAvgPool2d> pool;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<Linear> linear;
};

}  // namespace kestrel::layers
