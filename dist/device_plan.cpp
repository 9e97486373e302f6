#include "dist/device_plan.h"

#include <algorithm>
#include <sstream>

#include "base/error.h"
#include "engine/device.h"

namespace kestrel::dist {
namespace {

std::string gpus_present(int gpu_count) {
  if (gpu_count == 0) return "this machine has no CUDA device";
  if (gpu_count == 1) return "this machine has 1 CUDA device: 0";
  return str("this machine has ", gpu_count, " CUDA devices: 0..", gpu_count - 1);
}

}  // namespace

std::vector<int> parse_device_list(const std::string& device) {
  std::vector<int> gpus;
  if (device.empty() || device == "cpu") return gpus;
  std::stringstream ss(device);
  for (std::string part; std::getline(ss, part, ',');) {
    KESTREL_CHECK(!part.empty() && part != "cpu", "--device '", device,
                  "': give cpu, a GPU index, or a list of GPU indices like 0,1");
    const Device d = Device::parse(part);
    KESTREL_CHECK(std::find(gpus.begin(), gpus.end(), d.index) == gpus.end(), "--device '",
                  device, "' lists GPU ", d.index, " twice; list each GPU once");
    gpus.push_back(d.index);
  }
  KESTREL_CHECK(!gpus.empty() && device.back() != ',', "--device '", device,
                "': give cpu, a GPU index, or a list of GPU indices like 0,1");
  return gpus;
}

WorkerPlan plan_local_workers(const std::string& device, std::optional<int> nproc_flag,
                              int gpu_count) {
  WorkerPlan plan;
  plan.gpus = parse_device_list(device);
  KESTREL_CHECK(!nproc_flag || *nproc_flag >= 1, "--nproc-per-node must be >= 1, got ", *nproc_flag);
  for (int g : plan.gpus)
    KESTREL_CHECK(g < gpu_count, "--device ", device, ": GPU ", g, " does not exist (",
                  gpus_present(gpu_count), "); list GPUs that exist, or use --device cpu");
  const int listed = static_cast<int>(plan.gpus.size());
  if (listed == 0) {
    plan.nproc_per_node = nproc_flag.value_or(1);
  } else {
    KESTREL_CHECK(!nproc_flag || *nproc_flag == listed, "--nproc-per-node ", *nproc_flag,
                  " with --device ", device, " (", listed, listed == 1 ? " GPU" : " GPUs",
                  "): each process needs a GPU of its own; drop --nproc-per-node to run one "
                  "process per listed GPU, or list ", *nproc_flag, " GPUs");
    plan.nproc_per_node = listed;
  }
  return plan;
}

int worker_gpu(const std::vector<int>& gpus, int local_rank, int gpu_count) {
  KESTREL_CHECK(local_rank >= 0, "local rank must be >= 0, got ", local_rank);
  if (gpus.empty()) {
    KESTREL_CHECK(gpu_count > 0, "no CUDA device for local rank ", local_rank, "; use --device cpu");
    // NCCL runs one rank per GPU: two processes on one device fail at its set-up ("duplicate GPU").
    KESTREL_CHECK(local_rank < gpu_count, "local rank ", local_rank, " has no GPU of its own: this "
                  "machine has ", gpu_count, gpu_count == 1 ? " GPU" : " GPUs", " and every process "
                  "needs one; start at most ", gpu_count, " processes per node (--nproc-per-node ",
                  gpu_count, "), or train on the CPU with --device cpu");
    return local_rank;
  }
  KESTREL_CHECK(local_rank < static_cast<int>(gpus.size()), "local rank ", local_rank,
                " has no GPU: --device lists ", gpus.size(), gpus.size() == 1 ? " GPU" : " GPUs",
                "; list one GPU per local process");
  return gpus[local_rank];
}

}  // namespace kestrel::dist
