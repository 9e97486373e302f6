// Device memory, streams and copies on a real GPU: the caching allocator's steady state, stats,
// host<->device copies (pageable and pinned, blocking and not), streams and events.
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "engine/allocator.h"
#include "engine/cuda_graph.h"
#include "engine/ops/elementwise.h"
#include "engine/stream.h"
#include "tests/support/testing.h"

using namespace kestrel;
using kestrel::testing::random_tensor;

TEST(CudaMemory, SteadyStateHasNoCudaMalloc) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  auto step = [&] {
    Tensor x = Tensor::ones({16, 80, 80, 128}, DType::BF16, gpu);
    Tensor y = ops::silu(ops::add(x, x));
    Tensor z = ops::mul(y, 0.5);
    (void)z;
  };
  step();
  const size_t before = allocator_stats(gpu).raw_allocs;
  for (int i = 0; i < 5; ++i) step();
  EXPECT_EQ(allocator_stats(gpu).raw_allocs, before);
  EXPECT_GE(allocator_stats(gpu).peak_allocated, size_t(16) * 80 * 80 * 128 * 2);
}

TEST(CudaMemory, RoundTripsThroughPageableAndPinnedMemory) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  Tensor host = random_tensor({3, 5, 7}, 1, DType::F32);
  Tensor dev = host.to(gpu);
  EXPECT_EQ(dev.device(), gpu);
  EXPECT_EQ(dev.to(Device::cpu()).to_vector<float>(), host.to_vector<float>());

  Tensor pinned = Tensor::empty(host.shape(), DType::F32, Device::cpu(), /*pinned=*/true);
  EXPECT_TRUE(pinned.is_pinned());
  pinned.copy_(host);
  Tensor dev2 = Tensor::empty(host.shape(), DType::F32, gpu);
  dev2.copy_(pinned, /*non_blocking=*/true);
  Tensor back = Tensor::empty(host.shape(), DType::F32, Device::cpu(), /*pinned=*/true);
  back.copy_(dev2, /*non_blocking=*/true);
  current_stream(gpu).synchronize();
  EXPECT_EQ(back.to_vector<float>(), host.to_vector<float>());
}

TEST(CudaMemory, CopiesConvertDTypesAndStrides) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  Tensor host = random_tensor({4, 6}, 2, DType::F32);
  Tensor dev_t = host.to(gpu).transpose(0, 1).to(DType::BF16);  // strided, then cast on device
  Tensor expect = host.transpose(0, 1).to(DType::BF16);
  EXPECT_EQ(dev_t.to_double_vector(), expect.to_double_vector());
}

TEST(CudaStreams, WorkOnAStreamIsOrderedByEvents) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  Stream side = Stream::create(gpu);
  Tensor x = Tensor::full({1 << 20}, 2.0, DType::F32, gpu);
  Event ready(gpu);
  ready.record(current_stream(gpu));
  Tensor y;
  {
    StreamGuard guard(side);
    ready.wait(side);
    y = ops::mul(x, 3.0);
  }
  Event done(gpu, /*timing=*/true);
  done.record(side);
  done.wait(current_stream(gpu));
  EXPECT_EQ(y.to(Device::cpu()).to_vector<float>()[12345], 6.0f);
  EXPECT_TRUE(done.query());
}

TEST(CudaStreams, CurrentStreamIsPerThreadAndRestored) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  Stream s = Stream::create(gpu);
  EXPECT_EQ(current_stream(gpu).handle(), nullptr);
  {
    StreamGuard guard(s);
    EXPECT_EQ(current_stream(gpu).handle(), s.handle());
  }
  EXPECT_EQ(current_stream(gpu).handle(), nullptr);
}

