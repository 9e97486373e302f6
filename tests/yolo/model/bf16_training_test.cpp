// bfloat16 training on the CPU (--amp bf16 on a CPU with AVX-512 BF16 or AMX): activations and their
// gradients are bfloat16 from layer to layer, statistics, parameters and their gradients float32.
// Each op's forward and backward is checked against float32 on the same (exactly representable)
// values: what both compute from the same float32 numbers (BN's statistics and parameter
// gradients, a filter's gradient) must be the same bits, what bfloat16 stores within one rounding
// of float32's. The whole yolov5n step against its float32 step. Skipped on CPUs without bfloat16
// arithmetic, where --amp bf16 is refused (tests/yolo/train/precision_test).
#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/batchnorm_silu.h"
#include "engine/ops/concat.h"
#include "engine/ops/conv.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/layout.h"
#include "engine/ops/pool.h"
#include "engine/ops/reduce.h"
#include "engine/ops/upsample.h"
#include "kernels/bf16_operands.h"
#include "kernels/cast.h"
#include "layers/conv.h"
#include "tests/support/bf16_values.h"
#include "tests/support/testing.h"
#include "yolo/model/model.h"
#include "yolo/model/model_config.h"
#include "yolo/common/hyp.h"
#include "yolo/train/loss.h"
#include "yolo/train/train_step.h"

using namespace kestrel;
using kestrel::testing::all_close;
using kestrel::testing::bits_equal;
using kestrel::testing::random_tensor;
using kestrel::testing::representable;
using kestrel::testing::rounded;

#define SKIP_WITHOUT_BF16() \
  if (!kestrel::testing::native_bf16()) GTEST_SKIP() << "this CPU has no AVX-512 BF16 or AMX: --amp bf16 is refused on it"

namespace {

// sum(y * g) as float32, so that backward hands y the gradient g (rounded to y's type).
Tensor weighted_sum(const Tensor& y, const Tensor& g) { return ops::sum_all(ops::mul(y.to(DType::F32), g)); }

// Within one bfloat16 rounding (half an ulp: 2^-9 relative) of the float32 result, plus atol for
// values near zero and for the float32 sums' own differences.
::testing::AssertionResult within_a_rounding(const Tensor& bf16, const Tensor& f32, double atol) {
  if (bf16.dtype() != DType::BF16) return ::testing::AssertionFailure() << "not bfloat16: " << bf16.describe();
  return all_close(bf16.to(DType::F32), f32, atol, 1.0 / 256);
}

struct BnState {
  Tensor weight, bias, running_mean, running_var;
};

BnState bn_state(int64_t c) {
  return {random_tensor({c}, 21, DType::F32, 0.5, 1.5).set_requires_grad(), random_tensor({c}, 22, DType::F32, -0.5, 0.5)
              .set_requires_grad(),
          random_tensor({c}, 23, DType::F32), random_tensor({c}, 24, DType::F32, 0.5, 1.5)};
}

struct BnResult {
  Tensor y, dx, dweight, dbias, running_mean, running_var;
};

// One training step (or an eval-mode forward and backward) of BN (+ SiLU when fused) on x.
BnResult bn_step(const Tensor& x_in, const Tensor& g, bool fused, bool training) {
  BnState p = bn_state(x_in.size(3));
  Tensor x = x_in.detach().set_requires_grad();
  Tensor y = fused ? ops::batch_norm_silu(x, p.weight, p.bias, p.running_mean, p.running_var, training, 0.03, 1e-3)
                   : ops::batch_norm(x, p.weight, p.bias, p.running_mean, p.running_var, training, 0.03, 1e-3);
  weighted_sum(y, g).backward();
  return {y.detach(), x.grad(), p.weight.grad(), p.bias.grad(), p.running_mean, p.running_var};
}

}  // namespace

