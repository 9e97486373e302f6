// ops::launch on CUDA: the CUDA form runs with the device made current and receives the device's
// current stream (a StreamGuard's, not the default), the CPU form does not run, and the calling
// thread's current device is restored afterwards.
#include "engine/ops/launch.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "tests/support/testing.h"

using namespace kestrel;

TEST(LaunchCuda, RunsTheCudaFormOnItsDeviceAndStream) {
  KESTREL_SKIP_WITHOUT_CUDA();
  // The last GPU, so that on a machine with several the guard has something to switch.
  const Device gpu = Device::cuda(cuda_device_count() - 1);
  const Stream stream = Stream::create(gpu);
  StreamGuard on_stream(stream);
  int before = -1;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaGetDevice(&before), cudaSuccess);
  int cpu_runs = 0, inside = -1;
  const cudaStream_t got = ops::launch(
      gpu,
      [&]() -> cudaStream_t {
        ++cpu_runs;
        return nullptr;
      },
      [&](cudaStream_t s) {
        EXPECT_EQ(cudaGetDevice(&inside), cudaSuccess);
        return s;
      });
  EXPECT_EQ(cpu_runs, 0);
  EXPECT_EQ(got, stream.handle());
  EXPECT_EQ(inside, gpu.index);
  int after = -1;
  ASSERT_EQ(cudaGetDevice(&after), cudaSuccess);
  EXPECT_EQ(after, before);
}