// The driver may give a destroyed stream's handle to the next stream created. The allocator keys
// blocks by Stream::id(), never reused, so the dead stream's cached block does not move to the new
// stream (which gets a fresh segment); the dead stream's segment goes back once its work is done.
TEST(CudaMemory, ADestroyedStreamsBlocksNeverGoToAStreamReusingItsHandle) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  allocator_empty_cache(gpu);
  cudaStream_t dead_handle = nullptr;
  uint64_t dead_id = 0;
  {
    const Stream s = Stream::create(gpu);
    dead_handle = s.handle(), dead_id = s.id();
    StreamGuard guard(s);
    Tensor t = Tensor::ones({1 << 20}, DType::F32, gpu);  // 4 MiB each: one 20 MiB segment
    Tensor u = ops::mul(t, 2.0);
  }  // both freed (cached for s), then s destroyed: retired behind an event
  std::vector<Stream> made;
  bool repeated = false;
  for (int i = 0; i < 64 && !repeated; ++i) {
    made.push_back(Stream::create(gpu));
    EXPECT_GT(made.back().id(), dead_id);
    repeated = made.back().handle() == dead_handle;
  }
  std::printf("a destroyed stream's handle %s among the next %zu streams created\n",
              repeated ? "came back" : "did not come back", made.size());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the dead stream's work is done
  const AllocatorStats before = allocator_stats(gpu);
  StreamGuard guard(made.back());
  Tensor fresh = Tensor::ones({1 << 20}, DType::F32, gpu);
  const AllocatorStats after = allocator_stats(gpu);
  EXPECT_EQ(after.raw_allocs, before.raw_allocs + 1);  // not the dead stream's cached block
  EXPECT_EQ(after.raw_frees, before.raw_frees + 1);    // its segment went back
}

// cuda:N past the last GPU (cuda:1 on a one-GPU machine) is named as missing, with the devices
// there are, instead of CUDA's "invalid device ordinal"; a copy to it never starts.
TEST(CudaDevices, ADeviceThatDoesNotExistIsRefusedByName) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device missing = Device::cuda(cuda_device_count());
  const std::string e = kestrel::testing::error_of([&] { Tensor::zeros({3}, DType::F32, missing); });
  EXPECT_NE(e.find(missing.str() + " does not exist"), std::string::npos) << e;
  EXPECT_NE(e.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << e;
  const Tensor on_gpu = Tensor::ones({3}, DType::F32, Device::cuda(0));
  const std::string c = kestrel::testing::error_of([&] { (void)on_gpu.to(missing); });
  EXPECT_NE(c.find("does not exist"), std::string::npos) << c;
}

// The out-of-memory paths on a real device, reached with a cap on the allocator (issue 43): the
// failing stream's cache and then every stream's go back before a request fails; a request that
// does not fit during a CUDA graph capture fails naming the capture (nothing may go back then);
// pinned host memory past its cap fails naming the sizes. Each cap is lifted afterwards.
TEST(CudaOutOfMemory, ReleasesCachesThenFailsClearlyAlsoInCapturesAndPinnedMemory) {
  KESTREL_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  allocator_empty_cache(gpu);
  const size_t base = allocator_stats(gpu).reserved;
  constexpr int64_t MiB = 1 << 20;
  allocator_set_limit(gpu, base + 64 * MiB);
  {
    const Stream other = Stream::create(gpu);
    {
      StreamGuard g(other);
      Tensor cached = Tensor::empty({40 * MiB}, DType::U8, gpu);  // freed into other's cache
    }
    const size_t frees = allocator_stats(gpu).raw_frees;
    Tensor fits = Tensor::empty({40 * MiB}, DType::U8, gpu);  // only after other's cache goes back
    EXPECT_EQ(allocator_stats(gpu).raw_frees, frees + 1);
    const std::string e = kestrel::testing::error_of([&] { Tensor::empty({40 * MiB}, DType::U8, gpu); });
    EXPECT_NE(e.find("out of memory allocating"), std::string::npos) << e;

    CudaGraph graph(gpu);
    const Stream capture = Stream::create(gpu);
    graph.capture_begin(capture);
    std::string during;
    {
      StreamGuard g(capture);
      during = kestrel::testing::error_of([&] { Tensor::empty({40 * MiB}, DType::U8, gpu); });
    }
    graph.capture_end();
    EXPECT_NE(during.find("during a CUDA graph capture"), std::string::npos) << during;
  }
  allocator_set_limit(gpu, 0);

  allocator_set_limit(Device::cpu(), allocator_stats(Device::cpu(), true).reserved + 2 * MiB, true);
  const std::string pinned = kestrel::testing::error_of(
      [&] { Tensor::empty({8 * MiB}, DType::U8, Device::cpu(), /*pinned=*/true); });
  allocator_set_limit(Device::cpu(), 0, true);
  EXPECT_NE(pinned.find("out of memory allocating"), std::string::npos) << pinned;
}
