// The CPU multi-tensor optimizer kernels against hand-computed values (float64, so the only
// differences are roundings of the formulas, < 1e-14) and the textbook forms of the updates.
#include <cmath>
#include <limits>

#include "kernels/optim.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kernels::TensorList;

namespace {

Tensor vec(const std::vector<double>& v) {
  return Tensor::from_vector<double>(v, {static_cast<int64_t>(v.size())});
}

}  // namespace

TEST(OptimKernels, SgdNesterovWithWeightDecayByHand) {
  Tensor p = vec({1.0, -2.0}), g = vec({0.5, 0.25}), buf = vec({0.2, 0.0});
  TensorList list(3);
  list.add({p.data_ptr(), g.data_ptr(), buf.data_ptr()}, 2);
  kernels::sgd_step_cpu(DType::F64, list, {0.1, 0.9, 0.01, true});
  // d = g + wd p; buf = 0.9 buf + d; p -= lr (d + 0.9 buf)
  const double d0 = 0.5 + 0.01 * 1.0, b0 = 0.9 * 0.2 + d0;
  const double d1 = 0.25 + 0.01 * -2.0, b1 = d1;
  EXPECT_NEAR(buf.to_vector<double>()[0], b0, 1e-15);
  EXPECT_NEAR(buf.to_vector<double>()[1], b1, 1e-15);
  EXPECT_NEAR(p.to_vector<double>()[0], 1.0 - 0.1 * (d0 + 0.9 * b0), 1e-15);
  EXPECT_NEAR(p.to_vector<double>()[1], -2.0 - 0.1 * (d1 + 0.9 * b1), 1e-15);
  EXPECT_NEAR(p.to_vector<double>()[0], 0.8869, 1e-14);  // 1 - 0.1 * (0.51 + 0.9 * 0.69)
}

TEST(OptimKernels, SgdPlainMomentumWithoutDecay) {
  Tensor p = vec({1.0}), g = vec({0.5}), buf = vec({0.2});
  TensorList list(3);
  list.add({p.data_ptr(), g.data_ptr(), buf.data_ptr()}, 1);
  kernels::sgd_step_cpu(DType::F64, list, {0.1, 0.9, 0.0, false});
  EXPECT_NEAR(buf.item(), 0.68, 1e-15);
  EXPECT_NEAR(p.item(), 1.0 - 0.068, 1e-15);
}

// Adam in its textbook form: bias-corrected moments, p -= lr m̂ / (sqrt(v̂) + eps).
void textbook_adam(double& p, double& m, double& v, double g, double lr, double b1, double b2,
                   double eps, double wd, bool decoupled, int t) {
  if (decoupled) p *= 1 - lr * wd;
  else g += wd * p;
  m = b1 * m + (1 - b1) * g;
  v = b2 * v + (1 - b2) * g * g;
  const double mh = m / (1 - std::pow(b1, t)), vh = v / (1 - std::pow(b2, t));
  p -= lr * mh / (std::sqrt(vh) + eps);
}

class AdamKernel : public ::testing::TestWithParam<bool> {};

