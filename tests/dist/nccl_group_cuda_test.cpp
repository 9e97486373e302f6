// The NCCL process group on one GPU (world size 1): every collective, stream ordering between the
// caller's stream and the communication stream, input checks, and the watchdog's timeout.
#include <cuda_runtime.h>

#include <algorithm>
#include <thread>

#include "dist/nccl_group.h"
#include "engine/cuda_graph.h"
#include "tests/support/block_stream.h"
#include "base/error.h"
#include "tests/support/testing.h"

using kestrel::testing::error_of;

namespace kestrel::dist {
namespace {

using kestrel::testing::block_stream;

using namespace std::chrono_literals;

const DType kAllTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16,
                           DType::I32, DType::I64, DType::U8};

std::shared_ptr<ProcessGroup> one_rank_group(std::chrono::seconds timeout = 30s) {
  DistOptions o;
  o.timeout = timeout;
  return init_process_group("nccl", o, Device::cuda(0));
}

TEST(NcclGroup, CollectivesOnEveryDtype) {
  KESTREL_SKIP_WITHOUT_CUDA();
  auto pg = one_rank_group();
  EXPECT_EQ(pg->backend(), "nccl");
  const Device gpu = Device::cuda(0);
  for (DType t : kAllTypes) {
    // Values in [0, 50): exact in every dtype, u8 included.
    Tensor host = testing::random_tensor({1001}, 7, DType::F64, 0.0, 50.0).to(DType::I32).to(t);
    Tensor x = host.to(gpu);
    pg->all_reduce(x)->wait();  // one rank: the sum is the value itself
    EXPECT_TRUE(testing::all_close(x, host, 0.0, 0.0)) << dtype_name(t);
    if (is_floating(t)) {
      pg->all_reduce(x, ReduceOp::Average)->wait();
      EXPECT_TRUE(testing::all_close(x, host, 0.0, 0.0)) << dtype_name(t);
    }
    pg->broadcast(x, 0)->wait();
    EXPECT_TRUE(testing::all_close(x, host, 0.0, 0.0)) << dtype_name(t);
    Tensor out = Tensor::zeros({1001}, t, gpu);
    pg->all_gather(out, x)->synchronize();
    EXPECT_TRUE(testing::all_close(out, host, 0.0, 0.0)) << dtype_name(t);
  }
  auto b = pg->barrier();
  b->wait();
  EXPECT_TRUE(b->is_completed());
}

TEST(NcclGroup, CollectivesFollowTheCallersStream) {
  KESTREL_SKIP_WITHOUT_CUDA();
  auto pg = one_rank_group();
  const Device gpu = Device::cuda(0);
  Stream compute = Stream::create(gpu);
  StreamGuard guard(compute);
  Tensor in = Tensor::zeros({4097}, DType::F32, gpu);
  Tensor out = Tensor::zeros({4097}, DType::F32, gpu);
  compute.synchronize();
  // The fill runs only after 300 ms; an all_gather that did not wait for it would copy zeros.
  block_stream(compute, 300);
  in.fill_(7.0);
  auto work = pg->all_gather(out, in);
  EXPECT_FALSE(work->is_completed());
  work->wait();  // the compute stream now waits for the gather, the host does not
  Tensor result = Tensor::empty({4097}, DType::F32, gpu);
  result.copy_(out);  // on the compute stream, after the gather
  EXPECT_TRUE(testing::all_close(result, Tensor::full({4097}, 7.0, DType::F64), 0.0, 0.0));
  EXPECT_TRUE(work->is_completed());
}

// In place at world size 1, an all-reduce or broadcast that did nothing would leave the right
// values; what can fail is the order: the collective must not run before the caller's queued
// fill (it is not complete while the caller's stream is held), and the caller's later work must
// wait for it (Work::wait, then a copy on the caller's stream sees the filled value).
TEST(NcclGroup, InPlaceCollectivesAreOrderedBehindTheCallersWork) {
  KESTREL_SKIP_WITHOUT_CUDA();
  auto pg = one_rank_group();
  const Device gpu = Device::cuda(0);
  Stream compute = Stream::create(gpu);
  StreamGuard guard(compute);
  for (const bool broadcast : {false, true}) {
    Tensor x = Tensor::zeros({4097}, DType::F32, gpu);
    compute.synchronize();
    block_stream(compute, 300);
    x.fill_(5.0);
    auto work = broadcast ? pg->broadcast(x, 0) : pg->all_reduce(x);
    EXPECT_FALSE(work->is_completed()) << (broadcast ? "broadcast" : "all_reduce")
                                       << " ran before the caller's stream reached it";
    work->wait();
    Tensor result = Tensor::empty({4097}, DType::F32, gpu);
    result.copy_(x);
    EXPECT_TRUE(testing::all_close(result, Tensor::full({4097}, 5.0, DType::F64), 0.0, 0.0));
    EXPECT_TRUE(work->is_completed());
  }
}

// The same order for a collective captured into a CUDA graph, at every replay: the replay's
// (held-up) copy of new values runs before the gather, and the copy after Work::wait sees them.
TEST(NcclGroup, CapturedCollectivesAreOrderedAtEveryReplay) {
  KESTREL_SKIP_WITHOUT_CUDA();
  auto pg = one_rank_group();
  const Device gpu = Device::cuda(0);
  Stream compute = Stream::create(gpu);
  StreamGuard guard(compute);
  Tensor src = Tensor::zeros({4097}, DType::F32, gpu);  // what each replay gathers: set between
  Tensor x = Tensor::zeros({4097}, DType::F32, gpu);
  Tensor out = Tensor::zeros({4097}, DType::F32, gpu);
  Tensor result = Tensor::zeros({4097}, DType::F32, gpu);
  pg->all_gather(out, x)->wait();  // the communicator's first use, outside the capture
  compute.synchronize();
  CudaGraph graph(gpu);
  graph.capture_begin(compute);
  block_stream(compute, 200);  // a host node: every replay holds the stream here first
  x.copy_(src);
  auto work = pg->all_gather(out, x);
  work->wait();
  result.copy_(out);
  graph.capture_end();
  for (const double v : {3.0, -7.0}) {
    src.copy_(Tensor::full({4097}, v, DType::F32));
    compute.synchronize();
    graph.replay(compute);
    compute.synchronize();
    EXPECT_TRUE(testing::all_close(result.to(Device::cpu()), Tensor::full({4097}, v, DType::F64), 0.0, 0.0))
        << "replay gathering " << v;
  }
}

TEST(NcclGroup, RefusesTensorsItCannotWorkOn) {
  KESTREL_SKIP_WITHOUT_CUDA();
  auto pg = one_rank_group();
  const Device gpu = Device::cuda(0);
  EXPECT_NE(error_of([&] { pg->all_reduce(Tensor::zeros({3})); }).find("cuda:0 tensors"),
            std::string::npos);
  Tensor strided = Tensor::zeros({4, 4}, DType::F32, gpu).slice(1, 0, 4, 2);
  EXPECT_NE(error_of([&] { pg->all_reduce(strided); }).find("contiguous"), std::string::npos);
  EXPECT_NE(error_of([&] {
              pg->all_reduce(Tensor::zeros({2}, DType::I64, gpu), ReduceOp::Average);
            }).find("would truncate"),
            std::string::npos);
  EXPECT_NE(error_of([&] { pg->broadcast(Tensor::zeros({2}, DType::F32, gpu), 1); }).find("root 1"),
            std::string::npos);
  EXPECT_THROW(init_process_group("nccl", DistOptions{}, Device::cpu()), Error);
}

// Runs last: the group it aborts stays aborted. A collective stuck behind a blocked stream for
// longer than the timeout is aborted by the watchdog, and waiting on it throws instead of hanging.
TEST(NcclGroup, WatchdogAbortsAStuckCollective) {
  KESTREL_SKIP_WITHOUT_CUDA();
  auto pg = one_rank_group(1s);
  const Device gpu = Device::cuda(0);
  Stream compute = Stream::create(gpu);
  StreamGuard guard(compute);
  Tensor x = Tensor::ones({64}, DType::F32, gpu);
  compute.synchronize();
  block_stream(compute, 3000);
  auto work = pg->all_reduce(x);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  // A second thread polling the work is never held up by the watchdog (the abort runs outside
  // the group's lock) and sees the failure as soon as the waiting thread does.
  double longest_poll = 0, seen_done = -1;
  std::thread poller([&] {
    while (seen_done < 0) {
      const auto t0 = Clock::now();
      const bool done = work->is_completed();
      const auto t1 = Clock::now();
      longest_poll = std::max(longest_poll, std::chrono::duration<double>(t1 - t0).count());
      if (done) seen_done = std::chrono::duration<double>(t1 - start).count();
      std::this_thread::sleep_for(1ms);
    }
  });
  const std::string msg = error_of([&] { work->synchronize(); });
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  poller.join();
  EXPECT_LT(took, 2.9);  // before the stream would have unblocked by itself
  EXPECT_LT(longest_poll, 0.1);
  EXPECT_LT(seen_done, took + 0.2);
  EXPECT_NE(msg.find("rank 0: timed out after 1 s waiting for NCCL all_reduce of float32[64]"),
            std::string::npos)
      << msg;
  EXPECT_NE(error_of([&] { pg->barrier(); }).find("failed earlier"), std::string::npos);
  compute.synchronize();  // let the blocked stream drain before the tensors go away
}

}  // namespace
}  // namespace kestrel::dist
