#include "layers/classify.h"

#include <cmath>

#include "engine/ops/concat.h"
#include "engine/ops/conv.h"
#include "engine/ops/dropout.h"
#include "engine/ops/reduce.h"

namespace kestrel::layers {

Linear::Linear(int64_t in, int64_t out, Generator& gen) : in_features(in), out_features(out) {
  KESTREL_CHECK(in > 0 && out > 0, "Linear(", in, ", ", out, "): feature counts must be positive");
  init(gen, Device::cpu());
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

void Linear::init(Generator& gen, Device device) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = Tensor::empty({out_features, in_features}, DType::F32, device);
  gen.fill_uniform(weight, -bound, bound);
  weight.set_requires_grad();
  bias = Tensor::empty({out_features}, DType::F32, device);
  gen.fill_uniform(bias, -bound, bound);
  bias.set_requires_grad();
}

void Linear::reset(int64_t out, Generator& gen) {
  KESTREL_CHECK(out > 0, "Linear::reset: output count must be positive, got ", out);
  out_features = out;
  init(gen, weight.device());
}

Tensor Linear::forward(const Tensor& x) {
  KESTREL_CHECK(x.dim() == 2 && x.size(1) == in_features, "Linear(", in_features, ", ",
                out_features, "): input must be [batch, ", in_features, "], got ", x.describe());
  Tensor w = weight, b = bias;
  if (x.dtype() != w.dtype()) {  // mixed precision: compute in the activations' type
    w = w.to(x.dtype());
    b = b.to(x.dtype());
  }
  // [B, in] as NHWC [B, 1, 1, in] against an OHWI [out, 1, 1, in] filter: a GEMM.
  const Tensor y = ops::conv2d(x.reshape({x.size(0), 1, 1, in_features}),
                               w.reshape({out_features, 1, 1, in_features}), b,
                               ops::Conv2dParams{});
  return y.reshape({x.size(0), out_features});
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  KESTREL_CHECK(x.dim() == 4, "AdaptiveAvgPool2d: input must be NHWC [batch, height, width, ",
                "channels], got ", x.describe());
  return ops::mean(x, {1, 2});
}

Dropout::Dropout(double p, uint64_t seed) : p(p), generator(seed) {
  KESTREL_CHECK(p >= 0.0 && p <= 1.0, "Dropout: probability must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p == 0.0) return x;
  return ops::dropout(x, p, generator);
}

Classify::Classify(int64_t c1, int64_t c2, Generator& gen, int64_t k, int64_t s,
                   std::optional<int64_t> p) {
  KESTREL_CHECK(c1 > 0 && c2 > 0, "Classify(", c1, ", ", c2, "): channels and classes must be ",
                "positive");
  conv = register_module("conv", std::make_shared<Conv>(c1, kHiddenChannels, k, s, p, gen));
  // The reference adds this head to a built model (ClassificationModel._from_detection_model), after
  // initialize_weights() set every other BatchNorm to eps 1e-3 and momentum 0.03: its own keeps
  // PyTorch's defaults.
  conv->bn->eps = 1e-5;
  conv->bn->momentum = 0.1;
  pool = register_module("pool", std::make_shared<AdaptiveAvgPool2d>());
  drop = register_module("drop", std::make_shared<Dropout>(0.0));
  linear = register_module("linear", std::make_shared<Linear>(kHiddenChannels, c2, gen));
}

Tensor Classify::forward(const Tensor& x) {
  return linear->forward(drop->forward(pool->forward(conv->forward(x))));
}

Tensor Classify::forward(const std::vector<Tensor>& xs) {
  KESTREL_CHECK(!xs.empty(), "Classify: no inputs");
  return forward(xs.size() == 1 ? xs[0] : ops::concat(xs, -1));
}

bool Classify::set_classes(int64_t classes, Generator& gen) {
  if (classes == linear->out_features) return false;
  linear->reset(classes, gen);
  return true;
}

}  // namespace kestrel::layers
