// The CPU reference of the softmax cross-entropy kernels: per-row losses and log-sum-exp against
// a naive float64 formula (with and without label smoothing, large logits that overflow a naive
// exp), the backward against central finite differences of the forward in float64, float32 within
// float accuracy of float64, and labels outside [0, classes) refused.
#include <cmath>
#include <vector>

#include "kernels/cross_entropy.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kernels::CrossEntropyShape;

namespace {

// loss_r = (1 - eps) * -log_softmax(x)[y] + eps / nc * sum_c -log_softmax(x)[c], in long double
// with the max subtracted.
std::vector<double> naive_loss(const std::vector<double>& x, const std::vector<int64_t>& y,
                               int64_t classes, double eps) {
  std::vector<double> out;
  for (size_t r = 0; r < y.size(); ++r) {
    const double* row = x.data() + r * classes;
    long double m = row[0];
    for (int64_t c = 1; c < classes; ++c) m = std::max<long double>(m, row[c]);
    long double s = 0;
    for (int64_t c = 0; c < classes; ++c) s += std::exp(static_cast<long double>(row[c]) - m);
    const long double lse = m + std::log(s);
    long double smooth = 0;
    for (int64_t c = 0; c < classes; ++c) smooth += lse - row[c];
    out.push_back(static_cast<double>((1 - eps) * (lse - row[y[r]]) + eps / classes * smooth));
  }
  return out;
}

std::vector<double> random_values(size_t n, uint64_t seed, double scale) {
  const Tensor t =
      kestrel::testing::random_tensor({static_cast<int64_t>(n)}, seed, DType::F64, -scale, scale);
  return t.to_vector<double>();
}

struct Forward {
  std::vector<double> loss, lse;
};
Forward forward(const std::vector<double>& x, const std::vector<int64_t>& y, int64_t classes,
                double eps) {
  Forward f{std::vector<double>(y.size()), std::vector<double>(y.size())};
  kernels::cross_entropy_forward_cpu(DType::F64, x.data(), y.data(), f.loss.data(), f.lse.data(),
                                     CrossEntropyShape{static_cast<int64_t>(y.size()), classes},
                                     eps);
  return f;
}

}  // namespace

TEST(CrossEntropyKernel, HandValues) {
  // torch.nn.CrossEntropyLoss()([[1, 2, 3]], [2]) = 0.40760596...; label_smoothing=0.1: 0.50760596.
  const std::vector<double> x = {1, 2, 3};
  const std::vector<int64_t> y = {2};
  EXPECT_NEAR(forward(x, y, 3, 0.0).loss[0], 0.40760596444438013, 1e-15);
  EXPECT_NEAR(forward(x, y, 3, 0.1).loss[0], 0.5076059644443801, 1e-15);
  EXPECT_NEAR(forward(x, y, 3, 0.0).lse[0], 3.40760596444438013, 1e-15);
  // dlogits = softmax - one-hot, times gout.
  const std::vector<double> lse = forward(x, y, 3, 0.0).lse, gout = {2.0};
  std::vector<double> dx(3);
  kernels::cross_entropy_backward_cpu(DType::F64, x.data(), y.data(), lse.data(), gout.data(),
                                      dx.data(), CrossEntropyShape{1, 3}, 0.0);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(dx[0], 2 * std::exp(1.0) / z, 1e-15);
  EXPECT_NEAR(dx[1], 2 * std::exp(2.0) / z, 1e-15);
  EXPECT_NEAR(dx[2], 2 * (std::exp(3.0) / z - 1), 1e-15);
}

TEST(CrossEntropyKernel, MatchesNaiveFormula) {
  for (int64_t classes : {1, 2, 7, 1000}) {
    for (double eps : {0.0, 0.1, 1.0}) {
      SCOPED_TRACE(::testing::Message() << classes << " classes, eps " << eps);
      const int64_t rows = 5;
      const std::vector<double> x = random_values(rows * classes, 3 + classes, 4.0);
      std::vector<int64_t> y(rows);
      for (int64_t r = 0; r < rows; ++r) y[r] = (r * 7 + 3) % classes;
      const std::vector<double> want = naive_loss(x, y, classes, eps);
      const Forward got = forward(x, y, classes, eps);
      for (int64_t r = 0; r < rows; ++r) EXPECT_NEAR(got.loss[r], want[r], 1e-12 * (1 + want[r]));
    }
  }
}

