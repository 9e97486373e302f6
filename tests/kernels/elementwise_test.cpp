// Elementwise ops on the CPU: values against hand-computed ones, gradients against finite
// differences in float64, and the float32 fast kernels (vectorised exp, OpenMP chunks) against the
// float64 reference over extreme inputs, odd lengths and 1 vs 2 threads.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "engine/ops/elementwise.h"
#include "kernels/elementwise.h"
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

namespace {

using kernels::Binary;
using kernels::Unary;

constexpr double kEps32 = std::numeric_limits<float>::epsilon();  // 2^-23
constexpr double kMinNormal32 = std::numeric_limits<float>::min();

// Inputs a SiLU sees and then some: a dense sweep of [-100, 100], the points where exp overflows
// or its result turns subnormal, +-0, subnormal and tiny inputs, +-inf and NaN.
std::vector<float> activation_inputs() {
  std::vector<float> x;
  for (int i = -100000; i <= 100000; ++i) x.push_back(static_cast<float>(i) * 1e-3f);
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, 1.4e-45f, 1e-40f, 1e-38f, 1e-30f, 1e-7f, 1.2785f, 15.0f, 16.7f, 17.0f,
                  30.0f, 87.3f, 87.4f, 88.72f, 88.73f, 89.0f, 100.0f, 103.9f, 104.5f, 1e10f,
                  3.4e38f, inf})
    x.insert(x.end(), {v, -v});
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  return x;
}

std::vector<float> run_unary(Unary op, const std::vector<float>& x) {
  std::vector<float> y(x.size());
  kernels::unary_forward_cpu(op, DType::F32, x.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

std::vector<float> run_unary_backward(Unary op, const std::vector<float>& saved,
                                      const std::vector<float>& dy) {
  std::vector<float> dx(saved.size());
  kernels::unary_backward_cpu(op, DType::F32, saved.data(), dy.data(), dx.data(),
                              static_cast<int64_t>(saved.size()));
  return dx;
}

// fast within tol of exact, or both NaN.
::testing::AssertionResult near_or_both_nan(float fast, double exact, double tol, float x) {
  if (std::isnan(exact) && std::isnan(fast)) return ::testing::AssertionSuccess();
  if (std::abs(double(fast) - exact) <= tol || double(fast) == exact)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "x = " << x << ": got " << fast << ", float64 reference "
                                       << exact << ", tolerance " << tol;
}

// Absolute slack for a SiLU (or its derivative) whose sigmoid fell below float's normal range.
double tiny_abs(float x) { return kMinNormal32 * std::max(1.0, std::abs(double(x))); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  // Empty vectors may hold no pointer at all, and memcmp's may not be null.
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Odd lengths around the vector widths (4, 8, 16 floats) and the 32768-element chunk.
constexpr int64_t kLengths[] = {0, 1, 3, 7, 15, 17, 31, 33, 65, 32767, 32769, 100003};

}  // namespace

// Error budget, in float32 ulps (eps = 2^-23 relative): exp ~1 (<= 2 with FMA), 1 + e and the
// division 0.5 each, SiLU's product 0.5: 3 eps relative covers it. A sigmoid below float's
// normal range (x < -87.3) has no relative precision in float at all (expf's subnormals, then 0
// once exp(-x) overflows), hence an absolute FLT_MIN, which SiLU multiplies by |x|.
TEST(ElementwiseFloat32, SiluAndSigmoidMatchFloat64ReferenceOverExtremes) {
  const std::vector<float> x = activation_inputs();
  const std::vector<float> silu = run_unary(Unary::Silu, x);
  const std::vector<float> sig = run_unary(Unary::Sigmoid, x);
  for (size_t i = 0; i < x.size(); ++i) {
    const double s = kernels::sigmoid_fn<double>(x[i]);
    const double y = kernels::silu_fn<double>(x[i]);
    ASSERT_TRUE(near_or_both_nan(sig[i], s, 3 * kEps32 * std::abs(s) + kMinNormal32, x[i]));
    ASSERT_TRUE(near_or_both_nan(silu[i], y, 3 * kEps32 * std::abs(y) + tiny_abs(x[i]), x[i]));
  }
}

// Saturation as libm's expf gives it: silu(-100) is -0 (exp(100) overflows, x * 0), silu(100) is
// 100, the sigmoid 0 and 1; for every extreme input the fast kernel is within 1e-7 of the float
// reference built on expf, and keeps the sign of zero.
TEST(ElementwiseFloat32, SaturatesLikeExpf) {
  const std::vector<float> x{-1e10f, -104.5f, -100.0f, -89.0f, -88.73f, -30.0f, -17.0f, -0.0f,
                             0.0f,   17.0f,   30.0f,   88.73f, 89.0f,   100.0f, 1e10f};
  const std::vector<float> silu = run_unary(Unary::Silu, x);
  const std::vector<float> sig = run_unary(Unary::Sigmoid, x);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(sig[i], kernels::sigmoid_fn<float>(x[i]), 1e-7) << x[i];
    EXPECT_NEAR(silu[i], kernels::silu_fn<float>(x[i]), 1e-7 * std::max(1.0f, std::abs(x[i])))
        << x[i];
    EXPECT_EQ(std::signbit(silu[i]), std::signbit(kernels::silu_fn<float>(x[i]))) << x[i];
  }
  const std::vector<float> at100 = run_unary(Unary::Silu, {-100.0f, 100.0f});
  EXPECT_EQ(at100[0], 0.0f);
  EXPECT_TRUE(std::signbit(at100[0]));
  EXPECT_EQ(at100[1], 100.0f);
  const std::vector<float> sig100 = run_unary(Unary::Sigmoid, {-100.0f, 100.0f});
  EXPECT_EQ(sig100[0], 0.0f);
  EXPECT_EQ(sig100[1], 1.0f);
}

// d silu = s (1 + x (1 - s)): the error of s (3 eps relative) reaches the result amplified by
// |x| through x (1 - s), and the sum can cancel (the derivative's zero near x = -1.28), so the
// tolerance is 4 eps times the size of the terms, |dy| (|d silu| + |x| s), not of the result
// (plus the forward test's subnormal slack, times |dy|).
TEST(ElementwiseFloat32, ActivationBackwardMatchesFloat64Reference) {
  const std::vector<float> x = activation_inputs();
  std::vector<float> dy(x.size());
  for (size_t i = 0; i < x.size(); ++i) dy[i] = 0.5f + static_cast<float>(i % 7) * 0.25f;
  const std::vector<float> dsilu = run_unary_backward(Unary::Silu, x, dy);
  for (size_t i = 0; i < x.size(); ++i) {
    const double s = kernels::sigmoid_fn<double>(x[i]);
    const double g = double(dy[i]) * kernels::silu_grad_fn<double>(x[i]);
    const double terms = std::abs(dy[i]) * (std::abs(g / dy[i]) + std::abs(double(x[i])) * s);
    ASSERT_TRUE(near_or_both_nan(dsilu[i], g, 4 * kEps32 * terms + tiny_abs(x[i]) * dy[i], x[i]));
  }
  // The sigmoid's backward takes y = sigmoid(x) in [0, 1]: y (1 - y) in float is within 2 eps.
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>(std::abs(i % 1001 / 1000.0));
  const std::vector<float> dsig = run_unary_backward(Unary::Sigmoid, y, dy);
  for (size_t i = 0; i < x.size(); ++i) {
    const double g = double(dy[i]) * kernels::sigmoid_grad_fn<double>(y[i]);
    ASSERT_TRUE(near_or_both_nan(dsig[i], g, 2 * kEps32 * std::abs(g), y[i]));
  }
}

// Every length, tiny to several chunks, not multiples of any vector width: each element equals
// what the same kernel gives on the full array (vector body, tails and chunk edges agree), and
// is near the reference.
TEST(ElementwiseFloat32, OddLengthsGiveTheSameElementsAsOneLongRun) {
  const std::vector<float> all = activation_inputs();
  const std::vector<float> silu_all = run_unary(Unary::Silu, all);
  for (int64_t n : kLengths) {
    const std::vector<float> x(all.begin() + 1000, all.begin() + 1000 + n);
    const std::vector<float> y = run_unary(Unary::Silu, x);
    for (int64_t i = 0; i < n; ++i) {
      const double ref = kernels::silu_fn<double>(x[i]);
      ASSERT_TRUE(near_or_both_nan(y[i], ref, 3 * kEps32 * std::abs(ref) + tiny_abs(x[i]), x[i]))
          << "n " << n;
    }
  }
}

TEST(ElementwiseFloat32, SameBitsOnOneAndTwoThreads) {
  const std::vector<float> x = activation_inputs();
  std::vector<float> dy(x.size(), 0.75f);
  std::vector<std::vector<float>> runs[2];
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    auto& r = runs[threads - 1];
    r.push_back(run_unary(Unary::Silu, x));
    r.push_back(run_unary(Unary::Sigmoid, x));
    r.push_back(run_unary_backward(Unary::Silu, x, dy));
    r.push_back(run_unary_backward(Unary::Sigmoid, r[1], dy));
    std::vector<float> sum(x.size()), affine(x.size());
    kernels::binary_cpu(Binary::Mul, DType::F32, x.data(), dy.data(), sum.data(),
                        static_cast<int64_t>(x.size()), -1.5);
    kernels::affine_scalar_cpu(DType::F32, x.data(), affine.data(), static_cast<int64_t>(x.size()),
                               0.3, -0.7);
    r.push_back(sum);
    r.push_back(affine);
  }
  for (size_t k = 0; k < runs[0].size(); ++k) EXPECT_TRUE(same_bits(runs[0][k], runs[1][k])) << k;
}

