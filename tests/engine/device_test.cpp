// Devices: parsing, and telling "no GPU" from "CUDA broken". A machine without an NVIDIA driver
// (CI) or without devices counts 0 GPUs; a loaded driver with a failing CUDA is an error naming
// the CUDA error and the fix, never a silent CPU fallback.
#include "engine/device.h"

#include <gtest/gtest.h>

#include "base/error.h"

using namespace kestrel;

TEST(Device, ParsesCpuAndCudaIndices) {
  EXPECT_TRUE(Device::parse("cpu").is_cpu());
  EXPECT_EQ(Device::parse("0"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
  EXPECT_THROW(Device::parse("gpu"), Error);
}

TEST(Device, NoDriverOrNoDeviceIsNoGpu) {
  EXPECT_EQ(cuda_init_problem(cudaSuccess, true), "");
  EXPECT_EQ(cuda_init_problem(cudaErrorNoDevice, true), "");
  EXPECT_EQ(cuda_init_problem(cudaErrorInsufficientDriver, false), "");  // CI: no driver at all
}

TEST(Device, ALoadedDriverWithFailingCudaIsABrokenInstall) {
  const std::string why = cuda_init_problem(cudaErrorInsufficientDriver, true);
  EXPECT_NE(why.find("cudaErrorInsufficientDriver"), std::string::npos) << why;
  EXPECT_NE(why.find("nvidia-smi"), std::string::npos) << why;
  EXPECT_NE(why.find("--device cpu"), std::string::npos) << why;
  EXPECT_NE(cuda_init_problem(cudaErrorInitializationError, true), "");
}

TEST(Device, ThisMachineAnswersWithoutThrowing) {
  // On CI (no driver) and on a healthy GPU machine alike; a broken GPU machine fails here, loudly.
  EXPECT_GE(cuda_device_count(), 0);
}
