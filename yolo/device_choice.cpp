#include "yolo/device_choice.h"

#include <cuda_runtime.h>

#include <vector>

#include "base/error.h"
#include "dist/device_plan.h"
#include "kernels/bf16_operands.h"

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

std::string Precision::describe() const {
  switch (conv_operands) {
    case ops::ConvOperands::Float32: return dtype_name(activations);
    case ops::ConvOperands::Bfloat16: return "float32 activations, bfloat16 convolutions";
    case ops::ConvOperands::Bfloat16Emulated:
      return "float32 activations, bfloat16 convolutions (emulated in float32)";
  }
  return dtype_name(activations);
}

namespace {

Precision cpu_precision(const std::string& amp) {
  Precision p;
  if (amp.empty() || amp == "off") return p;
  if (amp == "bf16-emulated") {
    p.conv_operands = ops::ConvOperands::Bfloat16Emulated;
    return p;
  }
  KESTREL_CHECK(amp != "fp16", "--amp fp16 needs a CUDA device; on the CPU use --amp bf16 (CPUs with "
                "AVX-512 BF16 or AMX) or --amp off");
  KESTREL_CHECK(amp == "bf16", "--amp must be bf16, fp16, bf16-emulated or off, got '", amp, "'");
  const kernels::CpuBf16Support cpu = kernels::cpu_bf16_support();
  KESTREL_CHECK(cpu.native(), "--amp bf16 on the CPU needs AVX-512 BF16 or AMX-BF16, ",
                cpu.avx512_bf16 || cpu.amx_bf16
                    ? "which this CPU has but oneDNN may not use (ONEDNN_MAX_CPU_ISA caps it below "
                      "AVX512_CORE_BF16): unset ONEDNN_MAX_CPU_ISA, or "
                    : "which this CPU lacks: oneDNN has no bfloat16 convolution for it, and float32 is "
                      "the fast path here. ",
                "Use --amp off (or --amp bf16-emulated to check bf16 training's numbers, slower)");
  p.conv_operands = ops::ConvOperands::Bfloat16;
  return p;
}

}  // namespace

Precision pick_precision(const std::string& amp, Device device) {
  if (device.is_cpu()) return cpu_precision(amp);
  Precision p;
  if (amp == "off") return p;
  KESTREL_CHECK(amp != "bf16-emulated", "--amp bf16-emulated is for the CPU; on CUDA use --amp bf16");
  if (amp == "fp16") {
    p.activations = DType::F16;
  } else if (amp == "bf16") {
    p.activations = DType::BF16;
  } else {
    KESTREL_CHECK(amp.empty(), "--amp must be bf16, fp16, bf16-emulated or off, got '", amp, "'");
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device.index);
    p.activations = prop.major >= 8 ? DType::BF16 : DType::F16;
  }
  return p;
}

}  // namespace kestrel::yolo
