// The reference's schedule: numpy.interp, the linear and cosine lf, warmup length, the per-
// iteration warmup of lr / momentum / accumulate and LambdaLR's epoch steps, at chosen points
// whose values are worked out by hand in the comments.
#include <cmath>

#include "tests/support/testing.h"
#include "yolo/train/schedule.h"

using namespace kestrel;
using namespace kestrel::yolo;

namespace {

std::vector<ParamGroup> groups(double lr, double momentum) {
  std::vector<ParamGroup> g(3);
  for (int i = 0; i < 3; ++i) {
    g[i].lr = g[i].initial_lr = lr;
    g[i].momentum = momentum;
    const char* names[] = {"p0", "p1", "p2"};
    g[i].params.push_back({names[i], Tensor::zeros({1}).set_requires_grad(), false});
  }
  return g;
}

}  // namespace

TEST(Schedule, InterpAsNumpy) {
  EXPECT_EQ(interp(-1, 0, 10, 2.0, 4.0), 2.0);
  EXPECT_EQ(interp(0, 0, 10, 2.0, 4.0), 2.0);
  EXPECT_EQ(interp(5, 0, 10, 2.0, 4.0), 3.0);
  EXPECT_EQ(interp(10, 0, 10, 0.1, 0.00901), 0.00901);  // the right end exactly
  EXPECT_EQ(interp(11, 0, 10, 2.0, 4.0), 4.0);
}

TEST(Schedule, LinearAndCosineFactors) {
  EXPECT_DOUBLE_EQ(lr_factor(0, 300, 0.01, false), 1.0);
  EXPECT_DOUBLE_EQ(lr_factor(75, 300, 0.01, false), 0.75 * 0.99 + 0.01);
  EXPECT_DOUBLE_EQ(lr_factor(150, 300, 0.01, false), 0.505);
  EXPECT_DOUBLE_EQ(lr_factor(300, 300, 0.01, false), 0.01);
  EXPECT_DOUBLE_EQ(lr_factor(0, 300, 0.01, true), 1.0);
  // (1 - cos(pi/4)) / 2 = 0.146446609..., times -0.99, plus 1
  EXPECT_NEAR(lr_factor(75, 300, 0.01, true), 1 - 0.99 * 0.14644660940672624, 1e-15);
  EXPECT_NEAR(lr_factor(150, 300, 0.01, true), 0.505, 1e-15);
  EXPECT_NEAR(lr_factor(300, 300, 0.01, true), 0.01, 1e-15);  // 1 - 0.99 rounds to 0.01 + 9e-18
}

TEST(Schedule, WarmupLength) {
  EXPECT_EQ(warmup_iterations(3.0, 10), 100);
  EXPECT_EQ(warmup_iterations(3.0, 1000), 3000);
  EXPECT_EQ(warmup_iterations(2.5, 41), 102);  // round(102.5) = 102, halves to even
  EXPECT_EQ(warmup_iterations(2.5, 43), 108);  // round(107.5) = 108
}

