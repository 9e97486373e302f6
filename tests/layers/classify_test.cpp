// The classifier's head and its parts: Linear (shapes, PyTorch's default initialisation drawn as
// Conv2d draws, forward against a naive product, gradients against finite differences in
// float64, a new class count), AdaptiveAvgPool2d (mean over H and W, gradient), Dropout and
// ops::dropout (identity at p = 0 and in eval, the kept fraction and scale at p = 0.5, gradient =
// mask, reproducible from the seed), and Classify (parameter count, the reference's state-dict
// names and order, the fused eval forward against the unfused running-statistics one, a list of
// inputs joined on channels, set_classes).
#include <cmath>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops/concat.h"
#include "engine/ops/dropout.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/reduce.h"
#include "layers/classify.h"
#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::layers;
using kestrel::testing::all_close;
using kestrel::testing::error_of;
using kestrel::testing::random_tensor;

namespace {

std::vector<std::string> state_names(Module& m) {
  std::vector<std::string> out;
  for (const StateEntry& e : m.state_entries()) out.push_back(e.name);
  return out;
}

// The layer's parameters as float64 leaves (for the gradient checks).
void to_f64(Linear& l) {
  l.weight = l.weight.detach().to(DType::F64).set_requires_grad();
  l.bias = l.bias.detach().to(DType::F64).set_requires_grad();
}

}  // namespace

TEST(Linear, ShapesAndDefaultInitialisation) {
  Generator gen(7);
  Linear l(16, 5, gen);
  EXPECT_EQ(l.type_name(), "torch.nn.modules.linear.Linear");
  EXPECT_EQ(l.weight.shape(), (Shape{5, 16}));
  EXPECT_EQ(l.bias.shape(), (Shape{5}));
  EXPECT_EQ(l.parameter_count(), 16 * 5 + 5);
  EXPECT_EQ(state_names(l), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_FALSE(l.state_entries()[0].ohwi_conv_weight);
  EXPECT_TRUE(l.weight.requires_grad() && l.bias.requires_grad());
  // Uniform in ±1/sqrt(in): the weight's values first, then the bias's, from the same stream.
  Generator again(7);
  Tensor w = Tensor::empty({5, 16}), b = Tensor::empty({5});
  again.fill_uniform(w, -0.25, 0.25);
  again.fill_uniform(b, -0.25, 0.25);
  EXPECT_EQ(l.weight.to_vector<float>(), w.to_vector<float>());
  EXPECT_EQ(l.bias.to_vector<float>(), b.to_vector<float>());
  const Tensor y = l.forward(Tensor::zeros({3, 16}));
  EXPECT_EQ(y.shape(), (Shape{3, 5}));
  EXPECT_NE(error_of([&] { l.forward(Tensor::zeros({3, 15})); }), "");
  EXPECT_NE(error_of([&] { l.forward(Tensor::zeros({3, 1, 1, 16})); }), "");
}

TEST(Linear, ForwardIsTheProduct) {
  Generator gen(1);
  Linear l(37, 11, gen);
  const Tensor x = random_tensor({6, 37}, 2, DType::F32, -2, 2);
  const std::vector<float> xv = x.to_vector<float>(), w = l.weight.to_vector<float>(),
                           b = l.bias.to_vector<float>();
  const std::vector<float> y = l.forward(x).to_vector<float>();
  for (int64_t n = 0; n < 6; ++n)
    for (int64_t o = 0; o < 11; ++o) {
      double want = b[o];
      for (int64_t i = 0; i < 37; ++i) want += static_cast<double>(xv[n * 37 + i]) * w[o * 37 + i];
      EXPECT_NEAR(y[n * 11 + o], want, 1e-5) << n << "," << o;
    }
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  Generator gen(3);
  Linear l(7, 4, gen);
  to_f64(l);
  const Tensor x = random_tensor({3, 7}, 4).set_requires_grad();
  EXPECT_TRUE(kestrel::testing::gradcheck(
      [&](const std::vector<Tensor>& in) {
        l.weight = in[1];
        l.bias = in[2];
        return l.forward(in[0]);
      },
      {x, l.weight, l.bias}));
}

TEST(Linear, ResetDrawsAFreshLayerOfTheNewSize) {
  Generator gen(5);
  Linear l(8, 3, gen);
  Generator fresh(9), expected(9);
  l.reset(6, fresh);
  EXPECT_EQ(l.out_features, 6);
  EXPECT_EQ(l.weight.shape(), (Shape{6, 8}));
  EXPECT_EQ(l.parameter_count(), 8 * 6 + 6);
  Linear want(8, 6, expected);
  EXPECT_EQ(l.weight.to_vector<float>(), want.weight.to_vector<float>());
  EXPECT_EQ(l.bias.to_vector<float>(), want.bias.to_vector<float>());
  EXPECT_TRUE(l.weight.requires_grad());
  EXPECT_EQ(l.named_parameters()[0].second.shape(), (Shape{6, 8}));  // the slots follow
}

TEST(AdaptiveAvgPool2d, MeanOverHeightAndWidth) {
  AdaptiveAvgPool2d pool;
  EXPECT_EQ(pool.type_name(), "torch.nn.modules.pooling.AdaptiveAvgPool2d");
  const Tensor x = random_tensor({2, 3, 5, 4}, 6);
  const Tensor y = pool.forward(x);
  ASSERT_EQ(y.shape(), (Shape{2, 4}));
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 4; ++c) {
      double s = 0;
      for (int hw = 0; hw < 15; ++hw) s += xv[(n * 15 + hw) * 4 + c];
      EXPECT_NEAR(yv[n * 4 + c], s / 15, 1e-15);
    }
  const Tensor xg = random_tensor({2, 3, 2, 4}, 8).set_requires_grad();
  EXPECT_TRUE(kestrel::testing::gradcheck(
      [&](const std::vector<Tensor>& in) { return pool.forward(in[0]); }, {xg}));
  EXPECT_NE(error_of([&] { pool.forward(Tensor::zeros({2, 4})); }), "");
}