// Logits far beyond exp's range: the max-shifted sum stays finite.
TEST(CrossEntropyKernel, LargeLogitsStayFinite) {
  const std::vector<double> x = {1000.0, 0.0, -1000.0, 800.0};
  const std::vector<int64_t> y = {3};
  const Forward f = forward(x, y, 4, 0.0);
  EXPECT_NEAR(f.loss[0], 200.0, 1e-12);
  EXPECT_NEAR(f.lse[0], 1000.0, 1e-12);
  const std::vector<float> xf = {1000.f, 0.f, -1000.f, 800.f};
  std::vector<float> loss(1), lse(1);
  kernels::cross_entropy_forward_cpu(DType::F32, xf.data(), y.data(), loss.data(), lse.data(),
                                     CrossEntropyShape{1, 4}, 0.1);
  EXPECT_TRUE(std::isfinite(loss[0]));
  EXPECT_NEAR(loss[0], naive_loss(x, y, 4, 0.1)[0], 1e-3);
}

// d(sum_r gout_r loss_r)/dx against central differences of the forward, in float64.
TEST(CrossEntropyKernel, BackwardMatchesFiniteDifferences) {
  for (double eps : {0.0, 0.1}) {
    SCOPED_TRACE(eps);
    const int64_t rows = 3, classes = 5;
    const std::vector<double> x = random_values(rows * classes, 11, 2.0);
    const std::vector<int64_t> y = {0, 4, 2};
    const std::vector<double> gout = {1.0, -0.5, 2.5};
    const Forward f = forward(x, y, classes, eps);
    std::vector<double> dx(x.size());
    kernels::cross_entropy_backward_cpu(DType::F64, x.data(), y.data(), f.lse.data(), gout.data(),
                                        dx.data(), CrossEntropyShape{rows, classes}, eps);
    const double h = 1e-6;
    for (size_t i = 0; i < x.size(); ++i) {
      std::vector<double> xp = x, xm = x;
      xp[i] += h;
      xm[i] -= h;
      const Forward fp = forward(xp, y, classes, eps), fm = forward(xm, y, classes, eps);
      double numeric = 0;
      for (int64_t r = 0; r < rows; ++r) numeric += gout[r] * (fp.loss[r] - fm.loss[r]) / (2 * h);
      EXPECT_NEAR(dx[i], numeric, 1e-8) << i;
    }
  }
}

TEST(CrossEntropyKernel, Float32WithinFloatAccuracyOfFloat64) {
  const int64_t rows = 16, classes = 100;
  const std::vector<double> x = random_values(rows * classes, 21, 8.0);
  std::vector<int64_t> y(rows);
  for (int64_t r = 0; r < rows; ++r) y[r] = (r * 13) % classes;
  const std::vector<float> xf(x.begin(), x.end());
  const Forward want = forward(x, y, classes, 0.1);
  std::vector<float> loss(rows), lse(rows), gout(rows, 1.0f), dxf(x.size());
  kernels::cross_entropy_forward_cpu(DType::F32, xf.data(), y.data(), loss.data(), lse.data(),
                                     CrossEntropyShape{rows, classes}, 0.1);
  kernels::cross_entropy_backward_cpu(DType::F32, xf.data(), y.data(), lse.data(), gout.data(),
                                      dxf.data(), CrossEntropyShape{rows, classes}, 0.1);
  std::vector<double> dx(x.size()), ones(rows, 1.0);
  kernels::cross_entropy_backward_cpu(DType::F64, x.data(), y.data(), want.lse.data(), ones.data(),
                                      dx.data(), CrossEntropyShape{rows, classes}, 0.1);
  for (int64_t r = 0; r < rows; ++r) EXPECT_NEAR(loss[r], want.loss[r], 1e-5 * (1 + want.loss[r]));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(dxf[i], dx[i], 1e-6) << i;
}

TEST(CrossEntropyKernel, LabelsOutsideTheClassesAreRefused) {
  const std::vector<double> x(6, 0.0);
  std::vector<double> loss(2), lse(2);
  for (int64_t bad : {-1, 3, 1000}) {
    const std::vector<int64_t> y = {1, bad};
    EXPECT_EQ(kernels::first_bad_label(y.data(), 2, 3), 1);
    const std::string e = kestrel::testing::error_of([&] {
      kernels::cross_entropy_forward_cpu(DType::F64, x.data(), y.data(), loss.data(), lse.data(),
                                         CrossEntropyShape{2, 3}, 0.0);
    });
    EXPECT_NE(e.find("row 1 has label " + std::to_string(bad)), std::string::npos) << e;
  }
  const std::vector<int64_t> good = {0, 2};
  EXPECT_EQ(kernels::first_bad_label(good.data(), 2, 3), -1);
}