// BN + SiLU (the end of every Conv block) and plain BN (SyncBN's steps, BottleneckCSP): statistics,
// running statistics and the weight and bias gradients are float32 sums of the same float32
// numbers, so the same bits; y and dx within one rounding. Also in eval mode (frozen statistics).
TEST(Bf16Training, BatchNormKeepsFloat32StatisticsAndGradients) {
  SKIP_WITHOUT_BF16();
  // 2 * 9 * 7 rows: the fixed chunks, the 4-row unrolled sums and their remainder.
  const Tensor x = representable({2, 9, 7, 40}, 1, -3.0, 5.0), g = representable({2, 9, 7, 40}, 2);
  for (bool fused : {true, false})
    for (bool training : {true, false}) {
      SCOPED_TRACE(std::string(fused ? "batch_norm_silu" : "batch_norm") + (training ? " training" : " eval"));
      const BnResult f32 = bn_step(x, g, fused, training), b16 = bn_step(x.to(DType::BF16), g, fused, training);
      EXPECT_TRUE(bits_equal(b16.running_mean, f32.running_mean));
      EXPECT_TRUE(bits_equal(b16.running_var, f32.running_var));
      EXPECT_TRUE(within_a_rounding(b16.y, f32.y, 1e-6));
      ASSERT_EQ(b16.dweight.dtype(), DType::F32);
      // The fused backward's g = dy * silu'(z) is the same float in both; plain BN's sums read dy.
      EXPECT_TRUE(bits_equal(b16.dweight, f32.dweight));
      EXPECT_TRUE(bits_equal(b16.dbias, f32.dbias));
      // bfloat16's dx step computes in float (CUDA's rule), float32's in double: 1e-5 apart at most.
      EXPECT_TRUE(within_a_rounding(b16.dx, f32.dx, 1e-5));
    }
}

// The convolution of bfloat16 activations against float32 activations with bfloat16 operands (the
// same oneDNN bf16 arithmetic with float32 results): the filter gradient is the same pass on the
// same operands, so the same bits; y and dx within one rounding; the bias gradient float32.
TEST(Bf16Training, ConvolutionGivesBfloat16ActivationsAndFloat32ParameterGradients) {
  SKIP_WITHOUT_BF16();
  struct Case {
    int64_t n, h, w, c, o, k, stride;
  };
  for (const Case& c : {Case{2, 12, 10, 16, 32, 3, 1}, Case{2, 16, 16, 8, 24, 3, 2}, Case{3, 7, 9, 48, 16, 1, 1},
                        Case{2, 20, 20, 3, 16, 6, 2}}) {
    SCOPED_TRACE("k" + std::to_string(c.k) + " s" + std::to_string(c.stride) + " c" + std::to_string(c.c));
    const Tensor x0 = representable({c.n, c.h, c.w, c.c}, 5), w0 = representable({c.o, c.k, c.k, c.c}, 6, -0.3, 0.3);
    const Tensor b0 = random_tensor({c.o}, 7, DType::F32, -0.5, 0.5);
    ops::Conv2dParams p{c.stride, c.stride, c.k / 2, c.k / 2};
    const Shape y_shape{c.n, (c.h + 2 * (c.k / 2) - c.k) / c.stride + 1, (c.w + 2 * (c.k / 2) - c.k) / c.stride + 1, c.o};
    const Tensor g = representable(y_shape, 8);
    auto step = [&](DType activations, ops::ConvOperands operands) {
      Tensor x = x0.clone().to(activations).set_requires_grad(), w = w0.clone().set_requires_grad(),
             b = b0.clone().set_requires_grad();
      ops::Conv2dParams q = p;
      q.operands = operands;
      const Tensor y = ops::conv2d(x, w, b, q);
      weighted_sum(y, g).backward();
      return std::vector<Tensor>{y.detach(), x.grad(), w.grad(), b.grad()};
    };
    const std::vector<Tensor> ref = step(DType::F32, ops::ConvOperands::Bfloat16);
    const std::vector<Tensor> got = step(DType::BF16, ops::ConvOperands::Float32);
    EXPECT_TRUE(within_a_rounding(got[0], ref[0], 1e-3));
    EXPECT_TRUE(within_a_rounding(got[1], ref[1], 1e-3));
    ASSERT_EQ(got[2].dtype(), DType::F32);
    EXPECT_TRUE(bits_equal(got[2], ref[2]));
    ASSERT_EQ(got[3].dtype(), DType::F32);
    EXPECT_TRUE(all_close(got[3], ref[3], 1e-5, 1e-6));  // both sum g's values in double
  }
}

