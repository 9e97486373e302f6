// The training step's flags, computed on the device right after the loss, so that the host
// learns them a step later without waiting and the optimizer can skip on the device:
//   flags[0] = 1 when the loss components (box, obj, cls: three consecutive doubles of the loss
//              summary, from kernels::kSummaryBox) are not all finite,
//   flags[1] = the rank's stop request (SIGINT/SIGTERM received), which the host writes into a
//              one-float device buffer before the step: read when the kernel runs, so a captured
//              CUDA graph of the step sees each batch's request.
// The trainer then sums the flags over the ranks (one small all-reduce).
#pragma once
#include <cuda_runtime.h>

#include "kernels/dtype.h"

namespace kestrel::kernels {

constexpr int kStepFlags = 2;
constexpr int kFlagNonFinite = 0;
constexpr int kFlagStop = 1;

// 1 when box + obj + cls is inf or NaN, else 0 (x - x is 0 only for finite x).
KESTREL_HD inline float loss_nonfinite(const double* components) {
  const double s = components[0] + components[1] + components[2];
  return s - s == 0.0 ? 0.0f : 1.0f;
}

// components: box, obj, cls; stop: one float, non-zero when the rank was asked to stop; flags:
// kStepFlags floats (all host memory on the CPU, device memory on CUDA, where one thread writes
// them on `stream`).
void step_flags_cpu(const double* components, const float* stop, float* flags);
void step_flags_cuda(const double* components, const float* stop, float* flags,
                     cudaStream_t stream);

}  // namespace kestrel::kernels
