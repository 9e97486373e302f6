// Max pooling on the CPU against a naive two-pass implementation written from PyTorch's
// definition (pad with -inf, take the window's maximum or NaN; the gradient goes to the first
// element in row-major window order equal to it): values, gradients, ties, padding, NaN and
// -inf, finite differences, and the refusal of bad arguments.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "engine/ops/elementwise.h"
#include "engine/ops/pool.h"
#include "kernels/maxpool.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::gradcheck;
using kestrel::testing::random_tensor;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Pool {
  int64_t k, s, p;
};
void PrintTo(const Pool& p, std::ostream* os) { *os << "k" << p.k << " s" << p.s << " p" << p.p; }

struct Naive {
  Shape shape;
  std::vector<double> y, dx;
};

// Forward and, for output gradient dy (empty: none), the input gradient by scattering.
Naive naive_pool(const Tensor& x, Pool pool, const std::vector<double>& dy = {}) {
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  const int64_t OH = (H + 2 * pool.p - pool.k) / pool.s + 1,
                OW = (W + 2 * pool.p - pool.k) / pool.s + 1;
  const int64_t PH = H + 2 * pool.p, PW = W + 2 * pool.p;
  std::vector<double> v = x.to_double_vector();
  // The padded input, padding -inf; `real` marks input positions.
  std::vector<double> padded(N * PH * PW * C, -kInf);
  std::vector<int64_t> source(padded.size(), -1);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t q = ((n * PH + h + pool.p) * PW + w + pool.p) * C + c;
          source[q] = ((n * H + h) * W + w) * C + c;
          padded[q] = v[source[q]];
        }
  Naive out{{N, OH, OW, C}, {}, std::vector<double>(v.size(), 0.0)};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t c = 0; c < C; ++c) {
          std::vector<int64_t> window;
          for (int64_t kh = 0; kh < pool.k; ++kh)
            for (int64_t kw = 0; kw < pool.k; ++kw)
              window.push_back(((n * PH + oh * pool.s + kh) * PW + ow * pool.s + kw) * C + c);
          bool any_nan = false;
          double m = -kInf;
          for (int64_t q : window) {
            any_nan |= std::isnan(padded[q]);
            m = std::max(m, padded[q]);
          }
          const double value = any_nan ? NAN : m;
          out.y.push_back(value);
          if (dy.empty()) continue;
          for (int64_t q : window) {
            const bool hit = any_nan ? std::isnan(padded[q]) : padded[q] == value;
            if (hit && source[q] >= 0) {
              out.dx[source[q]] += dy[out.y.size() - 1];
              break;
            }
          }
        }
  return out;
}

// Small integers: every gradient sum is exact in any order.
std::vector<double> integer_grad(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> g(n);
  for (double& v : g) v = static_cast<double>(rng() % 17) - 8.0;
  return g;
}

// Distinct values spaced 0.1 apart in random order: no ties, even after finite-difference steps.
Tensor distinct_values(const Shape& shape, uint64_t seed) {
  std::vector<double> v(shape_numel(shape));
  std::iota(v.begin(), v.end(), 0.0);
  std::shuffle(v.begin(), v.end(), std::mt19937_64(seed));
  for (double& x : v) x = 0.1 * x - 3.0;
  return Tensor::from_vector(v, shape);
}

// Compares forward values and gradients (for dy) with the naive implementation.
void expect_matches_naive(const Tensor& x_, Pool pool, uint64_t seed) {
  for (DType dtype : {DType::F64, DType::F32}) {
    Tensor x = x_.to(dtype).detach().set_requires_grad();
    Tensor y = ops::max_pool2d(x, pool.k, pool.s, pool.p);
    std::vector<double> dy = integer_grad(y.numel(), seed);
    const Naive ref = naive_pool(x, pool, dy);
    ASSERT_EQ(y.shape(), ref.shape);
    const std::vector<double> got = y.to_double_vector();
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(ref.y[i]))
        EXPECT_TRUE(std::isnan(got[i])) << "output " << i;
      else
        EXPECT_EQ(got[i], ref.y[i]) << "output " << i;
    }
    y.backward(Tensor::from_vector(dy, y.shape()).to(dtype));
    EXPECT_EQ(x.grad().to_double_vector(), ref.dx) << dtype_name(dtype);
  }
}

