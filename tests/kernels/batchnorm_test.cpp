// Batch norm on the CPU: forward values and running statistics against a naive implementation
// written here, gradients against finite differences in float64, the statistics' numerical
// stability at large means (including the shifted-sum + Chan math the CUDA kernels use), the
// merge of partial statistics, argument errors, and the float32 fast kernels (vectorised, OpenMP
// chunks) against the float64 reference, on 1 and 2 threads.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "engine/autograd.h"
#include "engine/ops/batchnorm.h"
#include "kernels/batchnorm.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::all_close;
using kestrel::testing::gradcheck;
using kestrel::testing::random_tensor;

namespace {

constexpr double kEps = 1e-3;       // YOLOv5's
constexpr double kMomentum = 0.03;  // YOLOv5's

struct NaiveStats {
  std::vector<double> mean, var;  // biased variance
};

NaiveStats naive_stats(const std::vector<double>& x, int64_t channels) {
  const int64_t rows = static_cast<int64_t>(x.size()) / channels;
  NaiveStats s{std::vector<double>(channels, 0.0), std::vector<double>(channels, 0.0)};
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t r = 0; r < rows; ++r) s.mean[c] += x[r * channels + c];
    s.mean[c] /= rows;
    for (int64_t r = 0; r < rows; ++r) s.var[c] += std::pow(x[r * channels + c] - s.mean[c], 2);
    s.var[c] /= rows;
  }
  return s;
}

std::vector<double> naive_normalize(const std::vector<double>& x, const NaiveStats& s,
                                    const std::vector<double>& w, const std::vector<double>& b) {
  const int64_t channels = static_cast<int64_t>(w.size());
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t c = static_cast<int64_t>(i) % channels;
    y[i] = (x[i] - s.mean[c]) / std::sqrt(s.var[c] + kEps) * w[c] + b[c];
  }
  return y;
}

struct Params {
  Tensor weight, bias, running_mean, running_var;
};

// weight around 1, bias around 0, running statistics at PyTorch's initial values (0 and 1).
Params make_params(int64_t channels, DType dtype, uint64_t seed) {
  return {random_tensor({channels}, seed, dtype, 0.5, 1.5),
          random_tensor({channels}, seed + 1, dtype, -0.5, 0.5), Tensor::zeros({channels}, dtype),
          Tensor::ones({channels}, dtype)};
}

Tensor bn(const Tensor& x, const Params& p, bool training, double momentum = kMomentum) {
  return ops::batch_norm(x, p.weight, p.bias, p.running_mean, p.running_var, training, momentum,
                         kEps);
}

// Runs fn, expecting a kestrel::Error whose message names the op and contains `needle`.
template <class F>
void expect_error(F fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("batch_norm"), std::string::npos) << message;
    EXPECT_NE(message.find(needle), std::string::npos) << message;
  }
}

}  // namespace

TEST(BatchNorm, TrainingForwardMatchesNaive) {
  for (DType dt : {DType::F64, DType::F32}) {
    const Shape shape{3, 5, 7, 6};
    Tensor x = random_tensor(shape, 11, dt, -2, 3);
    Params p = make_params(6, dt, 12);
    Tensor y = bn(x, p, true);
    const NaiveStats s = naive_stats(x.to_double_vector(), 6);
    Tensor expected = Tensor::from_vector(naive_normalize(x.to_double_vector(), s,
                                                          p.weight.to_double_vector(),
                                                          p.bias.to_double_vector()),
                                          shape);
    // float32: the CPU kernel computes in double, so the only error is the output's rounding.
    const double tol = dt == DType::F64 ? 1e-12 : 1e-6;
    EXPECT_TRUE(all_close(y, expected, tol, tol)) << dtype_name(dt);
  }
}

