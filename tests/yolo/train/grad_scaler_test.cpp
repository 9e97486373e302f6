// The fp16 loss scaler on the CPU, whose state lives in CPU tensors by the same code path as on
// CUDA: pass-through when disabled; scale and unscale; a step with an injected inf is skipped on
// the "device" (parameters and momentum untouched), counted, and halves the scale, with no host
// read inside scale/unscale/step/update (HostSyncGuard counts CPU reads as the ones that would
// block on CUDA); growth after the interval; the caller's skip flag skips a finite step; unscaled
// gradients equal the old host formula (scale_grads by float(1 / scale)) bit for bit; the host
// view round-trips through load_state.
#include <cstring>
#include <limits>

#include "engine/host_sync.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/reduce.h"
#include "tests/support/testing.h"
#include "yolo/train/grad_scaler.h"

using namespace kestrel;
using namespace kestrel::yolo;
using kestrel::testing::error_of;

namespace {

struct OneParam {
  Tensor p;
  Tensor x;
  Optimizer opt;
  explicit OneParam(double momentum = 0.0, DType dtype = DType::F32)
      : p(Tensor::from_vector<double>({1.0, -2.0}, {2}).to(dtype).set_requires_grad()),
        x(Tensor::from_vector<double>({0.5, 0.25}, {2}).to(dtype)),
        opt(OptimizerKind::SGD, make_groups(p, momentum)) {}
  static std::vector<ParamGroup> make_groups(const Tensor& p, double momentum) {
    std::vector<ParamGroup> g(1);
    g[0].lr = g[0].initial_lr = 0.1;
    g[0].momentum = momentum;
    g[0].params.push_back({"p", p, false});
    return g;
  }
  Tensor loss() const { return ops::sum_all(ops::mul(p, x)); }  // d loss / d p = x
  Tensor momentum() const { return opt.state_tensors().at(0).second; }
};

// scale, backward, (an injected bad gradient), unscale, step, update: the scaler's calls under a
// guard that throws at the first host read.
void scaled_step(GradScaler& scaler, OneParam& s, float bad_grad = 0.0f,
                 const Tensor& skip = Tensor()) {
  s.opt.zero_grad();
  Tensor scaled;
  {
    HostSyncGuard none(HostSyncGuard::Policy::Throw);
    scaled = scaler.scale(s.loss());
  }
  scaled.backward();
  if (bad_grad != 0.0f) s.p.grad().data<float>()[1] = bad_grad;  // an overflowed fp16 gradient
  HostSyncGuard none(HostSyncGuard::Policy::Throw);
  scaler.unscale(s.opt);
  EXPECT_TRUE(scaler.step(s.opt, skip));  // always issued: the skip is decided on the device
  scaler.update();
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && a.dtype() == b.dtype() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) == 0;
}

}  // namespace

TEST(GradScaler, DisabledPassesThrough) {
  OneParam s;
  GradScaler scaler(false);
  Tensor l = s.loss();
  EXPECT_TRUE(scaler.scale(l).is_same(l));
  scaler.scale(l).backward();
  scaler.unscale(s.opt);
  EXPECT_TRUE(scaler.step(s.opt));
  scaler.update();
  EXPECT_EQ(s.p.to_vector<float>()[0], 1.0f - 0.1f * 0.5f * 1.0f);
  EXPECT_FALSE(scaler.skip_flag().defined());
  scaler.load_state({1024.0, 17, 3});
  EXPECT_EQ(scaler.scale_value(), 1024.0);
  EXPECT_EQ(scaler.state().growth_tracker, 17);
}

TEST(GradScaler, UnscalesBeforeTheStep) {
  OneParam s;
  GradScaler scaler(true);
  EXPECT_EQ(scaler.scale_value(), 65536.0);
  scaler.scale(s.loss()).backward();
  EXPECT_EQ(s.p.grad().to_vector<float>()[0], 0.5f * 65536);
  scaler.unscale(s.opt);
  EXPECT_EQ(s.p.grad().to_vector<float>(), s.x.to_vector<float>());
  EXPECT_THROW(scaler.unscale(s.opt), Error);
  EXPECT_TRUE(scaler.step(s.opt));
  EXPECT_EQ(scaler.skip_flag().item(), 0.0);
  scaler.update();
  EXPECT_EQ(s.p.to_vector<float>()[1], -2.0f - 0.1f * 0.25f);
  EXPECT_EQ(scaler.scale_value(), 65536.0);
  EXPECT_EQ(scaler.state().growth_tracker, 1);
  EXPECT_THROW(scaler.update(), Error);  // no step since the last update
}

