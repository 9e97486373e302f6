// ops::cross_entropy (the reference's nn.CrossEntropyLoss(label_smoothing=eps), mean reduction):
// hand values, label smoothing 0 and 0.1 against a naive float64 formula, gradients against
// finite differences in float64 (through the mean, and the per-row form with an arbitrary
// incoming gradient), float32 against float64, the dtypes of loss and gradient, and bad inputs
// refused (labels outside [0, nc), shapes, dtypes, devices).
#include <cmath>
#include <vector>

#include "engine/ops/cross_entropy.h"
#include "engine/ops/elementwise.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::error_of;
using kestrel::testing::random_tensor;

namespace {

Tensor labels_of(const std::vector<int64_t>& y) {
  return Tensor::from_vector<int64_t>(y, {static_cast<int64_t>(y.size())});
}

// The reference formula, per row, in double: -(1 - eps) log p_y - eps / nc sum_c log p_c.
double naive_mean_loss(const Tensor& logits, const std::vector<int64_t>& y, double eps) {
  const std::vector<double> x = logits.to(DType::F64).to_double_vector();
  const int64_t nc = logits.size(1);
  double total = 0;
  for (size_t r = 0; r < y.size(); ++r) {
    double z = 0;
    for (int64_t c = 0; c < nc; ++c) z += std::exp(x[r * nc + c]);
    double row = 0;
    for (int64_t c = 0; c < nc; ++c) {
      const double logp = x[r * nc + c] - std::log(z);
      row -= (eps / nc) * logp;
      if (c == y[r]) row -= (1 - eps) * logp;
    }
    total += row;
  }
  return total / static_cast<double>(y.size());
}

}  // namespace

TEST(CrossEntropy, HandValuesAsTorch) {
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 0.5f, -1, 2}, {2, 3});
  // torch: CrossEntropyLoss()([[1, 2, 3]], [2]) = 0.4076059644; with label_smoothing 0.1,
  // 0.5076059644.
  EXPECT_NEAR(ops::cross_entropy(x.slice(0, 0, 1), labels_of({2}), 0.0).item(), 0.40760596444438,
              1e-6);
  EXPECT_NEAR(ops::cross_entropy(x.slice(0, 0, 1), labels_of({2}), 0.1).item(), 0.50760596444438,
              1e-6);
  const Tensor loss = ops::cross_entropy(x, labels_of({2, 0}), 0.0);
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_EQ(loss.dtype(), DType::F32);
  const double row1 = std::log(std::exp(0.5) + std::exp(-1.0) + std::exp(2.0)) - 0.5;
  EXPECT_NEAR(loss.item(), (0.40760596444438 + row1) / 2, 1e-6);
}

TEST(CrossEntropy, MatchesNaiveFormulaWithAndWithoutSmoothing) {
  for (double eps : {0.0, 0.1}) {
    SCOPED_TRACE(eps);
    const Tensor x = random_tensor({8, 10}, 5, DType::F64, -3, 3);
    const std::vector<int64_t> y = {0, 9, 3, 3, 7, 1, 2, 5};
    EXPECT_NEAR(ops::cross_entropy(x, labels_of(y), eps).item(), naive_mean_loss(x, y, eps), 1e-13);
    const Tensor rows = ops::cross_entropy_rows(x, labels_of(y), eps);
    ASSERT_EQ(rows.shape(), (Shape{8}));
    EXPECT_NEAR(rows.to_vector<double>()[1], naive_mean_loss(x.slice(0, 1, 2), {9}, eps), 1e-13);
  }
}

TEST(CrossEntropy, GradientsMatchFiniteDifferences) {
  for (double eps : {0.0, 0.1}) {
    SCOPED_TRACE(eps);
    const Tensor y = labels_of({1, 0, 4, 2});
    const Tensor x = random_tensor({4, 5}, 9, DType::F64, -2, 2).set_requires_grad();
    EXPECT_TRUE(kestrel::testing::gradcheck(
        [&](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], y, eps); }, {x}));
    EXPECT_TRUE(kestrel::testing::gradcheck(
        [&](const std::vector<Tensor>& in) { return ops::cross_entropy_rows(in[0], y, eps); },
        {x}));
    // A non-contiguous view of the logits: the gradient lands in the view's geometry.
    const Tensor xt = random_tensor({5, 4}, 10, DType::F64, -2, 2).set_requires_grad();
    EXPECT_TRUE(kestrel::testing::gradcheck(
        [&](const std::vector<Tensor>& in) {
          return ops::cross_entropy(in[0].transpose(0, 1), y, eps);
        },
        {xt}));
  }
}

