// --device lists to local workers and their GPUs, for machines with any number of GPUs (passed
// in, so no GPU is needed): one worker per listed GPU, rank r on the r-th listed GPU, and clear
// errors for GPUs that do not exist and for --nproc-per-node disagreeing with the list.
#include "dist/device_plan.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "tests/support/testing.h"

using namespace kestrel;
using namespace kestrel::dist;

namespace {

using kestrel::testing::error_of;

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(DevicePlan, ParsesDeviceLists) {
  EXPECT_TRUE(parse_device_list("").empty());
  EXPECT_TRUE(parse_device_list("cpu").empty());
  EXPECT_EQ(parse_device_list("0"), std::vector<int>{0});
  EXPECT_EQ(parse_device_list("2,0,3"), (std::vector<int>{2, 0, 3}));
  EXPECT_EQ(parse_device_list("cuda:1,cuda:0"), (std::vector<int>{1, 0}));
  EXPECT_TRUE(mentions(error_of([] { parse_device_list("0,0"); }), "lists GPU 0 twice"));
  EXPECT_TRUE(mentions(error_of([] { parse_device_list("0,"); }), "a list of GPU indices like 0,1"));
  EXPECT_TRUE(mentions(error_of([] { parse_device_list("0,,1"); }), "a list of GPU indices like 0,1"));
  EXPECT_TRUE(mentions(error_of([] { parse_device_list("cpu,0"); }), "a list of GPU indices like 0,1"));
  EXPECT_TRUE(mentions(error_of([] { parse_device_list("gpu0"); }), "invalid device 'gpu0'"));
}

TEST(DevicePlan, AListOfGpusStartsOneWorkerPerGpu) {
  const WorkerPlan two = plan_local_workers("0,1", std::nullopt, 2);
  EXPECT_EQ(two.nproc_per_node, 2);
  EXPECT_EQ(two.gpus, (std::vector<int>{0, 1}));
  // Rank r opens the r-th listed GPU, whatever the order of the list.
  const WorkerPlan picked = plan_local_workers("3,1", std::nullopt, 4);
  EXPECT_EQ(picked.nproc_per_node, 2);
  EXPECT_EQ(worker_gpu(picked.gpus, 0, 4), 3);
  EXPECT_EQ(worker_gpu(picked.gpus, 1, 4), 1);
  // One GPU, or none listed: one process, unless --nproc-per-node asks for more.
  EXPECT_EQ(plan_local_workers("0", std::nullopt, 1).nproc_per_node, 1);
  EXPECT_EQ(plan_local_workers("cpu", std::nullopt, 0).nproc_per_node, 1);
  EXPECT_EQ(plan_local_workers("cpu", 3, 0).nproc_per_node, 3);
  EXPECT_EQ(plan_local_workers("", 2, 0).nproc_per_node, 2);
  // --nproc-per-node agreeing with the list is accepted.
  EXPECT_EQ(plan_local_workers("0,1,2", 3, 8).nproc_per_node, 3);
}

TEST(DevicePlan, GpusThatDoNotExistAreNamed) {
  std::string e = error_of([] { plan_local_workers("0,1", std::nullopt, 0); });
  EXPECT_TRUE(mentions(e, "--device 0,1: GPU 0 does not exist (this machine has no CUDA device)")) << e;
  e = error_of([] { plan_local_workers("0,1", std::nullopt, 1); });
  EXPECT_TRUE(mentions(e, "GPU 1 does not exist (this machine has 1 CUDA device: 0)")) << e;
  e = error_of([] { plan_local_workers("0,5", std::nullopt, 4); });
  EXPECT_TRUE(mentions(e, "GPU 5 does not exist (this machine has 4 CUDA devices: 0..3)")) << e;
}

TEST(DevicePlan, NprocPerNodeMustMatchTheList) {
  std::string e = error_of([] { plan_local_workers("0,1", 4, 2); });
  EXPECT_TRUE(mentions(e, "--nproc-per-node 4 with --device 0,1 (2 GPUs)")) << e;
  e = error_of([] { plan_local_workers("0", 2, 1); });
  EXPECT_TRUE(mentions(e, "--nproc-per-node 2 with --device 0 (1 GPU): each process needs a GPU")) << e;
  EXPECT_TRUE(mentions(error_of([] { plan_local_workers("cpu", 0, 0); }), "--nproc-per-node must be >= 1"));
}

TEST(DevicePlan, WorkerGpuWithoutAList) {
  // The default device: local rank r opens GPU r.
  EXPECT_EQ(worker_gpu({}, 0, 2), 0);
  EXPECT_EQ(worker_gpu({}, 1, 2), 1);
  // More local processes than GPUs: NCCL cannot put two ranks on one device.
  const std::string more = error_of([] { worker_gpu({}, 3, 2); });
  EXPECT_TRUE(mentions(more, "local rank 3 has no GPU of its own: this machine has 2 GPUs")) << more;
  EXPECT_TRUE(mentions(more, "--nproc-per-node 2")) << more;
  EXPECT_TRUE(mentions(error_of([] { worker_gpu({}, 0, 0); }), "no CUDA device for local rank 0"));
  // A worker beyond the list (torchrun with more processes than listed GPUs).
  const std::string e = error_of([] { worker_gpu({0, 1}, 2, 4); });
  EXPECT_TRUE(mentions(e, "local rank 2 has no GPU: --device lists 2 GPUs")) << e;
}
