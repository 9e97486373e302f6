// Dynamic loss scaling with its state on the device, as PyTorch's
// _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_: the scale, the growth
// tracker, the skipped-step count and the current step's found-inf flag are device values that
// these kernels read and write where they run, so a loss-scaled training step needs no host read
// and no per-step kernel argument (it can be captured once in a CUDA graph and replayed).
//   unscale:       x *= inverse_scale(*scale) over a multi-tensor list (kernels/optim.h's
//                  TensorList and launch plan); *found_inf = 1 when any input was inf or NaN.
//   combine_skip:  *out = caller's skip flag (optional) || *found_inf, the flag the optimizer
//                  kernels read (kernels/optim.h's step_skipped).
//   update_scale:  one thread: back off after a non-finite step, grow after growth_interval good
//                  ones; clears *found_inf for the next step.
// Host memory on the CPU, device memory on CUDA (one stream, in order).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "base/dtype.h"
#include "kernels/optim.h"

namespace kestrel::kernels {

// --- per-value math (shared by the CPU reference and the CUDA kernels) ---------------------------
// 1 / scale in double, rounded to float32: exact for the power-of-two scales the scaler keeps.
KESTREL_HD inline float inverse_scale(float scale) {
  return static_cast<float>(div_rn(1.0, static_cast<double>(scale)));
}

// Inf or NaN (x - x is 0 only for finite x).
template <class T>
KESTREL_HD inline bool nonfinite(T x) {
  return !(add_rn(x, -x) == T(0));
}

// The constructor's constants of the scale schedule (never per-step values).
struct ScaleSchedule {
  double growth_factor;   // > 1
  double backoff_factor;  // in (0, 1)
  int32_t growth_interval;  // >= 1
};

// One update, as _amp_update_scale_: after a non-finite step the scale times backoff_factor, the
// tracker 0 and one more skipped step; else the tracker counts the good step and at
// growth_interval the scale times growth_factor (kept only when finite in float32) and the
// tracker restarts at 0. Products in double, rounded once to float32.
KESTREL_HD inline void update_scale_value(float& scale, int32_t& tracker, int64_t& skipped,
                                          bool found_inf, const ScaleSchedule& s) {
  if (found_inf) {
    scale = static_cast<float>(mul_rn(static_cast<double>(scale), s.backoff_factor));
    tracker = 0;
    skipped += 1;
    return;
  }
  tracker += 1;
  if (tracker == s.growth_interval) {
    const float grown = static_cast<float>(mul_rn(static_cast<double>(scale), s.growth_factor));
    if (!nonfinite(grown)) scale = grown;
    tracker = 0;
  }
}

// The optimizer's skip flag: 1 when the caller's flag (may be null) is non-zero or a gradient
// was non-finite, else 0.
KESTREL_HD inline float combined_skip(const float* skip, float found_inf) {
  return step_skipped(skip) || found_inf != 0.0f ? 1.0f : 0.0f;
}

// --- entry points ------------------------------------------------------------------------------
// Every device pointer names a one-element buffer on the list's device (CUDA) or host memory (CPU).
//
// x *= inverse_scale(*scale) over a depth-1 list, the same rounding as kernels::scale_cpu /
// scale_cuda with factor inverse_scale(*scale); sets *found_inf = 1 when any input value was inf
// or NaN and leaves it alone otherwise. CPU: float and double. CUDA: float, half and bfloat16
// storage, float math.
void unscale_cpu(DType t, const TensorList& list, const float* scale, float* found_inf);
void unscale_cuda(DType t, const TensorList& list, const float* scale, float* found_inf,
                  cudaStream_t s);

// *out = combined_skip(skip, *found_inf); skip may be null.
void combine_skip_cpu(const float* skip, const float* found_inf, float* out);
void combine_skip_cuda(const float* skip, const float* found_inf, float* out, cudaStream_t s);

// update_scale_value(*scale, *tracker, *skipped, *found_inf != 0, schedule), then *found_inf = 0.
void update_scale_cpu(float* scale, int32_t* tracker, int64_t* skipped, float* found_inf,
                      const ScaleSchedule& schedule);
void update_scale_cuda(float* scale, int32_t* tracker, int64_t* skipped, float* found_inf,
                       const ScaleSchedule& schedule, cudaStream_t s);

}  // namespace kestrel::kernels