TEST(BatchNorm, EvalForwardUsesRunningStatistics) {
  const Shape shape{2, 3, 4, 5};
  Tensor x = random_tensor(shape, 21, DType::F64, -2, 2);
  Params p = make_params(5, DType::F64, 22);
  p.running_mean = random_tensor({5}, 23, DType::F64, -1, 1);
  p.running_var = random_tensor({5}, 24, DType::F64, 0.2, 3);
  const std::vector<double> rm = p.running_mean.to_double_vector();
  const std::vector<double> rv = p.running_var.to_double_vector();
  Tensor y = bn(x, p, false);
  Tensor expected = Tensor::from_vector(naive_normalize(x.to_double_vector(), NaiveStats{rm, rv},
                                                        p.weight.to_double_vector(),
                                                        p.bias.to_double_vector()),
                                        shape);
  EXPECT_TRUE(all_close(y, expected, 1e-12, 1e-12));
  EXPECT_EQ(p.running_mean.to_double_vector(), rm);  // eval leaves the buffers alone
  EXPECT_EQ(p.running_var.to_double_vector(), rv);
}

TEST(BatchNorm, RunningStatisticsUseUnbiasedVarianceOverTwoSteps) {
  const int64_t C = 4;
  const double momentum = 0.1;
  for (DType dt : {DType::F64, DType::F32}) {
    Params p = make_params(C, dt, 31);
    Tensor x1 = random_tensor({2, 3, 3, C}, 32, dt, -1, 4);
    Tensor x2 = random_tensor({1, 5, 1, C}, 33, dt, -3, 1);
    std::vector<double> rm(C, 0.0), rv(C, 1.0);
    for (const Tensor& x : {x1, x2}) {
      bn(x, p, true, momentum);
      const double m = static_cast<double>(x.numel() / C);
      const NaiveStats s = naive_stats(x.to_double_vector(), C);
      for (int64_t c = 0; c < C; ++c) {
        rm[c] = (1 - momentum) * rm[c] + momentum * s.mean[c];
        rv[c] = (1 - momentum) * rv[c] + momentum * s.var[c] * m / (m - 1);
      }
    }
    const double tol = dt == DType::F64 ? 1e-12 : 1e-6;
    EXPECT_TRUE(all_close(p.running_mean, Tensor::from_vector(rm, {C}), tol, tol));
    EXPECT_TRUE(all_close(p.running_var, Tensor::from_vector(rv, {C}), tol, tol));
  }
}

// num_batches_tracked: the running-statistics update advances it by one per training forward,
// in the kernel (no host access), and eval leaves it alone; a counter of another type or device is
// refused before anything is updated.
TEST(BatchNorm, TrainingForwardCountsBatchesInTheRunningUpdate) {
  const int64_t C = 3;
  Params p = make_params(C, DType::F32, 41);
  const Tensor x = random_tensor({2, 2, 2, C}, 42, DType::F32);
  Tensor counter = Tensor::zeros({}, DType::I64);
  ops::batch_norm(x, p.weight, p.bias, p.running_mean, p.running_var, true, kMomentum, kEps,
                  counter);
  ops::batch_norm(x, p.weight, p.bias, p.running_mean, p.running_var, true, kMomentum, kEps,
                  counter);
  EXPECT_EQ(counter.to_vector<int64_t>(), std::vector<int64_t>{2});
  ops::batch_norm(x, p.weight, p.bias, p.running_mean, p.running_var, false, kMomentum, kEps,
                  counter);
  EXPECT_EQ(counter.to_vector<int64_t>(), std::vector<int64_t>{2});
  const Tensor mean_before = p.running_mean.clone();
  EXPECT_THROW(ops::batch_norm(x, p.weight, p.bias, p.running_mean, p.running_var, true,
                               kMomentum, kEps, Tensor::zeros({}, DType::F32)),
               Error);
  EXPECT_TRUE(all_close(p.running_mean, mean_before, 0, 0));
  int64_t raw = 5;
  kernels::batch_norm_update_running_cpu(DType::F32, 0, p.running_mean.data_ptr(), kMomentum,
                                         p.running_mean.data_ptr(), p.running_var.data_ptr(),
                                         &raw);
  EXPECT_EQ(raw, 6);
}

TEST(BatchNorm, TrainingUpdatesRunningStatisticsWithoutGrad) {
  autograd::NoGradGuard no_grad;
  Params p = make_params(3, DType::F32, 41);
  Tensor x = random_tensor({2, 2, 2, 3}, 42, DType::F32, 1, 2).set_requires_grad();
  Tensor y = bn(x, p, true);
  EXPECT_FALSE(y.requires_grad());
  for (double v : p.running_mean.to_double_vector()) EXPECT_GT(v, 0.0);
}

