// The loss scaler's kernels on the CPU: plain loops over host memory (the reference the CUDA
// kernels are tested against).
#include "kernels/amp_scale.h"
#include "kernels/dispatch.h"

namespace kestrel::kernels {

void unscale_cpu(DType t, const TensorList& list, const float* scale, float* found_inf) {
  KESTREL_CHECK(list.depth == 1, "gradient unscaling: expects single tensors, got depth ",
                list.depth);
  const float inv = inverse_scale(*scale);
  bool found = false;
  KESTREL_DISPATCH_CPU_FLOAT(t, T, "gradient unscaling", {
    const T f = static_cast<T>(inv);
    for (size_t k = 0; k < list.size(); ++k) {
      T* x = static_cast<T*>(list.ptrs[k][0]);
      for (int64_t i = 0; i < list.numel[k]; ++i) {
        found = found || nonfinite(x[i]);
        x[i] = mul_rn(x[i], f);
      }
    }
  });
  if (found) *found_inf = 1.0f;
}

void combine_skip_cpu(const float* skip, const float* found_inf, float* out) {
  *out = combined_skip(skip, *found_inf);
}

void update_scale_cpu(float* scale, int32_t* tracker, int64_t* skipped, float* found_inf,
                      const ScaleSchedule& schedule) {
  update_scale_value(*scale, *tracker, *skipped, *found_inf != 0.0f, schedule);
  *found_inf = 0.0f;
}

}  // namespace kestrel::kernels