// dlogits = (softmax - smoothed one-hot) * g / B, by hand for one row pair.
TEST(CrossEntropy, GradientByHand) {
  const Tensor x = Tensor::from_vector<double>({1, 2, 3, 0, 0, 0}, {2, 3}).set_requires_grad();
  const Tensor loss = ops::cross_entropy(x, labels_of({2, 1}), 0.3);
  loss.backward();
  const std::vector<double> g = x.grad().to_vector<double>();
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const double off = 0.1, on = 0.7 + 0.1;  // eps / nc, 1 - eps + eps / nc
  EXPECT_NEAR(g[0], (std::exp(1.0) / z - off) / 2, 1e-15);
  EXPECT_NEAR(g[2], (std::exp(3.0) / z - on) / 2, 1e-15);
  EXPECT_NEAR(g[3], (1.0 / 3 - off) / 2, 1e-15);
  EXPECT_NEAR(g[4], (1.0 / 3 - on) / 2, 1e-15);
}

TEST(CrossEntropy, Float32AgreesWithFloat64) {
  const Tensor x64 = random_tensor({32, 100}, 12, DType::F64, -6, 6);
  std::vector<int64_t> yv(32);
  for (int64_t i = 0; i < 32; ++i) yv[i] = (i * 37) % 100;
  const Tensor y = labels_of(yv);
  const Tensor x32 = x64.to(DType::F32).set_requires_grad();
  const Tensor x64g = x32.detach().to(DType::F64).set_requires_grad();
  const Tensor l32 = ops::cross_entropy(x32, y, 0.1), l64 = ops::cross_entropy(x64g, y, 0.1);
  EXPECT_EQ(l64.dtype(), DType::F64);
  EXPECT_NEAR(l32.item(), l64.item(), 1e-6 * std::abs(l64.item()));
  l32.backward();
  l64.backward();
  EXPECT_EQ(x32.grad().dtype(), DType::F32);
  EXPECT_TRUE(kestrel::testing::all_close(x32.grad(), x64g.grad(), 1e-8, 1e-5));
}

TEST(CrossEntropy, BadInputIsRefused) {
  const Tensor x = Tensor::zeros({2, 3});
  for (int64_t bad : {-1, 3}) {
    const std::string e = error_of([&] { ops::cross_entropy(x, labels_of({0, bad}), 0.0); });
    EXPECT_NE(e.find("class label " + std::to_string(bad) + " at row 1 is outside [0, 3)"),
              std::string::npos)
        << e;
  }
  EXPECT_NE(error_of([&] { ops::check_class_labels(labels_of({5}), 5); }), "");
  EXPECT_EQ(error_of([&] { ops::check_class_labels(labels_of({4, 0}), 5); }), "");
  EXPECT_NE(error_of([&] {
              ops::cross_entropy(x, labels_of({0}), 0.0);
            }).find("labels must be int64 [2]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ops::cross_entropy(x, Tensor::zeros({2}), 0.0); }), "");  // float labels
  EXPECT_NE(error_of([&] {
              ops::cross_entropy(Tensor::zeros({2, 3, 1}), labels_of({0, 0}), 0.0);
            }),
            "");
  EXPECT_NE(error_of([&] { ops::cross_entropy(x, labels_of({0, 0}), 1.5); }), "");
  EXPECT_NE(error_of([&] {
              ops::cross_entropy(Tensor::zeros({2, 3}, DType::I64), labels_of({0, 0}), 0.0);
            }),
            "");
  // The mean over no rows is NaN, as the reference's.
  EXPECT_TRUE(std::isnan(ops::cross_entropy(Tensor::zeros({0, 3}), labels_of({}), 0.0).item()));
}
