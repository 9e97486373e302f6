// SyncBN and the Reducer on CUDA tensors, ranks as threads on one GPU sharing a fake group that
// stages through the host (tests/dist/fake_group.h): the device paths of the statistics, merge,
// apply, backward kernels and of the flat gradient buffers, against float64 CPU references.
#include <gtest/gtest.h>

#include "dist/reducer.h"
#include "dist/sync_batchnorm.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/concat.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/reduce.h"
#include "tests/dist/fake_group.h"
#include "tests/support/testing.h"

namespace kestrel::dist {
namespace {

using kestrel::testing::all_close;
using kestrel::testing::random_tensor;
using testing::FakeGroup;
using testing::run_ranks;

constexpr int64_t kH = 5, kW = 4, kC = 8;
constexpr double kMomentum = 0.1, kEps = 1e-3;

struct Outputs {
  Tensor y, dx, dweight, dbias, running_mean, running_var;
};

// BN training step with loss sum(y * g); parameters from fixed seeds, on `device` in `pdtype`.
Outputs step(const Tensor& x_in, const Tensor& g, Device device, DType pdtype,
             const std::shared_ptr<ProcessGroup>& group) {
  auto param = [&](uint64_t seed, double lo, double hi) {
    return random_tensor({kC}, seed, DType::F64, lo, hi).to(pdtype).to(device);
  };
  Tensor w = param(1, 0.5, 1.5).set_requires_grad(true),
         b = param(2, -1, 1).set_requires_grad(true);
  Tensor rm = param(3, -1, 1), rv = param(4, 0.5, 1.5);
  Tensor x = x_in.detach().set_requires_grad(true);
  Tensor y = group ? sync_batch_norm(x, w, b, rm, rv, true, kMomentum, kEps, group)
                   : ops::batch_norm(x, w, b, rm, rv, true, kMomentum, kEps);
  ops::sum_all(ops::mul(y, g)).backward();
  return {y.detach(), x.grad(), w.grad(), b.grad(), rm, rv};
}

// float32 CUDA kernels (float accumulation, values O(1) around mean 3) against float64: errors of
// a few float32 ulps per accumulated term, well inside 1e-4.
TEST(SyncBatchNormCudaTest, TwoRanksMatchFloat64BatchNormOnTheConcatenatedBatch) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const std::vector<int64_t> rows = {3, 2};
  std::vector<Tensor> xs, gs;
  for (int r = 0; r < 2; ++r) {
    xs.push_back(random_tensor({rows[r], kH, kW, kC}, 10 + r, DType::F64, 1.0, 5.0));
    gs.push_back(random_tensor({rows[r], kH, kW, kC}, 20 + r, DType::F64));
  }
  const Outputs ref =
      step(ops::concat(xs, 0), ops::concat(gs, 0), Device::cpu(), DType::F64, nullptr);
  std::vector<Outputs> got(2);
  run_ranks(2, [&](std::shared_ptr<FakeGroup> group) {
    const int r = group->rank();
    got[r] = step(xs[r].to(DType::F32).to(Device::cuda()), gs[r].to(DType::F32).to(Device::cuda()),
                  Device::cuda(), DType::F32, group);
  });
  int64_t start = 0;
  Tensor dw = Tensor::zeros({kC}, DType::F64), db = Tensor::zeros({kC}, DType::F64);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const int64_t end = start + rows[r];
    EXPECT_TRUE(all_close(got[r].y, ref.y.slice(0, start, end), 1e-4, 1e-4));
    EXPECT_TRUE(all_close(got[r].dx, ref.dx.slice(0, start, end), 1e-4, 1e-4));
    EXPECT_TRUE(all_close(got[r].running_mean, ref.running_mean, 1e-5, 1e-5));
    EXPECT_TRUE(all_close(got[r].running_var, ref.running_var, 1e-5, 1e-5));
    ops::add_(dw, got[r].dweight.to(Device::cpu()).to(DType::F64));
    ops::add_(db, got[r].dbias.to(Device::cpu()).to(DType::F64));
    start = end;
  }
  EXPECT_TRUE(all_close(dw, ref.dweight, 1e-3, 1e-4));
  EXPECT_TRUE(all_close(db, ref.dbias, 1e-3, 1e-4));
}

// The flat buffers live on the GPU; AccumulateGrad adds into their views on the current stream.
TEST(ReducerCudaTest, AveragesGradientsOfCudaParameters) {
  KESTREL_SKIP_WITHOUT_CUDA();
  constexpr int64_t kN = 1000;
  const Tensor w_host = random_tensor({kN}, 3, DType::F32);
  run_ranks(2, [&](std::shared_ptr<FakeGroup> group) {
    Tensor w = w_host.to(Device::cuda()).set_requires_grad(true);
    Tensor v = w_host.to(Device::cuda()).set_requires_grad(true);
    ReducerOptions options;
    options.bucket_cap_mb = 3000.0 / (1024 * 1024);  // one parameter per bucket
    Reducer reducer({{"w", w}, {"v", v}}, group, options);
    const Tensor x = random_tensor({kN}, 40 + group->rank(), DType::F32).to(Device::cuda());
    reducer.prepare_for_backward();
    ops::sum_all(ops::mul(ops::mul(x, w), v)).backward();
    reducer.finalize();
    // d/dw = x * v averaged over the ranks' x; v = w here.
    const Tensor x0 = random_tensor({kN}, 40, DType::F32), x1 = random_tensor({kN}, 41, DType::F32);
    const Tensor want = ops::mul(ops::mul(ops::add(x0, x1), 0.5), w_host);
    EXPECT_TRUE(all_close(w.grad(), want, 1e-6, 1e-5));
    EXPECT_TRUE(all_close(v.grad(), want, 1e-6, 1e-5));
    EXPECT_TRUE(w.grad().device().is_cuda());
    EXPECT_EQ(w.grad().storage(), v.grad().storage());
    EXPECT_EQ(reducer.last_timeline().buckets.size(), 2u);
  });
}

}  // namespace
}  // namespace kestrel::dist
