// The Gloo group on CUDA tensors, staged through pinned host memory: two processes sharing GPU 0
// (how DDP is tested without NCCL), plus one rank checking stream ordering.
#include <cuda_runtime.h>

#include <thread>

#include "dist/env.h"
#include "dist/gloo_group.h"
#include "tests/support/block_stream.h"
#include "base/error.h"
#include "tests/dist/spawn.h"
#include "tests/support/testing.h"

namespace kestrel::dist {
namespace {

using kestrel::testing::block_stream;

using namespace std::chrono_literals;

// Rank r holds (i % 13) + r at index i: sums over two ranks are exact in every float type.
Tensor values(int rank, int64_t n) {
  Tensor x = Tensor::empty({n}, DType::F64);
  for (int64_t i = 0; i < n; ++i) x.data<double>()[i] = static_cast<double>(i % 13 + rank);
  return x;
}

// What every rank holds after summing values() over ranks 0 and 1.
Tensor sum_of_two_ranks(int64_t n) {
  Tensor x = Tensor::empty({n}, DType::F64);
  for (int64_t i = 0; i < n; ++i) x.data<double>()[i] = 2.0 * (i % 13) + 1.0;
  return x;
}

TEST(GlooCudaWorker, DISABLED_StagedCollectives) {
  DistFlags flags;
  flags.timeout = 10s;
  auto pg = init_process_group("gloo", resolve_dist_options(flags, process_environment()),
                               Device::cuda(0));
  const Device gpu = Device::cuda(0);
  const int rank = pg->rank();
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (int64_t n : {1, 1001}) {
      Tensor x = values(rank, n).to(t).to(gpu);
      pg->all_reduce(x)->wait();
      Tensor sum = sum_of_two_ranks(n);
      ASSERT_TRUE(testing::all_close(x, sum, 0.0, 0.0)) << dtype_name(t) << " n=" << n;
      // Average: k + 0.5 with k <= 12 is exact in every type, bf16 included.
      Tensor y = values(rank, n).to(t).to(gpu);
      pg->all_reduce(y, ReduceOp::Average)->wait();
      Tensor avg = sum.clone();
      for (int64_t i = 0; i < n; ++i) avg.data<double>()[i] /= 2;
      ASSERT_TRUE(testing::all_close(y, avg, 0.0, 0.0)) << dtype_name(t) << " n=" << n;
    }
    Tensor b = values(rank, 33).to(t).to(gpu);
    pg->broadcast(b, 1)->wait();
    ASSERT_TRUE(testing::all_close(b, values(1, 33), 0.0, 0.0)) << dtype_name(t);
    Tensor out = Tensor::zeros({66}, t, gpu);
    pg->all_gather(out, values(rank, 33).to(t).to(gpu))->wait();
    ASSERT_TRUE(testing::all_close(out.slice(0, 0, 33), values(0, 33), 0.0, 0.0));
    ASSERT_TRUE(testing::all_close(out.slice(0, 33, 66), values(1, 33), 0.0, 0.0));
  }
  pg->barrier()->wait();
}

TEST(GlooCudaGroup, TwoProcessesShareOneGpu) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const auto results =
      testing::run_ranks("GlooCudaWorker.DISABLED_StagedCollectives", 2, testing::free_port());
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << testing::describe(results);
}

TEST(GlooCudaGroup, StagingFollowsTheCallersStream) {
  KESTREL_SKIP_WITHOUT_CUDA();
  auto pg = init_process_group("gloo", DistOptions{}, Device::cuda(0));
  const Device gpu = Device::cuda(0);
  Stream compute = Stream::create(gpu);
  StreamGuard guard(compute);
  Tensor x = Tensor::zeros({4097}, DType::BF16, gpu);
  compute.synchronize();
  // The fill runs only after 300 ms: the staged copy must wait for it, not read zeros.
  block_stream(compute, 300);
  x.fill_(5.0);
  pg->all_reduce(x, ReduceOp::Average)->wait();
  EXPECT_TRUE(testing::all_close(x, Tensor::full({4097}, 5.0, DType::F64), 0.0, 0.0));
}

}  // namespace
}  // namespace kestrel::dist
