// From `--device` and `--nproc-per-node` to the local workers of `kestrel train` and the GPU each
// one opens. `--device 0,1` alone starts one process per listed GPU (DDP), where the reference
// would run DataParallel in one process; every worker sees all GPUs and opens
// gpus[LOCAL_RANK], as torchrun's workers open the device of their LOCAL_RANK. Pure functions of
// their arguments (the GPU count is passed in), so every case is tested without GPUs.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace kestrel::dist {

// The GPUs a --device value lists: "0", "0,1,3", "cuda:1" (Device::parse's forms, comma
// separated); empty for "" (the default device) and "cpu". Throws on anything else and on a GPU
// listed twice.
std::vector<int> parse_device_list(const std::string& device);

struct WorkerPlan {
  int nproc_per_node = 1;  // local workers; 1 means this process trains by itself
  std::vector<int> gpus;   // the listed GPUs, gpus[r] for local rank r (empty: cpu or default)
};

// nproc_flag: --nproc-per-node when given; gpu_count: the CUDA devices of this machine (only read
// when GPUs are listed). A list without --nproc-per-node gives one worker per listed GPU. Throws,
// naming the GPU and what exists, when a listed GPU is not on this machine, and when
// --nproc-per-node differs from the number of listed GPUs (NCCL runs one rank per GPU).
WorkerPlan plan_local_workers(const std::string& device, std::optional<int> nproc_flag,
                              int gpu_count);

// The GPU that local worker `local_rank` opens: gpus[local_rank] from a --device list, or GPU
// local_rank without one. Throws when there is no GPU for that rank (each needs its own: NCCL).
int worker_gpu(const std::vector<int>& gpus, int local_rank, int gpu_count);

}  // namespace kestrel::dist
