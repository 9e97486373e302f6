// The fused batch norm + SiLU (ops::batch_norm_silu) against finite differences (float64) and
// against the two separate ops it replaces (float32 and float64).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/batchnorm_silu.h"
#include "engine/ops/elementwise.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::all_close;
using kestrel::testing::gradcheck;
using kestrel::testing::random_tensor;

namespace {

constexpr double kEps = 1e-3;
constexpr double kMomentum = 0.03;

struct Params {
  Tensor weight, bias, running_mean, running_var;
};

Params make_params(int64_t channels, DType dtype, uint64_t seed) {
  return {random_tensor({channels}, seed, dtype, 0.5, 1.5),
          random_tensor({channels}, seed + 1, dtype, -0.5, 0.5),
          random_tensor({channels}, seed + 2, dtype, -0.3, 0.3),
          random_tensor({channels}, seed + 3, dtype, 0.5, 2.0)};
}

Params clone(const Params& p) {
  return {p.weight.clone(), p.bias.clone(), p.running_mean.clone(), p.running_var.clone()};
}

struct Result {
  Tensor y, dx, dweight, dbias, running_mean, running_var;
};

// Forward and backward with upstream gradient dy, through the fused op or the two separate ones.
Result run(bool fused, const Tensor& x0, const Params& p0, const Tensor& dy, bool training) {
  Tensor x = x0.clone().set_requires_grad();
  Params p = clone(p0);
  p.weight.set_requires_grad();
  p.bias.set_requires_grad();
  Tensor y = fused ? ops::batch_norm_silu(x, p.weight, p.bias, p.running_mean, p.running_var,
                                          training, kMomentum, kEps)
                   : ops::silu(ops::batch_norm(x, p.weight, p.bias, p.running_mean,
                                               p.running_var, training, kMomentum, kEps));
  autograd::backward({y}, {dy});
  return {y, x.grad(), p.weight.grad(), p.bias.grad(), p.running_mean, p.running_var};
}

void expect_same(const Result& a, const Result& b, double tol, const std::string& where) {
  EXPECT_TRUE(all_close(a.y, b.y, tol, tol)) << "y, " << where;
  EXPECT_TRUE(all_close(a.dx, b.dx, tol, tol)) << "dx, " << where;
  EXPECT_TRUE(all_close(a.dweight, b.dweight, tol, tol)) << "dweight, " << where;
  EXPECT_TRUE(all_close(a.dbias, b.dbias, tol, tol)) << "dbias, " << where;
  EXPECT_TRUE(all_close(a.running_mean, b.running_mean, 0, 0)) << "running_mean, " << where;
  EXPECT_TRUE(all_close(a.running_var, b.running_var, 0, 0)) << "running_var, " << where;
}

}  // namespace

class BatchNormSiluGrad : public ::testing::TestWithParam<Shape> {};

TEST_P(BatchNormSiluGrad, MatchesFiniteDifferencesInTrainingAndEval) {
  const Shape shape = GetParam();
  const int64_t C = shape[3];
  for (bool training : {true, false}) {
    Tensor x = random_tensor(shape, 81, DType::F64, -2, 2).set_requires_grad();
    Params p = make_params(C, DType::F64, 82);
    p.weight.set_requires_grad();
    p.bias.set_requires_grad();
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& in) {
          return ops::batch_norm_silu(in[0], in[1], in[2], p.running_mean, p.running_var,
                                      training, kMomentum, kEps);
        },
        {x, p.weight, p.bias}))
        << (training ? "training" : "eval");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormSiluGrad,
                         ::testing::Values(Shape{2, 3, 5, 4}, Shape{1, 1, 2, 3}, Shape{3, 3, 1, 7},
                                           Shape{2, 1, 3, 33}));

TEST(BatchNormSilu, GradientOfParametersAloneAndOfInputAlone) {
  Tensor x = random_tensor({2, 3, 2, 5}, 91, DType::F64, -1, 1);
  Params p = make_params(5, DType::F64, 92);
  p.weight.set_requires_grad();
  auto f = [&](const std::vector<Tensor>& in) {
    return ops::batch_norm_silu(in[0], in[1], in[2], p.running_mean, p.running_var, true,
                                kMomentum, kEps);
  };
  EXPECT_TRUE(gradcheck(f, {x, p.weight, p.bias}));
  p.weight.set_requires_grad(false);
  x.set_requires_grad();
  EXPECT_TRUE(gradcheck(f, {x, p.weight, p.bias}));
}

// float64: the same math as the separate ops, summed in the same order.
TEST(BatchNormSilu, Float64EqualsTheSeparateOps) {
  for (bool training : {true, false}) {
    const Shape shape{3, 4, 5, 6};
    const Tensor x = random_tensor(shape, 101, DType::F64, -3, 3);
    const Tensor dy = random_tensor(shape, 102, DType::F64, -1, 1);
    const Params p = make_params(6, DType::F64, 103);
    expect_same(run(true, x, p, dy, training), run(false, x, p, dy, training), 1e-12,
                training ? "training" : "eval");
  }
}

// float32: the separate kernels' chunked double sums, and z as a float multiply-add where the
// separate batch norm computes it in double, so the results agree to a few float32 roundings, on
// shapes with one chunk and with many.
TEST(BatchNormSilu, Float32AgreesWithTheSeparateOps) {
  for (const Shape& shape : {Shape{2, 3, 5, 4}, Shape{4, 40, 40, 32}, Shape{2, 20, 20, 255}}) {
    for (bool training : {true, false}) {
      const Tensor x = random_tensor(shape, 111, DType::F32, -4, 5);
      const Tensor dy = random_tensor(shape, 112, DType::F32, -1, 1);
      const Params p = make_params(shape[3], DType::F32, 113);
      const std::string where = Tensor::empty(shape).describe() + (training ? " training" : " eval");
      expect_same(run(true, x, p, dy, training), run(false, x, p, dy, training), 2e-5, where);
    }
  }
}

// Fixed chunks merged in chunk order: the same bits on one thread and on two.
TEST(BatchNormSilu, Float32SameBitsOnOneAndTwoThreads) {
  const Shape shape{4, 40, 40, 32};
  const Tensor x = random_tensor(shape, 121, DType::F32, -4, 5);
  const Tensor dy = random_tensor(shape, 122, DType::F32, -1, 1);
  const Params p = make_params(32, DType::F32, 123);
  omp_set_num_threads(1);
  const Result one = run(true, x, p, dy, true);
  omp_set_num_threads(2);
  const Result two = run(true, x, p, dy, true);
  for (auto [a, b] : {std::pair{one.y, two.y}, {one.dx, two.dx}, {one.dweight, two.dweight}})
    EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * sizeof(float)), 0);
}

// The separate op's checks, with its messages.
TEST(BatchNormSilu, BadArgumentsAreRefusedClearly) {
  const Params p = make_params(4, DType::F32, 131);
  try {
    ops::batch_norm_silu(Tensor::zeros({2, 3, 4}), p.weight, p.bias, p.running_mean,
                         p.running_var, true, kMomentum, kEps);
    ADD_FAILURE() << "a 3-d input was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NHWC"), std::string::npos) << e.what();
  }
  try {
    ops::batch_norm_silu(Tensor::zeros({2, 3, 4, 5}), p.weight, p.bias, p.running_mean,
                         p.running_var, true, kMomentum, kEps);
    ADD_FAILURE() << "5 channels with 4 parameters were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight"), std::string::npos) << e.what();
  }
}