// Shapes with odd sizes, a single channel, and very few rows per channel (M = 2, 3).
class BatchNormGrad : public ::testing::TestWithParam<Shape> {};

TEST_P(BatchNormGrad, TrainingMatchesFiniteDifferences) {
  const Shape shape = GetParam();
  const int64_t C = shape[3];
  Tensor x = random_tensor(shape, 51, DType::F64, -2, 2).set_requires_grad();
  Params p = make_params(C, DType::F64, 52);
  p.weight.set_requires_grad();
  p.bias.set_requires_grad();
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<Tensor>& in) {
        return ops::batch_norm(in[0], in[1], in[2], p.running_mean, p.running_var, true,
                               kMomentum, kEps);
      },
      {x, p.weight, p.bias}));
}

TEST_P(BatchNormGrad, EvalMatchesFiniteDifferences) {
  const Shape shape = GetParam();
  const int64_t C = shape[3];
  Tensor x = random_tensor(shape, 61, DType::F64, -2, 2).set_requires_grad();
  Params p = make_params(C, DType::F64, 62);
  p.running_mean = random_tensor({C}, 63, DType::F64, -1, 1);
  p.running_var = random_tensor({C}, 64, DType::F64, 0.2, 2);
  p.weight.set_requires_grad();
  p.bias.set_requires_grad();
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<Tensor>& in) {
        return ops::batch_norm(in[0], in[1], in[2], p.running_mean, p.running_var, false,
                               kMomentum, kEps);
      },
      {x, p.weight, p.bias}));
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormGrad,
                         ::testing::Values(Shape{2, 3, 5, 4}, Shape{3, 1, 1, 1}, Shape{1, 1, 2, 3},
                                           Shape{3, 3, 1, 7}, Shape{1, 5, 3, 1}, Shape{2, 1, 3, 33}));

TEST(BatchNorm, GradientOfParametersAloneAndOfInputAlone) {
  Tensor x = random_tensor({2, 3, 2, 5}, 71, DType::F64, -1, 1);
  Params p = make_params(5, DType::F64, 72);
  p.weight.set_requires_grad();
  auto f = [&](const std::vector<Tensor>& in) {
    return ops::batch_norm(in[0], in[1], in[2], p.running_mean, p.running_var, true, kMomentum,
                           kEps);
  };
  EXPECT_TRUE(gradcheck(f, {x, p.weight, p.bias}));
  p.weight.set_requires_grad(false);
  x.set_requires_grad();
  EXPECT_TRUE(gradcheck(f, {x, p.weight, p.bias}));
}

