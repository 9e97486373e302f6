// ModelEMA: the decay ramp at chosen update counts, the averaged values of parameters and BN
// buffers (integer buffers untouched), the EMA copy's mode and gradient flags, and the update
// count kept on the model's device (advanced by the kernel, left alone by a skipped update).
#include <cmath>

#include "engine/autograd.h"
#include "engine/ops/elementwise.h"
#include "layers/conv.h"
#include "tests/support/testing.h"
#include "yolo/train/ema.h"

using namespace kestrel;
using namespace kestrel::yolo;

TEST(Ema, DecayCurve) {
  Generator g1(1), g2(2);
  layers::Conv model(3, 4, 3, 1, std::nullopt, g1);
  ModelEma ema(std::make_shared<layers::Conv>(3, 4, 3, 1, std::nullopt, g2), model);
  EXPECT_DOUBLE_EQ(ema.decay_at(1), 0.9999 * (1 - std::exp(-1.0 / 2000)));
  EXPECT_NEAR(ema.decay_at(1), 4.998250e-4, 1e-9);     // ≈ 0.9999 / 2000, barely averaging
  EXPECT_NEAR(ema.decay_at(2000), 0.6320573468, 1e-10);  // 0.9999 (1 - 1/e)
  EXPECT_NEAR(ema.decay_at(10000), 0.9931627268, 1e-10);  // 0.9999 (1 - e^-5)
  EXPECT_NEAR(ema.decay_at(1000000), 0.9999, 1e-12);
}

TEST(Ema, CopiesThenAveragesFloatState) {
  Generator g1(1), g2(2);
  layers::Conv model(3, 4, 3, 1, std::nullopt, g1);
  auto copy = std::make_shared<layers::Conv>(3, 4, 3, 1, std::nullopt, g2);
  ModelEma ema(copy, model, 1999);
  EXPECT_FALSE(copy->is_training());
  EXPECT_FALSE(copy->conv->weight.requires_grad());
  EXPECT_EQ(copy->conv->weight.to_vector<float>(), model.conv->weight.to_vector<float>());

  // Move the model: new weights, and a training forward that moves the BN statistics.
  const std::vector<float> e_w = copy->conv->weight.to_vector<float>();
  const std::vector<float> e_rm = copy->bn->running_mean.to_vector<float>();
  {
    autograd::NoGradGuard no_grad;
    model.conv->weight.copy_(ops::mul(model.conv->weight, 3.0));
    model.forward(kestrel::testing::random_tensor({2, 5, 5, 3}, 9, DType::F32));
  }
  model.bn->num_batches_tracked.fill_(7);
  ema.update(model);
  EXPECT_EQ(ema.updates(), 2000);
  const float d = static_cast<float>(ema.decay_at(2000));
  const float omd = static_cast<float>(1.0 - ema.decay_at(2000));
  const std::vector<float> m_w = model.conv->weight.to_vector<float>();
  const std::vector<float> m_rm = model.bn->running_mean.to_vector<float>();
  const std::vector<float> w = copy->conv->weight.to_vector<float>();
  const std::vector<float> rm = copy->bn->running_mean.to_vector<float>();
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(w[i], e_w[i] * d + omd * m_w[i]) << i;
  for (size_t i = 0; i < rm.size(); ++i) EXPECT_EQ(rm[i], e_rm[i] * d + omd * m_rm[i]) << i;
  EXPECT_NE(rm[0], m_rm[0]);
  EXPECT_EQ(copy->bn->num_batches_tracked.item(), 0.0);  // integer buffers are not averaged
}

TEST(Ema, MismatchedArchitectureIsRefused) {
  Generator g1(1), g2(2);
  layers::Conv model(3, 4, 3, 1, std::nullopt, g1);
  EXPECT_THROW(ModelEma(std::make_shared<layers::Conv>(3, 5, 3, 1, std::nullopt, g2), model),
               Error);
  EXPECT_THROW(ModelEma(nullptr, model), Error);
}

// The count lives in device_updates(): the kernel advances it, a skipped update leaves it, and
// updates() / set_updates() read and write it.
TEST(Ema, DeviceCountAdvancesAndSkipLeavesIt) {
  Generator g1(1), g2(2);
  layers::Conv model(3, 4, 3, 1, std::nullopt, g1);
  auto copy = std::make_shared<layers::Conv>(3, 4, 3, 1, std::nullopt, g2);
  ModelEma ema(copy, model, 5);
  EXPECT_EQ(ema.updates(), 5);
  EXPECT_EQ(ema.device_updates().dtype(), DType::I64);
  EXPECT_EQ(ema.device_updates().device(), model.conv->weight.device());
  {
    autograd::NoGradGuard no_grad;
    model.conv->weight.copy_(ops::mul(model.conv->weight, 2.0));
  }
  ema.issue_update(model, Tensor::zeros({1}));
  EXPECT_EQ(ema.updates(), 6);
  const std::vector<float> w = copy->conv->weight.to_vector<float>();
  ema.update(model, Tensor::ones({1}));  // skipped: nothing moves
  EXPECT_EQ(ema.updates(), 6);
  EXPECT_EQ(copy->conv->weight.to_vector<float>(), w);
  ema.update(model);
  EXPECT_EQ(ema.updates(), 7);
  EXPECT_NE(copy->conv->weight.to_vector<float>(), w);
  ema.set_updates(123456789012LL);
  EXPECT_EQ(ema.updates(), 123456789012LL);
  EXPECT_EQ(ema.device_updates().to_vector<int64_t>()[0], 123456789012LL);
  EXPECT_THROW(ema.set_updates(-1), Error);
  EXPECT_THROW(ema.update(model, Tensor::zeros({2})), Error);
}

// The decay the kernel uses at each update of a ramp equals decay_at(updates) (the reference's
// formula): ema = d ema + (1 - d) model with d, 1 - d rounded to float, from the first update on.
TEST(Ema, DecayRampOfTheUpdatesFollowsDecayAt) {
  Generator g1(1), g2(2);
  layers::Conv model(3, 4, 3, 1, std::nullopt, g1);
  auto copy = std::make_shared<layers::Conv>(3, 4, 3, 1, std::nullopt, g2);
  ModelEma ema(copy, model, 0, 0.9999, 3.0);  // a short ramp: d changes a lot per update
  for (int64_t n = 1; n <= 6; ++n) {
    {
      autograd::NoGradGuard no_grad;
      model.conv->weight.copy_(ops::mul(model.conv->weight, 1.5));
    }
    const std::vector<float> before = copy->conv->weight.to_vector<float>();
    const std::vector<float> m = model.conv->weight.to_vector<float>();
    ema.update(model);
    EXPECT_EQ(ema.updates(), n);
    EXPECT_DOUBLE_EQ(ema.decay_at(n), 0.9999 * (1 - std::exp(-static_cast<double>(n) / 3.0)));
    const float d = static_cast<float>(ema.decay_at(n));
    const float omd = static_cast<float>(1.0 - ema.decay_at(n));
    const std::vector<float> w = copy->conv->weight.to_vector<float>();
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_EQ(w[i], before[i] * d + omd * m[i]) << "update " << n << " element " << i;
  }
}