TEST(Dropout, IdentityAtZeroAndInEval) {
  Dropout d(0.0);
  EXPECT_EQ(d.type_name(), "torch.nn.modules.dropout.Dropout");
  const Tensor x = random_tensor({4, 8}, 1, DType::F32);
  EXPECT_TRUE(d.forward(x).is_same(x));
  Dropout half(0.5, 3);
  half.train(false);
  EXPECT_TRUE(half.forward(x).is_same(x));
  Generator gen(1);
  EXPECT_TRUE(ops::dropout(x, 0.0, gen).is_same(x));
  EXPECT_EQ(gen.offset(), 0u);  // p = 0 draws nothing
  EXPECT_EQ(ops::dropout(x, 1.0, gen).to_vector<float>(), std::vector<float>(32, 0.0f));
  EXPECT_NE(error_of([&] { Dropout bad(1.5); }), "");
  EXPECT_NE(error_of([&] { ops::dropout(x, -0.1, gen); }), "");
}

TEST(Dropout, HalfKeepsHalfScaledByTwoAndGradientIsTheMask) {
  Dropout d(0.5, 11);
  const int64_t n = 200000;
  const Tensor x = Tensor::ones({n}).set_requires_grad();
  const Tensor y = d.forward(x);
  const std::vector<float> v = y.to_vector<float>();
  int64_t kept = 0;
  for (float e : v) {
    EXPECT_TRUE(e == 0.0f || e == 2.0f) << e;
    kept += e != 0.0f;
  }
  // Binomial(n, 0.5): standard deviation 224 of 100000; 5 sigma.
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.5, 5 * 0.5 / std::sqrt(static_cast<double>(n)));
  ops::sum_all(y).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), v);  // d(sum y)/dx = mask, x = 1
  // The same seed gives the same mask; the next call a different one.
  Dropout same(0.5, 11);
  EXPECT_EQ(same.forward(Tensor::ones({n})).to_vector<float>(), v);
  EXPECT_NE(same.forward(Tensor::ones({n})).to_vector<float>(), v);
  // p = 0.2: scale 1.25, about 80% kept.
  Generator gen(4);
  const std::vector<float> w = ops::dropout(Tensor::ones({n}), 0.2, gen).to_vector<float>();
  int64_t kept2 = 0;
  for (float e : w) kept2 += e != 0.0f;
  EXPECT_NEAR(static_cast<double>(kept2) / n, 0.8, 5 * 0.4 / std::sqrt(static_cast<double>(n)));
  for (float e : w) EXPECT_TRUE(e == 0.0f || e == 1.25f) << e;
}

TEST(Classify, ParametersAndStateNamesAsTheReference) {
  Generator gen(0);
  Classify head(256, 10, gen);
  EXPECT_EQ(head.type_name(), "models.common.Classify");
  EXPECT_EQ(head.parameter_count(), 256 * 1280 + 2 * 1280 + 1280 * 10 + 10);
  EXPECT_EQ(state_names(head), (std::vector<std::string>{
                                   "conv.conv.weight", "conv.bn.weight", "conv.bn.bias",
                                   "conv.bn.running_mean", "conv.bn.running_var",
                                   "conv.bn.num_batches_tracked", "linear.weight", "linear.bias"}));
  EXPECT_EQ(head.linear->weight.shape(), (Shape{10, 1280}));
  EXPECT_EQ(head.conv->conv->weight.shape(), (Shape{1280, 1, 1, 256}));
  EXPECT_EQ(head.drop->p, 0.0);
  EXPECT_EQ(head.classes(), 10);
  // Children in the reference's order: conv, pool, drop, linear (and Conv's conv, bn).
  std::vector<std::string> types;
  head.visit([&](Module& m) { types.push_back(m.type_name()); });
  EXPECT_EQ(types, (std::vector<std::string>{
                       "models.common.Classify", "models.common.Conv",
                       "torch.nn.modules.conv.Conv2d", "torch.nn.modules.batchnorm.BatchNorm2d",
                       "torch.nn.modules.pooling.AdaptiveAvgPool2d",
                       "torch.nn.modules.dropout.Dropout", "torch.nn.modules.linear.Linear"}));
  // The conv's weights are drawn first, then the linear's (the reference's construction order).
  Generator again(0);
  Tensor conv_w = Tensor::empty({1280, 1, 1, 256});
  again.fill_uniform(conv_w, -1.0 / 16, 1.0 / 16);
  Linear linear(1280, 10, again);
  EXPECT_EQ(head.linear->weight.to_vector<float>(), linear.weight.to_vector<float>());
}

