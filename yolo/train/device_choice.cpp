#include "yolo/train/device_choice.h"

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

Precision cpu_precision(AmpMode amp, CpuMixed mixed) {
  Precision p;
  if (amp == AmpMode::Auto || amp == AmpMode::Off) return p;
  if (amp == AmpMode::Bf16Emulated) {
    p.conv_operands = ops::ConvOperands::Bfloat16Emulated;
    return p;
  }
  KESTREL_CHECK(amp != AmpMode::Fp16, "--amp fp16 needs a CUDA device; on the CPU use --amp bf16 (CPUs with "
                "AVX-512 BF16 or AMX) or --amp off");
  const kernels::CpuBf16Support cpu = kernels::cpu_bf16_support();
  KESTREL_CHECK(cpu.native(), "--amp bf16 on the CPU needs AVX-512 BF16 or AMX-BF16, ",
                cpu.avx512_bf16 || cpu.amx_bf16
                    ? "which this CPU has but oneDNN may not use (ONEDNN_MAX_CPU_ISA caps it below "
                      "AVX512_CORE_BF16): unset ONEDNN_MAX_CPU_ISA, or "
                    : "which this CPU lacks: oneDNN has no bfloat16 convolution for it, and float32 is "
                      "the fast path here. ",
                "Use --amp off (or --amp bf16-emulated to check bf16 training's numbers, slower)");
  if (mixed == CpuMixed::Activations)
    p.activations = DType::BF16;
  else
    p.conv_operands = ops::ConvOperands::Bfloat16;
  return p;
}

}  // namespace

Precision pick_precision(AmpMode amp, Device device, CpuMixed cpu_mixed) {
  if (device.is_cpu()) return cpu_precision(amp, cpu_mixed);
  Precision p;
  switch (amp) {
    case AmpMode::Off: return p;
    case AmpMode::Bf16Emulated: KESTREL_FAIL("--amp bf16-emulated is for the CPU; on CUDA use --amp bf16");
    case AmpMode::Fp16: p.activations = DType::F16; return p;
    case AmpMode::Bf16: p.activations = DType::BF16; return p;
    case AmpMode::Auto: break;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device.index);
  p.activations = prop.major >= 8 ? DType::BF16 : DType::F16;
  return p;
}

}  // namespace kestrel::yolo