TEST(GradScaler, InfSkipsTheStepOnTheDeviceCountsItAndBacksOff) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    OneParam s(0.9);
    GradScaler scaler(true);
    scaled_step(scaler, s, bad);
    EXPECT_EQ(scaler.skip_flag().item(), 1.0);
    EXPECT_EQ(s.p.to_vector<float>(), (std::vector<float>{1.0f, -2.0f}));
    EXPECT_EQ(s.momentum().to_vector<float>(), (std::vector<float>{0.0f, 0.0f}));
    EXPECT_EQ(scaler.skipped_steps(), 1);
    EXPECT_EQ(scaler.scale_value(), 32768.0);
    EXPECT_EQ(scaler.state().growth_tracker, 0);
    // The flag was cleared: the next, finite step applies (PyTorch's first momentum step:
    // buffer = gradient, Nesterov's d = g + 0.9 buffer).
    scaled_step(scaler, s);
    EXPECT_EQ(scaler.skip_flag().item(), 0.0);
    EXPECT_EQ(s.momentum().to_vector<float>(), (std::vector<float>{0.5f, 0.25f}));
    EXPECT_EQ(s.p.to_vector<float>()[0], 1.0f + -0.1f * (0.5f + 0.9f * 0.5f));
    EXPECT_EQ(scaler.skipped_steps(), 1);
    EXPECT_EQ(scaler.state().growth_tracker, 1);
  }
}