// Activations with mean 1e4 and std 1: their sum of squares in float32 cancels completely.
TEST(BatchNorm, StatisticsStayAccurateAtLargeMean) {
  const int64_t rows = 10000, C = 3;
  Tensor x = random_tensor({rows, 1, 1, C}, 81, DType::F32, 1e4 - 1.7, 1e4 + 1.7);
  const std::vector<double> xv = x.to_double_vector();
  const NaiveStats exact = naive_stats(xv, C);  // double, two passes, from the same float values

  // The CPU kernel.
  std::vector<float> moments(kernels::moments_size(C));
  kernels::batch_norm_stats_cpu(DType::F32, x.data_ptr(), {rows, C}, moments.data());
  EXPECT_EQ(moments[0], float(rows));
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_NEAR(moments[1 + c], exact.mean[c], 0.5e-3);  // half a float32 ulp at 1e4
    EXPECT_NEAR(moments[1 + C + c], exact.var[c], 1e-6 * exact.var[c]);
  }

  // The CUDA kernels' float32 math, run here: sums shifted by the channel's first value over
  // strided chunks of rows, folded with Chan's formula in the shifted frame. Rounding of float sums
  // of ~300 terms stays well inside 1e-5 relative; the mean is off by its final rounding at most.
  const int chunks = 37;
  for (int64_t c = 0; c < C; ++c) {
    const float k = static_cast<float>(xv[c]);
    kernels::Moments<float> total;
    float naive_sum = 0, naive_sum_sq = 0;
    for (int chunk = 0; chunk < chunks; ++chunk) {
      float n = 0, s = 0, q = 0;
      for (int64_t r = chunk; r < rows; r += chunks) {
        const float v = static_cast<float>(xv[r * C + c]);
        const float d = v - k;
        s += d;
        q += d * d;
        n += 1;
        naive_sum += v;
        naive_sum_sq += v * v;
      }
      total = kernels::merge_moments(total, kernels::moments_from_shifted_sums(n, s, q));
    }
    EXPECT_EQ(total.count, float(rows));
    EXPECT_NEAR(k + total.mean, exact.mean[c], 0.5e-3);  // half a float32 ulp at 1e4
    EXPECT_NEAR(total.m2 / total.count, exact.var[c], 1e-5 * exact.var[c]);
    // What the test guards against: the float32 textbook formula is off by far more than 10%.
    const float naive_var = naive_sum_sq / rows - (naive_sum / rows) * (naive_sum / rows);
    EXPECT_GT(std::abs(naive_var - exact.var[c]), 0.1 * exact.var[c]);
  }

  // And through the op: the output is standardised, up to the float32 mean's rounding (0.5e-3).
  Params p = make_params(C, DType::F32, 82);
  p.weight.fill_(1.0);
  p.bias.fill_(0.0);
  const NaiveStats out = naive_stats(bn(x, p, true).to_double_vector(), C);
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_NEAR(out.mean[c], 0.0, 0.6e-3);
    EXPECT_NEAR(out.var[c], exact.var[c] / (exact.var[c] + kEps), 1e-4);
  }
}

// Moments of two parts (of different sizes, plus an empty rank) merged with Chan's formula equal
// the moments of the whole.
TEST(BatchNorm, MergedPartialStatisticsEqualStatisticsOfTheConcatenation) {
  for (DType dt : {DType::F64, DType::F32}) {
    const int64_t C = 5, rows_a = 12, rows_b = 35;
    Tensor whole = random_tensor({rows_a + rows_b, 1, 1, C}, 91, dt, -3, 8);
    const int64_t stride = kernels::moments_size(C);
    Tensor gathered = Tensor::zeros({3, stride}, dt);  // rank 2 stays empty: count 0
    const size_t elem = whole.element_size();
    const char* base = static_cast<const char*>(whole.data_ptr());
    char* out = static_cast<char*>(gathered.data_ptr());
    kernels::batch_norm_stats_cpu(dt, base, {rows_a, C}, out);
    kernels::batch_norm_stats_cpu(dt, base + rows_a * C * elem, {rows_b, C}, out + stride * elem);
    Tensor merged = Tensor::empty({stride}, dt);
    kernels::batch_norm_merge_moments_cpu(dt, 3, C, gathered.data_ptr(), merged.data_ptr());
    Tensor direct = Tensor::empty({stride}, dt);
    kernels::batch_norm_stats_cpu(dt, whole.data_ptr(), {rows_a + rows_b, C}, direct.data_ptr());
    // float32: both sides are rounded float results of double arithmetic (a few ulps apart).
    const double tol = dt == DType::F64 ? 1e-13 : 1e-6;
    EXPECT_TRUE(all_close(merged, direct, tol, tol)) << dtype_name(dt);
    EXPECT_EQ(merged.to_double_vector()[0], double(rows_a + rows_b));
  }
}

