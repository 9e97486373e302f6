// SyncBN on in-process ranks (tests/dist/fake_group.h) against the single-process op
// (ops::batch_norm) on the concatenated batch: the output, dx, the summed weight/bias gradients and
// the running statistics must agree. Float64 makes the comparison tight (1e-12): the only
// differences are summation orders. Ranks hold different batch sizes, one even an empty batch.
#include "dist/sync_batchnorm.h"

#include <gtest/gtest.h>

#include "engine/ops/batchnorm.h"
#include "engine/ops/concat.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/reduce.h"
#include "kernels/bf16_operands.h"
#include "tests/dist/fake_group.h"
#include "tests/support/testing.h"

namespace kestrel::dist {
namespace {

using kestrel::testing::all_close;
using kestrel::testing::random_tensor;
using testing::FakeGroup;
using testing::run_ranks;

constexpr int64_t kH = 3, kW = 2, kC = 4;
constexpr double kMomentum = 0.1, kEps = 1e-3;

struct Params {
  Tensor weight, bias, running_mean, running_var;
};

Params make_params(DType x_dtype) {
  const DType dtype = ops::bn_steps::param_dtype(x_dtype);  // float32 beside bfloat16 activations
  Params p{random_tensor({kC}, 1, dtype, 0.5, 1.5).set_requires_grad(true),
           random_tensor({kC}, 2, dtype).set_requires_grad(true), random_tensor({kC}, 3, dtype),
           random_tensor({kC}, 4, dtype, 0.5, 1.5)};
  return p;
}

// The batch of rank r: rows[r] images, values offset by `mean` (large means test the merge).
Tensor rank_batch(int r, int64_t n, DType dtype, double mean) {
  return random_tensor({n, kH, kW, kC}, 10 + r, DType::F64, mean - 2.0, mean + 2.0).to(dtype);
}

struct Result {
  Tensor y, dx, dweight, dbias, running_mean, running_var;
};

// One training step of BN on every rank's batch, either synchronised (per rank) or as one
// process on the concatenation; loss = sum(y * g) with a fixed random g.
Result bn_step(const Tensor& x_in, const Tensor& g, const std::shared_ptr<ProcessGroup>& group,
               DType dtype) {
  Params p = make_params(dtype);
  Tensor x = x_in.detach().set_requires_grad(true);
  Tensor y = group ? sync_batch_norm(x, p.weight, p.bias, p.running_mean, p.running_var, true,
                                     kMomentum, kEps, group)
                   : ops::batch_norm(x, p.weight, p.bias, p.running_mean, p.running_var, true,
                                     kMomentum, kEps);
  // bfloat16 activations: the weighted sum in float32 (its gradient reaches y rounded).
  if (dtype == DType::BF16)
    ops::sum_all(ops::mul(y.to(DType::F32), g.to(DType::F32))).backward();
  else
    ops::sum_all(ops::mul(y, g)).backward();
  return {y.detach(), x.grad(), p.weight.grad(), p.bias.grad(), p.running_mean, p.running_var};
}

void compare_with_concatenated(const std::vector<int64_t>& rows, DType dtype, double mean,
                               double atol, double rtol) {
  const int ranks = static_cast<int>(rows.size());
  std::vector<Tensor> xs, gs;
  for (int r = 0; r < ranks; ++r) {
    xs.push_back(rank_batch(r, rows[r], dtype, mean));
    gs.push_back(random_tensor({rows[r], kH, kW, kC}, 50 + r, DType::F64).to(dtype));
  }
  const Result ref = bn_step(ops::concat(xs, 0), ops::concat(gs, 0), nullptr, dtype);
  std::vector<Result> got(ranks);
  run_ranks(ranks, [&](std::shared_ptr<FakeGroup> group) {
    const int r = group->rank();
    got[r] = bn_step(xs[r], gs[r], group, dtype);
    EXPECT_EQ(group->all_gathers, 1);  // forward: the moments
    EXPECT_EQ(group->all_reduces, 1);  // backward: the two sums
  });
  int64_t start = 0;
  const DType pt = ops::bn_steps::param_dtype(dtype);
  Tensor dweight = Tensor::zeros({kC}, pt), dbias = Tensor::zeros({kC}, pt);
  for (int r = 0; r < ranks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const int64_t end = start + rows[r];
    EXPECT_TRUE(all_close(got[r].y, ref.y.slice(0, start, end), atol, rtol));
    EXPECT_TRUE(all_close(got[r].dx, ref.dx.slice(0, start, end), atol, rtol));
    EXPECT_TRUE(all_close(got[r].running_mean, ref.running_mean, atol, rtol));
    EXPECT_TRUE(all_close(got[r].running_var, ref.running_var, atol, rtol));
    // Each rank's weight/bias gradient is its own batch's share; the Reducer sums them (here:
    // the loss is a sum over the batch, so the shares add up to the whole batch's gradient).
    ops::add_(dweight, got[r].dweight);
    ops::add_(dbias, got[r].dbias);
    start = end;
  }
  EXPECT_TRUE(all_close(dweight, ref.dweight, atol, rtol));
  EXPECT_TRUE(all_close(dbias, ref.dbias, atol, rtol));
}

TEST(SyncBatchNormTest, TwoRanksEqualBatchNormOnTheConcatenatedBatch) {
  compare_with_concatenated({2, 3}, DType::F64, 0.0, 1e-12, 1e-10);
}

TEST(SyncBatchNormTest, ThreeRanksWithOneEmptyBatch) {
  compare_with_concatenated({3, 0, 1}, DType::F64, 0.0, 1e-12, 1e-10);
}

// float32 activations around 1000 with spread 1: a pooled fp32 sum of squares would lose every
// significant digit of the variance; the Chan merge keeps the error at float32 rounding of the
// normalised values. Both sides run in float32, so the tolerance is a few float32 ulps of O(1)
// outputs amplified by the mean/std ratio of the input (1000 / 1).
TEST(SyncBatchNormTest, Float32LargeMeanStaysAccurate) {
  compare_with_concatenated({2, 2}, DType::F32, 1000.0, 2e-3, 1e-3);
}

// The CPU's --amp bf16 with --sync-bn: bfloat16 activations, float32 statistics and parameter
// gradients. The merged moments differ from one pass over the batch by float32 roundings only, and
// y and dx are stored in bfloat16: within a rounding or two of the single process's.
TEST(SyncBatchNormTest, Bfloat16ActivationsOnTheCpu) {
  if (!kernels::cpu_bf16_support().native()) GTEST_SKIP() << "this CPU has no AVX-512 BF16 or AMX: --amp bf16 is refused on it";
  compare_with_concatenated({3, 2}, DType::BF16, 0.5, 2e-2, 2.0 / 256);
}

TEST(SyncBatchNormTest, EvalUsesRunningStatisticsWithoutCommunication) {
  const Tensor x = rank_batch(0, 2, DType::F64, 0.0);
  Params ref = make_params(DType::F64);
  const Tensor want = ops::batch_norm(x, ref.weight, ref.bias, ref.running_mean, ref.running_var,
                                      false, kMomentum, kEps);
  run_ranks(2, [&](std::shared_ptr<FakeGroup> group) {
    Params p = make_params(DType::F64);
    const Tensor y = sync_batch_norm(x, p.weight, p.bias, p.running_mean, p.running_var, false,
                                     kMomentum, kEps, group);
    EXPECT_TRUE(all_close(y, want, 0, 0));
    ops::sum_all(y).backward();
    EXPECT_EQ(group->all_gathers + group->all_reduces + group->broadcasts, 0);
  });
}

TEST(SyncBatchNormTest, RefusesBadArguments) {
  run_ranks(2, [&](std::shared_ptr<FakeGroup> group) {
    Params p = make_params(DType::F64);
    const Tensor x = rank_batch(group->rank(), 2, DType::F64, 0.0);
    const Tensor wrong = Tensor::ones({kC + 1}, DType::F64);
    EXPECT_THROW(sync_batch_norm(x, wrong, p.bias, p.running_mean, p.running_var, true, kMomentum,
                                 kEps, group),
                 Error);
    EXPECT_THROW(sync_batch_norm(x.reshape({2 * kH, kW * kC}), p.weight, p.bias, p.running_mean,
                                 p.running_var, true, kMomentum, kEps, group),
                 Error);
    EXPECT_THROW(sync_batch_norm(x, p.weight, p.bias, p.running_mean, p.running_var, true,
                                 kMomentum, kEps, nullptr),
                 Error);
  });
  // One value per channel in the whole world: no variance to estimate (every rank refuses).
  EXPECT_THROW(
      run_ranks(
          2,
          [&](std::shared_ptr<FakeGroup> group) {
            Params p = make_params(DType::F64);
            const Tensor x = random_tensor({group->rank() == 0 ? 1 : 0, 1, 1, kC}, 5, DType::F64);
            sync_batch_norm(x, p.weight, p.bias, p.running_mean, p.running_var, true, kMomentum,
                            kEps, group);
          }),
      Error);
}

}  // namespace
}  // namespace kestrel::dist
