// Elementwise ops on the CPU: values against hand-computed ones, gradients against finite
// differences in float64.
#include <cmath>

#include "engine/ops/elementwise.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::gradcheck;
using kestrel::testing::random_tensor;

TEST(Elementwise, SiluAndSigmoidValues) {
  Tensor x = Tensor::from_vector<double>({-3.0, -0.5, 0.0, 0.5, 3.0}, {5});
  std::vector<double> s = ops::sigmoid(x).to_double_vector();
  std::vector<double> y = ops::silu(x).to_double_vector();
  std::vector<double> xv = x.to_double_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    double sig = 1.0 / (1.0 + std::exp(-xv[i]));
    EXPECT_NEAR(s[i], sig, 1e-15);
    EXPECT_NEAR(y[i], xv[i] * sig, 1e-15);
  }
}

TEST(Elementwise, BinaryValues) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3}, {3});
  Tensor b = Tensor::from_vector<float>({4, 5, -6}, {3});
  EXPECT_EQ(ops::add(a, b).to_vector<float>(), (std::vector<float>{5, 7, -3}));
  EXPECT_EQ(ops::sub(a, b).to_vector<float>(), (std::vector<float>{-3, -3, 9}));
  EXPECT_EQ(ops::mul(a, b).to_vector<float>(), (std::vector<float>{4, 10, -18}));
  EXPECT_EQ(ops::mul(a, 0.5).to_vector<float>(), (std::vector<float>{0.5f, 1, 1.5f}));
  ops::add_(a, b);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{5, 7, -3}));
}

TEST(Elementwise, MismatchedInputsAreRefused) {
  Tensor a = Tensor::zeros({3});
  EXPECT_THROW(ops::add(a, Tensor::zeros({4})), Error);
  EXPECT_THROW(ops::add(a, Tensor::zeros({3}, DType::F64)), Error);
}

class ElementwiseGrad : public ::testing::TestWithParam<Shape> {};

TEST_P(ElementwiseGrad, UnaryMatchesFiniteDifferences) {
  Tensor x = random_tensor(GetParam(), 1, DType::F64, -4, 4).set_requires_grad();
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::silu(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::sigmoid(in[0]); }, {x}));
}

TEST_P(ElementwiseGrad, BinaryMatchesFiniteDifferences) {
  Tensor a = random_tensor(GetParam(), 2).set_requires_grad();
  Tensor b = random_tensor(GetParam(), 3).set_requires_grad();
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::add(in[0], in[1]); }, {a, b}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::sub(in[0], in[1]); }, {a, b}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::mul(in[0], in[1]); }, {a, b}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::mul(in[0], -2.5); }, {a}));
}

INSTANTIATE_TEST_SUITE_P(Shapes, ElementwiseGrad,
                         ::testing::Values(Shape{1}, Shape{7}, Shape{2, 3, 5, 3}, Shape{1, 5, 1, 9}));
