// Device memory, streams and copies on a real GPU: the caching allocator's steady state, stats,
// host<->device copies (pageable and pinned, blocking and not), streams and events.
#include <cuda_runtime.h>

#include "engine/allocator.h"
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
