// The device and the compute precision a training run uses (--device, --amp).
#pragma once
#include <string>

#include "base/dtype.h"
#include "engine/device.h"

namespace kestrel::yolo {

// --device: "", "cpu", "0", "0,1": local rank r opens the r-th listed GPU (dist/device_plan.h).
Device pick_device(const std::string& spec, int local_rank);
// --amp: bf16 | fp16 | off; "" = bf16 on sm_80+ GPUs (fp16 before), off on the CPU.
DType pick_compute_dtype(const std::string& amp, Device device);

}  // namespace kestrel::yolo
