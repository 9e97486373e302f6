// NCHW <-> NHWC conversions and images_to_input on the CPU: values against naive index loops,
// gradients against finite differences, and the refusal of bad inputs.
#include <string>

#include "engine/ops/layout.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::gradcheck;
using kestrel::testing::random_tensor;

namespace {

// out[n, h, w, c] = x[n, c, h, w].
std::vector<double> naive_to_nhwc(const Tensor& x) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  std::vector<double> v = x.to_double_vector(), out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w)
        for (int64_t c = 0; c < C; ++c) out.push_back(v[((n * C + c) * H + h) * W + w]);
  return out;
}

// out[n, c, h, w] = x[n, h, w, c].
std::vector<double> naive_to_nchw(const Tensor& x) {
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  std::vector<double> v = x.to_double_vector(), out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) out.push_back(v[((n * H + h) * W + w) * C + c]);
  return out;
}

void expect_error(const std::function<void()>& fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

class LayoutShapes : public ::testing::TestWithParam<Shape> {};

}  // namespace

TEST_P(LayoutShapes, ValuesMatchNaive) {
  const Shape& s = GetParam();  // read as [N, C, H, W] going one way, [N, H, W, C] the other
  for (DType dtype : {DType::F32, DType::F64, DType::BF16, DType::U8}) {
    Tensor x = random_tensor(s, 1, DType::F64, 0, 250).to(dtype);
    Tensor nhwc = ops::nchw_to_nhwc(x);
    EXPECT_EQ(nhwc.shape(), (Shape{s[0], s[2], s[3], s[1]}));
    EXPECT_EQ(nhwc.dtype(), dtype);
    EXPECT_EQ(nhwc.to_double_vector(), naive_to_nhwc(x)) << dtype_name(dtype);
    Tensor nchw = ops::nhwc_to_nchw(x);
    EXPECT_EQ(nchw.shape(), (Shape{s[0], s[3], s[1], s[2]}));
    EXPECT_EQ(nchw.to_double_vector(), naive_to_nchw(x)) << dtype_name(dtype);
    EXPECT_EQ(ops::nhwc_to_nchw(nhwc).to_double_vector(), x.to_double_vector());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LayoutShapes,
    // Full 32x32 tiles with partial ones at the edges, tiles spanning a short dimension
    // (3 channels: 351-wide tiles; 2: 352-high ones), and both dimensions short.
    ::testing::Values(Shape{1, 1, 1, 1}, Shape{2, 3, 5, 7}, Shape{1, 4, 1, 9}, Shape{3, 5, 2, 1},
                      Shape{2, 33, 3, 11}, Shape{1, 70, 9, 8}, Shape{2, 3, 40, 30},
                      Shape{1, 40, 30, 2}, Shape{2, 64, 4, 8}));

TEST(Layout, GradientsMatchFiniteDifferences) {
  for (const Shape& s :
       {Shape{1, 1, 1, 1}, Shape{2, 3, 5, 7}, Shape{3, 5, 2, 1}, Shape{1, 33, 2, 17}}) {
    Tensor x = random_tensor(s, 2).set_requires_grad();
    EXPECT_TRUE(
        gradcheck([](const std::vector<Tensor>& in) { return ops::nchw_to_nhwc(in[0]); }, {x}));
    EXPECT_TRUE(
        gradcheck([](const std::vector<Tensor>& in) { return ops::nhwc_to_nchw(in[0]); }, {x}));
  }
}

TEST(Layout, NonContiguousInputIsReadThroughItsStrides) {
  Tensor base = random_tensor({2, 5, 4, 3}, 3, DType::F32);
  Tensor view = base.transpose(2, 3);
  EXPECT_EQ(ops::nchw_to_nhwc(view).to_double_vector(), naive_to_nhwc(view.contiguous()));
}

TEST(Layout, ImagesToInputScalesEveryByteValue) {
  std::vector<uint8_t> bytes(256 * 3);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i % 256);
  Tensor images = Tensor::from_vector(bytes, {2, 4, 32, 3});
  // float32 is the reference's img.float() / 255, bit for bit (a correctly rounded quotient).
  std::vector<float> f = ops::images_to_input(images, DType::F32).to_vector<float>();
  for (size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(f[i], static_cast<float>(bytes[i]) / 255.0f);
  std::vector<double> d = ops::images_to_input(images, DType::F64, 0.5).to_vector<double>();
  for (size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(d[i], bytes[i] * 0.5);
  EXPECT_EQ(ops::images_to_input(images, DType::F32).shape(), images.shape());
  // A batch of several of the conversion's parallel chunks (2^16 values each), every value.
  std::vector<uint8_t> many(3 * 65536 + 123);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<uint8_t>((i * 7) % 256);
  const std::vector<float> g =
      ops::images_to_input(Tensor::from_vector(many, {1, 1, int64_t(many.size()) / 3, 3}), DType::F32).to_vector<float>();
  for (size_t i = 0; i < many.size(); ++i) ASSERT_EQ(g[i], static_cast<float>(many[i]) / 255.0f) << i;
}

TEST(Layout, ImagesToInputOfANonContiguousBatch) {
  std::vector<uint8_t> bytes(2 * 3 * 4 * 5);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  Tensor nchw = Tensor::from_vector(bytes, {2, 3, 4, 5});
  Tensor nhwc_view = nchw.permute({0, 2, 3, 1});
  std::vector<double> expected;
  for (double v : naive_to_nhwc(nchw)) expected.push_back(v * 2.0);
  EXPECT_EQ(ops::images_to_input(nhwc_view, DType::F64, 2.0).to_double_vector(), expected);
}

TEST(Layout, BadInputsAreRefused) {
  expect_error([] { ops::nchw_to_nhwc(Tensor::zeros({3, 4, 5})); }, "nchw_to_nhwc");
  expect_error([] { ops::nhwc_to_nchw(Tensor::zeros({1, 3, 4, 5, 6})); }, "nhwc_to_nchw");
  Tensor images = Tensor::zeros({1, 4, 4, 3}, DType::U8);
  expect_error([] { ops::images_to_input(Tensor::zeros({1, 4, 4, 3}), DType::F32); }, "uint8");
  expect_error([&] { ops::images_to_input(images, DType::U8); }, "floating");
  Tensor three_d = Tensor::zeros({4, 4, 3}, DType::U8);
  expect_error([&] { ops::images_to_input(three_d, DType::F32); }, "images_to_input");
  // The CPU makes float32, float64 and bfloat16 input (its bfloat16 inference); float16 input is
  // made on the device.
  expect_error([&] { ops::images_to_input(images, DType::F16); }, "images_to_input");
}
