// CUDA graphs on a real GPU: a captured sequence of element-wise ops replays to the eager result
// and follows inputs changed in place; allocations of the capture come from the graph's pool and
// a steady replay loop allocates nothing; graphs share a pool; work that cannot be captured is
// refused with a clear error and leaves the stream usable; the legacy default stream is refused.
#include "engine/cuda_graph.h"

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/ops/elementwise.h"
#include "engine/stream.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::error_of;
using kestrel::testing::random_tensor;

namespace {

const Device gpu = Device::cuda(0);

std::vector<float> host_values(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }

// Inputs allocated before the capture, on the capturing stream, values from a fixed seed.
struct Inputs {
  explicit Inputs(int64_t n = 1 << 16)
      : x(random_tensor({n}, 1, DType::F32).to(gpu)), y(random_tensor({n}, 2, DType::F32).to(gpu)) {}
  Tensor x, y;
};

// A few element-wise ops with temporaries freed along the way.
Tensor step(const Inputs& in) { return ops::mul(ops::silu(ops::add(in.x, in.y)), 0.5); }

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(CudaGraph, ReplayGivesTheEagerResultAndFollowsInputsChangedInPlace) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Stream s = Stream::create(gpu);
  StreamGuard on(s);
  Inputs in;
  const std::vector<float> eager = host_values(step(in));

  CudaGraph graph(gpu);
  EXPECT_FALSE(graph.ready());
  graph.capture_begin(s);
  EXPECT_TRUE(is_capturing(s));
  Tensor out = step(in);
  graph.capture_end();
  EXPECT_FALSE(is_capturing(s));
  ASSERT_TRUE(graph.ready());

  graph.replay(s);
  EXPECT_EQ(host_values(out), eager);

  in.x.copy_(random_tensor(in.x.shape(), 3, DType::F32));  // in place: same address
  const std::vector<float> eager2 = host_values(step(in));
  EXPECT_NE(eager2, eager);
  graph.replay(s);
  EXPECT_EQ(host_values(out), eager2);
}

// The capture takes new segments for the graph's pool although the general pool has the step's
// blocks cached for this stream (from the warm-up); afterwards, replays allocate nothing and eager
// work never gets the pool's memory.
TEST(CudaGraph, CaptureAllocatesFromThePoolAndReplaysAllocateNothing) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Stream s = Stream::create(gpu);
  StreamGuard on(s);
  Inputs in;
  { Tensor warm = step(in); }  // the step's sizes are now cached in the general pool
  const AllocatorStats before = allocator_stats(gpu);

  CudaGraph graph(gpu);
  graph.capture_begin(s);
  Tensor out = step(in);
  graph.capture_end();
  const AllocatorStats captured = allocator_stats(gpu);
  EXPECT_GT(captured.raw_allocs, before.raw_allocs) << "the pool's own segments";
  EXPECT_GE(captured.reserved, before.reserved + out.numel() * sizeof(float));

  for (int i = 0; i < 20; ++i) graph.replay(s);
  s.synchronize();
  const AllocatorStats steady = allocator_stats(gpu);
  EXPECT_EQ(steady.raw_allocs, captured.raw_allocs);
  EXPECT_EQ(steady.allocated, captured.allocated);

  void* pool_block = out.data_ptr();
  out = Tensor();  // back to the graph's pool, not the general one
  Tensor eager = step(in);
  EXPECT_NE(eager.data_ptr(), pool_block);
}

