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

// A training run's precision. On CUDA, mixed precision runs the activations in bfloat16 or float16
// (fp32 master weights, BN statistics and loss). On the CPU the activations stay float32 and
// --amp bf16 runs every convolution of the training model on bfloat16 operands with float32
// accumulation (ops::ConvOperands): oneDNN's bf16 kernels, on CPUs with AVX-512 BF16 or AMX;
// validation runs float32.
struct Precision {
  DType activations = DType::F32;
  ops::ConvOperands conv_operands = ops::ConvOperands::Float32;
  // For the console: "float32", "bfloat16", "float32 activations, bfloat16 convolutions", ...
  std::string describe() const;
};

// --amp (checked when read: yolo/train/train_options.h); Auto = bf16 on sm_80+ GPUs (fp16 before),
// off on the CPU. On the CPU, bf16 needs AVX-512 BF16 or AMX (refused elsewhere, saying why: oneDNN has no
// bf16 convolution there), fp16 is refused, and bf16-emulated runs bf16's roundings through the
// float32 kernels on any CPU (ops::ConvOperands::Bfloat16Emulated: to check bf16 training's
// numbers where the instructions are missing; slower than off).
Precision pick_precision(AmpMode amp, Device device);

}  // namespace kestrel::yolo
