// The device and the compute precision a training run uses (--device, --amp).
#pragma once
#include <string>

#include "base/dtype.h"
#include "engine/device.h"
#include "engine/ops/conv.h"
#include "yolo/train/train_options.h"

namespace kestrel::yolo {

// --device: "", "cpu", "0", "0,1": local rank r opens the r-th listed GPU (dist/device_plan.h).
Device pick_device(const std::string& spec, int local_rank);

// A training run's precision. Mixed precision runs the activations in bfloat16 (CUDA: or float16),
// layer to layer, with float32 master weights, BN statistics, loss, optimizer and EMA: on CUDA, and
// on CPUs with AVX-512 BF16 or AMX (--amp bf16, oneDNN's bf16 kernels). Where a task's CPU kernels
// take no bfloat16 activations (classification's head), CpuMixed::Operands keeps float32
// activations and runs every convolution on bfloat16 operands with float32 accumulation
// (ops::ConvOperands); --amp bf16-emulated does that on any CPU, through the float32 kernels.
struct Precision {
  DType activations = DType::F32;
  ops::ConvOperands conv_operands = ops::ConvOperands::Float32;
  // For the console: "float32", "bfloat16", "float32 activations, bfloat16 convolutions", ...
  std::string describe() const;
};

// What --amp bf16 means on the CPU: bfloat16 activations, or float32 ones with bfloat16 operands.
enum class CpuMixed : uint8_t { Activations, Operands };

// --amp (checked when read: yolo/train/train_options.h); Auto = bf16 on sm_80+ GPUs (fp16 before),
// off on the CPU. On the CPU, bf16 needs AVX-512 BF16 or AMX (refused elsewhere, saying why: oneDNN has no
// bf16 convolution there), fp16 is refused, and bf16-emulated runs bf16's roundings through the
// float32 kernels on any CPU (ops::ConvOperands::Bfloat16Emulated: to check bf16 training's
// numbers where the instructions are missing; slower than off; float32 activations).
Precision pick_precision(AmpMode amp, Device device, CpuMixed cpu_mixed = CpuMixed::Activations);

}  // namespace kestrel::yolo