// Add, sub and mul round exactly as float arithmetic does (alpha * op(a, b), two roundings), also
// in place (out aliasing a); the scalar affine may fuse its multiply-add, so it is held to one
// rounding of each term.
TEST(ElementwiseFloat32, BinaryAndAffineMatchFloatArithmetic) {
  for (int64_t n : kLengths) {
    std::vector<float> a(n), b(n);
    for (int64_t i = 0; i < n; ++i) {
      a[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
      b[i] = std::cos(0.11f * static_cast<float>(i)) - 0.5f;
    }
    for (Binary op : {Binary::Add, Binary::Sub, Binary::Mul}) {
      std::vector<float> out(n), in_place = a;
      kernels::binary_cpu(op, DType::F32, a.data(), b.data(), out.data(), n, 0.5);
      kernels::binary_cpu(op, DType::F32, in_place.data(), b.data(), in_place.data(), n, 0.5);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(out[i], 0.5f * kernels::binary_fn(op, a[i], b[i])) << "n " << n << " i " << i;
      EXPECT_TRUE(same_bits(out, in_place)) << "n " << n;
    }
    std::vector<float> out(n);
    kernels::affine_scalar_cpu(DType::F32, a.data(), out.data(), n, -1.25, 0.375);
    for (int64_t i = 0; i < n; ++i) {
      const double exact = double(a[i]) * -1.25 + 0.375;
      ASSERT_NEAR(out[i], exact, kEps32 * (std::abs(a[i] * 1.25) + 0.375)) << "n " << n;
    }
  }
}