// Upsample's and max-pool's backward sum gradients in float and round once; concat and add pass
// them through.
TEST(Bf16Training, UpsampleMaxPoolConcatAndAddBackwardRoundOnce) {
  SKIP_WITHOUT_BF16();
  const Tensor a = representable({2, 6, 5, 8}, 11);
  auto grads = [&](DType t) {
    Tensor x = a.clone().to(t).set_requires_grad();
    const Tensor up = ops::upsample_nearest2x(x);
    const Tensor pooled = ops::max_pool2d(ops::max_pool2d(x, 5, 1, 2), 5, 1, 2);  // SPPF's overlapping windows
    const Tensor both = ops::concat({ops::add(x, pooled), x}, 3);
    ops::add(weighted_sum(up, representable(up.shape(), 12)), weighted_sum(both, representable(both.shape(), 13)))
        .backward();
    return x.grad();
  };
  const Tensor f32 = grads(DType::F32), b16 = grads(DType::BF16);
  // The float32 graph sums the same values in the same order, so bfloat16 differs by its roundings
  // at each accumulation (autograd's and the ops'): a few roundings of the terms (up to 2 here), which
  // where they cancel leave an absolute error.
  EXPECT_TRUE(all_close(b16.to(DType::F32), f32, 0.05, 4.0 / 256));
  EXPECT_EQ(b16.dtype(), DType::BF16);
  // Each op alone: exactly float32's sum, rounded.
  Tensor x = a.to(DType::BF16).set_requires_grad();
  const Tensor dy = representable({2, 12, 10, 8}, 14);
  weighted_sum(ops::upsample_nearest2x(x), dy).backward();
  Tensor xf = a.clone().set_requires_grad();
  weighted_sum(ops::upsample_nearest2x(xf), dy).backward();
  EXPECT_TRUE(bits_equal(x.grad(), xf.grad().to(DType::BF16)));
  Tensor xp = a.to(DType::BF16).set_requires_grad(), xpf = a.clone().set_requires_grad();
  const Tensor dp = representable({2, 6, 5, 8}, 15);
  weighted_sum(ops::max_pool2d(xp, 5, 1, 2), dp).backward();
  weighted_sum(ops::max_pool2d(xpf, 5, 1, 2), dp).backward();
  EXPECT_TRUE(bits_equal(xp.grad(), xpf.grad().to(DType::BF16)));
}

// SiLU and sigmoid as ops of their own (SyncBN runs BN, then SiLU): float32's values, rounded once.
TEST(Bf16Training, ActivationsRoundTheFloatResultOnce) {
  SKIP_WITHOUT_BF16();
  const Tensor a = representable({3, 5, 7, 24}, 16, -6.0, 6.0), dy = representable({3, 5, 7, 24}, 17);
  for (bool silu : {true, false}) {
    SCOPED_TRACE(silu ? "silu" : "sigmoid");
    Tensor x = a.clone().to(DType::BF16).set_requires_grad(), xf = a.clone().set_requires_grad();
    const Tensor y = silu ? ops::silu(x) : ops::sigmoid(x), yf = silu ? ops::silu(xf) : ops::sigmoid(xf);
    EXPECT_TRUE(bits_equal(y, yf.to(DType::BF16)));
    weighted_sum(y, dy).backward();
    // sigmoid's backward reads its output, which bfloat16 stored rounded: float32's from that output.
    if (silu) {
      weighted_sum(yf, dy).backward();
      EXPECT_TRUE(bits_equal(x.grad(), xf.grad().to(DType::BF16)));
    } else {
      Tensor yr = yf.detach().to(DType::BF16).to(DType::F32);
      const Tensor expected = ops::mul(dy, ops::mul(yr, ops::sub(Tensor::ones(yr.shape()), yr)));
      EXPECT_TRUE(all_close(x.grad().to(DType::F32), expected, 1e-7, 1.0 / 256));
    }
  }
}

// The casts around bfloat16 activations (the input, the loss's float32 view, their gradients) take
// a vectorised path: the same bits as the per-value rule.
TEST(Bf16Training, CastsRoundToNearestEvenAndWidenExactly) {
  std::vector<float> v{0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, -3.3e38f, 1e-40f, INFINITY, -INFINITY, NAN};
  for (int i = 0; i < 1000; ++i) v.push_back(std::ldexp(float(i * 7919 % 1000) / 999.0f - 0.5f, i % 60 - 30));
  const Tensor f = Tensor::from_vector(v, {int64_t(v.size())});
  const Tensor b = f.to(DType::BF16);
  const Tensor back = b.to(DType::F32);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t bits = static_cast<const uint16_t*>(b.data_ptr())[i];
    if (std::isnan(v[i])) {
      EXPECT_TRUE(std::isnan(kernels::bf16_to_float(bits)));
      continue;
    }
    EXPECT_EQ(bits, kernels::bf16_bits(v[i])) << v[i];
    EXPECT_EQ(back.data<float>()[i], kernels::bf16_to_float(bits)) << v[i];
  }
}

