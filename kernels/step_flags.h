// The training step's flags, computed on the device right after the loss, so that the host
// learns them a step later without waiting and the optimizer can skip on the device:
//   flags[0] = 1 when the loss components (box, obj, cls: three consecutive doubles of the loss
//              summary, from kernels::kSummaryBox) are not all finite,
//   flags[1] = the rank's stop request (SIGINT/SIGTERM received),
//   flags[2] = 1 when the rank runs the batch as a replay of a CUDA graph.
// The host writes the last two into a two-float device buffer (`requests`: stop request, replayed)
// before the step: read when the kernel runs, so a captured CUDA graph of the step sees each
// batch's values. The trainer then sums the flags over the ranks (one small all-reduce): the
// replay count must be 0 or every rank (ranks capture and replay at the same batches).
#pragma once
#include <cuda_runtime.h>

#include "base/dtype.h"

namespace kestrel::kernels {

constexpr int kStepFlags = 3;
constexpr int kFlagNonFinite = 0;
constexpr int kFlagStop = 1;
constexpr int kFlagReplayed = 2;
// The host-written inputs: requests[kRequestStop], requests[kRequestReplayed].
constexpr int kStepRequests = 2;
constexpr int kRequestStop = 0;
constexpr int kRequestReplayed = 1;

// 1 when box + obj + cls is inf or NaN, else 0 (x - x is 0 only for finite x).
KESTREL_HD inline float loss_nonfinite(const double* components) {
  const double s = components[0] + components[1] + components[2];
  return s - s == 0.0 ? 0.0f : 1.0f;
}

// The flags from the loss components and the host's requests (non-zero: yes).
KESTREL_HD inline void compute_step_flags(const double* components, const float* requests,
                                          float* flags) {
  flags[kFlagNonFinite] = loss_nonfinite(components);
  flags[kFlagStop] = requests[kRequestStop] != 0.0f ? 1.0f : 0.0f;
  flags[kFlagReplayed] = requests[kRequestReplayed] != 0.0f ? 1.0f : 0.0f;
}

// components: box, obj, cls; requests: kStepRequests floats; flags: kStepFlags floats (all host
// memory on the CPU, device memory on CUDA, where one thread writes them on `stream`).
void step_flags_cpu(const double* components, const float* requests, float* flags);
void step_flags_cuda(const double* components, const float* requests, float* flags,
                     cudaStream_t stream);

}  // namespace kestrel::kernels
