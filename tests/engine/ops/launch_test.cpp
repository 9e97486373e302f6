// ops::launch on the CPU: the CPU form runs, the CUDA form does not, and launch returns what the
// CPU form returns (void, a value, a tensor).
#include "engine/ops/launch.h"

#include <gtest/gtest.h>

#include <string>

using namespace kestrel;

TEST(Launch, CpuRunsTheCpuFormOnly) {
  int cpu_runs = 0, cuda_runs = 0;
  ops::launch(
      Device::cpu(), [&] { ++cpu_runs; }, [&](cudaStream_t) { ++cuda_runs; });
  EXPECT_EQ(cpu_runs, 1);
  EXPECT_EQ(cuda_runs, 0);
}

TEST(Launch, ReturnsTheCpuFormsValue) {
  const std::string which = ops::launch(
      Device::cpu(), []() -> std::string { return "cpu"; },
      [](cudaStream_t) -> std::string { return "cuda"; });
  EXPECT_EQ(which, "cpu");
  const Tensor t = ops::launch(
      Device::cpu(), [] { return Tensor::full({2}, 3.0, DType::F32); },
      [](cudaStream_t) { return Tensor(); });
  ASSERT_TRUE(t.defined());
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{3.0f, 3.0f}));
}

TEST(Launch, StreamOfTheCpuIsTheNullStandIn) {
  EXPECT_EQ(ops::stream_of(Device::cpu()), nullptr);
  EXPECT_EQ(ops::stream_of(Tensor::zeros({1})), nullptr);
}
