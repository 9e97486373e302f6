// The fp16 loss scaler on a GPU (skipped without one): float16 gradients of a scaled loss are
// unscaled exactly (the scale is a power of two), an inf or NaN gradient found by the device's
// fused unscale skips the step on the device (parameters untouched) and halves the scale, good
// steps grow it after the interval, a set device skip flag skips the step without any inf, and a
// whole scaled step (forward, scale, backward, unscale, clip, step, update), finite or not, makes
// no blocking host read: the state and every decision stay on the device.
#include <limits>

#include "engine/host_sync.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/reduce.h"
#include "engine/stream.h"
#include "tests/support/testing.h"
#include "yolo/train/grad_scaler.h"

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
    EXPECT_TRUE(scaler.step(s.opt));       // issued; its kernels read the skip flag
    EXPECT_EQ(scaler.skip_flag().item(), 1.0);
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
  EXPECT_EQ(scaler.skipped_steps(), 0);  // no inf: a good step for the schedule
  EXPECT_EQ(scaler.state().growth_tracker, 1);
}

TEST(GradScalerCuda, ScaledStepMakesNoHostRead) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Stream stream = Stream::create(kGpu);
  StreamGuard on_stream(stream);
  OneParam s;
  GradScaler scaler(true, 1024.0, 2.0, 0.5, 2);
  const Tensor window = Tensor::zeros({1}, DType::F32, kGpu);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> expected = s.p.to_vector<float>();
  const void* flag = nullptr;
  for (int i = 0; i < 5; ++i) {
    const bool bad = i == 2;
    {
      HostSyncGuard none(HostSyncGuard::Policy::Throw);
      s.opt.zero_grad();
      scaler.scale(s.loss()).backward();
      if (bad) s.p.grad().slice(0, 0, 1).fill_(inf);
      scaler.unscale(s.opt);
      clip_grad_norm(s.opt.parameters(), 10.0);
      EXPECT_TRUE(scaler.step(s.opt, window));
      scaler.update();
    }
    if (!flag) flag = scaler.skip_flag().data_ptr();
    EXPECT_EQ(scaler.skip_flag().data_ptr(), flag) << i;  // one buffer, fit for graph capture
    if (!bad) {
      const std::vector<float> g = {0.5f, 0.25f, -1.0f};
      for (size_t k = 0; k < g.size(); ++k) expected[k] -= 0.1f * g[k];
    }
    EXPECT_EQ(s.p.to_vector<float>(), expected) << i;
  }
  // 1024: good, good (2048), inf (1024), good, good (2048).
  EXPECT_EQ(scaler.scale_value(), 2048.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  stream.synchronize();
}
