// Nearest 2x upsampling on the CPU: values and block-sum gradients against naive loops written
// from the definition, gradients against finite differences, and the refusal of bad inputs.
#include <cmath>
#include <string>

#include "engine/ops/upsample.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::gradcheck;
using kestrel::testing::random_tensor;

namespace {

// y[n, oh, ow, c] = x[n, oh / 2, ow / 2, c].
std::vector<double> naive_upsample(const Tensor& x) {
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  std::vector<double> v = x.to_double_vector(), out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < 2 * H; ++oh)
      for (int64_t ow = 0; ow < 2 * W; ++ow)
        for (int64_t c = 0; c < C; ++c) out.push_back(v[((n * H + oh / 2) * W + ow / 2) * C + c]);
  return out;
}

// dx[n, h, w, c] = sum over a, b in {0, 1} of dy[n, 2h + a, 2w + b, c].
std::vector<double> naive_block_sums(const Tensor& dy) {
  const int64_t N = dy.size(0), H = dy.size(1) / 2, W = dy.size(2) / 2, C = dy.size(3);
  std::vector<double> v = dy.to_double_vector(), out(N * H * W * C, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < 2 * H; ++oh)
      for (int64_t ow = 0; ow < 2 * W; ++ow)
        for (int64_t c = 0; c < C; ++c)
          out[((n * H + oh / 2) * W + ow / 2) * C + c] +=
              v[((n * 2 * H + oh) * 2 * W + ow) * C + c];
  return out;
}

class UpsampleShapes : public ::testing::TestWithParam<Shape> {};

}  // namespace

TEST_P(UpsampleShapes, ValuesMatchNaive) {
  const Shape& s = GetParam();
  for (DType dtype : {DType::F32, DType::F64, DType::BF16, DType::U8}) {
    Tensor x = random_tensor(s, 1, DType::F64, 0, 200).to(dtype);
    Tensor y = ops::upsample_nearest2x(x);
    EXPECT_EQ(y.shape(), (Shape{s[0], 2 * s[1], 2 * s[2], s[3]}));
    EXPECT_EQ(y.dtype(), dtype);
    EXPECT_EQ(y.to_double_vector(), naive_upsample(x)) << dtype_name(dtype);
  }
}

TEST_P(UpsampleShapes, BackwardSumsEachBlock) {
  const Shape& s = GetParam();
  for (DType dtype : {DType::F32, DType::F64}) {
    Tensor x = random_tensor(s, 2, dtype).set_requires_grad();
    // Small integers: every block sum is exact in float32 too.
    const Shape out{s[0], 2 * s[1], 2 * s[2], s[3]};
    std::vector<double> ints;
    for (double v : random_tensor(out, 3, DType::F64, -8, 8).to_double_vector())
      ints.push_back(std::trunc(v));
    Tensor dy = Tensor::from_vector(ints, out).to(dtype);
    ops::upsample_nearest2x(x).backward(dy);
    EXPECT_EQ(x.grad().to_double_vector(), naive_block_sums(dy)) << dtype_name(dtype);
  }
}

TEST_P(UpsampleShapes, GradientMatchesFiniteDifferences) {
  Tensor x = random_tensor(GetParam(), 4).set_requires_grad();
  EXPECT_TRUE(
      gradcheck([](const std::vector<Tensor>& in) { return ops::upsample_nearest2x(in[0]); }, {x}));
}

INSTANTIATE_TEST_SUITE_P(Shapes, UpsampleShapes,
                         ::testing::Values(Shape{1, 1, 1, 1}, Shape{1, 3, 5, 7}, Shape{2, 4, 3, 5},
                                           Shape{2, 1, 6, 8}, Shape{3, 2, 2, 3}));

TEST(Upsample, NonContiguousInputIsReadThroughItsStrides) {
  Tensor nchw = random_tensor({2, 5, 3, 4}, 5, DType::F32);
  Tensor nhwc_view = nchw.permute({0, 2, 3, 1});
  EXPECT_EQ(ops::upsample_nearest2x(nhwc_view).to_double_vector(),
            naive_upsample(nhwc_view.contiguous()));
}

TEST(Upsample, BadInputsAreRefused) {
  try {
    ops::upsample_nearest2x(Tensor::zeros({4, 4, 3}));
    ADD_FAILURE() << "a 3-d input was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NHWC"), std::string::npos) << e.what();
  }
  // Backward arithmetic on the CPU is float32, float64 and bfloat16 (its --amp bf16); the error
  // names the op.
  try {
    Tensor x = Tensor::zeros({1, 2, 2, 1}, DType::F16).set_requires_grad();
    ops::upsample_nearest2x(x).backward(Tensor::zeros({1, 4, 4, 1}, DType::F16));
    ADD_FAILURE() << "f16 backward on the CPU was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("upsample_nearest2x"), std::string::npos) << e.what();
  }
}
