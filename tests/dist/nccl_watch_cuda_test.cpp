// NcclProcessGroup::watch_stream: the collectives captured into a CUDA graph run at each replay,
// where the group never sees them issued, so the replayer hands each replay to the group to time.
// A watched replay that finishes is forgotten; one stuck past the timeout aborts the communicator,
// and the next call on the group throws, naming it. (Its own binary: the group it aborts stays
// aborted.)
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "base/error.h"
#include "dist/nccl_group.h"
#include "engine/cuda_graph.h"
#include "tests/support/block_stream.h"
#include "tests/support/testing.h"

using kestrel::testing::error_of;

namespace kestrel::dist {
namespace {

using kestrel::testing::block_stream;

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(NcclWatch, AStuckReplayFailsTheGroupAfterTheTimeout) {
  KESTREL_SKIP_WITHOUT_CUDA();
  DistOptions o;
  o.timeout = 1s;
  auto pg = init_process_group("nccl", o, Device::cuda(0));
  const Device gpu = Device::cuda(0);
  Stream compute = Stream::create(gpu);
  StreamGuard guard(compute);

  // Finished work is never a failure, however long ago it was watched.
  pg->watch_stream("a quick replay");
  compute.synchronize();
  std::this_thread::sleep_for(1500ms);
  EXPECT_NO_THROW(pg->watch_stream("another quick replay"));
  compute.synchronize();

  // Inside a capture there is nothing to watch yet: refused, and the capture fails with it.
  {
    CudaGraph graph(gpu, make_graph_pool(gpu));
    graph.capture_begin(compute);
    const std::string msg = error_of([&] { pg->watch_stream("a capture"); });
    EXPECT_NE(msg.find("watch_stream"), std::string::npos) << msg;
    EXPECT_THROW(graph.capture_end(), Error);
  }

  block_stream(compute, 4000);
  const auto start = Clock::now();
  pg->watch_stream("the stuck replay");
  std::string msg;
  while (msg.empty() && Clock::now() - start < 3500ms) {
    std::this_thread::sleep_for(20ms);
    msg = error_of([&] { pg->watch_stream("a later replay"); });
  }
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(took, 3.0) << "the watchdog did not time the stuck replay out";
  EXPECT_NE(msg.find("rank 0: timed out after 1 s waiting for NCCL the stuck replay"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("a later replay cannot go on"), std::string::npos) << msg;
  // Collectives refuse to start on the failed group too.
  EXPECT_THROW(pg->all_reduce(Tensor::ones({4}, DType::F32, gpu)), Error);
  compute.synchronize();
}

}  // namespace
}  // namespace kestrel::dist
