// The fp16 loss scaler: pass-through when disabled; scale and unscale; a step with an injected
// inf is skipped (parameters untouched), counted, and halves the scale; growth after the interval.
#include <limits>

#include "engine/ops/elementwise.h"
#include "engine/ops/reduce.h"
#include "tests/support/testing.h"
#include "yolo/grad_scaler.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

struct OneParam {
  Tensor p = Tensor::from_vector<float>({1.0f, -2.0f}, {2}).set_requires_grad();
  Tensor x = Tensor::from_vector<float>({0.5f, 0.25f}, {2});
  Optimizer opt;
  OneParam() : opt(OptimizerKind::SGD, make_groups(p)) {}
  static std::vector<ParamGroup> make_groups(const Tensor& p) {
    std::vector<ParamGroup> g(1);
    g[0].lr = g[0].initial_lr = 0.1;
    g[0].momentum = 0.0;
    g[0].params.push_back({"p", p, false});
    return g;
  }
  Tensor loss() const { return ops::sum_all(ops::mul(p, x)); }  // d loss / d p = x
};

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
  scaler.update();
  EXPECT_EQ(s.p.to_vector<float>()[1], -2.0f - 0.1f * 0.25f);
  EXPECT_EQ(scaler.scale_value(), 65536.0);
  EXPECT_EQ(scaler.state().growth_tracker, 1);
  EXPECT_THROW(scaler.update(), Error);  // no step since the last update
}

TEST(GradScaler, InfSkipsTheStepCountsItAndBacksOff) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    OneParam s;
    GradScaler scaler(true);
    scaler.scale(s.loss()).backward();
    s.p.grad().data<float>()[1] = bad;  // an overflowed fp16 gradient
    EXPECT_FALSE(scaler.step(s.opt));   // unscales itself, finds the inf, skips
    scaler.update();
    EXPECT_EQ(s.p.to_vector<float>(), (std::vector<float>{1.0f, -2.0f}));
    EXPECT_EQ(scaler.skipped_steps(), 1);
    EXPECT_EQ(scaler.scale_value(), 32768.0);
    EXPECT_EQ(scaler.state().growth_tracker, 0);
  }
}

TEST(GradScaler, GrowsAfterTheInterval) {
  OneParam s;
  GradScaler scaler(true, 1024.0, 2.0, 0.5, 3);
  for (int i = 0; i < 3; ++i) {
    s.opt.zero_grad();
    scaler.scale(s.loss()).backward();
    EXPECT_TRUE(scaler.step(s.opt));
    scaler.update();
    EXPECT_EQ(scaler.scale_value(), i < 2 ? 1024.0 : 2048.0) << i;
  }
  EXPECT_EQ(scaler.state().growth_tracker, 0);
  EXPECT_EQ(scaler.skipped_steps(), 0);
  EXPECT_THROW(GradScaler(true, 0.0), Error);
}