// Two graphs that never run at the same time share one pool: the second capture reuses memory
// the first freed during its capture, and each replays correctly while the other's output lives.
TEST(CudaGraph, TwoGraphsShareAPool) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Stream s = Stream::create(gpu);
  StreamGuard on(s);
  Inputs in;
  const std::vector<float> sum = host_values(ops::add(in.x, in.y));
  const std::vector<float> stepped = host_values(step(in));

  CudaGraph first(gpu);
  first.capture_begin(s);
  Tensor out1 = ops::add(in.x, in.y);
  first.capture_end();

  CudaGraph second(gpu, first.pool());
  EXPECT_EQ(second.pool(), first.pool());
  second.capture_begin(s);
  Tensor out2 = step(in);
  second.capture_end();
  EXPECT_NE(out1.data_ptr(), out2.data_ptr()) << "out1 is still held";

  first.replay(s);
  second.replay(s);
  EXPECT_EQ(host_values(out1), sum);
  EXPECT_EQ(host_values(out2), stepped);

  std::shared_ptr<GraphPool> other = make_graph_pool(gpu);
  EXPECT_NE(other, first.pool());
}

// A host read during the capture (item(): a copy to the host that waits) is refused with an error
// naming it; capture_end then fails saying why, and the stream works eagerly again.
TEST(CudaGraph, HostSyncDuringCaptureThrowsAndLeavesTheStreamUsable) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Stream s = Stream::create(gpu);
  StreamGuard on(s);
  Inputs in(1);
  const double expected = host_values(ops::add(in.x, in.y))[0];

  CudaGraph graph(gpu);
  graph.capture_begin(s);
  Tensor t = ops::add(in.x, in.y);
  const std::string read = error_of([&] { (void)t.item(); });
  EXPECT_TRUE(contains(read, "cannot run during a CUDA graph capture")) << read;
  const std::string end = error_of([&] { graph.capture_end(); });
  EXPECT_TRUE(contains(end, "a host synchronisation or an uncapturable call")) << end;
  EXPECT_FALSE(graph.ready());
  EXPECT_FALSE(is_capturing(s));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);

  EXPECT_FLOAT_EQ(ops::add(in.x, in.y).item(), expected);

  // Stream::synchronize is refused the same way.
  CudaGraph again(gpu);
  again.capture_begin(s);
  const std::string sync = error_of([&] { s.synchronize(); });
  EXPECT_TRUE(contains(sync, "Stream::synchronize cannot run during a CUDA graph capture")) << sync;
  EXPECT_FALSE(error_of([&] { again.capture_end(); }).empty());
  EXPECT_FALSE(is_capturing(s));
  s.synchronize();
}

// An exception unwinding past a capturing graph: its destructor ends the capture.
TEST(CudaGraph, DestroyingACapturingGraphEndsTheCapture) {
  KESTREL_SKIP_WITHOUT_CUDA();
  Stream s = Stream::create(gpu);
  StreamGuard on(s);
  Inputs in;
  {
    CudaGraph graph(gpu);
    graph.capture_begin(s);
    Tensor t = step(in);
  }
  EXPECT_FALSE(is_capturing(s));
  EXPECT_EQ(host_values(step(in)).size(), size_t(in.x.numel()));
}

TEST(CudaGraph, RefusesStreamsItCannotCapture) {
  KESTREL_SKIP_WITHOUT_CUDA();
  CudaGraph graph(gpu);
  const std::string legacy = error_of([&] { graph.capture_begin(Stream::default_stream(gpu)); });
  EXPECT_TRUE(contains(legacy, "legacy default stream")) << legacy;
  Stream s = Stream::create(gpu);
  const std::string not_current = error_of([&] { graph.capture_begin(s); });
  EXPECT_TRUE(contains(not_current, "current stream")) << not_current;
  EXPECT_FALSE(is_capturing(s));
  EXPECT_TRUE(contains(error_of([&] { graph.replay(s); }), "nothing to replay"));
  EXPECT_TRUE(contains(error_of([&] { graph.capture_end(); }), "without a capture"));
}

TEST(CudaGraph, IsCapturingIsFalseOnTheCpu) {
  EXPECT_FALSE(is_capturing(Stream()));
  EXPECT_TRUE(contains(error_of([] { CudaGraph graph(Device::cpu()); }), "CUDA device"));
}