TEST(BatchNorm, BadArgumentsAreRefusedClearly) {
  Tensor x = random_tensor({2, 3, 3, 4}, 101, DType::F32);
  Params p = make_params(4, DType::F32, 102);
  auto call = [&](const Tensor& in, const Params& q, bool training = true, double eps = kEps,
                  double momentum = kMomentum) {
    return ops::batch_norm(in, q.weight, q.bias, q.running_mean, q.running_var, training,
                           momentum, eps);
  };
  Params wrong = p;
  wrong.weight = Tensor::ones({5});
  expect_error([&] { call(x, wrong); }, "weight");
  wrong = p;
  wrong.bias = Tensor::zeros({4}, DType::F64);
  expect_error([&] { call(x, wrong); }, "bias");
  wrong = p;
  wrong.running_var = Tensor::ones({4, 1});
  expect_error([&] { call(x, wrong); }, "running_var");
  wrong = p;
  wrong.running_mean = Tensor::zeros({8}).slice(0, 0, 8, 2);
  expect_error([&] { call(x, wrong); }, "contiguous");
  wrong = p;
  wrong.weight = Tensor();
  expect_error([&] { call(x, wrong); }, "weight");
  expect_error([&] { call(x.reshape({18, 4}), p); }, "NHWC");
  expect_error([&] { call(x.to(DType::F64), p); }, "float64");  // params must follow F64 input
  expect_error([&] { call(random_tensor({1, 1, 1, 4}, 103, DType::F32), p); }, "more than one");
  expect_error([&] { call(x, p, true, 0.0); }, "eps");
  expect_error([&] { call(x, p, true, kEps, 1.5); }, "momentum");
  // A single row is fine in eval mode.
  EXPECT_NO_THROW(call(random_tensor({1, 1, 1, 4}, 104, DType::F32), p, false));
}

namespace {

// One problem for the four kernels, in float32 and the same values widened to float64.
struct Problem {
  kernels::BatchNormShape shape;
  std::vector<float> x, dy, weight, bias;
};

// Channels alternate between means 0, 3 and 1e4 (where a float32 sum of squares cancels), spreads
// 0.5 to 2; dy is the kind of gradient BN sees (mean near 0, some channels with an offset).
Problem make_problem(int64_t rows, int64_t channels, uint64_t seed) {
  Problem p{{rows, channels}, {}, {}, {}, {}};
  p.x = random_tensor({rows, channels}, seed, DType::F32, -1, 1).to_vector<float>();
  p.dy = random_tensor({rows, channels}, seed + 1, DType::F32, -1, 1).to_vector<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < channels; ++c) {
      const float mean = c % 3 == 0 ? 0.0f : (c % 3 == 1 ? 3.0f : 1e4f);
      float& x = p.x[r * channels + c];
      x = mean + x * (0.5f + static_cast<float>(c % 4) * 0.5f);
      p.dy[r * channels + c] += c % 2 == 0 ? 0.0f : 0.25f;
    }
  p.weight = random_tensor({channels}, seed + 2, DType::F32, 0.5, 1.5).to_vector<float>();
  p.bias = random_tensor({channels}, seed + 3, DType::F32, -0.5, 0.5).to_vector<float>();
  return p;
}

template <class T>
std::vector<T> widen(const std::vector<float>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Runs stats, forward, backward reduce and backward apply in precision T; returns their outputs
// (moments, y, sums, dx) in double.
template <class T>
std::vector<std::vector<double>> run_kernels(const Problem& p) {
  const DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  const int64_t C = p.shape.channels;
  const std::vector<T> x = widen<T>(p.x), dy = widen<T>(p.dy), w = widen<T>(p.weight),
                       b = widen<T>(p.bias);
  std::vector<T> moments(kernels::moments_size(C)), y(x.size()), sums(2 * C), dx(x.size());
  kernels::batch_norm_stats_cpu(dt, x.data(), p.shape, moments.data());
  // Both precisions normalise with the same (float32-rounded) statistics, so that each kernel's
  // comparison measures that kernel alone.
  const std::vector<T> stats = widen<T>(std::vector<float>(moments.begin(), moments.end()));
  const T* mean = stats.data() + 1;
  const T* var = stats.data() + 1 + C;
  kernels::batch_norm_forward_cpu(dt, x.data(), p.shape, mean, var, w.data(), b.data(), kEps,
                                  y.data());
  kernels::batch_norm_backward_reduce_cpu(dt, dy.data(), x.data(), p.shape, mean, var, kEps,
                                          sums.data());
  const std::vector<T> sums_f = widen<T>(std::vector<float>(sums.begin(), sums.end()));
  kernels::batch_norm_backward_apply_cpu(dt, dy.data(), x.data(), p.shape, mean, var, w.data(),
                                         kEps, sums_f.data(), stats.data(), dx.data());
  auto to_d = [](const std::vector<T>& v) { return std::vector<double>(v.begin(), v.end()); };
  return {to_d(moments), to_d(y), to_d(sums), to_d(dx)};
}

// Channel counts: the stem input's 3, YOLOv5n's 16 and 64, Detect's odd 255; row counts from one
// row to several 32K-element chunks, none a multiple of a vector width.
struct FastCase {
  int64_t rows, channels;
};
constexpr FastCase kFastCases[] = {{1, 16}, {7, 3}, {5, 255}, {4099, 16},
                                   {25001, 3}, {1031, 64}, {301, 255}};

}  // namespace