void expect_error(const std::function<void()>& fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

class PoolConfigs : public ::testing::TestWithParam<Pool> {};

}  // namespace

TEST_P(PoolConfigs, RandomInputsMatchNaive) {
  uint64_t seed = 1;
  for (const Shape& s :
       {Shape{1, 7, 9, 3}, Shape{2, 5, 5, 2}, Shape{1, 6, 4, 1}, Shape{2, 8, 11, 5}}) {
    expect_matches_naive(random_tensor(s, seed), GetParam(), seed + 100);
    ++seed;
  }
}

TEST_P(PoolConfigs, ConstantInputSendsGradientToFirstOfEachWindow) {
  expect_matches_naive(Tensor::full({2, 7, 6, 3}, 0.5, DType::F64), GetParam(), 7);
}

TEST_P(PoolConfigs, GradientMatchesFiniteDifferences) {
  const Pool p = GetParam();
  auto f = [p](const std::vector<Tensor>& in) { return ops::max_pool2d(in[0], p.k, p.s, p.p); };
  EXPECT_TRUE(gradcheck(f, {distinct_values({1, 6, 7, 2}, 3).set_requires_grad()}));
  EXPECT_TRUE(gradcheck(f, {distinct_values({2, 5, 5, 1}, 4).set_requires_grad()}));
}

// The float32 (and bfloat16) backward scatters each output's gradient; every input element must still
// receive its sum in the gather's order (kernels::maxpool_input_grad, what CUDA runs): the same bits,
// on gradients whose sums round.
TEST_P(PoolConfigs, FloatBackwardIsTheSharedGatherBitForBit) {
  const Pool p = GetParam();
  kernels::PoolShape g;
  g.n = 2, g.h = 9, g.w = 11, g.c = 5, g.kernel = p.k, g.stride = p.s, g.pad = p.p;
  g.out_h = kernels::pool_out_size(g.h, p.k, p.s, p.p);
  g.out_w = kernels::pool_out_size(g.w, p.k, p.s, p.p);
  // Few distinct values: many ties, so windows share their choices and inputs collect several terms.
  std::vector<float> x(g.n * g.h * g.w * g.c), y(g.n * g.out_h * g.out_w * g.c), dy(y.size()), dx(x.size());
  std::vector<uint8_t> window(y.size());
  std::mt19937 rng(5);
  for (float& v : x) v = float(rng() % 4);
  for (float& v : dy) v = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng) * 1e3f;
  kernels::maxpool2d_forward_cpu(DType::F32, x.data(), y.data(), window.data(), g);
  kernels::maxpool2d_backward_cpu(DType::F32, dy.data(), window.data(), dx.data(), g);
  size_t i = 0;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t h = 0; h < g.h; ++h)
      for (int64_t w = 0; w < g.w; ++w)
        for (int64_t c = 0; c < g.c; ++c, ++i)
          ASSERT_EQ(dx[i], kernels::maxpool_input_grad(dy.data(), window.data(), g, n, h, w, c)) << "input " << i;
}

INSTANTIATE_TEST_SUITE_P(Configs, PoolConfigs,
                         ::testing::Values(Pool{5, 1, 2}, Pool{3, 2, 1}, Pool{2, 2, 0},
                                           Pool{3, 1, 0}, Pool{1, 1, 0}, Pool{4, 3, 2},
                                           Pool{3, 3, 1}));

TEST(MaxPool, TiesGoToTheFirstElementInRowMajorOrder) {
  // 3x3 of ones, 2x2 windows, stride 1: window (i, j) starts at (i, j) and keeps it.
  Tensor x = Tensor::ones({1, 3, 3, 1}, DType::F64).set_requires_grad();
  ops::max_pool2d(x, 2, 1, 0).backward(Tensor::ones({1, 2, 2, 1}, DType::F64));
  EXPECT_EQ(x.grad().to_double_vector(), (std::vector<double>{1, 1, 0, 1, 1, 0, 0, 0, 0}));
}

