// BN folding on the CPU: in float64, conv(x, w') + b' equals BatchNorm(conv(x, w)) with running
// statistics (the identity the fold rests on), and the float32 fold equals the float64 one to
// float32 rounding (each output is one product, so within 2 ulp relative).
#include <cmath>

#include "engine/ops/batchnorm.h"
#include "engine/ops/conv.h"
#include "engine/ops/fold_bn.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::all_close;
using kestrel::testing::random_tensor;

namespace {

struct Bn {
  Tensor gamma, beta, mean, var;
};
Bn random_bn(int64_t o, DType t, uint64_t seed) {
  return {random_tensor({o}, seed, t, 0.5, 1.5), random_tensor({o}, seed + 1, t, -0.5, 0.5),
          random_tensor({o}, seed + 2, t, -1.0, 1.0), random_tensor({o}, seed + 3, t, 0.01, 2.0)};
}

}  // namespace

TEST(FoldBn, FoldedConvolutionEqualsConvolutionThenEvalBatchNorm) {
  for (const auto& [c, o, k, stride] : {std::tuple{3, 8, 6, 2}, {16, 32, 3, 1}, {32, 16, 1, 1}, {5, 7, 3, 2}}) {
    const Tensor x = random_tensor({2, 13, 11, c}, 1, DType::F64);
    const Tensor w = random_tensor({o, k, k, c}, 2, DType::F64);
    const Bn bn = random_bn(o, DType::F64, 3);
    const ops::Conv2dParams p{stride, stride, k / 2, k / 2};
    const Tensor reference = ops::batch_norm(ops::conv2d(x, w, Tensor(), p), bn.gamma, bn.beta, bn.mean.clone(),
                                             bn.var.clone(), false, 0.03, 1e-3);
    const ops::FoldedConv f = ops::fold_batch_norm(w, bn.gamma, bn.beta, bn.mean, bn.var, 1e-3);
    EXPECT_TRUE(all_close(ops::conv2d(x, f.weight, f.bias, p), reference, 1e-12, 1e-12)) << "c" << c << " o" << o;
  }
}

TEST(FoldBn, Float32FoldMatchesFloat64) {
  const Tensor w = random_tensor({24, 3, 3, 16}, 5, DType::F64);
  const Bn bn = random_bn(24, DType::F64, 6);
  const ops::FoldedConv ref = ops::fold_batch_norm(w, bn.gamma, bn.beta, bn.mean, bn.var, 1e-3);
  const ops::FoldedConv f32 = ops::fold_batch_norm(w.to(DType::F32), bn.gamma.to(DType::F32), bn.beta.to(DType::F32),
                                                   bn.mean.to(DType::F32), bn.var.to(DType::F32), 1e-3);
  EXPECT_TRUE(all_close(f32.weight, ref.weight, 1e-7, 3e-7));
  EXPECT_TRUE(all_close(f32.bias, ref.bias, 1e-7, 3e-7));
}

TEST(FoldBn, MismatchedParametersAreRefused) {
  const Tensor w = random_tensor({4, 1, 1, 3}, 1, DType::F32);
  const Bn bn = random_bn(5, DType::F32, 2);
  EXPECT_THROW(ops::fold_batch_norm(w, bn.gamma, bn.beta, bn.mean, bn.var, 1e-3), Error);
}