// The float32 kernels do the float64 reference's arithmetic in double and round once at the end;
// they only sum in a different order (chunks, then chunk order; one pass with a per-chunk shift
// for the statistics). So each result is within one float32 rounding (eps * |value|) of the
// float64 result, plus the double arithmetic's own error relative to the magnitude of what was
// summed (1e-12 of it: ~1e-16 per operation, grown by the row count and, for the variance, by the
// shifted sums' cancellation, (mean - shift)^2 / var, a few tens here).
TEST(BatchNormFloat32, KernelsMatchFloat64Reference) {
  const double eps32 = std::numeric_limits<float>::epsilon();
  for (const FastCase& fc : kFastCases) {
    const Problem p = make_problem(fc.rows, fc.channels, 200 + fc.rows);
    const auto f32 = run_kernels<float>(p);
    const auto f64 = run_kernels<double>(p);
    const int64_t C = fc.channels;
    // Magnitudes of what each sum adds up, per channel: sum |x|, sum |dy|, sum |dy xhat|.
    std::vector<double> abs_x(C, 0.0), abs_dy(C, 0.0), abs_dy_xhat(C, 0.0);
    for (int64_t i = 0; i < fc.rows * C; ++i) {
      const int64_t c = i % C;
      const double mean = float(f64[0][1 + c]), var = float(f64[0][1 + C + c]);
      abs_x[c] += std::abs(p.x[i]);
      abs_dy[c] += std::abs(p.dy[i]);
      abs_dy_xhat[c] += std::abs(p.dy[i] * (p.x[i] - mean)) / std::sqrt(var + kEps);
    }
    const std::string where = "rows " + std::to_string(fc.rows) + " C " + std::to_string(C);
    auto near = [&](double got, double want, double summed, const std::string& what) {
      EXPECT_NEAR(got, want, eps32 * std::abs(want) + 1e-12 * summed) << what << ", " << where;
    };
    EXPECT_EQ(f32[0][0], double(fc.rows));
    for (int64_t c = 0; c < C; ++c) {
      near(f32[0][1 + c], f64[0][1 + c], abs_x[c] / fc.rows, "mean");
      near(f32[0][1 + C + c], f64[0][1 + C + c], f64[0][1 + C + c], "variance");
      near(f32[2][c], f64[2][c], abs_dy[c], "sum dy");
      near(f32[2][C + c], f64[2][C + c], abs_dy_xhat[c], "sum dy xhat");
    }
    // Per element the same double arithmetic (up to FMA contraction) on O(1) terms.
    for (size_t i = 0; i < f32[1].size(); ++i) {
      near(f32[1][i], f64[1][i], 1.0, "y");
      near(f32[3][i], f64[3][i], 1.0, "dx");
    }
  }
}

// Fixed chunks merged in chunk order: the same bits on one thread and on two.
TEST(BatchNormFloat32, SameBitsOnOneAndTwoThreads) {
  for (const FastCase& fc : kFastCases) {
    const Problem p = make_problem(fc.rows, fc.channels, 300 + fc.rows);
    omp_set_num_threads(1);
    const auto one = run_kernels<float>(p);
    omp_set_num_threads(2);
    const auto two = run_kernels<float>(p);
    for (size_t k = 0; k < one.size(); ++k)
      EXPECT_EQ(std::memcmp(one[k].data(), two[k].data(), one[k].size() * sizeof(double)), 0)
          << "output " << k << ", rows " << fc.rows << " C " << fc.channels;
  }
}