TEST(GradScaler, StepUnscalesItselfAndFindsTheInf) {
  OneParam s;
  GradScaler scaler(true);
  scaler.scale(s.loss()).backward();
  s.p.grad().data<float>()[0] = -std::numeric_limits<float>::infinity();
  {
    HostSyncGuard none(HostSyncGuard::Policy::Throw);
    EXPECT_TRUE(scaler.step(s.opt));
    scaler.update();
  }
  EXPECT_EQ(s.p.to_vector<float>(), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

TEST(GradScaler, GrowsAfterTheInterval) {
  OneParam s;
  GradScaler scaler(true, 1024.0, 2.0, 0.5, 3);
  for (int i = 0; i < 3; ++i) {
    scaled_step(scaler, s);
    EXPECT_EQ(scaler.scale_value(), i < 2 ? 1024.0 : 2048.0) << i;
  }
  EXPECT_EQ(scaler.state().growth_tracker, 0);
  EXPECT_EQ(scaler.skipped_steps(), 0);
  EXPECT_THROW(GradScaler(true, 0.0), Error);
}

// Good, good, inf (tracker restarts), then three good steps grow: the old host schedule's scales.
TEST(GradScaler, ScheduleOverMixedSteps) {
  OneParam s;
  GradScaler scaler(true, 1024.0, 2.0, 0.5, 3);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> bad = {0, 0, inf, 0, 0, 0, inf, inf, 0};
  const std::vector<double> scales = {1024, 1024, 512, 512, 512, 1024, 512, 256, 256};
  const std::vector<int64_t> trackers = {1, 2, 0, 1, 2, 0, 0, 0, 1};
  for (size_t i = 0; i < bad.size(); ++i) {
    scaled_step(scaler, s, bad[i]);
    const GradScaler::State st = scaler.state();
    EXPECT_EQ(st.scale, scales[i]) << i;
    EXPECT_EQ(st.growth_tracker, trackers[i]) << i;
  }
  EXPECT_EQ(scaler.skipped_steps(), 3);
}

TEST(GradScaler, CallersSkipFlagSkipsAFiniteStep) {
  OneParam s;
  GradScaler scaler(true, 1024.0);
  for (float value : {1.0f, 2.0f}) {  // a window with one, or two, non-finite losses
    scaled_step(scaler, s, 0.0f, Tensor::full({1}, value));
    EXPECT_EQ(scaler.skip_flag().item(), 1.0);
    EXPECT_EQ(s.p.to_vector<float>(), (std::vector<float>{1.0f, -2.0f}));
  }
  // Not a non-finite gradient: counted as a good step, as before.
  EXPECT_EQ(scaler.skipped_steps(), 0);
  EXPECT_EQ(scaler.state().growth_tracker, 2);
  scaled_step(scaler, s, 0.0f, Tensor::zeros({1}));
  EXPECT_EQ(scaler.skip_flag().item(), 0.0);
  EXPECT_EQ(s.p.to_vector<float>()[0], 1.0f - 0.1f * 0.5f);
  EXPECT_NE(error_of([&] {
              scaler.scale(s.loss()).backward();
              scaler.step(s.opt, Tensor::zeros({1}, DType::F64));
            }).find("one-element float32"),
            std::string::npos);
}

TEST(GradScaler, UnscaledGradientsEqualTheOldFormulaBitwise) {
  for (DType dtype : {DType::F32, DType::F64}) {
    for (double init : {65536.0, 3.0}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::to_string(init));
      const Tensor grad = kestrel::testing::random_tensor({5000}, 3, dtype, -6e4, 6e4);
      Tensor p = Tensor::zeros({5000}, dtype).set_requires_grad();
      Tensor q = Tensor::zeros({5000}, dtype).set_requires_grad();
      Optimizer opt(OptimizerKind::SGD, OneParam::make_groups(p, 0.0));
      p.set_grad(grad.clone());
      q.set_grad(grad.clone());
      GradScaler scaler(true, init);
      scaler.unscale(opt);
      // Before the state moved to the device: scale_grads by 1 / scale rounded to float32.
      scale_grads({q}, static_cast<float>(1.0 / static_cast<float>(init)));
      EXPECT_TRUE(same_bits(p.grad(), q.grad()));
    }
  }
}

TEST(GradScaler, StateRoundTripsBeforeAndAfterPlacement) {
  GradScaler scaler(true);
  scaler.load_state({1024.0, 17, 3});  // before any step: kept until the state is placed
  EXPECT_EQ(scaler.scale_value(), 1024.0);
  EXPECT_EQ(scaler.state().growth_tracker, 17);
  EXPECT_EQ(scaler.skipped_steps(), 3);
  OneParam s;
  scaled_step(scaler, s);
  const void* flag = scaler.skip_flag().data_ptr();
  EXPECT_EQ(s.p.grad().to_vector<float>(), (std::vector<float>{0.5f, 0.25f}));
  EXPECT_EQ(scaler.state().growth_tracker, 18);
  scaler.load_state({0.1, 5, 9});  // rounded to float32, as the device keeps it
  const GradScaler::State st = scaler.state();
  EXPECT_EQ(st.scale, static_cast<double>(0.1f));
  EXPECT_EQ(st.growth_tracker, 5);
  EXPECT_EQ(st.skipped_steps, 9);
  scaled_step(scaler, s, std::numeric_limits<float>::infinity());
  EXPECT_EQ(scaler.skipped_steps(), 10);
  EXPECT_EQ(scaler.skip_flag().data_ptr(), flag);  // the same buffer every step
  EXPECT_NE(error_of([&] { scaler.load_state({-1.0, 0, 0}); }).find("finite scale > 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { scaler.load_state({2.0, -1, 0}); }).find("non-negative"),
            std::string::npos);
}

TEST(GradScaler, Float64LossAndNonScalarLoss) {
  OneParam s(0.0, DType::F64);
  GradScaler scaler(true, 1024.0);
  scaler.scale(s.loss()).backward();
  EXPECT_EQ(s.p.grad().to_vector<double>(), (std::vector<double>{512.0, 256.0}));
  scaler.unscale(s.opt);
  EXPECT_EQ(s.p.grad().to_vector<double>(), (std::vector<double>{0.5, 0.25}));
  const Tensor per_element = scaler.scale(ops::mul(s.p, s.x));  // [2], one scale for both
  EXPECT_EQ(per_element.to_vector<double>(), (std::vector<double>{512.0, -512.0}));
  EXPECT_NE(error_of([&] { scaler.scale(s.loss().to(DType::F16)); }).find("float32"),
            std::string::npos);
}

namespace {

// An unscale and step begun in a CUDA graph capture that failed never ran: restoring the
// snapshot taken before lets the next step unscale and step again, with the scale as it was.
TEST(GradScaler, ARestoredSnapshotForgetsABegunStep) {
  GradScaler scaler(true, 4.0);
  OneParam s;
  const GradScaler::Snapshot before = scaler.snapshot();
  scaler.scale(s.loss()).backward();
  scaler.unscale(s.opt);
  EXPECT_THROW(scaler.unscale(s.opt), Error);
  scaler.restore(before);
  s.opt.zero_grad();
  scaler.scale(s.loss()).backward();
  EXPECT_NO_THROW(scaler.unscale(s.opt));
  EXPECT_TRUE(scaler.step(s.opt));
  scaler.update();
  EXPECT_EQ(scaler.state().scale, 4.0);
  EXPECT_EQ(scaler.state().growth_tracker, 1);
}

}  // namespace