TEST(MaxPool, PaddingNeverWins) {
  // All inputs negative: zero padding would show up as zeros at the border.
  Tensor x = random_tensor({1, 4, 5, 2}, 9, DType::F64, -5, -1);
  Tensor y = ops::max_pool2d(x, 3, 1, 1);
  for (double v : y.to_double_vector()) EXPECT_LT(v, -1.0 + 1e-12);
  expect_matches_naive(x, {3, 1, 1}, 9);
  expect_matches_naive(x, {5, 1, 2}, 10);
}

TEST(MaxPool, NanPropagatesAndTakesTheGradient) {
  std::vector<double> v = random_tensor({1, 6, 6, 1}, 11).to_double_vector();
  v[2 * 6 + 3] = NAN;
  Tensor x = Tensor::from_vector(v, {1, 6, 6, 1}).set_requires_grad();
  Tensor y = ops::max_pool2d(x, 3, 1, 1);
  std::vector<double> out = y.to_double_vector();
  for (int64_t oh = 0; oh < 6; ++oh)
    for (int64_t ow = 0; ow < 6; ++ow) {
      const bool covers = std::abs(oh - 2) <= 1 && std::abs(ow - 3) <= 1;
      EXPECT_EQ(std::isnan(out[oh * 6 + ow]), covers) << oh << ", " << ow;
    }
  y.backward(Tensor::ones(y.shape(), DType::F64));
  EXPECT_EQ(x.grad().to_double_vector()[2 * 6 + 3], 9.0);  // every window that contains it
  expect_matches_naive(x.detach(), {3, 1, 1}, 12);
  expect_matches_naive(x.detach(), {2, 2, 0}, 13);
}

TEST(MaxPool, WindowsOfMinusInfinityChooseTheirFirstInput) {
  expect_matches_naive(Tensor::full({1, 5, 4, 2}, -kInf, DType::F64), {5, 1, 2}, 14);
  std::vector<double> v(5 * 5, -kInf);
  v[12] = 1.0;
  expect_matches_naive(Tensor::from_vector(v, {1, 5, 5, 1}), {3, 2, 1}, 15);
}

TEST(MaxPool, SppfChainOfThree) {
  // YOLOv5's SPPF: the same k5 s1 p2 pool three times; sizes are preserved. Duplicated maxima
  // (one input chosen by several windows) create ties in the later pools, which the gradient
  // must resolve consistently.
  auto sppf = [](const std::vector<Tensor>& in) {
    Tensor y1 = ops::max_pool2d(in[0], 5, 1, 2);
    Tensor y2 = ops::max_pool2d(y1, 5, 1, 2);
    Tensor y3 = ops::max_pool2d(y2, 5, 1, 2);
    EXPECT_EQ(y3.shape(), in[0].shape());
    return ops::add(ops::add(y1, y2), y3);
  };
  EXPECT_TRUE(gradcheck(sppf, {distinct_values({1, 7, 6, 2}, 16).set_requires_grad()}));
}

TEST(MaxPool, BadArgumentsAreRefused) {
  Tensor x = Tensor::zeros({1, 6, 6, 2});
  expect_error([&] { ops::max_pool2d(Tensor::zeros({6, 6, 2}), 3, 1, 1); }, "NHWC");
  expect_error([&] { ops::max_pool2d(x, 3, 1, 2); }, "padding 2");
  expect_error([&] { ops::max_pool2d(x, 3, 1, -1); }, "padding -1");
  expect_error([&] { ops::max_pool2d(x, 0, 1, 0); }, "kernel 0");
  expect_error([&] { ops::max_pool2d(Tensor::zeros({1, 20, 20, 1}), 17, 1, 0); }, "kernel 17");
  expect_error([&] { ops::max_pool2d(x, 3, 0, 1); }, "stride");
  expect_error([&] { ops::max_pool2d(Tensor::zeros({1, 2, 6, 1}), 5, 1, 1); }, "smaller than");
  Tensor bytes = Tensor::zeros({1, 6, 6, 1}, DType::U8);
  expect_error([&] { ops::max_pool2d(bytes, 3, 1, 1); }, "max_pool2d");
}
