// bfloat16 inference on the CPU (val/detect --half on a CPU with AVX-512 BF16 or AMX): every op of
// a fused YOLOv5 forward takes and gives bfloat16 activations, computing in float32 and rounding
// once. Each op is checked against float32 on the same (exactly representable) values; the whole
// model against its float32 forward. Skipped on CPUs without bfloat16 arithmetic, where --half
// stays float32 (the last test).
#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops/concat.h"
#include "engine/ops/conv.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/layout.h"
#include "engine/ops/pool.h"
#include "engine/ops/upsample.h"
#include "kernels/bf16_operands.h"
#include "kernels/conv2d_dnnl.h"
#include "layers/conv.h"
#include "tests/support/bf16_values.h"
#include "tests/support/testing.h"
#include "yolo/model/model.h"
#include "yolo/model/model_config.h"

using namespace kestrel;
using kestrel::testing::all_close;
using kestrel::testing::random_tensor;

using kestrel::testing::bits_equal;
using kestrel::testing::representable;
using kestrel::testing::rounded;

#define SKIP_WITHOUT_BF16() \
  if (!kestrel::testing::native_bf16()) GTEST_SKIP() << "this CPU has no AVX-512 BF16 or AMX: --half stays float32 on it"

TEST(Bf16Inference, DataMovementAndMaxPoolAreExact) {
  SKIP_WITHOUT_BF16();
  autograd::NoGradGuard no_grad;
  const Tensor a = representable({2, 6, 5, 24}, 1), b = representable({2, 6, 5, 8}, 2);
  const Tensor a16 = a.to(DType::BF16), b16 = b.to(DType::BF16);
  EXPECT_TRUE(bits_equal(ops::concat({a16, b16}, 3), ops::concat({a, b}, 3).to(DType::BF16)));
  EXPECT_TRUE(bits_equal(ops::upsample_nearest2x(a16), ops::upsample_nearest2x(a).to(DType::BF16)));
  for (int64_t k : {5, 3, 2}) {
    const int64_t pad = k / 2, stride = k == 2 ? 2 : 1;
    EXPECT_TRUE(bits_equal(ops::max_pool2d(a16, k, stride, pad), ops::max_pool2d(a, k, stride, pad).to(DType::BF16)))
        << "kernel " << k;
  }
}

TEST(Bf16Inference, AddRoundsTheFloatSumOnce) {
  SKIP_WITHOUT_BF16();
  autograd::NoGradGuard no_grad;
  const Tensor a = representable({3, 7, 9, 33}, 3), b = representable({3, 7, 9, 33}, 4, -0.01, 0.01);
  EXPECT_TRUE(bits_equal(ops::add(a.to(DType::BF16), b.to(DType::BF16)), ops::add(a, b).to(DType::BF16)));
}

TEST(Bf16Inference, InputIsTheRoundedFloatInput) {
  SKIP_WITHOUT_BF16();
  Tensor images = Tensor::empty({2, 4, 5, 3}, DType::U8);
  for (int64_t i = 0; i < images.numel(); ++i) images.data<uint8_t>()[i] = static_cast<uint8_t>(i * 37);
  EXPECT_TRUE(bits_equal(ops::images_to_input(images, DType::BF16), ops::images_to_input(images, DType::F32).to(DType::BF16)));
}