TEST(Classify, ForwardShapesAndGradients) {
  Generator gen(2);
  Classify head(8, 5, gen);
  const Tensor x = random_tensor({3, 4, 4, 8}, 3, DType::F32);
  const Tensor y = head.forward(x);
  EXPECT_EQ(y.shape(), (Shape{3, 5}));
  ops::sum_all(ops::mul(y, y)).backward();
  for (const auto& [name, p] : head.named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
  // A list of inputs is joined on channels first.
  const Tensor a = x.slice(3, 0, 3).contiguous(), b = x.slice(3, 3, 8).contiguous();
  head.train(false);
  autograd::NoGradGuard no_grad;
  EXPECT_TRUE(all_close(head.forward(std::vector<Tensor>{a, b}), head.forward(x), 0, 0));
  EXPECT_NE(error_of([&] { head.forward(std::vector<Tensor>{}); }), "");
}

// Eval without gradients runs the Conv's fused inference (BN folded into the convolution, SiLU in
// its pass); eval with gradients the unfused conv -> BN (running statistics) -> SiLU. Both are
// the reference's eval forward, and they agree to float32 accuracy.
TEST(Classify, FusedEvalForwardEqualsRunningStatisticsForward) {
  Generator gen(4);
  Classify head(16, 7, gen);
  head.conv->bn->running_mean.copy_(random_tensor({1280}, 5, DType::F32, -0.5, 0.5));
  head.conv->bn->running_var.copy_(random_tensor({1280}, 6, DType::F32, 0.5, 2.0));
  head.conv->bn->weight.detach().copy_(random_tensor({1280}, 7, DType::F32, 0.5, 1.5));
  head.conv->bn->bias.detach().copy_(random_tensor({1280}, 8, DType::F32, -0.2, 0.2));
  head.train(false);
  const Tensor x = random_tensor({2, 5, 5, 16}, 9, DType::F32);
  const Tensor unfused = head.forward(x);
  Tensor fused;
  {
    autograd::NoGradGuard no_grad;
    fused = head.forward(x);
    head.conv->fuse();
    EXPECT_TRUE(all_close(head.forward(x), fused, 1e-5, 1e-4));
  }
  EXPECT_TRUE(all_close(fused, unfused, 1e-5, 1e-4));
  // By hand: conv (1x1), BN with running statistics, SiLU, mean over H and W, then the Linear.
  const std::vector<float> xv = x.to_vector<float>(),
                           cw = head.conv->conv->weight.to_vector<float>();
  const std::vector<float> rm = head.conv->bn->running_mean.to_vector<float>(),
                           rv = head.conv->bn->running_var.to_vector<float>(),
                           bw = head.conv->bn->weight.to_vector<float>(),
                           bb = head.conv->bn->bias.to_vector<float>(),
                           lw = head.linear->weight.to_vector<float>(),
                           lb = head.linear->bias.to_vector<float>();
  std::vector<double> pooled(2 * 1280, 0.0);
  for (int n = 0; n < 2; ++n)
    for (int hw = 0; hw < 25; ++hw)
      for (int o = 0; o < 1280; ++o) {
        double z = 0;
        for (int i = 0; i < 16; ++i)
          z += static_cast<double>(xv[(n * 25 + hw) * 16 + i]) * cw[o * 16 + i];
        z = (z - rm[o]) / std::sqrt(rv[o] + 1e-5) * bw[o] + bb[o];
        pooled[n * 1280 + o] += z / (1 + std::exp(-z)) / 25;
      }
  const std::vector<float> got = unfused.to_vector<float>();
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 7; ++k) {
      double want = lb[k];
      for (int o = 0; o < 1280; ++o) want += pooled[n * 1280 + o] * lw[k * 1280 + o];
      EXPECT_NEAR(got[n * 7 + k], want, 1e-4) << n << "," << k;
    }
}

TEST(Classify, SetClassesReplacesTheLinear) {
  Generator gen(0);
  Classify head(32, 10, gen);
  const std::vector<float> conv_before = head.conv->conv->weight.to_vector<float>();
  Generator g2(1);
  EXPECT_FALSE(head.set_classes(10, g2));
  EXPECT_EQ(g2.offset(), 0u);
  EXPECT_TRUE(head.set_classes(3, g2));
  EXPECT_EQ(head.classes(), 3);
  EXPECT_EQ(head.linear->weight.shape(), (Shape{3, 1280}));
  EXPECT_EQ(head.parameter_count(), 32 * 1280 + 2 * 1280 + 1280 * 3 + 3);
  EXPECT_EQ(head.conv->conv->weight.to_vector<float>(), conv_before);
  EXPECT_EQ(state_names(head).back(), "linear.bias");
  EXPECT_EQ(head.forward(Tensor::zeros({2, 2, 2, 32})).shape(), (Shape{2, 3}));
}