TEST_P(AdamKernel, ThreeStepsMatchTextbookForm) {
  const bool decoupled = GetParam();
  const double lr = 0.01, b1 = 0.937, b2 = 0.999, eps = 1e-8, wd = 0.05;
  Tensor p = vec({0.5, -1.5, 2.0}), m = vec({0, 0, 0}), v = vec({0, 0, 0});
  std::vector<double> ep = p.to_vector<double>(), em(3, 0.0), ev(3, 0.0);
  const double grads[3][3] = {{0.1, -0.2, 0.3}, {0.05, 0.4, -0.1}, {-0.3, 0.0, 0.2}};
  for (int t = 1; t <= 3; ++t) {
    Tensor g = vec({grads[t - 1][0], grads[t - 1][1], grads[t - 1][2]});
    TensorList list(4);
    list.add({p.data_ptr(), g.data_ptr(), m.data_ptr(), v.data_ptr()}, 3);
    kernels::adam_step_cpu(DType::F64, list, {lr, b1, b2, eps, wd, decoupled, t});
    for (int i = 0; i < 3; ++i)
      textbook_adam(ep[i], em[i], ev[i], grads[t - 1][i], lr, b1, b2, eps, wd, decoupled, t);
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(p.to_vector<double>()[i], ep[i], 1e-13) << i;
    EXPECT_NEAR(m.to_vector<double>()[i], em[i], 1e-15) << i;
    EXPECT_NEAR(v.to_vector<double>()[i], ev[i], 1e-15) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AdamAndAdamW, AdamKernel, ::testing::Values(false, true));

TEST(OptimKernels, AdamFirstStepMovesByLr) {
  // With zero moments, step 1 moves every element by lr * g / (|g| + eps) ≈ lr * sign(g).
  Tensor p = vec({0.0, 0.0}), g = vec({3.0, -0.001}), m = vec({0, 0}), v = vec({0, 0});
  TensorList list(4);
  list.add({p.data_ptr(), g.data_ptr(), m.data_ptr(), v.data_ptr()}, 2);
  kernels::adam_step_cpu(DType::F64, list, {0.001, 0.9, 0.999, 1e-8, 0.0, false, 1});
  EXPECT_NEAR(p.to_vector<double>()[0], -0.001, 1e-11);
  EXPECT_NEAR(p.to_vector<double>()[1], 0.001, 1e-8);
  EXPECT_THROW(kernels::adam_step_cpu(DType::F64, list, {0.001, 0.9, 0.999, 1e-8, 0, false, 0}),
               Error);
}

TEST(OptimKernels, GlobalNormOverManyTensors) {
  Tensor a = vec({3.0, 4.0}), b = vec({12.0}), empty = vec({});
  TensorList list(1);
  list.add({a.data_ptr()}, 2);
  list.add({empty.data_ptr()}, 0);
  list.add({b.data_ptr()}, 1);
  EXPECT_DOUBLE_EQ(kernels::global_norm_cpu(DType::F64, list), 13.0);
  Tensor f = Tensor::from_vector<float>({1e20f, 1e20f}, {2});  // squares overflow float, not double
  TensorList lf(1);
  lf.add({f.data_ptr()}, 2);
  const double big = static_cast<double>(1e20f);
  EXPECT_NEAR(kernels::global_norm_cpu(DType::F32, lf), std::sqrt(2.0) * big, 1e-15 * big);
}

TEST(OptimKernels, ClipCoefficient) {
  EXPECT_FLOAT_EQ(kernels::clip_coef(20.0f, 10.0f), 10.0f / (20.0f + 1e-6f));
  EXPECT_EQ(kernels::clip_coef(5.0f, 10.0f), 1.0f);
  EXPECT_TRUE(std::isnan(kernels::clip_coef(std::nanf(""), 10.0f)));
  EXPECT_EQ(kernels::clip_coef(std::numeric_limits<float>::infinity(), 10.0f), 0.0f);
}

TEST(OptimKernels, ScaleFlagsNonFiniteInputs) {
  Tensor a = vec({1.0, -2.0}), b = vec({4.0});
  TensorList list(1);
  list.add({a.data_ptr()}, 2);
  list.add({b.data_ptr()}, 1);
  EXPECT_FALSE(kernels::scale_cpu(DType::F64, list, 0.5));
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(b.item(), 2.0);
  b.fill_(std::numeric_limits<double>::infinity());
  EXPECT_TRUE(kernels::scale_cpu(DType::F64, list, 1.0));
  b.fill_(std::nan(""));
  EXPECT_TRUE(kernels::scale_cpu(DType::F64, list, 1.0));
}

TEST(OptimKernels, EmaUpdateByHand) {
  Tensor e = Tensor::from_vector<float>({1.0f, 2.0f}, {2});
  Tensor m = Tensor::from_vector<float>({3.0f, -2.0f}, {2});
  TensorList list(2);
  list.add({e.data_ptr(), m.data_ptr()}, 2);
  kernels::ema_update_cpu(DType::F32, list, 0.75);
  EXPECT_EQ(e.to_vector<float>(), (std::vector<float>{0.75f * 1 + 0.25f * 3, 0.75f * 2 - 0.25f * 2}));
}

TEST(OptimKernels, BadListsAreRefused) {
  Tensor a = vec({1.0});
  TensorList list(2);
  EXPECT_THROW(list.add({a.data_ptr()}, 1), Error);
  EXPECT_THROW(list.add({a.data_ptr(), a.data_ptr()}, -1), Error);
  TensorList one(1);
  one.add({a.data_ptr()}, 1);
  EXPECT_THROW(kernels::scale_cpu(DType::F16, one, 1.0), Error);  // CPU: float/double only
}

TEST(OptimKernels, LaunchPlanCoversEveryChunkOnceWithinTheLimits) {
  // An empty tensor, short tails, a tensor longer than one launch's blocks, and more tensors
  // than one launch holds (pointers are never read by the plan).
  std::vector<int64_t> sizes = {1000, 0, 1, kernels::kListChunk + 1, 3 * kernels::kListChunk,
                                (kernels::kMaxListBlocks + 10) * kernels::kListChunk + 7};
  for (int i = 0; i < 80; ++i) sizes.push_back(17 * i + 3);
  TensorList list(2);
  for (int64_t n : sizes) list.add({nullptr, nullptr}, n);

  std::vector<std::pair<int, int64_t>> want, got;
  for (size_t k = 0; k < sizes.size(); ++k)
    for (int64_t c = 0; c * kernels::kListChunk < sizes[k]; ++c) want.emplace_back(int(k), c);
  const std::vector<kernels::ListLaunch> plan = kernels::plan_list_launches(list);
  int64_t blocks = 0;
  for (const kernels::ListLaunch& l : plan) {
    EXPECT_EQ(l.first_block, blocks);
    EXPECT_LE(l.tensors.size(), size_t(kernels::kMaxListTensors));
    EXPECT_LE(l.block_tensor.size(), size_t(kernels::kMaxListBlocks));
    EXPECT_FALSE(l.block_tensor.empty());
    for (size_t b = 0; b < l.block_tensor.size(); ++b)
      got.emplace_back(l.tensors.at(l.block_tensor[b]), l.block_chunk[b]);
    blocks += static_cast<int64_t>(l.block_tensor.size());
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(blocks, kernels::norm_partial_count(list));
  EXPECT_GE(plan.size(), 4u);  // the long tensor and the many short ones both split launches
  EXPECT_TRUE(kernels::plan_list_launches(TensorList(1)).empty());
}

// A set skip flag (a non-finite loss on some rank) leaves parameters and state as they were; a
// clear one changes nothing about the update.
TEST(OptimKernels, SkipFlagLeavesEverythingUnchanged) {
  const float skip = 1.0f, go = 0.0f;
  Tensor p = vec({1.0, -2.0}), g = vec({0.5, 0.25}), buf = vec({0.2, 0.0});
  TensorList sgd(3);
  sgd.add({p.data_ptr(), g.data_ptr(), buf.data_ptr()}, 2);
  kernels::sgd_step_cpu(DType::F64, sgd, {0.1, 0.9, 0.01, true}, &skip);
  EXPECT_EQ(p.to_vector<double>(), (std::vector<double>{1.0, -2.0}));
  EXPECT_EQ(buf.to_vector<double>(), (std::vector<double>{0.2, 0.0}));
  kernels::sgd_step_cpu(DType::F64, sgd, {0.1, 0.9, 0.01, true}, &go);
  EXPECT_NEAR(p.to_vector<double>()[0], 0.8869, 1e-14);

  Tensor m = vec({0.1, 0.2}), v = vec({0.3, 0.4});
  TensorList adam(4);
  adam.add({p.data_ptr(), g.data_ptr(), m.data_ptr(), v.data_ptr()}, 2);
  const std::vector<double> p_before = p.to_vector<double>();
  kernels::adam_step_cpu(DType::F64, adam, {1e-3, 0.9, 0.999, 1e-8, 0.0, false, 1}, &skip);
  EXPECT_EQ(p.to_vector<double>(), p_before);
  EXPECT_EQ(m.to_vector<double>(), (std::vector<double>{0.1, 0.2}));
  EXPECT_EQ(v.to_vector<double>(), (std::vector<double>{0.3, 0.4}));

  Tensor e = vec({1.0, 2.0}), model = vec({3.0, -2.0});
  TensorList ema(2);
  ema.add({e.data_ptr(), model.data_ptr()}, 2);
  kernels::ema_update_cpu(DType::F64, ema, 0.75, &skip);
  EXPECT_EQ(e.to_vector<double>(), (std::vector<double>{1.0, 2.0}));
  kernels::ema_update_cpu(DType::F64, ema, 0.75, &go);
  EXPECT_EQ(e.to_vector<double>(), (std::vector<double>{1.5, 1.0}));
  EXPECT_FALSE(kernels::step_skipped(nullptr));
  EXPECT_FALSE(kernels::step_skipped(&go));
  EXPECT_TRUE(kernels::step_skipped(&skip));
}