// oneDNN sums in float32 on the rounded operands and rounds y once, after the bias and SiLU: within
// a bfloat16 rounding (2^-8 relative) of the float32 convolution of the same operands, plus what
// the two sum orders and oneDNN's swish differ by.
TEST(Bf16Inference, ConvolutionIsTheFloatConvolutionRounded) {
  SKIP_WITHOUT_BF16();
  autograd::NoGradGuard no_grad;
  struct Case {
    int64_t n, h, w, c, o, k, stride;
  };
  for (const Case& c : {Case{2, 12, 10, 16, 32, 3, 1}, Case{1, 16, 16, 8, 24, 3, 2}, Case{3, 7, 9, 48, 16, 1, 1},
                        Case{1, 20, 20, 3, 16, 6, 2}}) {
    const Tensor x = representable({c.n, c.h, c.w, c.c}, 5), w = representable({c.o, c.k, c.k, c.c}, 6, -0.3, 0.3);
    const Tensor b = random_tensor({c.o}, 7, DType::F32, -0.5, 0.5);
    const ops::Conv2dParams p{c.stride, c.stride, c.k / 2, c.k / 2};
    for (ops::ConvActivation act : {ops::ConvActivation::None, ops::ConvActivation::Silu}) {
      const Tensor expected = ops::conv2d_inference(x, rounded(w), b, p, act, kernels::kUncachedWeights);
      const Tensor y = ops::conv2d_inference(x.to(DType::BF16), w, b, p, act, kernels::kUncachedWeights);
      ASSERT_EQ(y.dtype(), DType::BF16);
      EXPECT_TRUE(all_close(y.to(DType::F32), expected, 2e-3, 1.0 / 128))
          << "k" << c.k << " s" << c.stride << " c" << c.c << (act == ops::ConvActivation::Silu ? " silu" : "");
    }
  }
}

TEST(Bf16Inference, AFusedModelReordersItsFiltersOnce) {
  SKIP_WITHOUT_BF16();
  autograd::NoGradGuard no_grad;
  yolo::DetectionModel model(yolo::load_model_config("models/yolov5n.yaml"), 4, 0);
  model.train(false);
  layers::fuse_convs(model);
  const Tensor x = representable({1, 64, 64, 3}, 8, 0.0, 1.0).to(DType::BF16);
  model.predict(x);
  const kernels::DnnlWeightCacheStats before = kernels::conv2d_dnnl_weight_cache_stats();
  model.predict(x);
  const kernels::DnnlWeightCacheStats after = kernels::conv2d_dnnl_weight_cache_stats();
  EXPECT_EQ(after.reorders - before.reorders, 3u) << "only Detect's three unfused convolutions reorder again";
  EXPECT_GT(after.hits, before.hits);
}

// The whole fused yolov5n: boxes, objectness and class scores of bfloat16 inference against float32
// on the same images.
TEST(Bf16Inference, Yolov5nPredictsAsInFloat32) {
  SKIP_WITHOUT_BF16();
  autograd::NoGradGuard no_grad;
  yolo::DetectionModel model(yolo::load_model_config("models/yolov5n.yaml"), 80, 0);
  model.train(false);
  layers::fuse_convs(model);
  Tensor images = Tensor::empty({2, 160, 192, 3}, DType::U8);
  for (int64_t i = 0; i < images.numel(); ++i) images.data<uint8_t>()[i] = static_cast<uint8_t>((i * 7919) % 251);
  const Tensor f32 = model.predict(ops::images_to_input(images, DType::F32)).boxes;
  const Tensor b16 = model.predict(ops::images_to_input(images, DType::BF16)).boxes;
  ASSERT_EQ(b16.dtype(), DType::F32);  // Detect decodes in float32
  ASSERT_EQ(b16.shape(), f32.shape());
  const int64_t rows = f32.size(0) * f32.size(1), no = f32.size(2);
  double worst_box = 0, worst_score = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < no; ++j) {
      const double d = std::abs(double(b16.data<float>()[r * no + j]) - f32.data<float>()[r * no + j]);
      (j < 4 ? worst_box : worst_score) = std::max(j < 4 ? worst_box : worst_score, d);
    }
  EXPECT_LT(worst_box, 0.5) << "pixels";  // 0.03 and 0.0002 here (a freshly initialised model)
  EXPECT_LT(worst_score, 0.005);
  EXPECT_GT(worst_score, 0.0) << "bfloat16 ran (not float32 under another name)";
}

TEST(Bf16Inference, GradientsAreRefused) {
  SKIP_WITHOUT_BF16();
  const Tensor x = representable({1, 8, 8, 4}, 9).to(DType::BF16);
  const Tensor w = representable({4, 3, 3, 4}, 10).set_requires_grad();
  EXPECT_NE(kestrel::testing::error_of([&] { ops::conv2d_inference(x, w, Tensor(), {1, 1, 1, 1}, ops::ConvActivation::None,
                                                          kernels::kUncachedWeights); })
                .find("records no gradients"),
            std::string::npos);
}