// The whole yolov5n training step (forward, loss, backward) on bfloat16 activations against float32
// on the same batch and weights: the loss and every parameter's gradient agree to what bfloat16's
// 8-bit activations allow, and the parameter gradients are float32.
TEST(Bf16Training, Yolov5nStepMatchesFloat32) {
  SKIP_WITHOUT_BF16();
  const yolo::ModelConfig cfg = yolo::load_model_config("models/yolov5n.yaml");
  Tensor images = Tensor::empty({4, 128, 128, 3}, DType::U8);
  for (int64_t i = 0; i < images.numel(); ++i) images.data<uint8_t>()[i] = static_cast<uint8_t>((i * 7919 + i / 384) % 251);
  // (image, class, x, y, w, h), normalised.
  const Tensor targets = Tensor::from_vector<float>(
      {0, 1, 0.5f, 0.5f, 0.3f, 0.4f, 0, 3, 0.2f, 0.3f, 0.1f, 0.1f, 1, 0, 0.7f, 0.6f, 0.5f, 0.3f, 2, 2, 0.4f, 0.4f,
       0.05f, 0.08f, 3, 1, 0.3f, 0.7f, 0.25f, 0.2f},
      {5, 6});
  struct Step {
    double loss;
    std::vector<std::pair<std::string, Tensor>> grads;
  };
  auto step = [&](DType activations, ops::ConvOperands operands = ops::ConvOperands::Float32) {
    yolo::DetectionModel model(cfg, 4, 0);
    model.train(true);
    layers::set_conv_operands(model, operands);
    const yolo::ComputeLoss loss(model.detect(), yolo::Hyp{});
    Tensor x = ops::images_to_input(images, activations);
    const std::vector<Tensor> raw = model.forward(x);
    EXPECT_EQ(raw[0].dtype(), activations) << "the activations reach the head in their type";
    const yolo::DeviceLoss l = loss.forward(yolo::loss_inputs(raw), targets);
    l.total.backward();
    Step s{l.total.to(DType::F64).to_vector<double>()[0], {}};
    for (auto& [name, p] : model.named_parameters()) s.grads.emplace_back(name, p.grad());
    return s;
  };
  const Step f32 = step(DType::F32), b16 = step(DType::BF16);
  EXPECT_NEAR(b16.loss, f32.loss, 0.01 * f32.loss);
  ASSERT_EQ(b16.grads.size(), f32.grads.size());
  // At initialisation the gradients are sensitive: rounding only the input to bfloat16 (float32
  // everywhere else) already turns the gradient by cos 0.984 (PyTorch: 0.984 too). bfloat16
  // activations round at every layer; the reference's yolov5n under PyTorch 2.15's CPU bf16 autocast,
  // on this batch against its float32 step: loss 1.1 % apart, all gradients as one vector cos 0.834,
  // the worst parameter cos 0.63, the median 0.88, the norm 0.4 % apart. Kestrel here: 0.2 %, 0.851,
  // 0.578 (a BN weight whose gradient is a cancelling sum), norm 0.8 %.
  double dot = 0, na = 0, ne = 0, worst_cos = 1;
  std::string worst;
  for (size_t i = 0; i < f32.grads.size(); ++i) {
    const Tensor a = b16.grads[i].second.contiguous(), e = f32.grads[i].second.contiguous();
    ASSERT_TRUE(a.defined() && e.defined()) << f32.grads[i].first;
    ASSERT_EQ(a.dtype(), DType::F32) << f32.grads[i].first;
    double pd = 0, pa = 0, pe = 0;
    for (int64_t j = 0; j < a.numel(); ++j) {
      const double x = a.data<float>()[j], y = e.data<float>()[j];
      pd += x * y;
      pa += x * x;
      pe += y * y;
    }
    dot += pd;
    na += pa;
    ne += pe;
    const double cos = pe > 0 && pa > 0 ? pd / std::sqrt(pa * pe) : 1.0;
    if (cos < worst_cos) {
      worst_cos = cos;
      worst = f32.grads[i].first;
    }
  }
  const double cos = dot / std::sqrt(na * ne), norm_ratio = std::sqrt(na / ne);
  EXPECT_GT(cos, 0.8);
  EXPECT_NEAR(norm_ratio, 1.0, 0.05);
  EXPECT_GT(worst_cos, 0.4) << worst;
  std::printf("yolov5n step, bfloat16 vs float32: loss %.6f vs %.6f, gradient cosine %.5f, norm ratio %.4f, worst "
              "parameter's cosine %.5f (%s)\n",
              b16.loss, f32.loss, cos, norm_ratio, worst_cos, worst.c_str());
}