TEST(Schedule, WarmupStartMiddleEndSgd) {
  Hyp hyp;  // lr0 0.01, lrf 0.01, momentum 0.937, warmup 3 epochs, 0.8, bias lr 0.1
  Optimizer opt(OptimizerKind::SGD, groups(hyp.lr0, hyp.momentum));
  // 10 epochs, batch 16 (accumulate up to 4), 50 batches: nw = 150.
  LrSchedule s(hyp, 10, false, 16, 50, opt);
  EXPECT_EQ(s.warmup_iterations(), 150);
  EXPECT_EQ(s.accumulate(), 4);
  EXPECT_DOUBLE_EQ(opt.groups()[1].lr, 0.01);  // LambdaLR's construction: lr0 * lf(0)

  s.warmup(0, 0);
  EXPECT_EQ(s.accumulate(), 1);
  EXPECT_DOUBLE_EQ(opt.groups()[0].lr, 0.1);
  EXPECT_DOUBLE_EQ(opt.groups()[1].lr, 0.0);
  EXPECT_DOUBLE_EQ(opt.groups()[2].lr, 0.0);
  EXPECT_DOUBLE_EQ(opt.groups()[1].momentum, 0.8);

  // ni 75 of 150 in epoch 1: target lr0 lf(1) = 0.01 (0.9 * 0.99 + 0.01) = 0.00901.
  s.warmup(75, 1);
  EXPECT_EQ(s.accumulate(), 2);  // round(2.5) = 2
  EXPECT_NEAR(opt.groups()[0].lr, 0.1 + 0.5 * (0.00901 - 0.1), 1e-16);
  EXPECT_NEAR(opt.groups()[1].lr, 0.5 * 0.00901, 1e-16);
  EXPECT_NEAR(opt.groups()[2].momentum, 0.8 + 0.5 * 0.137, 1e-15);

  s.warmup(150, 3);  // the end: lr0 lf(3) = 0.01 (0.7 * 0.99 + 0.01) everywhere
  EXPECT_EQ(s.accumulate(), 4);
  for (const ParamGroup& g : opt.groups()) {
    EXPECT_DOUBLE_EQ(g.lr, 0.01 * (0.7 * 0.99 + 0.01));
    EXPECT_DOUBLE_EQ(g.momentum, 0.937);
  }
  Optimizer::Rates r = opt.rates(0);
  r.lr = 123;
  opt.set_rates(0, r);
  s.warmup(151, 3);  // past the warmup: nothing changes
  EXPECT_EQ(opt.groups()[0].lr, 123);
}

TEST(Schedule, EpochStepsAsLambdaLR) {
  Hyp hyp;
  Optimizer opt(OptimizerKind::SGD, groups(hyp.lr0, hyp.momentum));
  LrSchedule s(hyp, 10, true, 64, 1000, opt);
  s.set_last_epoch(-1);  // the reference's start_epoch - 1
  s.epoch_end();         // after epoch 0: lf(0)
  EXPECT_EQ(s.state().last_epoch, 0);
  EXPECT_DOUBLE_EQ(opt.groups()[2].lr, 0.01);
  s.epoch_end();  // after epoch 1: lf(1), cosine
  EXPECT_NEAR(opt.groups()[2].lr, 0.01 * (1 - 0.99 * (1 - std::cos(M_PI / 10)) / 2), 1e-16);
  s.set_last_epoch(9);
  s.epoch_end();
  EXPECT_NEAR(opt.groups()[0].lr, 0.01 * 0.01, 1e-16);
}

TEST(Schedule, AdamMomentumIsNotWarmedUp) {
  Hyp hyp;
  Optimizer opt(OptimizerKind::Adam, groups(0.001, hyp.momentum));
  LrSchedule s(hyp, 10, false, 16, 50, opt);
  s.warmup(10, 0);
  EXPECT_EQ(opt.groups()[1].momentum, hyp.momentum);  // Adam's groups have betas, no momentum
  EXPECT_NEAR(opt.groups()[1].lr, 10.0 / 150 * 0.001, 1e-18);
}

TEST(Schedule, AccumulationSteps) {
  Hyp hyp;
  Optimizer opt(OptimizerKind::SGD, groups(hyp.lr0, hyp.momentum));
  LrSchedule s(hyp, 10, false, 16, 500, opt);  // nw = 1500, accumulate 4 after it
  EXPECT_FALSE(s.step_due(2));  // 2 - (-1) < 4
  EXPECT_TRUE(s.step_due(3));
  s.record_step(3);
  EXPECT_FALSE(s.step_due(6));
  EXPECT_TRUE(s.step_due(7));
  LrSchedule::State st{4, 3, 7};
  s.load_state(st);
  EXPECT_EQ(s.state().last_epoch, 4);
  EXPECT_EQ(s.accumulate(), 3);
  EXPECT_TRUE(s.step_due(10));
  EXPECT_THROW(LrSchedule(hyp, 0, false, 16, 10, opt), Error);
}
