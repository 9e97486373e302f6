#include "yolo/device_choice.h"

#include <cuda_runtime.h>

#include <vector>

#include "base/error.h"
#include "dist/device_plan.h"

namespace kestrel::yolo {

Device pick_device(const std::string& spec, int local_rank) {
  const std::vector<int> gpus = dist::parse_device_list(spec);
  if (spec == "cpu" || (gpus.empty() && !cuda_available())) return Device::cpu();
  const int count = cuda_device_count();
  const int id = dist::worker_gpu(gpus, local_rank, count);
  KESTREL_CHECK(id < count, "--device ", spec, ": GPU ", id, " not found (", count,
                " CUDA devices); use --device cpu");
  return Device::cuda(id);
}

DType pick_compute_dtype(const std::string& amp, Device device) {
  if (amp == "off" || (amp.empty() && device.is_cpu())) return DType::F32;
  KESTREL_CHECK(device.is_cuda(), "--amp ", amp, " needs a CUDA device; use --amp off on the CPU");
  if (amp == "fp16") return DType::F16;
  if (amp == "bf16") return DType::BF16;
  KESTREL_CHECK(amp.empty(), "--amp must be bf16, fp16 or off, got '", amp, "'");
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device.index);
  return prop.major >= 8 ? DType::BF16 : DType::F16;
}

}  // namespace kestrel::yolo
