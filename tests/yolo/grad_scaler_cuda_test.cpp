// The fp16 loss scaler on a GPU (skipped without one): float16 gradients of a scaled loss are
// unscaled exactly (the scale is a power of two), an inf or NaN gradient found by the device's
// fused unscale skips the step (parameters untouched) and halves the scale, good steps grow it
// after the interval, and a set device skip flag skips the step without any inf.
#include <limits>

#include "engine/ops/elementwise.h"
#include "engine/ops/reduce.h"
#include "tests/support/testing.h"
#include "yolo/grad_scaler.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

const Device kGpu = Device::cuda(0);

// One float32 master parameter on the GPU; the loss is computed in float16 as under --amp fp16.
struct OneParam {
  Tensor p = Tensor::from_vector<float>({1.0f, -2.0f, 0.5f}, {3}).to(kGpu).set_requires_grad();
  Tensor x = Tensor::from_vector<float>({0.5f, 0.25f, -1.0f}, {3}).to(DType::F16).to(kGpu);
  Optimizer opt;
  OneParam() : opt(OptimizerKind::SGD, make_groups(p)) {}
  static std::vector<ParamGroup> make_groups(const Tensor& p) {
    std::vector<ParamGroup> g(1);
    g[0].lr = g[0].initial_lr = 0.1;
    g[0].momentum = 0.0;
    g[0].params.push_back({"p", p, false});
    return g;
  }
  // d loss / d p = x (exact in float16, and times the power-of-two scale too).
  Tensor loss() const { return ops::sum_all(ops::mul(p.to(DType::F16), x)).to(DType::F32); }
};

}  // namespace

TEST(GradScalerCuda, UnscalesExactlyAndSteps) {
  KESTREL_SKIP_WITHOUT_CUDA();
  OneParam s;
  GradScaler scaler(true, 1024.0);
  scaler.scale(s.loss()).backward();
  EXPECT_EQ(s.p.grad().to_vector<float>(), (std::vector<float>{512.0f, 256.0f, -1024.0f}));
  scaler.unscale(s.opt);
  EXPECT_EQ(s.p.grad().to_vector<float>(), (std::vector<float>{0.5f, 0.25f, -1.0f}));
  EXPECT_TRUE(scaler.step(s.opt));
  scaler.update();
  EXPECT_EQ(s.p.to_vector<float>(), (std::vector<float>{1.0f - 0.1f * 0.5f, -2.0f - 0.1f * 0.25f,
                                                        0.5f + 0.1f * 1.0f}));
}

TEST(GradScalerCuda, NonFiniteGradientSkipsAndBacksOff) {
  KESTREL_SKIP_WITHOUT_CUDA();
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    OneParam s;
    GradScaler scaler(true);
    scaler.scale(s.loss()).backward();
    s.p.grad().slice(0, 1, 2).fill_(bad);  // an overflowed fp16 gradient, on the device
    EXPECT_FALSE(scaler.step(s.opt));
    scaler.update();
    EXPECT_EQ(s.p.to_vector<float>(), (std::vector<float>{1.0f, -2.0f, 0.5f}));
    EXPECT_EQ(scaler.skipped_steps(), 1);
    EXPECT_EQ(scaler.scale_value(), 32768.0);
  }
}

TEST(GradScalerCuda, GrowsAfterTheIntervalAndHonoursTheSkipFlag) {
  KESTREL_SKIP_WITHOUT_CUDA();
  OneParam s;
  GradScaler scaler(true, 1024.0, 2.0, 0.5, 2);
  for (int i = 0; i < 2; ++i) {
    s.opt.zero_grad();
    scaler.scale(s.loss()).backward();
    EXPECT_TRUE(scaler.step(s.opt));
    scaler.update();
  }
  EXPECT_EQ(scaler.scale_value(), 2048.0);
  const std::vector<float> before = s.p.to_vector<float>();
  s.opt.zero_grad();
  scaler.scale(s.loss()).backward();
  EXPECT_TRUE(scaler.step(s.opt, Tensor::ones({1}, DType::F32, kGpu)));  // issued, then skipped
  scaler.update();
  EXPECT_EQ(s.p.to_vector<float>(), before);
}
